"""A function's exception table (its LSDA, in `.gcc_except_table`): which calls an exception may
leave through a landing pad of the same function, and where that pad is.

A landing pad is reached by no jump: the unwinder enters it from a call, with every callee-saved
register as it was at that call.  The save-slot data flow (core.saves.flow) follows these edges,
so a pad gets the state of the calls that lead to it, and code both a pad and a normal path reach
(a `catch` that carries on) gets both.  The `.eh_frame` FDE of a function names its LSDA (the `L`
augmentation); pyelftools decodes that pointer, this module decodes the table's header and its
call-site records:

    LPStart encoding (u8), LPStart if not omitted        default: the FDE's start
    TType encoding (u8), TType offset (ULEB128) if not omitted
    call-site encoding (u8), call-site table length (ULEB128)
    records: start, length, landing pad (offsets from LPStart; pad 0: none), action (ULEB128)
"""

from __future__ import annotations

import bisect
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import CfiError

SECTION = ".gcc_except_table"

OMIT = 0xFF
# DW_EH_PE_* value formats (the low four bits): size in bytes, signed; ULEB128/SLEB128 apart.
_ULEB128, _SLEB128 = 0x01, 0x09
_FIXED = {0x02: (2, False), 0x03: (4, False), 0x04: (8, False), 0x0A: (2, True), 0x0B: (4, True), 0x0C: (8, True)}
_ABSPTR = 0x00
_PCREL = 0x10


class CallSite(NamedTuple):
    """Calls whose last byte lies in [start, end) continue at `landing_pad` when an exception
    passes through them."""
    start: int
    end: int
    landing_pad: int


class _Reader:
    def __init__(self, data: bytes, pos: int, big_endian: bool, address_size: int):
        self.data, self.pos, self.big, self.address_size = data, pos, big_endian, address_size

    def fail(self, rule: str):
        return CfiError(SECTION, self.pos, rule)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise self.fail("the table runs past the end of the section")
        self.pos += 1
        return self.data[self.pos - 1]

    def leb128(self, signed: bool) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if shift > 70:
                raise self.fail("a LEB128 number longer than 10 bytes")
        if signed and b & 0x40:
            value -= 1 << shift
        return value

    def fixed(self, size: int, signed: bool) -> int:
        if self.pos + size > len(self.data):
            raise self.fail("a %d-byte value runs past the end of the section" % size)
        raw = self.data[self.pos:self.pos + size]
        self.pos += size
        return int.from_bytes(raw, "big" if self.big else "little", signed=signed)

    def encoded(self, encoding: int) -> int:
        fmt = encoding & 0x0F
        if fmt == _ULEB128:
            return self.leb128(False)
        if fmt == _SLEB128:
            return self.leb128(True)
        if fmt == _ABSPTR:
            return self.fixed(self.address_size, False)
        if fmt in _FIXED:
            return self.fixed(*_FIXED[fmt])
        raise self.fail("value encoding %#04x is none DWARF defines" % encoding)


def call_sites(data: bytes, address: int, lsda: int, function_start: int, big_endian: bool = False,
               address_size: int = 8) -> Tuple[CallSite, ...]:
    """The call sites with a landing pad of the LSDA at address `lsda` of the section `data` (at
    `address`), for the FDE that starts at `function_start`, in address order.  Raises CfiError
    for a malformed one."""
    r = _Reader(data, lsda - address, big_endian, address_size)
    if not 0 <= r.pos < len(data):
        raise CfiError(SECTION, r.pos, "an FDE's LSDA pointer %#x is outside the section" % lsda)
    start_enc = r.byte()
    lp_start = function_start
    if start_enc != OMIT:
        if start_enc & 0x70 not in (_ABSPTR, _PCREL) or start_enc & 0x80:
            raise r.fail("LPStart encoding %#04x: neither absolute nor PC-relative" % start_enc)
        at = address + r.pos
        lp_start = r.encoded(start_enc) + (at if start_enc & 0x70 == _PCREL else 0)
    if r.byte() != OMIT:
        r.leb128(False)                 # the type table: which exceptions a handler catches
    site_enc = r.byte()
    if site_enc == OMIT or site_enc & 0xF0:
        raise r.fail("call-site encoding %#04x: the records are offsets, of no other kind" % site_enc)
    length = r.leb128(False)
    end = r.pos + length
    if end > len(data):
        raise r.fail("a call-site table of %d bytes runs past the end of the section" % length)
    out: List[CallSite] = []
    while r.pos < end:
        start, size, pad = r.encoded(site_enc), r.encoded(site_enc), r.encoded(site_enc)
        r.leb128(False)                 # the action: which handlers, not where
        if pad:
            out.append(CallSite(lp_start + start, lp_start + start + size, lp_start + pad))
    if r.pos != end:
        raise r.fail("the last call-site record runs past the table's length")
    return tuple(sorted(out))


class ExceptionTables:
    """The exception tables of one ELF file: for a function (its `.eh_frame` FDE's start), its call
    sites, decoded on first use."""

    def __init__(self, data: bytes, address: int, lsda_of: Dict[int, int], big_endian: bool = False,
                 address_size: int = 8):
        self.data, self.address = data, address
        self.lsda_of = lsda_of          # FDE start -> its LSDA's address
        self.big_endian, self.address_size = big_endian, address_size
        self._decoded: Dict[int, Tuple[CallSite, ...]] = {}

    def call_sites(self, function_start: int) -> Tuple[CallSite, ...]:
        """The function's call sites with a landing pad (none without an LSDA).  Raises CfiError for
        a malformed table: the function's exception edges are then not known."""
        got = self._decoded.get(function_start)
        if got is None:
            lsda = self.lsda_of.get(function_start)
            got = () if lsda is None else call_sites(self.data, self.address, lsda, function_start,
                                                     self.big_endian, self.address_size)
            self._decoded[function_start] = got
        return got


def tables_of(image, lsda_of: Dict[int, int]) -> ExceptionTables:
    """The exception tables of the ELF file `image` (core.elf.image.ElfImage), its FDEs' LSDAs
    `lsda_of` (FDE start -> LSDA address) read from its CFI."""
    got = image.section_bytes(SECTION) if lsda_of else None
    data, address = got if got is not None else (b"", 0)
    return ExceptionTables(data, address, lsda_of, image.big_endian, 8 if image.elfclass == 64 else 4)


def landing_pad(sites: Sequence[CallSite], call_end: int, starts: Optional[Sequence[int]] = None) -> Optional[int]:
    """Where an exception leaving the call whose return address is `call_end` continues in this
    function (the records are looked up by the return address minus one), or None.  `starts`:
    the sites' starts, where the caller looks up many."""
    if starts is None:
        starts = [s.start for s in sites]
    k = bisect.bisect_right(starts, call_end - 1) - 1
    if k >= 0 and sites[k].start <= call_end - 1 < sites[k].end:
        return sites[k].landing_pad
    return None
