"""A side file of DWARF CFI made from SFrame: a separate ELF debug file, as `objcopy
--only-keep-debug` shapes one, holding the program's SFrame written out as `.debug_frame`.

GDB (by build ID under `set debug-file-directory`, or `add-symbol-file`), LLDB (`target symbols
add`) and elfutils (`--debuginfo-path`) all read such a file and unwind with its CFI.  What they
need of it, measured (../shared/facts.md): the program's class, byte order, machine and type; its
build-ID note (a side file is matched by it); its program headers; its allocated sections' headers
at their addresses, as SHT_NOBITS (GDB needs `.text` to relocate; elfutils the whole layout); no
`.symtab` other than the program's own (LLDB takes a side file's symbols, where it has any, instead
of the program's, and takes a side file for a program without `.symtab` only with one: so the
program's `.symtab` is copied, as `objcopy --only-keep-debug` keeps it, or where it has none, its
`.dynsym`).  A side file without any, for a program with a `.symtab`, LLDB 16, 21 and 23 take too,
keeping the program's symbols (tests/test_firststop.py): LLDB 23's files made at a stop carry none
(`write(symbols=False)`), and are written sooner; LLDB 16 to 21's carry them (the program is
added first: lldb_plugin.sidefiles._add).

A debugger takes a side file as *the* separate debug file of the program (LLDB in place of the
program's own debug information, GDB where the program has none), so it also carries the
program's DWARF debug sections and symbol table, as `objcopy --only-keep-debug` would: `frame
variable` and source lines still work.  The program's own `.debug_frame`, if any, comes first in
the new one.

The layout: the program's first bytes up to the end of its last note (ELF header, program headers,
notes: as objcopy keeps them), then the debug sections, `.debug_frame`, the symbol table, the
section names, and the section header table.  The program's section numbering is kept (symbols
and debug sections refer to it): allocated sections become SHT_NOBITS (notes keep their bytes),
debug sections and the symbol table are copied, the others become SHT_NULL.
"""

import os
import struct
from dataclasses import dataclass
from typing import Callable, Collection, List, Optional, Tuple, Union

from ..arch import abi as abimod
from ..dwarf import ehframe, emptyunit
from ..dwarf.coverage import CfiIndex
from ..dwarf.writer import Progress, debug_frame
from ..errors import ElfError
from ..sframe.index import SFrameIndex
from . import entry as entrymod
from .image import (
    SHF_ALLOC,
    SHT_NOBITS,
    ElfFile,
    ElfImage,
    SectionHeader,
    file_size,
    load_elf,
    read_at,
    section_data,
    section_headers,
)
from .notes import SHT_NOTE, build_id_in, debug_file_path

SHT_NULL = 0
SHT_PROGBITS = 1
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_DYNSYM = 11
PT_LOAD = 1
PT_INTERP = 3
PT_NOTE = 4
PT_PHDR = 6
PT_GNU_PROPERTY = 0x6474E553
_KEPT_SEGMENTS = (PT_INTERP, PT_PHDR, PT_NOTE, PT_GNU_PROPERTY)
_SHDR = {64: "IIQQQQIIQQ", 32: "IIIIIIIIII"}
_PHDR_OFFSETS = {64: ((8, "Q"), (32, "Q")), 32: ((4, "I"), (16, "I"))}    # (p_offset, p_filesz) within an entry
_EHDR_SH = {64: (40, "Q", 58), 32: (32, "I", 46)}     # e_shoff (offset, format), then e_shentsize.. at


Piece = Tuple[int, Union[bytes, bytearray]]      # (file offset, the bytes there)


@dataclass
class SideFile:
    """What `write` made."""
    path: str
    build_id: Optional[bytes]
    functions: int            # SFrame functions written out
    fdes: int                 # DWARF FDEs (a PLT's MASK FDE gives one per entry)
    skipped: int              # functions left out: the program's own CFI covers them, or not asked for
    symtab_from_dynsym: bool  # the program has no .symtab: the side file's is its .dynsym and a symbol per FDE


