"""A `.debug_frame` section rewritten as `.eh_frame`: the same rows, in the form a debugger reads
from a module's loaded CFI.

Why: LLDB 19 and later make their reader of a module's `.debug_frame` once and keep it for the
session, but make the `.eh_frame` reader when a symbol file first brings that section (LLDB 23
takes it from a side file where it is allocated) and prefer it.  So a side file of the functions
on the stacks can go first, as `.debug_frame`, and the one with registers after it, as
`.eh_frame`, in the same session (../shared/facts.md).

What changes (LSB's "Exception Frames" and DWARF 4, 6.4.1): the CIE id is 0 and an FDE's CIE
pointer counts back from the pointer itself; the CIE's augmentation starts "zR" (augmentation data
follow; the FDEs' addresses are DW_EH_PE_absptr: as `.debug_frame` has them) and every FDE has
augmentation data of length 0.  The call-frame instructions are the same bytes, register numbers
included (x86-64, AArch64 and s390x number them alike in both sections).
"""

import struct
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..errors import CfiError
from .writer import uleb128

DEBUG_FRAME_CIE_ID = 0xFFFFFFFF
EH_CIE_VERSION = 3               # the return-address column as ULEB128
DW_EH_PE_absptr = 0x00
_KNOWN_AUGMENTATION = frozenset("SB")    # the letters without data that may follow "zR" (a signal frame, AArch64's B key)


def _uleb(data: bytes, pos: int, end: int, what: str) -> int:
    """The end of the ULEB128 at pos."""
    while pos < end:
        if not data[pos] & 0x80:
            return pos + 1
        pos += 1
    raise CfiError("%s at %#x runs past its entry" % (what, pos))




@dataclass
class _Cie:
    augmentation: str
    aligns_and_ra: bytes        # code alignment, data alignment, return-address column
    instructions: bytes
    address_size: int


def _cie(data: bytes, at: int, body: int, end: int, address_size: int) -> _Cie:
    version = data[body]
    pos = body + 1
    nul = data.find(b"\0", pos, end)
    if version not in (1, 3, 4) or nul < 0:
        raise CfiError("the CIE at %#x: version %d or its augmentation is not one this rewrite reads" % (at, version))
    augmentation = data[pos:nul].decode("ascii", "replace")
    if set(augmentation) - _KNOWN_AUGMENTATION:
        raise CfiError("the CIE at %#x: augmentation %r is not one this rewrite reads" % (at, augmentation))
    pos = nul + 1
    if version == 4:
        address_size = data[pos]
        pos += 2                 # (address size, segment selector size)
    first = pos
    pos = _uleb(data, pos, end, "code alignment")
    pos = _uleb(data, pos, end, "data alignment")
    if version == 1:
        if pos >= end:
            raise CfiError("the CIE at %#x ends before its return-address column" % at)
        ra = data[pos:pos + 1]
        aligns_and_ra = data[first:pos] + uleb128(ra[0])
        pos += 1
    else:
        ra_end = _uleb(data, pos, end, "return-address column")
        aligns_and_ra, pos = data[first:ra_end], ra_end
    if address_size not in (4, 8):
        raise CfiError("the CIE at %#x: address size %d" % (at, address_size))
    return _Cie(augmentation, aligns_and_ra, data[pos:end], address_size)


def from_debug_frame(data: bytes, big_endian: bool, address_size: int = 8) -> bytes:
    """The `.eh_frame` section (its terminator included) of the `.debug_frame` section `data`
    (32-bit DWARF; CIE versions 1, 3 and 4), with the FDEs' addresses as they are.  Raises
    CfiError, naming the offset, where `data` is not such a section."""
    e = ">" if big_endian else "<"
    u32 = struct.Struct(e + "I")
    entries: List[Tuple[int, int, int]] = []       # (offset, body start, end)
    cies: Dict[int, _Cie] = {}
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CfiError("the entry at %#x: its length runs past the section's end" % pos)
        length = u32.unpack_from(data, pos)[0]
        if length == 0xFFFFFFFF:
            raise CfiError("the entry at %#x is 64-bit DWARF, which this rewrite does not read" % pos)
        end = pos + 4 + length
        if length < 4 or end > len(data):
            raise CfiError("the entry at %#x: length %d runs past the section's end" % (pos, length))
        if u32.unpack_from(data, pos + 4)[0] == DEBUG_FRAME_CIE_ID:
            if length < 5:
                raise CfiError("the CIE at %#x is too short" % pos)
            cies[pos] = _cie(data, pos, pos + 8, end, address_size)
        entries.append((pos, pos + 8, end))
        pos = end

    out = bytearray()
    placed: Dict[int, int] = {}         # the debug_frame CIE's offset -> the eh_frame one's

    def align(body: bytearray, size: int) -> None:
        body += b"\0" * (-(len(body) + 4) % size)        # DW_CFA_nop

    def place_cie(at: int) -> int:
        if at not in placed:
            cie = cies[at]
            body = bytearray(u32.pack(0))
            body += bytes([EH_CIE_VERSION]) + b"zR" + cie.augmentation.encode() + b"\0" + cie.aligns_and_ra
            body += uleb128(1) + bytes([DW_EH_PE_absptr]) + cie.instructions
            align(body, cie.address_size)
            placed[at] = len(out)
            out.extend(u32.pack(len(body)) + body)
        return placed[at]

    for at, body_at, end in entries:
        if at in cies:
            place_cie(at)
            continue
        cie_at = u32.unpack_from(data, at + 4)[0]
        if cie_at not in cies:
            raise CfiError("the FDE at %#x points to %#x, where no CIE is" % (at, cie_at))
        size = cies[cie_at].address_size
        if body_at + 2 * size > end:
            raise CfiError("the FDE at %#x ends inside its address range" % at)
        where = place_cie(cie_at)
        body = bytearray(u32.pack(len(out) + 4 - where))
        body += data[body_at:body_at + 2 * size] + b"\0" + data[body_at + 2 * size:end]
        align(body, size)
        out.extend(u32.pack(len(body)) + body)
    return bytes(out + u32.pack(0))
