"""The `sframe` command line and ELF access on real binaries: lookup, errors, how the section is found."""

import os
import subprocess

import pytest
from helpers import toolchains
from helpers.cli import REPO, sframe  # noqa: F401

from sframekit.core.elf.image import ElfImage, parse_address
from sframekit.core.errors import ElfError, NoSFrameError
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.encode import encode
from sframekit.core.sframe.index import SFrameIndex


@pytest.fixture(scope="module")
def frames(corpus):
    return {tc: corpus.get(tc, "frames", "O2-nofp") for tc in toolchains.TOOLCHAINS}


def test_every_real_section_roundtrips_byte_for_byte(corpus):
    checked = 0
    for b in corpus:
        for path in filter(None, (b.path, b.lib)):
            sf = ElfImage(path).require_sframe()
            s = Section(sf.data, sf.address)
            assert encode(s.header, s.check_all()) == sf.data, path
            checked += 1
    assert checked >= len(corpus)


def test_every_function_symbol_is_covered_with_the_right_bounds(frames):
    for tc, b in frames.items():
        img = ElfImage(b.path)
        idx = SFrameIndex(img.sframe.data, img.sframe.address)
        for name in ("stop_here", "leaf_work", "level1", "level2", "level3", "main"):
            addr, size = toolchains.function_symbols(b.path)[name]
            m = idx.lookup(addr)
            assert m is not None and m.fde.start == addr and m.fde.size == size, (tc, name)
            assert idx.lookup(addr + size - 1).fde.start == addr
            assert img.symbolize(addr + 2) == (name, 2)
            assert parse_address("%s+4" % name, img) == addr + 4


@pytest.mark.parametrize("utf8", [False, True])
def test_symbol_names_and_a_global_alias_over_a_local(tmp_path, utf8):
    """A global alias of a local function is the name at their address (.symtab lists locals
    first), in an ASCII string table and in one with a UTF-8 name (decoded each way)."""
    src = tmp_path / "a.c"
    src.write_text("static int inner(int x) { return x * 3 + 1; }\n"
                   "int outer(int) __attribute__((alias(\"inner\")));\n"
                   "__attribute__((noinline)) int %s(int x) { return outer(x) + 2; }\n"
                   "int main(int c, char **v) { (void)v; return %s(c); }\n" % (("caf\u00e9",) * 2 if utf8 else ("cafe",) * 2),
                   encoding="utf-8")
    exe = tmp_path / "a"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    syms = toolchains.function_symbols(exe)
    img = ElfImage(str(exe))
    name = "caf\u00e9" if utf8 else "cafe"
    assert img.symbolize(syms[name][0] + 1) == (name, 1)
    assert syms["outer"][0] == syms["inner"][0]
    assert img.symbolize(syms["inner"][0]) == ("outer", 0)
    assert img.function_at(syms["inner"][0] + 1)[2] == "outer"


@pytest.mark.parametrize("tc,cfa,ra,fp", [
    ("host", "CFA = rsp + 8", "RA = [CFA - 8] (fixed offset from the header)", "rbp unchanged"),
    ("trixie", "CFA = rsp + 8", "RA = [CFA - 8] (fixed offset from the header)", "rbp unchanged"),
    ("sid", "CFA = rsp + 8", "RA = [CFA - 8] (fixed offset from the header)", "rbp unchanged"),
    ("sid-aarch64", "CFA = sp", "x30 unchanged", "x29 unchanged"),
    ("sid-s390x", "CFA = r15 + 160", "r14 unchanged", "r11 unchanged"),
])
def test_lookup_of_a_leaf_in_words(frames, tc, cfa, ra, fp):
    b = frames[tc]
    code, out, err = sframe("lookup", b.path, "stop_here")
    assert code == 0 and err == ""
    lines = out.splitlines()
    version = {"host": 1, "trixie": 2}.get(tc, 3)
    assert lines[1].startswith("Section: .sframe at 0x") and "SFrame version %d" % version in lines[1]
    assert lines[2].startswith("Function: stop_here at 0x")
    assert lines[3].startswith("FDE: type default, PC type INC")
    assert lines[4].startswith("FRE 0 of 1: 0x")
    assert lines[5:] == ["Rules:", "  " + cfa, "  " + ra, "  " + fp]