@dataclass
class _Program:
    elf_header: bytes
    elfclass: int
    order: str
    sections: List[SectionHeader]
    # The program's bytes up to the end of its last note, as (offset, bytes) pieces in order, the
    # first from offset 0 holding the ELF and program headers; between them zeros (_head_pieces).
    head: Tuple[Tuple[int, bytes], ...]
    head_size: int
    build_id: Optional[bytes]
    symtab: Optional[Tuple[bytes, bytes, int]]   # .dynsym's (with .dynstr, sh_info) when there is no .symtab
    from_dynsym: bool
    copied: dict              # section number -> bytes of the sections copied as they are
    frame: bytes              # the program's own .debug_frame
    has_symtab: bool          # the program has a .symtab of its own (copied unless `_read_program` was told not to)
    segments: int             # its program headers (e_phnum, or where that is PN_XNUM, section 0's sh_info)


def _read_program(path: str, gaps: bool = False, symbols: bool = True) -> _Program:
    """What the side file is made of.  `gaps`: the head's bytes that are neither headers nor
    notes nor the interpreter's name left out, as zeros (`_head_pieces`).  `symbols`: the program's
    `.symtab` copied (else not, where it has one)."""
    def load(elf: ElfFile, fh) -> _Program:
        order = "<" if elf.little_endian else ">"
        size = 64 if elf.elfclass == 64 else 52
        ehdr = read_at(fh, 0, size, "the ELF header")
        sections = section_headers(elf)
        build_id = None
        note_end = size
        for sec in sections:
            if sec.type == SHT_NOTE and sec.flags & SHF_ALLOC:
                build_id = build_id_in(section_data(elf, sec), order, path) or build_id
                note_end = max(note_end, sec.offset + sec.size)
        phend = elf["e_phoff"] + elf["e_phentsize"] * elf.num_segments()
        note_end = max(note_end, phend)
        if gaps:
            segments = [(seg["p_type"], seg["p_offset"], seg["p_filesz"]) for seg in elf.iter_segments()]
            head = _head_pieces(fh, sections, segments, max(phend, size), note_end)
        else:
            head = ((0, read_at(fh, 0, note_end, "the program's headers and notes")),)
        names = {s.name: s for s in sections}
        dynsym = None
        copied = {}
        frame = b""
        for sec in sections:
            if sec.flags & SHF_ALLOC or sec.type == SHT_NOBITS or not sec.number:
                continue
            if sec.name == ".debug_frame":
                frame = section_data(elf, sec)
            elif _copied(sec, names, symbols):
                copied[sec.number] = read_at(fh, sec.offset, sec.size, "section %s" % sec.name)
        ds = names.get(".dynsym")
        if ".symtab" not in names and ds is not None and 0 < ds.link < len(sections) and ds.type != SHT_NOBITS:
            dynsym = (section_data(elf, ds), section_data(elf, sections[ds.link]), ds.info)
        has_symtab = any(sec.name == ".symtab" and sec.number and not sec.flags & SHF_ALLOC and sec.type != SHT_NOBITS
                         for sec in sections)
        return _Program(ehdr, elf.elfclass, order, sections, head, note_end, build_id, dynsym, dynsym is not None,
                        copied, frame, has_symtab, elf.num_segments())
    return load_elf(path, load, "its headers")


def _head_pieces(fh, sections: List[SectionHeader], segments: List[Tuple[int, int, int]], headers: int,
                 note_end: int) -> Tuple[Tuple[int, bytes], ...]:
    """Of the program's first `note_end` bytes, only its ELF and program headers (up to
    `headers`), its notes, its interpreter's name and the segments a side file keeps the bytes of
    (`segments`: (p_type, p_offset, p_filesz)), as (offset, bytes) pieces in order, overlapping
    ones joined; the bytes between them are zeros, never made: the holes of a sparse file.  A
    linker may place notes after the code and SFrame: the head is then most of the program, and
    no reader of a side file takes those bytes (its allocated sections are SHT_NOBITS)."""
    size = file_size(fh)
    if size is not None and note_end > size:        # (a note of no bytes far out: never allocated)
        raise ElfError("the program's headers and notes (%d bytes) lie beyond the end of the file" % note_end)
    kept = [(0, headers)]
    for sec in sections:
        if (sec.type == SHT_NOTE or sec.name == ".interp") and sec.flags & SHF_ALLOC and sec.type != SHT_NOBITS:
            kept.append((sec.offset, sec.offset + sec.size))
    kept += [(offset, offset + filesz) for kind, offset, filesz in segments if kind in _KEPT_SEGMENTS]
    kept = sorted((lo, min(hi, note_end)) for lo, hi in kept if lo < min(hi, note_end))
    joined: List[List[int]] = []
    for lo, hi in kept:
        if joined and lo <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], hi)
        else:
            joined.append([lo, hi])
    return tuple((lo, read_at(fh, lo, hi - lo, "the program's headers and notes")) for lo, hi in joined)


