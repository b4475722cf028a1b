"""The modules of a running program found in its memory alone, with their SFrame sections.

For a target whose files cannot be read (a remote board, a sysroot without the program): the
auxiliary vector places the executable's program headers (AT_PHDR); its PT_DYNAMIC's DT_DEBUG
entry points at the dynamic linker's `r_debug`, whose `link_map` chain gives each library's name
and load bias; a library's ELF header is mapped at its bias.  PT_GNU_SFRAME names each module's
`.sframe` (an allocated section, loaded with the code), PT_NOTE its build ID.
"""

import struct
from typing import Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from ..elf.image import (
    EHDR_SIZE,
    MAX_PHNUM,
    PHDR_SIZE,
    PT_DYNAMIC,
    PT_GNU_SFRAME,
    PT_LOAD,
    PT_NOTE,
    PT_PHDR,
    ProgramHeader,
    parse_elf_headers,
    unpack_phdrs,
)
from ..elf.notes import build_id_in
from .corelinks import (
    DT_DEBUG,
    DT_NULL,
    DYN_ENTRY,
    DYN_ENTRY_SIZE,
    LINK_MAP,
    LINK_MAP_SIZE,
    MAX_DYNAMIC,
    R_DEBUG_R_MAP,
)
from .corenotes import AT_ENTRY, AT_EXECFN, AT_PHDR, AT_PHNUM

AT_PHENT = 4                # the size of one program header
AT_BASE = 7                 # the dynamic linker's load address (its ELF header)
_PHENT = 56                 # sizeof(Elf64_Phdr)
_MAX_NAME = 4096            # bytes of a module's name read before it is taken as corrupt
_MAX_NOTES = 1 << 16        # bytes of PT_NOTE segments read for a build ID
_MAX_MODULES = 1024         # link_map entries walked (each costs reads of the target: a corrupt chain ends)
_MAX_SFRAME = 64 << 20      # a larger PT_GNU_SFRAME is taken as corrupt (the largest real ones: a few MiB)

ReadMemory = Callable[[int, int], bytes]      # (address, size) -> bytes; raises where unreadable


class InMemory(NamedTuple):
    """One module as its memory shows it."""
    name: str                         # the dynamic linker's name for it; the executable's AT_EXECFN
    bias: int                         # load bias: runtime address - link-time address
    phdrs: Tuple[ProgramHeader, ...]
    sframe: Optional[Tuple[int, int]]   # (runtime address, size) of its PT_GNU_SFRAME
    build_id: Optional[bytes]
    executable: bool

    def reader(self, read: ReadMemory) -> Callable[[int, int], Optional[bytes]]:
        """read(file offset, size) of the module's loaded bytes (what the file holds at those
        offsets, where a PT_LOAD maps them), or None: the file as far as memory shows it."""
        loads = [p for p in self.phdrs if p.type == PT_LOAD and p.filesz]

        def at(offset: int, size: int) -> Optional[bytes]:
            for p in loads:
                if p.offset <= offset and offset + size <= p.offset + p.filesz:
                    try:
                        return bytes(read(self.bias + p.vaddr + offset - p.offset, size))
                    except Exception:       # (the adapter's memory error)
                        return None
            return None
        return at


def modules(read: ReadMemory, auxv: Dict[int, int], order: str) -> Tuple[List[InMemory], List[str]]:
    """(modules, warnings): the executable and each library the dynamic linker lists, as their
    memory shows them.  `order` is the target's byte order ("<" or ">").  What cannot be read is
    left out with a warning; nothing raises."""
    out: List[InMemory] = []
    warnings: List[str] = []
    exe = _executable(read, auxv, order, warnings)
    if exe is not None:
        out.append(exe)
    seen = {exe.bias} if exe is not None else set()
    r_debug = _r_debug(read, exe, order, warnings) if exe is not None else 0
    if r_debug:
        try:
            _libraries(read, r_debug, order, out, seen, warnings)
        except Exception as exc:
            warnings.append("the dynamic linker's list of libraries cannot be read: %s" % exc)
    elif auxv.get(AT_BASE):          # stopped before the dynamic linker listed anything: itself
        lib = _library(read, "ld.so (AT_BASE)", auxv[AT_BASE], order, warnings)
        if lib is not None:
            out.append(lib)
    return out, warnings


def link_chain(read: ReadMemory, auxv: Dict[int, int], order: str) -> Tuple[Tuple[int, int], ...]:
    """(load bias, name address) of each entry of the dynamic linker's list, read anew: a few
    reads and one per module, against `modules()`' several per module.  What tells a debugger that
    modules it has no file for came or went (no other event says so), or () where unreadable."""
    try:
        warnings: List[str] = []
        exe = _executable(read, auxv, order, warnings, described=False)
        r_debug = _r_debug(read, exe, order, warnings) if exe is not None else 0
        if not r_debug:
            return ()
        (lm,) = struct.unpack(order + "Q", bytes(read(r_debug + R_DEBUG_R_MAP, 8)))
        out: List[Tuple[int, int]] = []
        visited: Set[int] = set()
        while lm and lm not in visited and len(visited) < _MAX_MODULES:
            visited.add(lm)
            l_addr, l_name, _l_ld, lm = struct.unpack(order + LINK_MAP, bytes(read(lm, LINK_MAP_SIZE)))
            out.append((l_addr, l_name))
        return tuple(out)
    except Exception:
        return ()


