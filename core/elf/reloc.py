"""Relocations in relocatable files (`.o`, `ld -r` output): completing an SFrame section's FDE
start fields as readelf does.

In an ET_REL file the assembler leaves each FDE's function start to a relocation (`.rela.sframe`:
`R_X86_64_PC32`/`PC64`, `R_AARCH64_PREL32`/`PREL64`, `R_390_PC32`/`PC64` against the function's
text section).  Sections of such a file have no addresses yet: readelf places each at 0, so a
function prints at its offset within its text section; a debugger lays the sections out one
after another and passes their addresses in.

A relocation names a function address D = S + A (symbol plus addend).  The field written is the
one the section's own start rule reads as D: D - P (P: the field's address) with
`FDE_FUNC_START_PCREL`, D - section address without it.  That is what applying a PC-relative
relocation gives in the first case; the second is V1, which has no PCREL flag although gas 2.40
relocates its fields PC-relatively (its readelf applies no relocation and prints 0 for every
function).  Relocations anywhere but on an FDE start field, of a width other than the field's,
of a type the ABI description does not list, or against an undefined symbol, raise ElfError.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple, Optional

from ..errors import ElfError
from ..sframe import format as F
from ..sframe.decode import parse_header


class Relocation(NamedTuple):
    """One relocation of the SFrame section, its symbol already resolved to an address."""
    offset: int     # r_offset: within the SFrame section
    type: int       # r_type, as the ELF psABI numbers it
    symbol: int     # S: the symbol's address (its section's address + st_value)
    addend: Optional[int]   # A: r_addend; None for REL, whose addend is the field's own value
    name: str = ""  # the symbol's name, for messages


def apply_all(data: bytes, relocations: Iterable[Relocation], kinds: dict, section_addr: int, big_endian: bool,
              where: str) -> bytes:
    """Any section's bytes with its relocations applied as the psABI says: S + A - P for the
    PC-relative kinds (P: the field's address, the section placed at `section_addr`), S + A for
    the others.  Used for the DWARF CFI of relocatable files (`sframe check`)."""
    out = bytearray(data)
    order = ">" if big_endian else "<"
    for r in relocations:
        kind = kinds.get(r.type)
        if kind is None:
            raise ElfError("%s: relocation type %d at offset %#x is not supported (supported: %s)"
                           % (where, r.type, r.offset, ", ".join(k.name for k in kinds.values())))
        if r.offset < 0 or r.offset + kind.size > len(out):
            raise ElfError("%s: relocation %s at offset %#x is outside the section" % (where, kind.name, r.offset))
        fmt = order + ("q" if kind.size == 8 else "i")
        addend = struct.unpack_from(fmt, out, r.offset)[0] if r.addend is None else r.addend
        value = r.symbol + addend - (section_addr + r.offset if kind.pcrel else 0)
        value &= (1 << 8 * kind.size) - 1
        struct.pack_into(fmt, out, r.offset, value - (value >> (8 * kind.size - 1) << 8 * kind.size))
    return bytes(out)


def start_fields(data: bytes) -> dict[int, int]:
    """Offset within the section -> byte width of every FDE start field."""
    h = parse_header(data)
    width = struct.calcsize(F.FDE_START_FORMAT[h.version])
    base = h.size + h.fdeoff
    return {base + i * h.fde_size: width for i in range(h.num_fdes)}


def apply(data: bytes, relocations: Iterable[Relocation], kinds: dict, section_addr: int = 0,
          where: str = ".sframe") -> bytes:
    """The section's bytes with its FDE start fields relocated.

    `kinds` is the ABI description's relocation table (type -> RelocKind: name, width);
    relocations of any listed kind name the function's address S + A.  `section_addr` is the
    address the SFrame section is placed at (0 as readelf places it); `where` names the section
    in messages."""
    h = parse_header(data)
    fields = start_fields(data)
    out = bytearray(data)
    pcrel = h.has(F.Flag.FDE_FUNC_START_PCREL)
    done = set()
    for r in relocations:
        kind = kinds.get(r.type)
        if kind is None:
            raise ElfError("%s: relocation type %d at offset %#x is not supported (supported: %s)"
                           % (where, r.type, r.offset, ", ".join(k.name for k in kinds.values())))
        width = fields.get(r.offset)
        if width is None:
            raise ElfError("%s: relocation %s at offset %#x is not on an FDE start field"
                           % (where, kind.name, r.offset))
        if kind.size != width:
            raise ElfError("%s: relocation %s at offset %#x is %d bytes wide; the FDE start field is %d"
                           % (where, kind.name, r.offset, kind.size, width))
        if r.offset in done:
            raise ElfError("%s: two relocations complete the FDE start field at offset %#x" % (where, r.offset))
        done.add(r.offset)
        fmt = h.endian + ("q" if width == 8 else "i")
        addend = struct.unpack_from(fmt, data, r.offset)[0] if r.addend is None else r.addend
        value = (r.symbol + addend - (section_addr + (r.offset if pcrel else 0))) & ((1 << 8 * width) - 1)
        struct.pack_into(fmt, out, r.offset, value - (value >> (8 * width - 1) << 8 * width))
    missing = sorted(set(fields) - done)
    if done and missing:      # some fields relocated, some not: those would name no function
        raise ElfError("%s: the FDE start field at offset %#x has no relocation (%d of %d have none)"
                       % (where, missing[0], len(missing), len(fields)))
    return bytes(out)