def _copied(sec: SectionHeader, names: dict, symbols: bool = True) -> bool:
    """Is this non-allocated section copied into the side file as it is: debug information, the
    symbol table and its strings (where `symbols`), GDB's index, a dwz file's link."""
    if sec.name.startswith((".debug_", ".zdebug_")) or sec.name in (".gdb_index", ".gnu_debugaltlink"):
        return True
    symtab = names.get(".symtab")
    return symbols and (sec.name == ".symtab" or (symtab is not None and sec.number == symtab.link))


def _uncovered(image: ElfImage) -> Optional[Callable[[int, int], bool]]:
    """keep(start, end) for the functions no DWARF CFI of the program covers, or None when the
    program has no CFI at all."""
    sections = image.cfi_sections(0)
    if not sections:
        return None
    cfi = CfiIndex(lambda: sections)

    def keep(start: int, end: int) -> bool:
        return cfi.find(start) is None and cfi.find(end - 1) is None
    return keep


def _entry(image: ElfImage, index: SFrameIndex, keep, code: Callable[[], Callable]) -> Tuple[Tuple[int, int], ...]:
    """The program's entry code as the outermost frame (core.elf.entry), where the program's own
    CFI does not cover it (an executable's `_start` comes from crt1.o, which has no SFrame; where
    an SFrame FDE starts at the entry point, the entry code replaces it: see _keep_entry).
    `code()`: the program's code reader, made where the code is read (the entry symbol's size
    mostly tells: a side file made at a stop reads no code)."""
    entry = entrymod.program_entry(entrymod.file_reader(image.path))
    if entry is None:
        return ()
    extent = entrymod.entry_extent_in(abimod.info(index.abi), entry, lambda addr, size: code()(addr, size), index,
                                      symbol=image.extent_at(entry))
    if extent is None or (keep is not None and not keep(*extent)):
        return ()
    return ((extent[0], extent[1] - extent[0]),)


def _keep_entry(keep, outermost):
    """`keep` without the FDE the entry code replaces (one that starts at the entry point)."""
    if not outermost:
        return keep
    entry = outermost[0][0]

    def kept(start: int, end: int) -> bool:
        return start != entry and (keep is None or keep(start, end))
    return kept


