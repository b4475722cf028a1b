"""ELF access: find the SFrame section, its address, and symbols.

Start addresses in an SFrame section resolve against the section's address, so the index is
built with `sh_addr` (link time) plus the load bias (PIE executables, shared libraries).

The ELF header, program and section headers, symbol tables and PLT relocations are read with
`struct` (`ElfFile`, `section_headers`): pyelftools takes 40 ms to import and builds a Python
object per section, a hash section's whole table included, which made start-up and every file
opened slow.  pyelftools reads what it is good at: DWARF, relocations of relocatable files,
compressed sections other than zlib (`ElfFile.full()`).
"""

import bisect
import os
import re
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from .. import pyelftools
from ..errors import ElfError, EmptySFrameError, NoSFrameError, NotElfError, SFrameError

T = TypeVar("T")

SHT_GNU_SFRAME = 0x6FFFFFF4
PT_GNU_SFRAME = 0x6474E554
SECTION_NAME = ".sframe"

PT_LOAD = 1
PT_DYNAMIC = 2
PT_NOTE = 4
PT_PHDR = 6
_PT_INTERP = 3
SHF_ALLOC = 0x2
# Symbols (ELF gABI): function types (STT_FUNC, STT_GNU_IFUNC), STB_GLOBAL, the first reserved section index.
_FUNC_TYPES = (2, 10)
_STB_GLOBAL = 1
_SHN_LORESERVE = 0xFF00
PF_W = 0x2
PF_R = 0x4

# 64-bit ELF layout read without pyelftools (from a core's memory, or a file's first bytes).
EHDR_SIZE = 64
_EHDR_ENTRY_PHOFF = ("QQ", 24)         # e_entry, e_phoff
_EHDR_PHENTSIZE_PHNUM = ("HH", 54)     # e_phentsize, e_phnum
PHDR_FORMAT = "IIQQQQQ"                # p_type, p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz
PHDR_SIZE = struct.calcsize("<" + PHDR_FORMAT)
MAX_PHNUM = 4096


class ProgramHeader(NamedTuple):
    """One Elf64_Phdr (p_paddr left out)."""
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class Load(NamedTuple):
    """A PT_LOAD segment of an ElfImage, in the order its users unpack it."""
    vaddr: int
    memsz: int
    offset: int
    filesz: int


class ElfHeaders(NamedTuple):
    """What parse_elf_headers reads: e_entry, e_phoff and the program headers."""
    order: str              # "<" or ">"
    entry: int
    phoff: int
    phdrs: List[ProgramHeader]
    header_end: int         # end of the program header table in the file


def unpack_phdrs(raw: bytes, order: str, count: int, entsize: int = PHDR_SIZE) -> List[ProgramHeader]:
    """ProgramHeaders from `count` raw Elf64_Phdr entries of `entsize` bytes."""
    out = []
    for i in range(count):
        t, f, off, vaddr, _paddr, filesz, memsz = struct.unpack_from(order + PHDR_FORMAT, raw, i * entsize)
        out.append(ProgramHeader(t, f, off, vaddr, filesz, memsz))
    return out


def parse_elf_headers(read) -> Optional[ElfHeaders]:
    """ELF header fields and program headers of a 64-bit ELF, through read(offset, size).

    read returns bytes or None.  Returns None if the bytes are not available or not a 64-bit
    ELF header.
    """
    ehdr = read(0, EHDR_SIZE)
    if not ehdr or len(ehdr) < EHDR_SIZE or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2:
        return None
    order = "<" if ehdr[5] == 1 else ">"
    entry, phoff = struct.unpack_from(order + _EHDR_ENTRY_PHOFF[0], ehdr, _EHDR_ENTRY_PHOFF[1])
    phentsize, phnum = struct.unpack_from(order + _EHDR_PHENTSIZE_PHNUM[0], ehdr, _EHDR_PHENTSIZE_PHNUM[1])
    if phentsize < PHDR_SIZE or phnum > MAX_PHNUM:
        return None
    table = read(phoff, phentsize * phnum)
    if table is None or len(table) < phentsize * phnum:
        return None
    return ElfHeaders(order, entry, phoff, unpack_phdrs(table, order, phnum, phentsize), phoff + phentsize * phnum)


def file_segments(path: str, ptype: int, limit: int) -> Optional[Tuple[str, List[bytes]]]:
    """(byte order, [contents]) of the segments of type `ptype` of the ELF file at `path`, each
    read whole if at most `limit` bytes, else its first `limit` bytes; None where the file is no
    64-bit ELF or cannot be read.  Program headers only: no section headers, no pyelftools."""
    try:
        with open(path, "rb") as fh:
            def read(offset: int, size: int) -> bytes:
                fh.seek(offset)
                return fh.read(size)
            hdr = parse_elf_headers(read)
            if hdr is None:
                return None
            return hdr.order, [read(p.offset, min(p.filesz, limit)) for p in hdr.phdrs if p.type == ptype]
    except OSError:
        return None


