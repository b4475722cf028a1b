"""core.target.inmemory and core.target.remotecopy without a debugger: a program and a library built
here are laid out in a memory image as the kernel and the dynamic linker lay them out (PT_LOAD
segments at a load bias, the auxiliary vector, DT_DEBUG, r_debug and the link_map chain), and the
modules are found in it; then damaged images; then local copies of a target's files by build ID."""

import struct
import subprocess

import pytest

from sframekit.core.elf.image import PT_DYNAMIC, ElfImage, parse_elf_headers
from sframekit.core.elf.notes import file_build_id
from sframekit.core.target import inmemory, remotecopy
from sframekit.core.target.corelinks import DT_DEBUG
from sframekit.core.target.corenotes import AT_ENTRY, AT_EXECFN, AT_PHDR, AT_PHNUM

EXE_BIAS, LIB_BIAS = 0x555555554000, 0x7FFFF7DC0000
R_DEBUG, LINK_MAPS, STRINGS = 0x7FFFF7FFD000, 0x7FFFF7FFD100, 0x7FFFFFFFE000


class Memory:
    """A sparse memory image of 4 KiB pages: read(addr, size) raises where a page is unmapped."""

    def __init__(self):
        self.pages = {}

    def write(self, addr, data):
        for i, b in enumerate(data):
            self.pages.setdefault((addr + i) >> 12, bytearray(4096))[(addr + i) & 4095] = b

    def read(self, addr, size):
        out = bytearray()
        for a in range(addr, addr + size):
            page = self.pages.get(a >> 12)
            if page is None:
                raise OSError("cannot access memory at %#x" % a)
            out.append(page[a & 4095])
        return bytes(out)


def _load(mem, path, bias):
    data = open(path, "rb").read()
    hdr = parse_elf_headers(lambda off, size: data[off:off + size])
    for p in hdr.phdrs:
        if p.type == 1:
            mem.write(bias + p.vaddr, data[p.offset:p.offset + p.filesz] + b"\0" * (p.memsz - p.filesz))
    return hdr


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("inmemory")
    src = d / "p.c"
    src.write_text("int lib(int); int main(int c, char **v) { return lib(c) + 1; }\n")
    (d / "l.c").write_text("int lib(int x) { return x * 3; }\n")
    flags = ["gcc", "-O2", "-Wa,--gsframe"]
    subprocess.run(flags + ["-shared", "-fPIC", "-o", str(d / "libl.so"), str(d / "l.c")], check=True)
    subprocess.run(flags + ["-o", str(d / "p"), str(src), str(d / "libl.so")], check=True)
    return d


def _image(built, link_maps=True, cycle=False):
    """The memory of the program stopped after the dynamic linker listed its library."""
    mem = Memory()
    exe, lib = built / "p", built / "libl.so"
    hdr = _load(mem, exe, EXE_BIAS)
    _load(mem, lib, LIB_BIAS)
    pt_phdr = [p for p in hdr.phdrs if p.type == 6][0]
    mem.write(STRINGS, str(exe).encode() + b"\0")
    mem.write(STRINGS + 0x200, str(lib).encode() + b"\0")
    auxv = {AT_PHDR: EXE_BIAS + pt_phdr.vaddr, AT_PHNUM: len(hdr.phdrs), inmemory.AT_PHENT: 56,
            AT_ENTRY: EXE_BIAS + hdr.entry, AT_EXECFN: STRINGS}
    if link_maps:      # DT_DEBUG -> r_debug -> [executable, library]
        dyn = [p for p in hdr.phdrs if p.type == PT_DYNAMIC][0]
        at = EXE_BIAS + dyn.vaddr
        while True:
            tag, _ = struct.unpack("<QQ", mem.read(at, 16))
            if tag == DT_DEBUG:
                mem.write(at + 8, struct.pack("<Q", R_DEBUG))
                break
            assert tag != 0
            at += 16
        mem.write(R_DEBUG, struct.pack("<iiQ", 1, 0, LINK_MAPS))
        second = LINK_MAPS + 0x40
        mem.write(LINK_MAPS, struct.pack("<QQQQ", EXE_BIAS, STRINGS + 0x300, 0, second))
        mem.write(STRINGS + 0x300, b"\0")
        mem.write(second, struct.pack("<QQQQ", LIB_BIAS, STRINGS + 0x200, 0, LINK_MAPS if cycle else 0))
    return mem, auxv


