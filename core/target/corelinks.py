"""The mapped files of a core without NT_FILE (qemu-user), from the dynamic linker's list.

The executable is placed through the auxiliary vector (AT_PHDR, AT_ENTRY); its DT_DEBUG entry
points at `r_debug`, whose `r_map` chain of `link_map` entries names every shared library and its
load bias.
"""

import struct
from typing import List, Optional, Set

from ..elf.image import PHDR_SIZE, PT_DYNAMIC, PT_LOAD, PT_PHDR, unpack_phdrs
from .corememory import CoreMemoryError
from .corenotes import AT_ENTRY, AT_PHDR, AT_PHNUM, AT_SYSINFO_EHDR, Mapping
from .mapped import MappedFile, loads_of, lowest_load, mappings_of

DT_NULL = 0
DT_DEBUG = 21
DYN_ENTRY = "QQ"             # d_tag, d_val
DYN_ENTRY_SIZE = 16
R_DEBUG_R_MAP = 8            # offset of r_map in struct r_debug
LINK_MAP = "QQQQ"            # l_addr, l_name, l_ld, l_next
LINK_MAP_SIZE = 32
MAX_LINK_MAP = 4096          # entries walked before the chain is taken as corrupt
MAX_DYNAMIC = 4096


def walk_link_map(core, exe_path: Optional[str], mods: List[MappedFile], maps: List[Mapping]) -> None:
    """Append the executable (`exe_path`, as the core names it) and each library to `mods`, and
    their mappings to `maps` as they are found (so that reads while walking can use them).
    `core` is the CoreFile; what cannot be found ends the walk with a warning."""
    if exe_path is None:
        core.warnings.append("%s: no NT_FILE note and no executable name in the core" % core.path)
        return
    files, page, order = core.files, core.page_size, core.order
    image = files.image(exe_path, True)
    hdr = files.headers(exe_path, True)
    # Program headers as loaded (from the core) beat the file's.
    phdr_addr, phnum = core.auxv.get(AT_PHDR), core.auxv.get(AT_PHNUM)
    phdrs = None
    if phdr_addr and phnum:
        raw = core.memory.read_core_only(phdr_addr, phnum * PHDR_SIZE)
        if raw is not None:
            phdrs = unpack_phdrs(raw, order, phnum)
    if phdrs is None and hdr is not None:
        phdrs = hdr.phdrs
    if phdrs is None:
        core.warnings.append("%s: executable %s not found (pass exe=)" % (core.path, exe_path))
        return
    bias = _exe_bias(core, phdrs, hdr, phdr_addr)
    if bias is None:
        core.warnings.append("%s: cannot place the executable %s" % (core.path, exe_path))
        return
    if image is not None and not files.same_file(exe_path, True, lowest_load(phdrs, bias, page), bias):
        image = None
    if image is not None:
        maps.extend(mappings_of(exe_path, bias, loads_of(hdr, image), page))
    mods.append(MappedFile(exe_path, bias, image))

    dyn = [p for p in phdrs if p.type == PT_DYNAMIC]
    if not dyn:
        return       # static executable
    try:
        r_debug = _dt_debug(core, dyn[0].vaddr + bias)
    except CoreMemoryError as exc:
        core.warnings.append("%s: cannot read the executable's dynamic section: %s" % (core.path, exc))
        return
    if not r_debug:
        core.warnings.append("%s: DT_DEBUG is not set; shared libraries unknown" % core.path)
        return
    try:
        _walk_libraries(core, r_debug, mods, maps)
    except CoreMemoryError as exc:
        core.warnings.append("%s: link_map chain unreadable: %s" % (core.path, exc))


def _exe_bias(core, phdrs, hdr, phdr_addr):
    """The executable's load bias: from PT_PHDR, else the entry point, else the PHDR's load."""
    pt_phdr = [p for p in phdrs if p.type == PT_PHDR]
    if phdr_addr and pt_phdr:
        return phdr_addr - pt_phdr[0].vaddr
    if core.auxv.get(AT_ENTRY) and hdr is not None:
        return core.auxv[AT_ENTRY] - hdr.entry
    if phdr_addr and hdr is not None:
        loads = [p for p in phdrs if p.type == PT_LOAD and p.offset <= hdr.phoff < p.offset + p.filesz]
        if loads:
            return phdr_addr - (loads[0].vaddr + hdr.phoff - loads[0].offset)
    return None


def _dt_debug(core, at):
    """The value of the dynamic section's DT_DEBUG entry at `at` (0 if none)."""
    for i in range(MAX_DYNAMIC):
        tag, val = struct.unpack(core.order + DYN_ENTRY, core.read(at + DYN_ENTRY_SIZE * i, DYN_ENTRY_SIZE))
        if tag == DT_NULL:
            break
        if tag == DT_DEBUG:
            return val
    return 0


def _walk_libraries(core, r_debug, mods, maps):
    files, page = core.files, core.page_size
    vdso = None
    if core.auxv.get(AT_SYSINFO_EHDR):
        vdso = core.memory.segment_at(core.auxv[AT_SYSINFO_EHDR])
    lm = core.read_pointer(r_debug + R_DEBUG_R_MAP)
    seen: Set[int] = set()
    first = True
    while lm and lm not in seen and len(seen) < MAX_LINK_MAP:
        seen.add(lm)
        l_addr, l_name, l_ld, l_next = struct.unpack(core.order + LINK_MAP, core.read(lm, LINK_MAP_SIZE))
        lm = l_next
        if first:
            first = False      # the executable itself, placed above
            continue
        if vdso is not None and vdso.vaddr <= l_ld < vdso.vaddr + vdso.memsz:
            continue           # the vDSO: no file behind it
        name = core.read_cstring(l_name) if l_name else ""
        if not name:
            continue
        lib = files.image(name, False)
        lhdr = files.headers(name, False) if lib is not None else None
        if lhdr is None or not files.same_file(name, False, lowest_load(lhdr.phdrs, l_addr, page), l_addr):
            lib = None
        if lib is not None and lhdr is not None:
            maps.extend(mappings_of(name, l_addr, loads_of(lhdr, lib), page))
        mods.append(MappedFile(name, l_addr, lib))