def _cstring(read: ReadMemory, addr: int) -> str:
    got = b""
    while len(got) < _MAX_NAME:
        at = addr + len(got)
        chunk = bytes(read(at, min(256, 4096 - at % 4096)))   # (never across a page end: the next may be unmapped)
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return (got + chunk[:end]).decode("utf-8", "replace")
        got += chunk
    return got.decode("utf-8", "replace")


def _cstring_or(read: ReadMemory, addr: int, default: str) -> str:
    if not addr:
        return default
    try:
        return _cstring(read, addr) or default
    except Exception:
        return default


def _described(read, name, bias, phdrs, order, warnings, executable) -> InMemory:
    sframe = None
    for p in phdrs:
        if p.type == PT_GNU_SFRAME:
            loaded = any(q.type == PT_LOAD and q.vaddr <= p.vaddr and p.vaddr + p.memsz <= q.vaddr + q.filesz
                         for q in phdrs)
            if 0 < p.memsz <= _MAX_SFRAME and loaded:
                sframe = (bias + p.vaddr, p.memsz)
            else:
                warnings.append("%s: PT_GNU_SFRAME of %d bytes at %#x, %s: not used"
                                % (name, p.memsz, p.vaddr, "not within a loaded segment" if not loaded else "too large"))
            break
    build_id = None
    for p in phdrs:
        if p.type == PT_NOTE and 0 < p.memsz <= _MAX_NOTES:
            try:
                build_id = build_id_in(bytes(read(bias + p.vaddr, p.memsz)), order, name)
            except Exception:
                continue
            if build_id is not None:
                break
    return InMemory(name, bias, tuple(phdrs), sframe, build_id, executable)


def _executable(read, auxv, order, warnings, described=True) -> Optional[InMemory]:
    at, count, size = auxv.get(AT_PHDR), auxv.get(AT_PHNUM), auxv.get(AT_PHENT, _PHENT)
    if not at or not count or count > MAX_PHNUM or not PHDR_SIZE <= size <= 4 * _PHENT:
        warnings.append("the auxiliary vector does not place the executable's program headers")
        return None
    name = _cstring_or(read, auxv.get(AT_EXECFN, 0), "the executable")
    try:
        phdrs = unpack_phdrs(bytes(read(at, count * size)), order, count, size)
    except Exception as exc:
        warnings.append("%s: its program headers cannot be read: %s" % (name, exc))
        return None
    pt_phdr = [p for p in phdrs if p.type == PT_PHDR]
    if pt_phdr:
        bias = at - pt_phdr[0].vaddr
    else:       # (no PT_PHDR: the headers follow the ELF header, at the first load's start)
        first = [p for p in phdrs if p.type == PT_LOAD and p.offset == 0]
        hdr = parse_elf_headers(lambda off, size: _or_none(read, at - EHDR_SIZE + off, min(size, MAX_PHNUM * _PHENT)))
        if not first or hdr is None or hdr.phoff != EHDR_SIZE:
            warnings.append("%s: its load bias cannot be told (no PT_PHDR)" % name)
            return None
        bias = at - EHDR_SIZE - first[0].vaddr
    if not described:
        return InMemory(name, bias, tuple(phdrs), None, None, True)
    if auxv.get(AT_ENTRY) is None:
        warnings.append("%s: no AT_ENTRY" % name)
    return _described(read, name, bias, phdrs, order, warnings, True)


def _or_none(read, addr, size):
    try:
        return bytes(read(addr, size))
    except Exception:
        return None


def _r_debug(read, exe: InMemory, order: str, warnings) -> int:
    dyn = [p for p in exe.phdrs if p.type == PT_DYNAMIC]
    if not dyn:
        return 0          # a static executable
    at = exe.bias + dyn[0].vaddr
    try:
        table = bytes(read(at, min(dyn[0].memsz, MAX_DYNAMIC * DYN_ENTRY_SIZE)))     # (one read)
        for i in range(len(table) // DYN_ENTRY_SIZE):
            tag, val = struct.unpack_from(order + DYN_ENTRY, table, i * DYN_ENTRY_SIZE)
            if tag == DT_NULL:
                break
            if tag == DT_DEBUG:
                return val
    except Exception as exc:
        warnings.append("%s: its dynamic section cannot be read: %s" % (exe.name, exc))
    return 0


def _libraries(read, r_debug, order, out, seen, warnings) -> None:
    (lm,) = struct.unpack(order + "Q", bytes(read(r_debug + R_DEBUG_R_MAP, 8)))
    visited: Set[int] = set()
    while lm and lm not in visited and len(visited) < _MAX_MODULES:
        visited.add(lm)
        l_addr, l_name, _l_ld, lm = struct.unpack(order + LINK_MAP, bytes(read(lm, LINK_MAP_SIZE)))
        if l_addr in seen:       # the executable (first in the list), or one listed twice
            continue
        seen.add(l_addr)
        name = _cstring_or(read, l_name, "")
        lib = _library(read, name or "the library at %#x" % l_addr, l_addr, order, warnings)
        if lib is not None:
            out.append(lib)


def _library(read, name, bias, order, warnings) -> Optional[InMemory]:
    """A shared object whose ELF header is mapped at its load bias (its first load at 0)."""
    hdr = parse_elf_headers(lambda off, size: _or_none(read, bias + off, min(size, MAX_PHNUM * _PHENT)))
    if hdr is None:
        warnings.append("%s: no ELF header at its load bias %#x" % (name, bias))
        return None
    if hdr.order != order:
        warnings.append("%s: its ELF header has the other byte order" % name)
        return None
    return _described(read, name, bias, hdr.phdrs, order, warnings, False)