def write(program: str, out_path: str, *, callee_saved: bool = True, all_functions: bool = False,
          workers: Optional[int] = None, debug_file: Optional[str] = None, only: Optional[Collection[int]] = None,
          progress: Optional[Progress] = None, eh_frame: bool = False, gaps: bool = False,
          empty_unit: bool = False, symbols: bool = True) -> SideFile:
    """Write the side file of `program` to `out_path`.  Functions the program's own DWARF CFI
    covers are left out (a debugger takes the program's CFI there) unless `all_functions`.
    `workers`: analyse in at most this many processes (None: one per core; core.parallel).
    `debug_file`: the program's own separate debug file, whose debug information and symbols the
    side file then carries (a debugger takes the side file in its place).  `only`: the link-time
    starts of the functions to write (None: all); the entry code is written all the same.
    `progress`: told how far the analysis is (core.dwarf.writer.Progress).  `eh_frame`: the rows
    as `.eh_frame` (not allocated; core.dwarf.ehframe) instead of `.debug_frame`, for a debugger that
    reads a second side file's `.debug_frame` only where the first had none (LLDB 23).  `gaps`:
    the program's bytes between its headers and notes that no reader takes left out, as a hole
    (`_head_pieces`: a file made at a stop is written sooner).  `empty_unit`: where the side file
    carries no debug information, a compile unit that describes nothing (core.dwarf.emptyunit: LLDB
    then reads the file with its DWARF reader alone, and takes it sooner).  `symbols`: the
    program's `.symtab` copied; where False, not where the program has one (a debugger that keeps
    a program's own symbols where the side file has none, LLDB, reads it from the program: a file
    made at a stop is written sooner; a side file's own, for a program without, is always made)."""
    image = ElfImage(program)
    sf = image.require_sframe()
    prog = _read_program(program, gaps, symbols)
    if debug_file is not None:
        if not prog.has_symtab:
            image.use_symbols_of(debug_file)   # (the analysis knows each function's start: s390x needs it)
        # (symbols left out too where the program has its own: the debugger reads those)
        prog = _with_debug_file(prog, _read_program(debug_file, gaps, symbols or not prog.has_symtab), debug_file)
    abi = abimod.for_elf(image.machine, image.big_endian)
    if abi is None:
        raise ElfError("%s: machine %s has no SFrame ABI" % (program, image.machine))
    index = SFrameIndex(sf.data, sf.address)
    if abimod.info(index.abi) is not abi:
        raise ElfError("%s: its SFrame section is for %s, the file for %s" % (program, abimod.info(index.abi).name, abi.name))
    keep = None if all_functions else _uncovered(image)
    starts = None if only is None else frozenset(only)
    numbers = None if starts is None else [fde.index for fde in map(index.find_fde, starts)
                                           if fde is not None and fde.start in starts]
    total = len(index)
    readers: List[Callable] = []

    def code() -> Callable:
        if not readers:
            readers.append(image.code_reader())     # (read once, where it is read at all)
        return readers[0]
    outermost = _entry(image, index, keep, code)
    address_size = 8 if prog.elfclass == 64 else 4
    written = debug_frame(index, code() if callee_saved else None, symbolize=image.symbolize,
                          address_size=address_size, keep=_keep_entry(keep, outermost),
                          base=len(prog.frame), outermost=outermost, workers=workers, progress=progress,
                          numbers=numbers)
    made = None
    if not prog.has_symtab:
        made = _fde_symbols(prog, written.data, outermost[0][0] if outermost else None)
    frame = prog.frame + written.data
    if eh_frame:
        frame = ehframe.from_debug_frame(frame, prog.order == ">", address_size)
    unit: Tuple[Tuple[str, bytes], ...] = ()
    if empty_unit and not any(sec.name in (".debug_info", ".zdebug_info") and sec.number in prog.copied
                              for sec in prog.sections):
        unit = emptyunit.empty_unit(prog.order == ">", address_size)
    pieces, size = _assemble(prog, frame, made, ".eh_frame" if eh_frame else ".debug_frame", unit)
    write_pieces(out_path, pieces, size)
    return SideFile(out_path, prog.build_id, written.functions, written.fdes, total - written.functions,
                    made is not None)


def write_private(path: str, data: bytes) -> None:
    """`data` as the file at `path`, readable by its owner alone (0600), whole or not at all."""
    write_pieces(path, ((0, data),), len(data))


