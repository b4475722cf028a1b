"""A `.debug_frame` section rewritten as `.eh_frame`: the same rows, in the form a debugger reads
from a module's loaded CFI.

Why: LLDB 23 makes its reader of a module's `.eh_frame`, and of its `.debug_frame`, each once:
when the first symbol file that has one is added (a side file's `.eh_frame` need not be
allocated: the addresses are absolute), and it prefers `.debug_frame`.  So a side file of the
functions on the stacks can go first, as `.eh_frame`, and the one with registers after it, its
`.debug_frame`, in the same session (lldb_plugin.sidefiles).

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
from .writer import CIE_ID_32, uleb128

_SECTION = ".debug_frame"
EH_CIE_VERSION = 1               # the return-address column a byte (LLVM reads no other version here)
DW_EH_PE_absptr = 0x00
_KNOWN_AUGMENTATION = frozenset("SB")    # the letters without data that may follow "zR" (a signal frame, AArch64's B key)


def _uleb(data: bytes, pos: int, end: int, what: str) -> int:
    """The end of the ULEB128 at pos."""
    while pos < end:
        if not data[pos] & 0x80:
            return pos + 1
        pos += 1
    raise CfiError(_SECTION, pos, "%s runs past its entry" % what)


@dataclass
class _Cie:
    augmentation: str
    aligns: bytes               # code alignment, data alignment (ULEB128, SLEB128)
    ra: int                     # the return-address column
    instructions: bytes
    address_size: int


def _cie(data: bytes, at: int, body: int, end: int, address_size: int) -> _Cie:
    version = data[body]
    pos = body + 1
    nul = data.find(b"\0", pos, end)
    if version not in (1, 3, 4) or nul < 0:
        raise CfiError(_SECTION, at, "CIE version %d, or an augmentation without its end, is not one this "
                       "rewrite reads" % version)
    augmentation = data[pos:nul].decode("ascii", "replace")
    if set(augmentation) - _KNOWN_AUGMENTATION:
        raise CfiError(_SECTION, at, "the CIE's augmentation %r is not one this rewrite reads" % augmentation)
    pos = nul + 1
    if version == 4:
        if pos + 2 > end:
            raise CfiError(_SECTION, at, "the CIE ends before its address size")
        if data[pos] != address_size or data[pos + 1]:
            raise CfiError(_SECTION, at, "the CIE's address size %d and segment selector size %d are not the "
                           "file's %d and 0" % (data[pos], data[pos + 1], address_size))
        pos += 2                 # (address size, segment selector size)
    first = pos
    pos = _uleb(data, pos, end, "code alignment")
    pos = _uleb(data, pos, end, "data alignment")
    aligns = data[first:pos]
    if version == 1:
        if pos >= end:
            raise CfiError(_SECTION, at, "the CIE ends before its return-address column")
        ra, pos = data[pos], pos + 1
    else:
        ra_end = _uleb(data, pos, end, "return-address column")
        ra = sum((b & 0x7F) << (7 * k) for k, b in enumerate(data[pos:ra_end]))
        pos = ra_end
    if ra > 0xFF:
        raise CfiError(_SECTION, at, "the return-address column %d does not fit a CIE of version 1" % ra)
    if address_size not in (4, 8):
        raise CfiError(_SECTION, at, "the CIE's address size is %d" % address_size)
    return _Cie(augmentation, aligns, ra, data[pos:end], address_size)


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
            raise CfiError(_SECTION, pos, "the entry's length runs past the section's end")
        length = u32.unpack_from(data, pos)[0]
        if length == 0xFFFFFFFF:
            raise CfiError(_SECTION, pos, "64-bit DWARF, which this rewrite does not read")
        end = pos + 4 + length
        if length < 4 or end > len(data):
            raise CfiError(_SECTION, pos, "the entry's length %d runs past the section's end" % length)
        if u32.unpack_from(data, pos + 4)[0] == CIE_ID_32:
            if length < 5:
                raise CfiError(_SECTION, pos, "the CIE is too short")
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
            body += bytes([EH_CIE_VERSION]) + b"zR" + cie.augmentation.encode() + b"\0" + cie.aligns + bytes([cie.ra])
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
            raise CfiError(_SECTION, at, "the FDE's CIE pointer %#x is not a CIE" % cie_at)
        size = cies[cie_at].address_size
        if body_at + 2 * size > end:
            raise CfiError(_SECTION, at, "the FDE ends inside its address range")
        where = place_cie(cie_at)
        body = bytearray(u32.pack(len(out) + 4 - where))
        body += data[body_at:body_at + 2 * size] + b"\0" + data[body_at + 2 * size:end]
        align(body, size)
        out.extend(u32.pack(len(body)) + body)
    return bytes(out + u32.pack(0))