@dataclass(frozen=True)
class SFrameData:
    """An SFrame section's bytes and where it lives."""
    data: bytes
    address: int        # link-time address (sh_addr, or p_vaddr of PT_GNU_SFRAME)
    file_offset: int
    name: str           # section name, or "PT_GNU_SFRAME" when found by segment only



class SectionHeader(NamedTuple):
    """One section header (Elf64_Shdr / Elf32_Shdr), its name resolved; `number`: its index in the table."""
    number: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


SHT_NOBITS = 8
_SHT_RELA = 4
SHF_COMPRESSED = 0x800
_SHDR = {64: "IIQQQQIIQQ", 32: "IIIIIIIIII"}    # name type flags addr offset size link info addralign entsize
_CHDR = {64: ("IIQQ", 24), 32: ("III", 12)}     # ch_type (ch_reserved) ch_size ch_addralign
_ELFCOMPRESS_ZLIB = 1


def file_size(stream) -> Optional[int]:
    """The size of the file `stream` reads, or None where it is not a file (an in-memory stream:
    its read says how much there is)."""
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return None


def read_at(stream, offset: int, size: int, what: str) -> bytes:
    """`size` bytes of the file at `offset`, checked against the file's size first (a header's
    claim is never trusted with a read or an allocation larger than the file)."""
    end = file_size(stream)
    if offset < 0 or size < 0 or (end is not None and offset + size > end):
        raise ElfError("%s (%d bytes at file offset %#x) lies beyond the end of the file" % (what, size, offset))
    stream.seek(offset)
    data = stream.read(size)
    if len(data) < size:
        raise ElfError("%s (%d bytes at file offset %#x) is cut short" % (what, size, offset))
    return data


def _entries_with(table: bytes, size: int, field: int, value: bytes) -> bytes:
    """The entries of a table of `size`-byte entries whose bytes at `field` are `value`."""
    out = []
    k = table.find(value)
    while k >= 0:
        if k % size == field:
            out.append(table[k - field:k - field + size])
        k = table.find(value, k + 1)
    return b"".join(out)


def _name_at(table: bytes, offset: int) -> str:
    """The NUL-terminated name at `offset` of a string table ("" past its end)."""
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def section_headers(elf) -> List[SectionHeader]:
    """The section header table of an ElfFile (or pyelftools ELFFile), unpacked with `struct`.

    pyelftools builds a Section object for each section as it is listed, and a hash section
    parses its whole table then: listing a C library's sections that way costs tens of
    milliseconds, every time a file is opened.  This reads the headers alone."""
    order = "<" if elf.little_endian else ">"
    fmt = order + _SHDR[elf.elfclass]
    size = struct.calcsize(fmt)
    count = elf.num_sections()
    if not count:
        return []
    stream = elf.stream
    entsize = elf["e_shentsize"]
    if entsize < size:
        raise ElfError("section header entries of %d bytes, %d expected" % (entsize, size))
    raw = read_at(stream, elf["e_shoff"], entsize * count, "the section header table")
    rows = [struct.unpack_from(fmt, raw, i * entsize) for i in range(count)]
    strndx = elf["e_shstrndx"]
    if strndx == 0xFFFF:                  # SHN_XINDEX: the index is section 0's sh_link
        strndx = rows[0][6]
    names = b""
    if 0 < strndx < count:
        _n, t, _f, _a, off, sz = rows[strndx][:6]
        if t != SHT_NOBITS:
            names = read_at(stream, off, sz, "the section name table")
    out = []
    for i, (name, *fields) in enumerate(rows):
        out.append(SectionHeader(i, _name_at(names, name), *fields))
    return out


def section_data(elf, sec: SectionHeader) -> bytes:
    """A section's bytes (none for SHT_NOBITS); zlib-compressed sections uncompressed, any other
    compression left to pyelftools."""
    if sec.type == SHT_NOBITS or not sec.size:
        return b""
    data = read_at(elf.stream, sec.offset, sec.size, "section %s" % sec.name)
    if sec.flags & SHF_COMPRESSED:
        fmt, head = _CHDR[elf.elfclass]
        if len(data) < head:
            raise ElfError("section %s: compressed, but shorter than its compression header" % sec.name)
        fields = struct.unpack_from(("<" if elf.little_endian else ">") + fmt, data)
        if fields[0] != _ELFCOMPRESS_ZLIB:
            return elf.get_section(sec.number).data()
        size = fields[-2]                   # ch_size: what it says it holds uncompressed
        try:
            out = zlib.decompressobj().decompress(data[head:], size)
        except zlib.error as exc:
            raise ElfError("section %s: cannot be uncompressed: %s" % (sec.name, exc)) from None
        if len(out) != size:
            raise ElfError("section %s: uncompressed to %d bytes, its header says %d" % (sec.name, len(out), size))
        return out
    return data


def _section_named(sections: List[SectionHeader], name: str) -> Optional[SectionHeader]:
    for sec in sections:
        if sec.name == name:
            return sec
    return None