def write_pieces(path: str, pieces: Collection[Piece], size: int) -> None:
    """A file of `size` bytes at `path`, `pieces` ((offset, bytes), in order) at their offsets and
    zeros between them, never written (a sparse file's holes read as zeros); readable by its owner
    alone (0600), whole or not at all."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        for at, data in pieces:
            fh.seek(at)
            fh.write(data)
        fh.truncate(size)
    os.replace(tmp, path)


def _with_debug_file(prog: _Program, dbg: _Program, path: str) -> _Program:
    """What the side file is made of where the program has a separate debug file: that file (objcopy
    --only-keep-debug shapes one as a side file is shaped: the program's headers, notes and
    allocated sections as SHT_NOBITS, in the numbering of the build its symbols and debug
    information refer to, which stripping the program renumbered), its own `.debug_frame` first."""
    if prog.build_id is None or dbg.build_id != prog.build_id or dbg.elfclass != prog.elfclass or \
            dbg.order != prog.order:
        raise ElfError("%s: not the separate debug file of this program (another build ID)" % path)
    return dbg


def _fde_ranges(frame: bytes, order: str, wide: bool) -> List[Tuple[int, int]]:
    """(start, size) of each FDE of a .debug_frame that core.dwarf.writer wrote (32-bit DWARF)."""
    out = []
    at = 0
    fmt = order + ("QQ" if wide else "II")
    while at + 8 <= len(frame):
        length, cie = struct.unpack_from(order + "II", frame, at)
        if length == 0:
            break
        if cie != 0xFFFFFFFF and at + 8 + struct.calcsize(fmt) <= len(frame):
            out.append(struct.unpack_from(fmt, frame, at + 8))
        at += 4 + length
    return sorted(set(out))


STT_FUNC, STB_LOCAL, SHN_ABS = 2, 0, 0xFFF1


def _fde_symbols(prog: _Program, frame: bytes, entry: Optional[int]) -> Tuple[bytes, bytes, int]:
    """The side file's symbol table for a program without `.symtab` (`strip -s`): its `.dynsym`,
    and a function symbol for each FDE outside the PLT that no `.dynsym` symbol starts (`_start` at
    the entry point, else `sub_ADDRESS`).  LLDB uses `.debug_frame` only at
    a PC a symbol covers, and takes no side file whose symbols name no code at all: without these
    it shows one frame, or crashes (a side file it rejects is freed while its sections are in use)."""
    e, wide = prog.order, prog.elfclass == 64
    fmt = struct.Struct(e + ("IBBHQQ" if wide else "IIIBBH"))
    dsyms, dstrs, dinfo = prog.symtab if prog.symtab is not None else (b"", b"\0", 0)
    dsyms = dsyms[:len(dsyms) - len(dsyms) % fmt.size]
    started = set()
    for at in range(0, len(dsyms), fmt.size):
        fields = fmt.unpack_from(dsyms, at)
        info, shndx, value = (fields[1], fields[3], fields[4]) if wide else (fields[3], fields[5], fields[1])
        if shndx and info & 0xF in (STT_FUNC, 10):
            started.add(value)
    strs = bytearray(dstrs or b"\0")

    def pack(name: str, value: int, size: int, shndx: int) -> bytes:
        at = len(strs)
        strs.extend(name.encode() + b"\0")
        info = STB_LOCAL << 4 | STT_FUNC
        return fmt.pack(at, info, 0, shndx, value, size) if wide else fmt.pack(at, value, size, info, 0, shndx)

    def section_of(addr: int) -> int:
        for sec in prog.sections:
            if sec.flags & SHF_ALLOC and sec.addr <= addr < sec.addr + sec.size and sec.number:
                return sec.number
        return SHN_ABS
    plts = [(sec.addr, sec.addr + sec.size) for sec in prog.sections if sec.name.startswith(".plt")]
    made = []
    for start, size in _fde_ranges(frame, e, wide):
        # (none for the PLT: the debuggers name its stubs themselves, and a symbol there would make
        # a breakpoint on `getppid` stop in `getppid@plt` too)
        if start in started or any(lo <= start < hi for lo, hi in plts):
            continue
        made.append(pack("_start" if start == entry else "sub_%x" % start, start, size, section_of(start)))
    null = b"\0" * fmt.size
    kept_locals = dsyms[fmt.size:dinfo * fmt.size] if dinfo else b""
    syms = null + b"".join(made) + kept_locals + dsyms[max(dinfo, 1) * fmt.size:]
    return syms, bytes(strs), 1 + len(made) + max(dinfo - 1, 0)


def build_id_path(directory: str, program: str) -> str:
    """Where `write` should put the side file of `program` under a debug-file directory (the
    `.build-id/xx/rest.debug` layout GDB, LLDB and elfutils search)."""
    bid = _read_program(program).build_id
    if bid is None:
        raise ElfError("%s has no build ID (link it with -Wl,--build-id): a side file under a debug-file "
                       "directory is found by it; write it with -o and load it by hand instead" % program)
    return debug_file_path(directory, bid)


def _assemble(prog: _Program, frame: bytes, symbols: Optional[Tuple[bytes, bytes, int]] = None,
              frame_name: str = ".debug_frame", extra: Tuple[Tuple[str, bytes], ...] = ()
              ) -> Tuple[List[Piece], int]:
    """The side file as (offset, bytes) pieces in order, zeros between them, and its size."""
    e, wide = prog.order, prog.elfclass == 64
    shdr_fmt = e + _SHDR[prog.elfclass]
    shdr_size = struct.calcsize(shdr_fmt)
    head = prog.head_size
    first = bytearray(prog.head[0][1])       # (the ELF and program headers, changed below)
    pieces: List[Piece] = [(0, first), *prog.head[1:]]
    out = bytearray()                         # what follows the head, from offset `head`
    names = bytearray(b"\0")

    def name(text: str) -> int:
        at = len(names)
        names.extend(text.encode() + b"\0")
        return at

    def place(data: bytes, align: int) -> int:
        out.extend(b"\0" * (-(head + len(out)) % align))
        at = head + len(out)
        out.extend(data)
        return at

    headers: List[Optional[tuple]] = []
    frame_index = None
    for sec in prog.sections:
        if sec.number == 0:
            headers.append((0,) * 10)
        elif sec.number in prog.copied:
            data = prog.copied[sec.number]
            at = place(data, max(sec.addralign, 1))
            headers.append((name(sec.name), sec.type, sec.flags, 0, at, len(data), sec.link, sec.info,
                            sec.addralign, sec.entsize))
        elif sec.name == ".debug_frame" and not sec.flags & SHF_ALLOC:
            frame_index = sec.number
            headers.append(None)
        elif sec.flags & SHF_ALLOC:
            # Notes keep their bytes (the build ID), and so does the interpreter's name (readelf
            # complains of a PT_INTERP without it): both lie in the first bytes, copied.
            keep = (sec.type == SHT_NOTE or sec.name == ".interp") and sec.offset + sec.size <= head
            headers.append((name(sec.name), sec.type if keep else SHT_NOBITS, sec.flags, sec.addr,
                            sec.offset if keep else head, sec.size, sec.link if sec.link < len(prog.sections)
                            else 0, sec.info, sec.addralign, sec.entsize))
        else:
            headers.append((0, SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0))
    at = place(frame, 8)
    row = (name(frame_name), SHT_PROGBITS, 0, 0, at, len(frame), 0, 0, 8, 0)
    if frame_index is None:
        headers.append(row)
    else:
        headers[frame_index] = row
    for sec_name, sec_data in extra:
        headers.append((name(sec_name), SHT_PROGBITS, 0, 0, place(sec_data, 1), len(sec_data), 0, 0, 1, 0))
    symtab = symbols if symbols is not None else prog.symtab
    if symtab is not None:
        syms, strs, info = symtab
        sym_at = place(syms, 8)
        symtab_index = len(headers)
        headers.append((name(".symtab"), SHT_SYMTAB, 0, 0, sym_at, len(syms), symtab_index + 1, info, 8,
                        24 if wide else 16))
        str_at = place(strs, 1)
        headers.append((name(".strtab"), SHT_STRTAB, 0, 0, str_at, len(strs), 0, 0, 1, 0))
    shstrndx = len(headers)
    shstr_name = name(".shstrtab")
    shstr_at = place(bytes(names), 1)
    headers.append((shstr_name, SHT_STRTAB, 0, 0, shstr_at, len(names), 0, 0, 1, 0))
    shoff = place(b"", 8)
    for h in headers:
        assert h is not None
        out.extend(struct.pack(shdr_fmt, *h))
    # The ELF header: the section header table's place, size and names; program headers kept,
    # their file extents cut to what this file holds (the notes), as objcopy cuts them.  (Both
    # lie in the head's first piece: _read_program.)
    off, fmt, shentsize_at = _EHDR_SH[prog.elfclass]
    struct.pack_into(e + fmt, first, off, shoff)
    struct.pack_into(e + "HHH", first, shentsize_at, shdr_size, len(headers), shstrndx)
    phoff_at, phoff_fmt = (32, "Q") if wide else (28, "I")
    (phoff,) = struct.unpack_from(e + phoff_fmt, first, phoff_at)
    (phentsize,) = struct.unpack_from(e + "H", first, 54 if wide else 42)
    (poff_at, pfmt), (pfilesz_at, _) = _PHDR_OFFSETS[prog.elfclass]
    for k in range(prog.segments):
        base = phoff + k * phentsize
        (p_type,) = struct.unpack_from(e + "I", first, base)
        (p_offset,) = struct.unpack_from(e + pfmt, first, base + poff_at)
        (p_filesz,) = struct.unpack_from(e + pfmt, first, base + pfilesz_at)
        # Only the segments whose bytes this file holds keep a file size: the headers, the
        # interpreter's name, the notes, the start of the first PT_LOAD.
        kept = p_type in _KEPT_SEGMENTS and p_offset + p_filesz <= head
        struct.pack_into(e + pfmt, first, base + poff_at, min(p_offset, head))
        struct.pack_into(e + pfmt, first, base + pfilesz_at,
                         p_filesz if kept else max(0, min(p_filesz, head - p_offset)) if p_type == PT_LOAD else 0)
    pieces.append((head, out))
    return pieces, head + len(out)