def test_lookup_inside_a_framed_function_and_the_plt(corpus):
    b = corpus.get("sid", "frames", "O2-fp")
    addr, size = toolchains.function_symbols(b.path)["level2"]
    code, out, _ = sframe("lookup", b.path, "level2+%d" % (size - 2))
    assert code == 0
    assert "  CFA = rbp + 16" in out.splitlines() or "  CFA = rsp + 8" in out.splitlines()
    img = ElfImage(b.path)
    idx = SFrameIndex(img.sframe.data, img.sframe.address)
    plt = [f for f in idx.section.fdes() if f.pc_type.name == "MASK"]
    assert plt, "the x86-64 build has a MASK FDE for .plt"
    code, out, _ = sframe("lookup", b.path, hex(plt[0].start + 0x13))
    assert code == 0
    assert "PC type MASK, rep size 16" in out and "of each 16-byte block" in out and "Function: puts@plt at " in out


def test_errors_are_one_line_on_stderr(tmp_path, frames):
    b = frames["sid"]
    text = tmp_path / "text"
    text.write_text("hello\n")
    cases = [
        (("lookup", tmp_path / "missing", "0x10"), "no such file"),
        (("dump", text), "not an ELF file"),
        (("dump", "/bin/true"), "no SFrame section"),
        (("lookup", b.path, "0x10"), "No SFrame information covers 0x10: it lies outside the SFrame range of"),
        (("lookup", b.path, "no_such_symbol+4"), "%s: no function symbol 'no_such_symbol'" % b.path),
        (("lookup", b.path, "stop_her"), "no function symbol 'stop_her' (did you mean stop_here?)"),
        (("lookup", b.path, "stop_here+x"), "cannot parse address 'stop_here+x': use hex"),
        (("dump", tmp_path), "is a directory"),
    ]
    for args, msg in cases:
        code, out, err = sframe(*args)
        assert code != 0 and out == ""
        assert err.count("\n") == 1 and err.startswith("sframe: ") and msg in err, (args, err)


def test_malformed_section_in_a_file_is_one_line(tmp_path, frames):
    b = frames["sid"]
    data = bytearray(b.path.read_bytes())
    sf = ElfImage(b.path).sframe
    data[sf.file_offset + 2] = 9           # version 9
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    code, out, err = sframe("dump", bad)
    assert code == 1 and out == ""
    assert err == "sframe: malformed SFrame section at byte offset 0x2: unknown version 9 (known: 1, 2, 3)\n"


def test_found_by_type_and_by_segment(tmp_path, frames):
    b = frames["sid"]
    renamed, nosh = tmp_path / "renamed", tmp_path / "nosh"
    toolchains.run_in("sid", ["objcopy", "--rename-section", ".sframe=.unwind_rows", str(b.path), str(renamed)],
                      cwd=tmp_path, check=True)
    toolchains.run_in("sid", ["objcopy", "--strip-section-headers", str(b.path), str(nosh)], cwd=tmp_path, check=True)
    ref = ElfImage(b.path).sframe
    by_type = ElfImage(renamed).sframe
    assert by_type.name == ".unwind_rows" and by_type.data == ref.data and by_type.address == ref.address
    by_seg = ElfImage(nosh).sframe
    assert by_seg.name == "PT_GNU_SFRAME" and by_seg.address == ref.address
    assert by_seg.data[:len(ref.data)] == ref.data
    code, out, _ = sframe("lookup", nosh, hex(toolchains.function_symbols(b.path)["stop_here"][0]))
    assert code == 0 and "Section: PT_GNU_SFRAME at %#x" % ref.address in out


def test_no_sframe_is_a_clear_error():
    with pytest.raises(NoSFrameError, match="no SFrame section"):
        ElfImage("/bin/true").require_sframe()
    with pytest.raises(ElfError, match="not an ELF file"):
        ElfImage("/etc/hostname")


