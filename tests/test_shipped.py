"""Binaries as they ship: one program (tests/fixtures/shipped.c) cut the ways distributions and
users ship it, each without `.eh_frame`, against the same shape that keeps it.

Shapes: `strip -s` (no `.symtab`) PIE and non-PIE, `--strip-debug`, `-g`.  The reference is GDB's
own DWARF backtrace of the copy that keeps `.eh_frame` (no plugin), stopped at the same place
(copies of one build at paths of equal length).  Consumers of the copy without it:

* GDB with the plugin (13 on the host's V1 build, 16 on trixie's V2, 18 on sid's V3);
* GDB without the plugin, through the side file `sframe cfi --build-id-dir` writes (found by build ID
  under `set debug-file-directory DIR:/usr/lib/debug`; not for `-g`, whose own debug information
  GDB takes instead, as the README says);
* `sframe backtrace` of a core GDB wrote at that stop;
* elfutils' eu-stack on that core through the side file (the host's V1 build).

Every one gives the reference's frames and nothing past the program's entry point: with `strip -s`
nothing names `_start`, which has no SFrame (crt1.o is not assembled with `--gsframe`), and only
the ELF header's entry point says the walk ends there (core.elf.entry).
"""

import json
import re
import subprocess
from pathlib import Path

import pytest
import toolchains as T
from test_gdb import PLUGIN, run_gdb

REPO = Path(__file__).resolve().parent.parent
SOURCE = T.FIXTURES_DIR / "shipped.c"
CLI = REPO / "scripts" / "sframe"
CFLAGS = ("-O2", "-fomit-frame-pointer", "-Wa,--gsframe")
SHAPES = ("strip-s", "strip-s-nopie", "strip-debug", "g")
CASES = [("gdb13", "host"), ("gdb16", "trixie"), ("gdb18", "sid")]


def _shape_cmds(tc, shape, work):
    """Commands (run in the toolchain's root) that build `shape` as WORK/ref/prog (keeps .eh_frame)
    and WORK/noeh/prog (without it): one build, cut two ways."""
    build = work / ("build-" + shape)
    flags = list(CFLAGS) + ["-g"] + (["-no-pie"] if shape == "strip-s-nopie" else [])
    cmds = [[tc.cc, *flags, "-o", str(build), str(SOURCE)]]
    cut = {"strip-s": ["-s"], "strip-s-nopie": ["-s"], "strip-debug": ["--strip-debug"], "g": None}[shape]
    for kind in ("ref", "noeh"):
        out = work / shape / kind / "prog"
        removed = ["-R", ".eh_frame", "-R", ".eh_frame_hdr"] if kind == "noeh" else []
        cmds.append(["mkdir", "-p", str(out.parent)])
        if cut is None:
            cmds.append([tc.tool("objcopy"), *removed, str(build), str(out)] if removed else ["cp", str(build), str(out)])
        else:
            cmds.append([tc.tool("strip"), *cut, *removed, "-o", str(out), str(build)])
    return cmds


@pytest.fixture(scope="module")
def shipped(roots, tmp_path_factory):
    """{toolchain: work directory} with every shape built (under /tmp, seen inside the roots)."""
    out = {}
    for _gdb, toolchain in CASES:
        tc = T.toolchain(toolchain)
        work = tmp_path_factory.mktemp("shipped-" + toolchain)
        script = "set -e\n" + "".join(" ".join(map(str, c)) + "\n" for shape in SHAPES for c in _shape_cmds(tc, shape, work))
        T.run_in(tc, ["sh", "-c", script], cwd=work, check=True)
        out[toolchain] = work
    return out


def _pcs(frames, skip=()):
    """Frame PCs, GDB's inline frames (the PC and CFA of the frame after them) and the levels in
    `skip` left out."""
    out, last = [], None
    for f in frames:
        if (f.pc, f.cfa) != last and f.level not in skip:
            out.append(f.pc)
        last = (f.pc, f.cfa)
    return out


def _tailcalls(out, label):
    return {int(m.group(1)) for m in re.finditer(r"^TAILCALL %s (\d+)$" % re.escape(label), out, re.M)}


# The levels of GDB's tail-call frames (made from a caller's DWARF call-site information, which
# only GDB reads): no unwinder of the stack itself shows them.
_TAILCALLS = """python
f = gdb.newest_frame()
while f is not None:
    if f.type() == gdb.TAILCALL_FRAME:
        print("TAILCALL %s %d" % (LABEL, f.level()))
    try:
        f = f.older()
    except gdb.error:
        f = None
end"""


