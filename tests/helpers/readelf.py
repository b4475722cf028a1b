"""Running binutils' readelf --sframe as the tests do (the host's 2.40, trixie's 2.44, sid's 2.47),
and comparing its text with `sframe dump`'s."""

import re
import shlex
from pathlib import Path

from . import toolchains


def readelf_many(which, paths, workdir):
    """[(stdout, stderr, exit status)] of `readelf --sframe` on each path, all in one process of
    the toolchain's root ("sid": binutils 2.47, "trixie": 2.44, "host": 2.40)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    outs = [workdir / ("r%d" % i) for i in range(len(paths))]
    script = workdir / "run.sh"
    script.write_text("".join("readelf --sframe %s >%s.out 2>%s.err; echo $? >%s.rc\n"
                              % (shlex.quote(str(p)), o, o, o) for p, o in zip(paths, outs)))
    toolchains.run_in(which, ["sh", str(script)], cwd=workdir,
                      binds=sorted({str(Path(p).parent) for p in paths}), check=True)
    return [(Path("%s.out" % o).read_text(), Path("%s.err" % o).read_text(),
             int(Path("%s.rc" % o).read_text())) for o in outs]


def readelf(which, paths):
    """{path: readelf --sframe text} by the readelf of `which`, in one process."""
    script = "".join("readelf --sframe %s; echo '@@END'\n" % p for p in paths)
    text = toolchains.run_in(which, ["sh", "-c", script], binds=[paths[0].parent], check=True).stdout
    parts = text.split("@@END\n")
    assert len(parts) == len(paths) + 1
    return dict(zip(paths, parts))


def split_index(text):
    """(header part, 'Function Index' part) of a dump."""
    head, sep, tail = text.partition("\n  Function Index :\n")
    assert sep, "no Function Index in:\n" + text
    return head, tail


def assert_v1_matches(ours, theirs):
    """V1: 2.40's function index must equal ours; its header ours without the fixed-offset lines."""
    assert theirs.startswith("Contents of the SFrame section"), theirs
    oh, ot = split_index(ours)
    th, tt = split_index(theirs)
    assert ot == tt
    ours_head = [l for l in oh.split("\n") if not l.startswith("    CFA fixed ")]
    if oh.count("SFRAME_F_") <= 1:
        assert ours_head == th.split("\n")
    else:   # 2.40 prints only one of several flags: compare the rest
        assert [l for l in ours_head if "SFRAME_F_" not in l] == [l for l in th.split("\n") if "SFRAME_F_" not in l]


_ROW_RE = re.compile(r"^    [0-9a-f]{16}  ")


def rows(text):
    """The row lines of a dump."""
    return [l for l in text.split("\n") if _ROW_RE.match(l)]


def frames_column(abi, regnum):
    """The name of DWARF register `regnum` in `readelf --debug-dump=frames(-interp)`'s rows:
    AArch64's v8-v15 (DWARF 72-79) where the analysis names their low halves d8-d15."""
    return "v%d" % (regnum - 64) if regnum in abi.partial else abi.regname(regnum)