def test_checkout_command_and_nothing_machine_wide(frames):
    """scripts/sframe runs this checkout's code from any directory, with Debian's Python (which has
    pyelftools), as scripts/demo uses it; and set-up (scripts/test ran it) leaves nothing
    machine-wide that points into a checkout: the /usr/local/bin/sframe link older set-ups made
    dangled once its clone was removed, and ran whichever clone set up last."""
    cmd = [str(REPO / "scripts" / "sframe")]
    p = subprocess.run(cmd + ["--help"], stdout=subprocess.PIPE, text=True, timeout=60, cwd="/")
    assert p.returncode == 0 and "dump" in p.stdout and "lookup" in p.stdout and "backtrace" in p.stdout
    p = subprocess.run(cmd + ["--version"], stdout=subprocess.PIPE, text=True, timeout=60, cwd="/")
    assert p.returncode == 0 and p.stdout.strip().endswith("(%s)" % REPO), p.stdout
    p = subprocess.run(cmd + ["dump", str(frames["host"].path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60, cwd="/")
    assert p.returncode == 0 and p.stdout.startswith("Contents of the SFrame section"), p.stderr
    link = os.readlink("/usr/local/bin/sframe") if os.path.islink("/usr/local/bin/sframe") else ""
    assert not link.endswith("/scripts/sframe"), "/usr/local/bin/sframe -> %s" % link


@pytest.fixture(scope="module")
def empty_sframe(frames, tmp_path_factory):
    """The sid program with its .sframe emptied (zero bytes, as gas 2.45+ writes for inputs
    without functions), and the output of binutils 2.47's readelf --sframe for it."""
    work = tmp_path_factory.mktemp("empty")
    (work / "nothing").write_bytes(b"")
    path = work / "empty"
    toolchains.run_in("sid", ["objcopy", "--update-section", ".sframe=nothing", str(frames["sid"].path), str(path)],
                      cwd=work, check=True)
    ref = toolchains.run_in("sid", ["readelf", "--sframe", str(path)], cwd=work)
    return path, ref


def test_empty_section_dumps_as_readelf_and_is_no_sframe(empty_sframe):
    path, ref = empty_sframe
    img = ElfImage(path)
    assert img.sframe is not None and img.sframe.data == b""
    assert ref.returncode == 0 and ref.stdout == "\nSection '.sframe' has no debugging data.\n", ref
    code, out, err = sframe("dump", path)
    assert (code, out, err) == (0, ref.stdout, "")
    with pytest.raises(NoSFrameError, match=r"the \.sframe section is empty"):
        img.require_sframe()
    code, out, err = sframe("lookup", path, "main")
    assert code != 0 and out == "" and err.count("\n") == 1 and "the .sframe section is empty (no SFrame data)" in err


def test_cfi_writes_the_side_file(tmp_path, frames):
    """`sframe cfi`: -o OUT or --build-id-dir DIR; -j N processes give the same file."""
    b = frames["sid"]
    code, out, err = sframe("cfi", b.noeh, "-o", tmp_path / "one.debug", "-j", "1")
    assert code == 0 and not err and out.startswith("%s: " % (tmp_path / "one.debug")), (out, err)
    assert " functions with SFrame written as " in out, out
    code, out, err = sframe("cfi", b.noeh, "--build-id-dir", tmp_path / "dir", "-j", "3")
    assert code == 0 and not err, err
    written = list((tmp_path / "dir").rglob("*"))
    files = [p for p in written if p.is_file() and p.suffix == ".debug"]
    assert len(files) == 1 and files[0].parent.parent.name == ".build-id" and len(files[0].parent.name) == 2, written
    assert files[0].read_bytes() == (tmp_path / "one.debug").read_bytes()
    # (and how it was made, beside: core.elf.sidetree's record)
    assert [p.name for p in written if p.suffix == ".json"] == [files[0].parent.name + files[0].stem + ".json"], written
    for args, msg in ((("-j", "0"), "argument -j/--jobs: '0' is not a whole number of at least 1"),
                      (("-o", tmp_path / "x", "--build-id-dir", tmp_path), "give -o OUT or --build-id-dir DIR")):
        code, out, err = sframe("cfi", b.noeh, *args)
        assert code == 2 and out == "" and msg in err.strip().splitlines()[-1], (args, err)
