"""LLVM as a second producer and a second reference (clang-23 and llvm-readobj-23 in the sid root).

  * clang-23 writes SFrame (with `-Wa,--gsframe -Wa,--allow-experimental-sframe`) as version 2
    with FDE_FUNC_START_PCREL, x86-64 only, into objects: `sframe dump` equals readelf 2.47
    byte for byte, every FDE starts at its function symbol, and the encoder round-trips it.
  * llvm-readobj-23 --sframe decodes independently of binutils, version 2 only (it refuses 1
    and 3, checked below): on every V2 file we have (trixie's executables and libraries, gas V2
    objects, LLVM objects) its header, FDEs (start, size, FRE count, types) and FRE rows equal
    core's.  Where the references disagree: trixie's V2 objects have no PCREL flag although gas
    relocates their start fields PC-relatively; llvm-readobj, like core, prints the function's
    offset (symbol + addend), readelf 2.47 a field read from the section start (test_objects).
"""

import re

import pytest
from helpers import toolchains as T
from helpers.objects import FIXTURES, usable
from helpers.readelf import readelf

from sframekit.core.elf.image import ElfImage
from sframekit.core.report.dump import dump_file
from sframekit.core.sframe import format as F
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.encode import encode

CLANG = ("clang-23", "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-Wa,--allow-experimental-sframe")


@pytest.fixture(scope="session")
def llvm_objects(roots, tmp_path_factory):
    work = tmp_path_factory.mktemp("llvm")
    cmds = [[*CLANG, "-c", str(T.FIXTURES_DIR / ("%s.c" % fx)), "-o", "llvm-%s.o" % fx] for fx in FIXTURES]
    cmds.append([*CLANG, "-ffunction-sections", "-c", str(T.FIXTURES_DIR / "frames.c"), "-o", "llvm-frames-fs.o"])
    T._run_script(T.toolchain("sid"), cmds, work)
    return [work / ("llvm-%s.o" % fx) for fx in FIXTURES] + [work / "llvm-frames-fs.o"]


def test_llvm_objects_dump_as_readelf(llvm_objects):
    ref = readelf("sid", llvm_objects)
    for path in llvm_objects:
        img = ElfImage(path)
        sec = Section(img.sframe.data, img.sframe.address)
        assert sec.version == 2 and sec.header.has(F.Flag.FDE_FUNC_START_PCREL), path
        assert dump_file(path) == ref[path], path
        syms = {(a, size) for a, size, _ in img._symtab()}
        for fde in sec.fdes():
            assert (fde.start, fde.size) in syms, (path, hex(fde.start))
        assert encode(sec.header, sec.check_all()) == img.sframe.data, path


def test_clang_writes_sframe_for_x86_64_only(roots, tmp_path):
    for target in ("aarch64-linux-gnu", "s390x-linux-gnu"):
        p = T.run_in("sid", [*CLANG, "--target=" + target, "-c", str(T.FIXTURES_DIR / "frames.c"), "-o", "x.o"],
                     cwd=tmp_path)
        assert p.returncode != 0 and "unsupported option '-Wa,--gsframe' for target '%s'" % target in p.stderr, p


# -- llvm-readobj as a second reference --------------------------------------------------------------


def parse_llvm_readobj(text):
    """(header {key: value}, [FDE {key: value, "fres": [FRE {key: value}]}]) from the text
    llvm-readobj-23 --sframe prints for one file."""
    header, fdes, fde, fre = {}, [], None, None
    for line in text.splitlines():
        st = line.strip()
        if st.startswith("FuncDescEntry ["):
            fde, fre = {"fres": []}, None
            fdes.append(fde)
        elif st == "Frame Row Entry {":
            fre = {}
            fde["fres"].append(fre)
        elif st == "}":
            fre = None
        else:
            key, sep, value = st.partition(": ")
            if sep:
                (fre if fre is not None else fde if fde is not None else header)[key] = value
    return header, fdes