def test_program_and_library_found_in_memory(built):
    mem, auxv = _image(built)
    mods, warnings = inmemory.modules(mem.read, auxv, "<")
    assert warnings == []
    assert [(m.name, m.bias, m.executable) for m in mods] == [
        (str(built / "p"), EXE_BIAS, True), (str(built / "libl.so"), LIB_BIAS, False)]
    for m, path in zip(mods, (built / "p", built / "libl.so")):
        image = ElfImage(str(path))
        want = image.require_sframe()
        # (binutils 2.40's PT_GNU_SFRAME may run past the section: the header says where it ends)
        assert m.sframe[0] == m.bias + want.address and m.sframe[1] >= len(want.data), m
        assert mem.read(m.sframe[0], len(want.data)) == want.data
        assert m.build_id == file_build_id(str(path)) and m.build_id
        # the file as far as memory shows it: its ELF header and its code
        data = path.read_bytes()
        read = m.reader(mem.read)
        assert read(0, 64) == data[:64]
        assert read(len(data) + 10, 4) is None


def test_before_the_dynamic_linker_ran(built):
    """No r_debug yet (DT_DEBUG 0): the executable alone, and no warning."""
    mem, auxv = _image(built, link_maps=False)
    mods, warnings = inmemory.modules(mem.read, auxv, "<")
    assert [m.executable for m in mods] == [True] and mods[0].sframe is not None and warnings == []


def test_damaged_images_are_warnings(built):
    """A link_map chain that loops ends; unreadable program headers, a library without an ELF
    header at its bias, no auxiliary vector: warnings, nothing raised."""
    mem, auxv = _image(built, cycle=True)
    mods, _ = inmemory.modules(mem.read, auxv, "<")
    assert len(mods) == 2
    assert inmemory.modules(mem.read, {}, "<") == ([], ["the auxiliary vector does not place the executable's "
                                                         "program headers"])
    mods, warnings = inmemory.modules(mem.read, {**auxv, AT_PHDR: 0x1000}, "<")
    assert mods == [] and "cannot be read" in warnings[0]
    mem.write(LINK_MAPS + 0x40, struct.pack("<Q", LIB_BIAS + 0x10))     # the library's bias off its header
    mods, warnings = inmemory.modules(mem.read, auxv, "<")
    assert len(mods) == 1 and "no ELF header at its load bias" in warnings[0], warnings
    mods, warnings = inmemory.modules(mem.read, auxv, ">")               # the wrong byte order: nothing sane
    assert all(m.sframe is None for m in mods) and warnings, (mods, warnings)


def test_link_chain_tells_a_change(built):
    """link_chain: the list's (bias, name) entries, read anew; () where nothing can be read."""
    mem, auxv = _image(built)
    chain = inmemory.link_chain(mem.read, auxv, "<")
    assert [bias for bias, _name in chain] == [EXE_BIAS, LIB_BIAS]
    mem.write(LINK_MAPS + 0x40, struct.pack("<Q", LIB_BIAS + 0x100000))     # another library's bias
    assert inmemory.link_chain(mem.read, auxv, "<") != chain
    assert inmemory.link_chain(mem.read, {}, "<") == ()
    assert inmemory.link_chain(_image(built, link_maps=False)[0].read, auxv, "<") == ()


# -- local copies of a target's files ----------------------------------------------------------------

