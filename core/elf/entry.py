"""A program's entry code (`_start`): the outermost frame of every stack of its main thread.

GDB's own walk ends there because glibc's CFI for `_start` leaves the return address undefined, or
because a symbol names the entry function.  A program shipped `strip -s` without `.eh_frame` has
neither, and crt1.o is not assembled with `--gsframe`: nothing says the frame above `main`'s
caller is the last, and an unwinder that goes on reads argc and argv as return addresses.  So the
ELF header's `e_entry` decides, whatever the symbols say: the code from there is the outermost
frame.  Its extent is the entry function's symbol where one gives it, else the code itself tells:
the only frames whose PC can lie in the entry code are at a call it makes (a return address) or
before it, so the extent runs from `e_entry` to the end of its last call before the code stops
falling through (x86-64: `call *__libc_start_main; hlt`, AArch64: `bl __libc_start_main; bl abort`,
s390x: `brasl __libc_start_main; .word 0`), the trap right after it included.

Only an executable has an entry point in this sense: ET_EXEC, or ET_DYN marked a PIE
(DT_FLAGS_1 & DF_1_PIE); a shared library's `e_entry` (libc.so.6 has one) is not its callers' end.
"""

import struct
from typing import Callable, Optional, Tuple

from ..arch import abi as abimod
from ..saves import analysis as saves
from ..saves.flow import Flow
from .image import PT_DYNAMIC, PT_GNU_SFRAME, PT_LOAD, ElfHeaders, parse_elf_headers

ET_EXEC, ET_DYN = 2, 3
DT_FLAGS_1 = 0x6FFFFFFB
DF_1_PIE = 0x08000000
ENTRY_WINDOW = 256          # bytes of entry code decoded at most (glibc's _start is 40-90 bytes)
_ENDS = (Flow.STOP, Flow.JUMP, Flow.INDIRECT)

ReadFile = Callable[[int, int], Optional[bytes]]       # read(file offset, size)
ReadCode = Callable[[int, int], Optional[bytes]]       # read(address, size)


def program_entry(read: ReadFile, hdr: Optional[ElfHeaders] = None) -> Optional[int]:
    """The link-time entry address of an executable (through `read(file offset, size)`; `hdr`: its
    headers, when read already), or None for a shared library, a relocatable file, or what cannot
    be read."""
    hdr = hdr or parse_elf_headers(read)
    if hdr is None or not hdr.entry:
        return None
    raw = read(16, 2)
    if raw is None or len(raw) < 2:
        return None
    (e_type,) = struct.unpack(hdr.order + "H", raw)
    if e_type == ET_EXEC:
        return hdr.entry
    if e_type != ET_DYN:
        return None
    dynamic = [p for p in hdr.phdrs if p.type == PT_DYNAMIC]
    if dynamic:
        seg = dynamic[0]
        data = read(seg.offset, min(seg.filesz, 1 << 16)) or b""
        for at in range(0, len(data) - 15, 16):
            tag, value = struct.unpack_from(hdr.order + "qQ", data, at)
            if tag == 0:
                break
            if tag == DT_FLAGS_1:
                return hdr.entry if value & DF_1_PIE else None
    return None          # (libc.so.6 asks for an interpreter and has an entry point, but is no PIE)


def sframe_segment(read: ReadFile, hdr: Optional[ElfHeaders] = None) -> Optional[Tuple[int, bytes]]:
    """(link-time address, bytes) of the file's PT_GNU_SFRAME segment (its .sframe section), or
    None: with the section's load address, the load bias of a file whose sections a debugger
    placed; with the bytes, whether the file is still the one loaded (not rebuilt since)."""
    hdr = hdr or parse_elf_headers(read)
    for p in hdr.phdrs if hdr is not None else ():
        if p.type == PT_GNU_SFRAME:
            return p.vaddr, read(p.offset, p.filesz) or b""
    return None


def file_reader(path: str) -> ReadFile:
    """read(file offset, size) of a file, opened at each call (a handful of calls per program)."""
    def read(offset: int, size: int) -> Optional[bytes]:
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(size)
        except OSError:
            return None
    return read


def code_reader(read: ReadFile, hdr: Optional[ElfHeaders] = None) -> Optional[ReadCode]:
    """read(link-time address, size) of a file's loaded bytes, by its PT_LOAD segments."""
    hdr = hdr or parse_elf_headers(read)
    if hdr is None:
        return None
    loads = [(p.vaddr, p.offset, p.filesz) for p in hdr.phdrs if p.type == PT_LOAD]

    def code(addr: int, size: int) -> Optional[bytes]:
        for vaddr, offset, filesz in loads:
            if vaddr <= addr < vaddr + filesz:
                return read(offset + addr - vaddr, min(size, vaddr + filesz - addr))
        return None
    return code


def entry_extent(abi: abimod.ABIInfo, entry: int, read_code: ReadCode,
                 covered: Callable[[int], bool] = lambda addr: False,
                 symbol: Optional[Tuple[int, int]] = None) -> Optional[Tuple[int, int]]:
    """[start, end) of the entry code at link-time address `entry`: `symbol`'s (start, size) where
    it starts there, else told by the code (see the module's docstring); the code stops before an
    address `covered(addr)` says other unwind data describes.  None where the code cannot be read
    or makes no call."""
    if symbol is not None and symbol[0] == entry and symbol[1] > 0:
        return entry, entry + symbol[1]
    code = read_code(entry, ENTRY_WINDOW)
    if not code:
        return None
    ops = saves.instructions(abi, bytes(code), entry)
    end = None
    for op in ops or ():
        if op.addr != entry and (covered(op.addr) or op.nop):
            break            # (another function's code, or the alignment padding before one)
        if op.flow is Flow.CALL:
            end = op.addr + op.length
        elif op.flow in _ENDS:
            if end == op.addr:            # the trap after the last call
                end += op.length
            break
    return (entry, end) if end is not None else None


def entry_extent_in(abi: abimod.ABIInfo, entry: int, read_code: ReadCode, index, bias: int = 0,
                    symbol: Optional[Tuple[int, int]] = None) -> Optional[Tuple[int, int]]:
    """entry_extent where the program's SFrame section (`index`, placed `bias` from the link-time
    addresses) is known: an FDE that starts at the entry point gives the extent, and the code stops
    where an FDE covers it."""
    match = index.lookup(entry + bias)
    if match is not None and match.fde.start - bias == entry:
        symbol = (entry, match.fde.size)
    return entry_extent(abi, entry, read_code, lambda addr: index.lookup(addr + bias) is not None, symbol)