def num(text):
    """An integer from llvm-readobj: `0x1F`, `-8`, or `V2 (0x2)` / `SP (0x1)` (the number in parentheses)."""
    m = re.search(r"\((0x[0-9A-Fa-f]+)\)$", text)
    return int(m.group(1) if m else text, 0)


def check_against_llvm(path, text):
    img = ElfImage(path, readelf_layout=True)    # objects: llvm-readobj prints symbol + addend
    sec = Section(img.sframe.data, img.sframe.address)
    h = sec.header
    header, fdes = parse_llvm_readobj(text)
    assert num(header["Magic"]) == F.MAGIC and num(header["Version"]) == h.version
    assert num(header["ABI"]) == h.abi and int(header["CFA fixed RA offset"]) == h.cfa_fixed_ra_offset
    assert int(header["CFA fixed FP offset (unused)"]) == h.cfa_fixed_fp_offset
    assert (int(header["Num FDEs"]), int(header["Num FREs"]), int(header["FRE subsection length"])) == \
        (h.num_fdes, h.num_fres, h.fre_len)
    assert (int(header["FDE subsection offset"]), int(header["FRE subsection offset"])) == (h.fdeoff, h.freoff)
    ours = sec.check_all()
    assert len(ours) == len(fdes)
    rows = 0
    for (fde, fres), theirs in zip(ours, fdes):
        start = int(theirs["PC"] if "PC" in theirs else theirs["Start Address"], 16)
        mask = fde.pc_type == F.PCType.MASK
        assert (start, int(theirs["Size"], 16), int(theirs["Num FREs"])) == (fde.start, fde.size, fde.num_fres), path
        assert (num(theirs["FRE Type"]), num(theirs["FDE Type"]), num(theirs["Raw"])) == \
            (fde.fre_type, fde.pc_type, fde.info), path
        assert int(theirs.get("Repetitive block size", theirs.get("Repetitive block size (unused)")), 16) == \
            fde.rep_size
        assert len(theirs["fres"]) == len(fres)
        for fre, t in zip(fres, theirs["fres"]):
            assert int(t["Start Address"], 16) == fre.start + (0 if mask else fde.start), (path, fde.index)
            assert (t["Return Address Signed"] == "Yes") == fre.mangled_ra
            assert num(t["Base Register"]) == fre.base_reg and int(t["CFA Offset"]) == fre.words[0]
            words = list(fre.words[1:])
            ra = h.cfa_fixed_ra_offset or (words.pop(0) if words else None)
            fp = h.cfa_fixed_fp_offset or (words.pop(0) if words else None)
            assert (int(t["RA Offset"]) if "RA Offset" in t else None) == ra, (path, fde.index, t)
            assert (int(t["FP Offset"]) if "FP Offset" in t else None) == fp, (path, fde.index, t)
            rows += 1
    return rows


def llvm_readobj(paths):
    script = "".join("llvm-readobj-23 --sframe %s; echo '@@END'\n" % p for p in paths)
    proc = T.run_in("sid", ["sh", "-c", script], binds=[p.parent for p in paths], check=True)
    parts = proc.stdout.split("@@END\n")
    assert len(parts) == len(paths) + 1
    return dict(zip(paths, parts)), proc.stderr


def test_every_v2_file_decodes_as_llvm_readobj(corpus, objects, llvm_objects):  # noqa: F811
    files = [p for b in corpus.select(toolchain="trixie") for p in (b.path, b.lib) if p is not None]
    files += usable(objects["trixie"]) + llvm_objects
    texts, err = llvm_readobj(files)
    assert "warning" not in err, err
    rows = sum(check_against_llvm(p, texts[p]) for p in files)
    assert rows > 500


def test_llvm_readobj_refuses_v1_and_v3(corpus):
    paths = [corpus.get("host", "frames", "O2-nofp").path, corpus.get("sid", "frames", "O2-nofp").path]
    _, err = llvm_readobj(paths)
    for path, version in zip(paths, (1, 3)):
        assert "warning: '%s': invalid sframe section: invalid/unsupported version number (%d)" % (path, version) \
            in err, err