def _fetcher(src, calls):
    def fetch(name, dest):
        calls.append(name)
        with open(src, "rb") as f, open(dest, "wb") as g:
            g.write(f.read())
    return fetch


def test_copy_by_build_id(built, tmp_path, monkeypatch):
    monkeypatch.setenv("SFRAME_CACHE", str(tmp_path / "cache"))
    prog = built / "p"
    bid = file_build_id(str(prog))
    calls = []
    # the same path here, the same build: no copy
    got = remotecopy.local_copy(str(prog), bid, _fetcher(prog, calls))
    assert got.path == str(prog) and "local file" in got.source and calls == []
    # another path (not on this machine): copied once, then taken from the cache
    away = "/nonexistent/dir/p"
    got = remotecopy.local_copy(away, bid, _fetcher(prog, calls))
    assert got.path.startswith(str(tmp_path / "cache" / "remote" / bid.hex()[:2])) and calls == [away]
    assert open(got.path, "rb").read() == prog.read_bytes()
    again = remotecopy.local_copy(away, bid, _fetcher(prog, calls))
    assert again.path == got.path and "before" in again.source and calls == [away]
    # a file here of that name but another build (the host's C library): never taken
    other = built / "libl.so"
    got = remotecopy.local_copy(str(other), bid, _fetcher(prog, calls))
    assert got.path != str(other) and file_build_id(got.path) == bid


def test_copy_refused_or_failed(built, tmp_path, monkeypatch):
    monkeypatch.setenv("SFRAME_CACHE", str(tmp_path / "cache"))
    prog, lib = built / "p", built / "libl.so"
    bid = file_build_id(str(prog))
    got = remotecopy.local_copy("/nonexistent/p", bid, _fetcher(lib, []))      # the target sent another build
    assert got.path is None and "has build ID %s, not %s" % (file_build_id(str(lib)).hex(), bid.hex()) in got.source
    assert not list((tmp_path / "cache" / "remote").rglob("*.tmp"))

    def fails(name, dest):
        raise RuntimeError("Remote I/O error: Operation not permitted.")
    got = remotecopy.local_copy("/nonexistent/p", bid, fails)
    assert got.path is None and "Operation not permitted" in got.source
    # no build ID: a copy for this process only
    got = remotecopy.local_copy("/nonexistent/p", None, _fetcher(prog, []))
    assert "for this session" in got.source and open(got.path, "rb").read() == prog.read_bytes()
    assert remotecopy.local_copy("/nonexistent/p", None, fails).path is None


def test_copy_must_be_the_file_loaded(built, tmp_path, monkeypatch):
    """A copy whose SFrame section is not the one in memory is refused; so is a name with control
    characters (it would reach a debugger command line) or a relative one."""
    monkeypatch.setenv("SFRAME_CACHE", str(tmp_path / "cache"))
    prog = built / "p"
    bid = file_build_id(str(prog))
    loaded = ElfImage(str(prog)).require_sframe().data
    assert remotecopy.sframe_as_loaded(str(prog), loaded)
    assert not remotecopy.sframe_as_loaded(str(prog), loaded[:-1] + bytes([loaded[-1] ^ 1]))
    assert not remotecopy.sframe_as_loaded(str(built / "l.c"), loaded)
    calls = []
    got = remotecopy.local_copy("/nonexistent/p", bid, _fetcher(prog, calls), lambda path: False)
    assert got.path is None and "differs from memory's" in got.source and calls
    assert not [p for p in (tmp_path / "cache" / "remote").rglob("*") if p.is_file()]
    got = remotecopy.local_copy("/nonexistent/p", bid, _fetcher(prog, calls),
                                lambda path: remotecopy.sframe_as_loaded(path, loaded))
    assert got.path is not None
    for name in ("/x\nshell touch /tmp/owned", "relative/p"):
        got = remotecopy.local_copy(name, bid, _fetcher(prog, calls))
        assert got.path is None and "is not one to copy" in got.source