# ELF header fields (gABI) by the names pyelftools gives them, for the values this package meets.
_E_TYPES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
_E_MACHINES = {2: "EM_SPARC", 3: "EM_386", 8: "EM_MIPS", 20: "EM_PPC", 21: "EM_PPC64", 22: "EM_S390", 40: "EM_ARM",
               43: "EM_SPARCV9", 62: "EM_X86_64", 183: "EM_AARCH64", 243: "EM_RISCV", 258: "EM_LOONGARCH"}
_EHDR = {64: "HHIQQQIHHHHHH", 32: "HHIIIIIHHHHHH"}   # e_type .. e_shstrndx, after e_ident
_EHDR_KEYS = ("e_type", "e_machine", "e_version", "e_entry", "e_phoff", "e_shoff", "e_flags", "e_ehsize",
              "e_phentsize", "e_phnum", "e_shentsize", "e_shnum", "e_shstrndx")
_PHDR = {64: (PHDR_FORMAT + "Q", ("p_type", "p_flags", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_align")),
         32: ("IIIIIIII", ("p_type", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_flags", "p_align"))}
_PN_XNUM = 0xFFFF


class Segment(dict):
    """One program header (p_type and the rest as numbers), and its bytes."""

    def __init__(self, fields, stream):
        super().__init__(fields)
        self._stream = stream

    def data(self) -> bytes:
        return read_at(self._stream, self["p_offset"], self["p_filesz"], "segment at %#x" % self["p_vaddr"])


class ElfFile:
    """An open ELF file's header, read with `struct`, offering the part of pyelftools' ELFFile
    interface this package uses (header fields, `num_sections`, `iter_segments`); `full()` is
    pyelftools' own ELFFile, made when first needed (DWARF, relocations, compressed sections).

    Reading headers and tables this way keeps pyelftools (40 ms to import, and slow to list a
    big file's sections) off the paths that do not need it: `sframe dump`, start-up, backtraces."""

    def __init__(self, stream):
        self.stream = stream
        stream.seek(0)
        ident = stream.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise NotElfError("not an ELF file")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError("ELF class %d, data encoding %d: not a valid ELF file" % (ident[4], ident[5]))
        self.elfclass = 64 if ident[4] == 2 else 32
        self.little_endian = ident[5] == 1
        self._order = "<" if self.little_endian else ">"
        fmt = self._order + _EHDR[self.elfclass]
        raw = stream.read(struct.calcsize(fmt))
        if len(raw) < struct.calcsize(fmt):
            raise ElfError("the ELF header is cut short")
        self.header = dict(zip(_EHDR_KEYS, struct.unpack(fmt, raw)))
        self.header["e_type"] = _E_TYPES.get(self.header["e_type"], self.header["e_type"])
        self.header["e_machine"] = _E_MACHINES.get(self.header["e_machine"], self.header["e_machine"])
        self._full = None
        self._zero = None

    def __getitem__(self, key):
        return self.header[key]

    def _section_zero(self) -> Tuple[int, int]:
        """(sh_size, sh_info) of section 0: the real counts when the header's overflow."""
        if self._zero is None:
            self._zero = (0, 0)
            fmt = self._order + _SHDR[self.elfclass]
            try:
                if self.header["e_shoff"]:
                    f = struct.unpack(fmt, read_at(self.stream, self.header["e_shoff"], struct.calcsize(fmt),
                                                   "section 0"))
                    self._zero = (f[5], f[7])
            except ElfError:
                pass                    # no section 0 to read: no counts from it
        return self._zero

    def num_sections(self) -> int:
        if self.header["e_shoff"] == 0:
            return 0
        return self.header["e_shnum"] or self._section_zero()[0]

    def num_segments(self) -> int:
        n = self.header["e_phnum"]
        return self._section_zero()[1] if n == _PN_XNUM else n

    def iter_segments(self):
        fmt, keys = _PHDR[self.elfclass]
        fmt = self._order + fmt
        size = struct.calcsize(fmt)
        entsize = self.header["e_phentsize"]
        count = self.num_segments()
        if count and entsize < size:
            raise ElfError("program header entries of %d bytes, %d expected" % (entsize, size))
        raw = read_at(self.stream, self.header["e_phoff"], entsize * count, "the program header table")
        for i in range(count):
            yield Segment(zip(keys, struct.unpack_from(fmt, raw, i * entsize)), self.stream)

    def full(self):
        """pyelftools' ELFFile of the same file (imported on first use)."""
        if self._full is None:
            self._full = pyelftools_file(self.stream)
        return self._full

    def get_section(self, n: int):
        return self.full().get_section(n)


def pyelftools_file(stream):
    try:
        pyelftools.load()
        from elftools.elf.elffile import ELFFile
    except ImportError as exc:   # the debugger adapters report this in one line
        raise ImportError("pyelftools is missing (%s): install it with 'apt-get install python3-pyelftools' "
                          "or 'pip install pyelftools'" % exc) from None
    return ELFFile(stream)


def _malformed(exc: BaseException) -> bool:
    """An exception a malformed file can cause in a reader of it (a count or size beyond what
    Python can hold included), which becomes one ElfError line."""
    return isinstance(exc, (ValueError, KeyError, IndexError, AttributeError, OSError, struct.error, zlib.error,
                            OverflowError, MemoryError)) or _pyelftools_error(exc)


def _pyelftools_error(exc: BaseException) -> bool:
    """An error pyelftools raises for a malformed file (if pyelftools was imported at all)."""
    mod = sys.modules.get("elftools.common.exceptions")
    return mod is not None and isinstance(exc, (mod.ELFError, mod.DWARFError))


def load_elf(path: str, load: Callable[..., T], what: str = "ELF structure") -> T:
    """Open path, check it is ELF, and call load(ElfFile, file); every failure becomes one ElfError line."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                raise NotElfError("%s: not an ELF file" % path)
            return load(ElfFile(fh), fh)
    except FileNotFoundError:
        raise ElfError("%s: no such file" % path) from None
    except IsADirectoryError:
        raise ElfError("%s: is a directory" % path) from None
    except PermissionError:
        raise ElfError("%s: permission denied" % path) from None
    except ElfError as exc:
        if str(exc).startswith(path + ": "):
            raise
        raise type(exc)("%s: cannot read %s: %s" % (path, what, exc)) from None
    except SFrameError:
        raise                     # (the section's own error, as a linked file's: its offset and rule)
    except Exception as exc:
        if not _malformed(exc):
            raise
        raise ElfError("%s: cannot read %s: %s" % (path, what, exc)) from None


class ElfImage:
    """An opened ELF file.  Reads everything it needs at construction; holds no open file after."""

    def __init__(self, path: str, readelf_layout: bool = False):
        """`readelf_layout`: in a relocatable file, place every section at 0 as readelf does
        (a function's address is then its offset in its section), not one after another."""
        self.path = os.fspath(path)
        self._readelf_layout = readelf_layout
        load_elf(self.path, lambda elf, fh: self._load(elf))

    def _load(self, elf):
        self.machine = elf["e_machine"]
        self.big_endian = not elf.little_endian
        self.elfclass = elf.elfclass
        self.e_type = elf["e_type"]
        self.entry = elf["e_entry"]
        self.interpreter = False
        self.sframe = None
        found = None
        sections = section_headers(elf)
        self.relocatable = self.e_type == "ET_REL"
        self._addrs = _layout(sections, self.relocatable and not self._readelf_layout)
        for k, sec in enumerate(sections):
            if sec.name == SECTION_NAME or sec.type == SHT_GNU_SFRAME:
                data = section_data(elf, sec)
                if self.relocatable and data:
                    data = self._relocated(elf, k, data)
                found = SFrameData(data, self._addrs[k], sec.offset, sec.name or SECTION_NAME)
                break
        self.loads = []
        for seg in elf.iter_segments():
            ptype = seg["p_type"]
            if found is None and ptype == PT_GNU_SFRAME:
                found = SFrameData(seg.data(), seg["p_vaddr"], seg["p_offset"], "PT_GNU_SFRAME")
            if ptype == PT_LOAD:
                self.loads.append(Load(seg["p_vaddr"], seg["p_memsz"], seg["p_offset"], seg["p_filesz"]))
            elif ptype == _PT_INTERP:
                self.interpreter = True
        self.sframe = found
        self._plts = [(sec.addr, sec.size, sec.name) for sec in sections if sec.name.startswith(".plt") and sec.addr]
        self._section_addrs: Dict[str, int] = {}
        for sec, addr in zip(sections, self._addrs):
            self._section_addrs.setdefault(sec.name, addr)
        self._dyn_relas = [(sec.offset, sec.size) for sec in sections
                           if sec.type == _SHT_RELA and sec.flags & SHF_ALLOC and not self.relocatable]
        self._placed = [(addr, sec.size, sec.name, sec.offset if sec.type != SHT_NOBITS else None)
                        for sec, addr in zip(sections, self._addrs)
                        if self.relocatable and sec.flags & SHF_ALLOC and sec.size]
        self._symbols = None     # read on first use (_symtab), with _starts and _plt_entries
        self._starts: List[int] = []
        self._plt_entries = None
        self._exact: Optional[Dict[int, str]] = None   # the names symbolize gives at symbols' starts
        self.symbol_file: Optional[str] = None   # where the symbols are read instead (use_symbols_of)

    def _relocations(self, elf, k, where):
        """The relocations aimed at section k, each symbol placed as the sections are (read by
        pyelftools: relocatable files only)."""
        from .reloc import Relocation
        elf = elf.full()
        sections = list(elf.iter_sections())
        relocs = []
        for sec in sections:
            if sec["sh_type"] not in ("SHT_RELA", "SHT_REL") or sec["sh_info"] != k:
                continue
            symtab = elf.get_section(sec["sh_link"])
            rela = sec["sh_type"] == "SHT_RELA"
            for r in sec.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                shndx = sym["st_shndx"]
                name = sym.name or (sections[shndx].name if isinstance(shndx, int) else "")
                if isinstance(shndx, int) and shndx < len(sections):
                    value = self._addrs[shndx] + sym["st_value"]
                elif shndx == "SHN_ABS":
                    value = sym["st_value"]
                else:
                    raise ElfError("%s: relocation at offset %#x is against %s symbol %r"
                                   % (where, r["r_offset"], "an undefined" if shndx == "SHN_UNDEF" else shndx, name))
                relocs.append(Relocation(r["r_offset"], r["r_info_type"], value, r["r_addend"] if rela else None, name))
        return relocs

    def _kinds(self, relocs, where):
        from ..arch import abi as abimod
        abi = abimod.for_elf(self.machine, self.big_endian)
        if relocs and abi is None:
            raise ElfError("%s: relocations for machine %s are not supported" % (where, self.machine))
        return abi.relocations if abi else {}

    def _relocated(self, elf, k, data):
        """The SFrame section's bytes with the relocations aimed at it applied (core.elf.reloc)."""
        from .reloc import apply
        where = "%s: %s" % (self.path, elf.full().get_section(k).name)
        relocs = self._relocations(elf, k, where)
        return apply(data, relocs, self._kinds(relocs, where), self._addrs[k], where)

    def relocated_section(self, name: str) -> Optional[Tuple[bytes, int]]:
        """(bytes, address) of section `name` of a relocatable file, its relocations applied with
        the sections placed as this image places them (core.elf.reloc.apply_all); None if absent."""
        from .reloc import apply_all

        def load(elf, _fh):
            for sec in section_headers(elf):
                if sec.name == name and sec.type != SHT_NOBITS:
                    k = sec.number
                    where = "%s: %s" % (self.path, name)
                    relocs = self._relocations(elf, k, where)
                    return apply_all(section_data(elf, sec), relocs, self._kinds(relocs, where), self._addrs[k],
                                     self.big_endian, where), self._addrs[k]
            return None
        return load_elf(self.path, load, "section %s" % name)

    def section_bytes(self, name: str) -> Optional[Tuple[bytes, int]]:
        """(bytes, address) of the first section called `name` with contents (of a relocatable
        file: relocated, as `relocated_section`), or None.  Read from the file now."""
        if self.relocatable:
            return self.relocated_section(name)

        def load(elf, _fh):
            for sec in section_headers(elf):
                if sec.name == name and sec.type != SHT_NOBITS:
                    return section_data(elf, sec), sec.addr
            return None
        return load_elf(self.path, load, "section %s" % name)

    def _function_symbols(self, elf, sections: List[SectionHeader], at: Optional[int] = None):
        """(strtab, [(address, size, name offset, binding)]) of the function symbols of .symtab,
        else .dynsym ((b"", []) where neither has any); with `at`, of those of the first table whose
        value is `at`, found by their value's bytes (not in a relocatable file).  The table is unpacked
        with `struct` (pyelftools' parser takes about 70 µs a symbol: a C library's 13,000 cost a
        second).  In a relocatable file a symbol's value is an offset in its section: placed as the
        sections are."""
        order = ">" if self.big_endian else "<"
        wide = self.elfclass == 64
        layout = order + ("IBBHQQ" if wide else "IIIBBH")
        size = struct.calcsize(layout)
        # Where st_info, st_shndx, st_value and st_size are in a record (st_name is first).
        info, shndx, value, size_ = (1, 3, 4, 5) if wide else (3, 5, 1, 2)
        for name in (".symtab", ".dynsym"):
            tab = _section_named(sections, name)
            if tab is None or tab.type == SHT_NOBITS or tab.link >= len(sections):
                continue
            data = section_data(elf, tab)
            data = data[:len(data) - len(data) % size]
            if at is not None:
                data = _entries_with(data, size, 8 if wide else 4, struct.pack(order + ("Q" if wide else "I"), at))
            # (Comprehensions, the fields by position: a program may have hundreds of thousands.)
            records = struct.iter_unpack(layout, data)
            if self.relocatable:
                addrs = self._addrs[:_SHN_LORESERVE]
                out = [(addrs[f[shndx]] + f[value], f[size_], f[0], f[info] >> 4) for f in records
                       if f[info] & 0xF in _FUNC_TYPES and f[0] and 0 < f[shndx] < len(addrs)]
            else:
                out = [(f[value], f[size_], f[0], f[info] >> 4) for f in records
                       if f[info] & 0xF in _FUNC_TYPES and f[0] and f[value]]
            if out or at is not None:      # (with `at`: the first table's, found or not)
                return section_data(elf, sections[tab.link]), out
        return b"", []

    def _read_symbols(self, elf, sections: List[SectionHeader]):
        """Function symbols (address, size, name), sorted by address; only functions' names are
        decoded."""
        strtab, found = self._function_symbols(elf, sections)
        # At an address the first global symbol, else the first (a global name over local aliases).
        syms = {f[0]: f for f in reversed(found)}
        syms.update({f[0]: f for f in reversed(found) if f[3] == _STB_GLOBAL})
        kept = sorted(syms.values())
        if strtab.isascii():       # (every name decoded at once: most tables are ASCII)
            text = strtab.decode("ascii") + "\0"
            find = text.find
            return [(addr, st_size, text[st_name:find("\0", st_name)]) for addr, st_size, st_name, _bind in kept]
        return [(addr, st_size, _name_at(strtab, st_name)) for addr, st_size, st_name, _bind in kept]

    def extent_at(self, addr: int) -> Optional[Tuple[int, int]]:
        """(start, size) of the function symbol `function_at` finds, without reading every
        symbol's name: one function of a large program (its entry point), found in a pass over its
        table, and where a symbol starts at `addr` (as `_start` does), in the table's bytes."""
        if self._symbols is not None:
            got = self.function_at(addr)
            return (got[0], got[1]) if got is not None else None

        def load(elf, _fh):
            sections = section_headers(elf)
            if not self.relocatable:
                strtab, exact = self._function_symbols(elf, sections, addr)
                if exact:
                    return exact
            return self._function_symbols(elf, sections)[1]
        found = []
        for path in ([self.symbol_file] if self.symbol_file else []) + [self.path]:
            try:
                found = load_elf(path, load, "its symbols")
            except ElfError:
                found = []
            if found:
                break                # (a debug file without symbols: the program's own)
        best = None                  # (address, size, binding), the alias kept as _read_symbols keeps it
        for value, size, _name, bind in found:
            if value <= addr and (best is None or value > best[0] or (
                    value == best[0] and bind == _STB_GLOBAL and best[2] != _STB_GLOBAL)):
                best = (value, size, bind)
        return (best[0], best[1]) if best is not None and addr < best[0] + max(best[1], 1) else None

    def use_symbols_of(self, path: str) -> None:
        """Take the function symbols from `path` (the program's separate debug file, whose `.symtab`
        a stripped program lacks, at the same addresses); the PLT's names still from the program."""
        self.symbol_file, self._symbols, self._exact = path, None, None

    def _symtab(self):
        if self._symbols is None:
            symbols = [] if self.symbol_file is None else load_elf(
                self.symbol_file, lambda elf, _fh: self._read_symbols(elf, section_headers(elf)), "its symbols")
            try:
                with open(self.path, "rb") as fh:
                    elf = ElfFile(fh)
                    sections = section_headers(elf)
                    if not symbols:          # (no debug file, or one without symbols: the program's)
                        symbols = self._read_symbols(elf, sections)
                    try:
                        plt = _plt_entries(elf, sections)
                    except Exception as exc:
                        if not isinstance(exc, ElfError) and not _malformed(exc):
                            raise
                        plt = None          # a PLT that cannot be read names no entries; the symbols stand
            except Exception as exc:
                if not isinstance(exc, ElfError) and not _malformed(exc):
                    raise
                raise ElfError("%s: cannot read symbols: %s" % (self.path, exc)) from None
            self._plt_entries, self._starts, self._symbols = plt, [s[0] for s in symbols], symbols
        return self._symbols

    def plt_name(self, addr: int, bias: int = 0) -> Optional[Tuple[str, int]]:
        """('name@plt', offset) for a load address inside a PLT entry, or None."""
        self._symtab()
        if self._plt_entries is None:
            return None
        start, size, head, names = self._plt_entries
        a = addr - bias
        k, off = divmod(a - start - head, size)
        if a < start + head or k >= len(names) or not names[k]:
            return None
        return names[k] + "@plt", off

    def require_sframe(self) -> SFrameData:
        """The SFrame section; NoSFrameError when there is none or it is empty (gas 2.45 and later
        write a zero-byte .sframe for inputs without functions: that is no SFrame, not an error)."""
        if self.sframe is None:
            raise NoSFrameError("%s: no SFrame section (.sframe) — build with -Wa,--gsframe" % self.path)
        if not self.sframe.data:
            raise EmptySFrameError("%s: the %s section is empty (no SFrame data)" % (self.path, self.sframe.name))
        return self.sframe

    def symbolize(self, addr: int, bias: int = 0) -> Optional[Tuple[str, int]]:
        """(name, offset) of the function containing addr (a load address), or None."""
        exact = self._exact if self._exact is not None else self._exact_starts()
        got = exact.get(addr - bias)
        if got is not None:
            return got, 0       # (a function's start, as a side file's writer asks of every one)
        plt = self.plt_name(addr, bias)
        if plt is not None:
            return plt
        a = addr - bias
        for start, size, name in self._plts:      # the PLT header and unnamed stubs: the section
            if start <= a < start + size:
                return name, a - start
        syms = self._symtab()
        i = bisect.bisect_right(self._starts, a) - 1
        if i < 0:
            return None
        start, size, name = syms[i]
        if a >= start + max(size, 1):
            return None
        return name, a - start

    def _exact_starts(self) -> Dict[int, str]:
        """The name symbolize gives at each function symbol's start outside the PLT (its answer
        there: (the name, 0)), the last of the symbols starting there, as the search finds it.
        (Names, not answers: a program of 50,000 functions then makes 50,000 tuples fewer.)"""
        syms = self._symtab()
        exact = {start: name for start, _size, name in syms}
        # (Left out: a start in the PLT, whose name the PLT's entries or sections give.)
        places = [(lo, lo + size) for lo, size, _name in self._plts]
        if self._plt_entries is not None:
            start, size, head, names = self._plt_entries
            places.append((start + head, start + head + size * len(names)))
        starts = self._starts
        for lo, hi in places:
            for k in range(bisect.bisect_left(starts, lo), bisect.bisect_left(starts, hi)):
                exact.pop(starts[k], None)
        self._exact = exact
        return exact

    def function_at(self, addr: int) -> Optional[Tuple[int, int, str]]:
        """(start, size, name) of the function symbol containing link-time address addr (a symbol
        of size 0 contains only its own address), or None."""
        syms = self._symtab()
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        start, size, name = syms[i]
        return (start, size, name) if addr < start + max(size, 1) else None

    def resolve(self, name: str) -> Optional[int]:
        """Link-time address of function symbol `name`, or None."""
        for start, _size, n in self._symtab():
            if n == name:
                return start
        return None

    def placement(self, addr: int) -> Optional[str]:
        """For a relocatable file, where an address lies: `section+offset` and how the sections
        were placed; None otherwise."""
        if not self.relocatable:
            return None
        how = "offsets in their sections" if self._readelf_layout else \
            "sections placed one after another from 0, as GDB places them"
        for start, size, name, _off in self._placed:
            if start <= addr < start + size:
                return "%s+%#x; relocatable file: %s" % (name, addr - start, how)
        return "relocatable file: %s" % how

    def section_address(self, name: str) -> Optional[int]:
        """sh_addr of the first section called `name`, or None."""
        return self._section_addrs.get(name)

    def cfi_sections(self, bias: int = 0, names: Optional[Sequence[str]] = None) -> list:
        """The file's DWARF CFI as core.dwarf.coverage sections (`.eh_frame` with its `.eh_frame_hdr`, and
        `.debug_frame`; or those of them in `names`), placed with load bias `bias` (an int, or for
        `.debug_frame` alone a callable giving it); none for relocatable objects, whose addresses
        are not final.  Read from the file now (ElfImage keeps no file open)."""
        from ..dwarf.coverage import DEBUG_FRAME, EH_FRAME, EH_FRAME_HDR, CfiSection
        if self.e_type == "ET_REL":
            return []
        names = names or (EH_FRAME, DEBUG_FRAME)

        wanted = set(names) | ({EH_FRAME_HDR} if EH_FRAME in names else set())

        def load(elf, _fh) -> Dict[str, Tuple[bytes, int]]:
            found = {}
            for sec in section_headers(elf):
                if sec.name in wanted and sec.type != SHT_NOBITS and sec.name not in found:
                    found[sec.name] = (section_data(elf, sec), sec.addr)
            return found
        found = load_elf(self.path, load, "CFI sections")
        size = 8 if self.elfclass == 64 else 4
        out = []
        if EH_FRAME in found and EH_FRAME in names:
            data, addr = found[EH_FRAME]
            hdr = found.get(EH_FRAME_HDR)
            out.append(CfiSection(EH_FRAME, data, addr + bias, bias=bias, big_endian=self.big_endian,
                                  addr_size=size, hdr=hdr and hdr[0], hdr_address=hdr[1] + bias if hdr else 0))
        if DEBUG_FRAME in found and DEBUG_FRAME in names:
            out.append(CfiSection(DEBUG_FRAME, found[DEBUG_FRAME][0], 0, bias=bias, big_endian=self.big_endian,
                                  addr_size=size))
        return out

    def code_reader(self) -> Callable[[int, int], Optional[bytes]]:
        """read(address, size) of the file's loaded bytes (its code), from its PT_LOAD segments
        read once: what the save-slot analysis of every function needs, without a read per call."""
        spans = []
        with open(self.path, "rb") as fh:
            for start, _memsz, offset, filesz in self.loads:
                fh.seek(offset)
                spans.append((start, fh.read(filesz)))
        spans.sort()
        starts = [s for s, _data in spans]
        self._relative_relocations(spans, starts)

        def read(addr: int, size: int) -> Optional[bytes]:
            k = bisect.bisect_right(starts, addr) - 1
            if k < 0:
                return None
            start, data = spans[k]
            lo = addr - start
            return data[lo:lo + size] if 0 <= lo and lo + size <= len(data) else None
        return read

    def _relative_relocations(self, spans, starts) -> None:
        """Set the words the dynamic loader sets to base + addend (R_*_RELATIVE of .rela.dyn) to
        their addend, as at base 0: a table of code addresses (GCC's computed gotos in a PIE)
        then reads as its code addresses.  (RELR and REL keep the addend in the word already.)"""
        from ..arch import abi as abimod
        abi = abimod.for_elf(self.machine, self.big_endian)
        if abi is None:
            return
        rtype = abi.relative_reloc
        wide = self.elfclass == 64
        fmt = ("<>"[self.big_endian]) + ("QQq" if wide else "IIi")
        entsize, word, size = (24, "Q", 8) if wide else (12, "I", 4)
        patched: Dict[int, bytearray] = {}
        with open(self.path, "rb") as fh:
            for offset, size in self._dyn_relas:
                fh.seek(offset)
                data = fh.read(size)
                for at in range(0, len(data) - entsize + 1, entsize):
                    r_offset, info, addend = struct.unpack_from(fmt, data, at)
                    if (info & 0xFFFFFFFF if wide else info & 0xFF) != rtype:
                        continue
                    k = bisect.bisect_right(starts, r_offset) - 1
                    if k < 0:
                        continue
                    lo = r_offset - spans[k][0]
                    if 0 <= lo and lo + size <= len(spans[k][1]):
                        buf = patched.setdefault(k, bytearray(spans[k][1]))
                        struct.pack_into(fmt[0] + word, buf, lo, addend & ((1 << 8 * size) - 1))
        for k, buf in patched.items():
            spans[k] = (spans[k][0], bytes(buf))

    def file_bytes(self, vaddr: int, size: int) -> Optional[bytes]:
        """Bytes at link-time address vaddr..vaddr+size from the file's PT_LOAD segments (a
        relocatable file's sections, as placed, unrelocated), or None."""
        spans = [(start, off, filesz) for start, _memsz, off, filesz in self.loads] + \
            [(start, off, filesz) for start, filesz, _name, off in self._placed if off is not None]
        for start, off, filesz in spans:
            if start <= vaddr and vaddr + size <= start + filesz:
                with open(self.path, "rb") as fh:
                    fh.seek(off + vaddr - start)
                    return fh.read(size)
        return None


def _layout(sections, one_after_another: bool) -> List[int]:
    """Each section's address: its sh_addr; or, for a relocatable file placed as GDB places one,
    the allocated sections one after another from 0, each at its alignment (others at 0)."""
    if not one_after_another:
        return [sec.addr for sec in sections]
    out, cursor = [], 0
    for sec in sections:
        if sec.flags & SHF_ALLOC:
            align = max(sec.addralign, 1)
            cursor = -(-cursor // align) * align
            out.append(cursor)
            cursor += sec.size
        else:
            out.append(0)
    return out


# (header size, entry size) of the .plt of the ABIs whose .rela.plt names one entry each, in order.
_PLT_SHAPES = {"EM_X86_64": (16, 16), "EM_AARCH64": (32, 16), "EM_S390": (32, 32)}


def _plt_entries(elf, sections: List[SectionHeader]):
    """(.plt address, entry size, header size, [names]) when .rela.plt maps onto .plt entries."""
    shape = _PLT_SHAPES.get(elf["e_machine"])
    plt = _section_named(sections, ".plt")
    rela = _section_named(sections, ".rela.plt")
    if not shape or plt is None or rela is None or not 0 < rela.link < len(sections) or rela.type == SHT_NOBITS:
        return None
    symtab = sections[rela.link]
    if not 0 < symtab.link < len(sections):
        return None
    order = "<" if elf.little_endian else ">"
    wide = elf.elfclass == 64
    rfmt, sym_size, shift = (order + "QQ", 24, 32) if wide else (order + "II", 16, 8)
    rsize = rela.entsize or (24 if wide else 12)
    relas, syms, strtab = section_data(elf, rela), section_data(elf, symtab), section_data(elf, sections[symtab.link])
    names = []
    for off in range(0, len(relas) - rsize + 1, rsize):
        _offset, info = struct.unpack_from(rfmt, relas, off)
        (st_name,) = struct.unpack_from(order + "I", syms, (info >> shift) * sym_size)
        names.append(_name_at(strtab, st_name))
    head, size = shape
    if plt.size != head + size * len(names):
        return None
    return plt.addr, size, head, names


def parse_address(text: str, image: Optional["ElfImage"] = None) -> int:
    """An address from hex (0x...), decimal, or `symbol[+offset]` (needs image)."""
    t = text.strip()
    try:
        return int(t, 0)
    except ValueError:
        pass
    name, plus, off = t.partition("+")
    name = name.strip()
    try:
        offset = int(off.strip(), 0) if plus else 0
    except ValueError:
        offset = None
    if image is not None and offset is not None and re.fullmatch(r"[A-Za-z_.$][\w.$@]*", name):
        addr = image.resolve(name)
        if addr is not None:
            return addr + offset
        names = [n for _start, _size, n in image._symtab()]
        import difflib  # (only for this message: not imported at every debugger's start)
        near = difflib.get_close_matches(name, names, n=3)
        raise ValueError("no function symbol %r%s" % (name, " (did you mean %s?)" % ", ".join(near) if near else ""))
    raise ValueError("cannot parse address %r: use hex (0x...), decimal or symbol[+offset]" % text)