def _session(prog, label, core=None, before=(), plugin=False):
    lines = ["set startup-with-shell off", "set backtrace past-main on", *before]
    if plugin:
        lines.append("source %s" % PLUGIN)
    lines += ["file %s" % prog, "break getppid", "run", "frames-dump %s" % label, _TAILCALLS.replace("LABEL", repr(label))]
    if core is not None:
        lines.append("generate-core-file %s" % core)
    return lines + ["kill"]


def _cli_frames(toolchain, core, prog, work):
    """`sframe backtrace CORE --json` run in the toolchain's root (its C library): the PCs."""
    proc = T.run_in(toolchain, ["/usr/bin/python3", str(CLI), "backtrace", str(core), "--exe", str(prog), "--json"],
                    cwd=work, check=True)
    doc = json.loads(proc.stdout)
    return [f["pc"] for f in doc["threads"][0]["frames"]], proc.stdout


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
@pytest.mark.parametrize("shape", SHAPES)
def test_shipped_shapes_unwind_as_dwarf(shipped, gdb, toolchain, shape):
    work = shipped[toolchain] / shape
    ref, noeh = work / "ref" / "prog", work / "noeh" / "prog"
    core = work / "core"
    out = run_gdb(gdb, _session(ref, "ref") + _session(noeh, "plugin", core=core, plugin=True), work)
    want = _pcs(out.frames("ref"))
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    got = _pcs(out.frames("plugin"))
    assert got == want, "%s %s %s: GDB with the plugin\n%s\nDWARF of the copy with .eh_frame\n%s" % (
        gdb, toolchain, shape, [hex(p) for p in got], [hex(p) for p in want])

    # (the stack's own frames: GDB's tail-call frames left out)
    stack = _pcs(out.frames("ref"), _tailcalls(out, "ref"))
    cli, text = _cli_frames(toolchain, core, noeh, work)
    assert cli == stack, "sframe backtrace of the core\n%s\nDWARF\n%s" % (text, [hex(p) for p in stack])

    if shape == "g":
        return
    side = work / "side"
    T.run_in(toolchain, ["/usr/bin/python3", str(CLI), "cfi", str(noeh), "--build-id-dir", str(side)], cwd=work,
             check=True)
    dirs = "%s:/usr/lib/debug" % side
    out = run_gdb(gdb, _session(noeh, "side", before=["set debug-file-directory %s" % dirs]), work)
    got = _pcs(out.frames("side"))
    assert got == want, "%s %s %s: GDB through the side file, no plugin\n%s\nDWARF\n%s" % (
        gdb, toolchain, shape, [hex(p) for p in got], [hex(p) for p in want])
    if toolchain == "host":
        eu = subprocess.run(["eu-stack", "--core", str(core), "--executable", str(noeh), "--debuginfo-path", dirs],
                            capture_output=True, text=True, timeout=120)
        frames = [int(m.group(1), 16) for m in re.finditer(r"^#\d+\s+(0x[0-9a-f]+)", eu.stdout, re.M)]
        assert frames == stack, "eu-stack through the side file\n%s%s\nDWARF\n%s" % (
            eu.stdout, eu.stderr, [hex(p) for p in stack])


def test_entry_code_of_every_toolchain_is_found(shipped):
    """core.elf.entry, on the `strip -s` builds: the entry code's extent ends right after its last
    call (the trap after it included), equal to `_start`'s symbol in the build that keeps it."""
    from sframekit.core.arch import abi as abimod
    from sframekit.core.elf import entry as entrymod
    from sframekit.core.elf.image import ElfImage
    for _gdb, toolchain in CASES:
        for shape in ("strip-s", "strip-s-nopie"):
            work = shipped[toolchain]
            stripped = work / shape / "noeh" / "prog"
            read = entrymod.file_reader(str(stripped))
            entry = entrymod.program_entry(read)
            image = ElfImage(str(work / ("build-" + shape)))
            start = image.function_at(image.entry)
            assert entry == image.entry and start is not None and start[2] == "_start"
            got = entrymod.entry_extent(abimod.AMD64, entry, entrymod.code_reader(read))
            assert got is not None and got[0] == entry and got[1] <= start[0] + start[1], (toolchain, shape, got, start)
            assert got[1] >= start[0] + start[1] - 16, (toolchain, shape, got, start)
    # A shared library (libc asks for an interpreter and has an entry point) is no program.
    assert entrymod.program_entry(entrymod.file_reader("/lib/x86_64-linux-gnu/libc.so.6")) is None
