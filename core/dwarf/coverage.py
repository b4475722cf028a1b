"""Which addresses DWARF CFI covers: the address ranges of the FDEs in `.eh_frame` and `.debug_frame`.

The SFrame unwinder steps aside where the debugger's own DWARF unwinder has CFI for a PC (mode
`auto`: "do no harm"), so of the CFI only the range of each FDE matters here; what its rules say
is not decoded.  With a `.eh_frame_hdr` binary-search table, building costs nothing and a query is
a binary search over the table in place plus the decoding of one FDE header.  Without one (a
`.debug_frame`, or a `.eh_frame_hdr` without a table), the FDE headers are read once into two
sorted arrays of addresses.  Queries are memoized.

Every read is bounds-checked: a malformed section raises `CfiError` naming the section, the byte
offset and the rule broken.  `CfiIndex` then counts that section as no CFI at all, as GDB does:
it discards a `.eh_frame` or `.debug_frame` it cannot read ("skipping .eh_frame info of ...").
"""

import bisect
import struct
from array import array
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import CfiError
from ..sframe.format import MASK64

# Why a module needs nothing from SFrame where the debugger's DWARF CFI is used (no side file, an
# idle unwinder): worded once.
ALL_COVERED = "its own DWARF CFI covers every function its SFrame does"

# DW_EH_PE_* pointer encodings (the LSB spec's .eh_frame format): the value format in the low
# nibble, what it is relative to in bits 4-6, an indirection flag, and "omitted".
PE_OMIT = 0xFF
PE_INDIRECT = 0x80
PE_ABSPTR, PE_ULEB128, PE_UDATA2, PE_UDATA4, PE_UDATA8 = 0x00, 0x01, 0x02, 0x03, 0x04
PE_SLEB128, PE_SDATA2, PE_SDATA4, PE_SDATA8 = 0x09, 0x0A, 0x0B, 0x0C
PE_PCREL, PE_DATAREL = 0x10, 0x30   # the applications GNU tools write (text/func-relative and aligned: never)
_FIXED = {PE_UDATA2: "H", PE_UDATA4: "I", PE_UDATA8: "Q", PE_SDATA2: "h", PE_SDATA4: "i", PE_SDATA8: "q"}

EH_FRAME, EH_FRAME_HDR, DEBUG_FRAME = ".eh_frame", ".eh_frame_hdr", ".debug_frame"


@dataclass(frozen=True)
class CfiRange:
    """One FDE's code range: [lo, hi) as loaded, the section it is in and its byte offset there."""
    section: str
    lo: int
    hi: int
    fde_offset: int

    def __str__(self) -> str:
        return "%s FDE at offset %#x covers %#x-%#x" % (self.section, self.fde_offset, self.lo, self.hi)


class _Reader:
    """Bounds-checked little reads from one section's bytes."""
    __slots__ = ("data", "name", "end", "big")

    def __init__(self, data: bytes, name: str, big_endian: bool):
        self.data = data
        self.name = name
        self.end = len(data)
        self.big = big_endian

    def fail(self, offset: int, rule: str) -> CfiError:
        return CfiError(self.name, offset, rule)

    def fixed(self, offset: int, code: str, what: str) -> int:
        size = struct.calcsize(code)
        if offset < 0 or offset + size > self.end:
            raise self.fail(offset, "%s runs past the end of the section (%d bytes)" % (what, self.end))
        return struct.unpack_from((">" if self.big else "<") + code, self.data, offset)[0]

    def leb(self, offset: int, signed: bool, what: str) -> Tuple[int, int]:
        value = shift = 0
        pos = offset
        while True:
            if pos >= self.end:
                raise self.fail(offset, "%s runs past the end of the section" % what)
            if shift > 63:
                raise self.fail(offset, "%s is longer than 64 bits" % what)
            b = self.data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if signed and b & 0x40:
            value -= 1 << shift
        return value, pos

    def cstring(self, offset: int, what: str) -> Tuple[bytes, int]:
        nul = self.data.find(b"\0", offset)
        if offset >= self.end or nul < 0:
            raise self.fail(offset, "%s is not NUL-terminated" % what)
        return bytes(self.data[offset:nul]), nul + 1

    def pointer_size(self, offset: int, enc: int, addr_size: int, what: str) -> int:
        """Byte size of a DW_EH_PE-encoded pointer at `offset` (its value is not needed)."""
        fmt = enc & 0x0F
        if fmt == PE_ABSPTR:
            return addr_size
        if fmt == PE_ULEB128 or fmt == PE_SLEB128:
            return self.leb(offset, False, what)[1] - offset
        if fmt in _FIXED:
            return struct.calcsize(_FIXED[fmt])
        raise self.fail(offset, "%s has an unknown pointer encoding %#x" % (what, enc))

    def pointer(self, offset: int, enc: int, field_addr: int, addr_size: int, what: str,
                bias: Callable[[], int] = lambda: 0, datarel_base: Optional[int] = None) -> Tuple[int, int]:
        """(value, next offset) of a DW_EH_PE-encoded pointer whose field is loaded at `field_addr`.
        Absolute values are link-time addresses: `bias()` is added to them."""
        fmt = enc & 0x0F
        size = self.pointer_size(offset, enc, addr_size, what)
        if fmt == PE_ULEB128 or fmt == PE_SLEB128:
            value = self.leb(offset, fmt == PE_SLEB128, what)[0]
        else:
            value = self.fixed(offset, _FIXED.get(fmt) or ("Q" if addr_size == 8 else "I"), what)
        app = enc & 0x70
        if enc & PE_INDIRECT:
            raise self.fail(offset, "%s is an indirect pointer (encoding %#x), not allowed here" % (what, enc))
        if app == PE_PCREL:
            value += field_addr
        elif app == PE_DATAREL and datarel_base is not None:
            value += datarel_base
        elif app == 0:
            value += bias()
        else:
            raise self.fail(offset, "%s has a pointer encoding %#x this reader does not resolve" % (what, enc))
        return value & MASK64, offset + size


class CfiSection:
    """The FDE ranges of one `.eh_frame` (loaded at `address`) or `.debug_frame` (not loaded), in a
    file whose load bias is `bias`.

    `hdr`/`hdr_address`: the `.eh_frame_hdr` of a `.eh_frame`, whose search table (when it has
    one) saves reading every FDE.  `addr_size` is the target's pointer size (ELF class).
    """

    def __init__(self, name: str, data: bytes, address: int, *, bias: Union[int, Callable[[], int]] = 0,
                 big_endian: bool = False, addr_size: int = 8, hdr: Optional[bytes] = None, hdr_address: int = 0):
        self.name = name
        self.eh = name == EH_FRAME
        self.address = address          # where the section is loaded (unused for .debug_frame)
        # The load bias, added to absolute (link-time) addresses; a callable is asked once, when
        # the first absolute address is met (most .eh_frame addresses are PC-relative).
        self._bias = bias
        self.addr_size = addr_size
        self.r = _Reader(bytes(data), name, big_endian)
        self._cies: Dict[int, Tuple[int, int]] = {}   # CIE offset -> (FDE pointer encoding, address size)
        self._hdr = (bytes(hdr), hdr_address) if hdr is not None and self.eh else None
        self._table: Optional[Tuple[_Reader, int, int, int]] = None   # (.eh_frame_hdr reader, offset, count, address)
        self._los: Optional[array] = None
        self._his: Optional[array] = None
        self._offs: Optional[array] = None

    def bias(self) -> int:
        if callable(self._bias):
            self._bias = self._bias()
        return self._bias

    # -- entries ---------------------------------------------------------------------------------

    def _length(self, off: int) -> Tuple[int, int, bool]:
        """(length, offset of the CIE id/pointer field, 64-bit DWARF) of the entry at `off`."""
        length = self.r.fixed(off, "I", "entry length")
        if length == 0xFFFFFFFF:
            return self.r.fixed(off + 4, "Q", "64-bit entry length"), off + 12, True
        return length, off + 4, False

    def _cie(self, off: int) -> Tuple[int, int]:
        """(FDE pointer encoding, address size) of the CIE at `off`, memoized."""
        got = self._cies.get(off)
        if got is not None:
            return got
        r = self.r
        length, idoff, is64 = self._length(off)
        end = idoff + length
        if length == 0 or end > r.end:
            raise r.fail(off, "CIE length %#x runs past the end of the section" % length)
        cie_id = r.fixed(idoff, "Q" if is64 else "I", "CIE id")
        if cie_id != (0 if self.eh else (MASK64 if is64 else 0xFFFFFFFF)):
            raise r.fail(off, "an FDE's CIE pointer leads to an entry that is not a CIE")
        p = idoff + (8 if is64 else 4)
        version = r.fixed(p, "B", "CIE version")
        if version not in (1, 3, 4):
            raise r.fail(p, "CIE version %d is not 1, 3 or 4" % version)
        aug, p = r.cstring(p + 1, "CIE augmentation string")
        addr_size = self.addr_size
        if aug.startswith(b"eh"):
            p += addr_size
        if version == 4:
            addr_size = r.fixed(p, "B", "CIE address size")
            if addr_size not in (4, 8):
                raise r.fail(p, "CIE address size %d is not 4 or 8" % addr_size)
            p += 2
        _, p = r.leb(p, False, "code alignment factor")
        _, p = r.leb(p, True, "data alignment factor")
        if version == 1:
            p += 1
        else:
            _, p = r.leb(p, False, "return address register")
        enc = PE_ABSPTR
        if aug.startswith(b"z"):
            auglen, p = r.leb(p, False, "augmentation data length")
            stop = p + auglen
            if stop > end:
                raise r.fail(p, "augmentation data runs past the end of the CIE")
            for ch in aug[1:].decode("latin-1"):
                if ch == "R":
                    enc = r.fixed(p, "B", "FDE pointer encoding")
                    p += 1
                elif ch == "P":
                    penc = r.fixed(p, "B", "personality encoding")
                    p += 1 + r.pointer_size(p + 1, penc, addr_size, "personality pointer")
                elif ch == "L":
                    p += 1
                elif ch not in "SBG":
                    break           # unknown letter: the rest is skipped through the length
            if p > stop:
                raise r.fail(p, "augmentation data longer than its length says")
        elif aug not in (b"", b"eh") and self.eh:
            raise r.fail(off, "CIE augmentation %r cannot be parsed without a 'z'" % aug.decode("latin-1"))
        self._cies[off] = got = (enc, addr_size)
        return got

    def fde_range(self, off: int) -> Optional[CfiRange]:
        """The range of the FDE at byte offset `off`, or None if the entry there is a CIE."""
        r = self.r
        length, idoff, is64 = self._length(off)
        end = idoff + length
        if end > r.end:
            raise r.fail(off, "entry length %#x runs past the end of the section" % length)
        ptr = r.fixed(idoff, "Q" if is64 else "I", "CIE pointer")
        if self.eh:
            if ptr == 0:
                return None
            cie_off = idoff - ptr
        else:
            if ptr == (MASK64 if is64 else 0xFFFFFFFF):
                return None
            cie_off = ptr
        if not 0 <= cie_off < r.end:
            raise r.fail(idoff, "CIE pointer %#x leads outside the section" % ptr)
        enc, addr_size = self._cie(cie_off)
        p = idoff + (8 if is64 else 4)
        if not self.eh:
            enc = PE_UDATA8 if addr_size == 8 else PE_UDATA4
        lo, p = r.pointer(p, enc, self.address + p, addr_size, "FDE initial location", bias=self.bias)
        size, p = r.pointer(p, enc & 0x0F, 0, addr_size, "FDE address range")
        if p > end:
            raise r.fail(off, "FDE fields run past its length")
        return CfiRange(self.name, lo, (lo + size) & MASK64, off)

    # -- lookup ----------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Read every FDE header once: sorted arrays of (lo, hi, offset)."""
        ranges = []
        off = 0
        end = self.r.end
        while off < end:
            if end - off < 4:
                raise self.r.fail(off, "%d stray bytes after the last entry" % (end - off))
            length, idoff, _ = self._length(off)
            if length == 0:             # a terminator, or padding between linked inputs
                off = idoff
                continue
            nxt = idoff + length
            if nxt > end:
                raise self.r.fail(off, "entry length %#x runs past the end of the section" % length)
            rng = self.fde_range(off)
            if rng is not None and rng.hi > rng.lo:
                ranges.append((rng.lo, rng.hi, off))
            off = nxt
        ranges.sort()
        self._los = array("Q", (x[0] for x in ranges))
        self._his = array("Q", (x[1] for x in ranges))
        self._offs = array("Q", (x[2] for x in ranges))

    def ranges(self) -> List[Tuple[int, int]]:
        """[(lo, hi)] of every FDE, sorted (every FDE header read: for a whole file's figures)."""
        if self._los is None:
            self._scan()
        assert self._los is not None and self._his is not None
        return list(zip(self._los, self._his))

    def find(self, pc: int) -> Optional[CfiRange]:
        """The FDE whose range holds pc, or None.  Raises CfiError on a malformed section."""
        if self._hdr is not None:        # parsed on first use: building never fails
            (hdr, hdr_address), self._hdr = self._hdr, None
            self._table = _hdr_table(_Reader(hdr, EH_FRAME_HDR, self.r.big), hdr_address, self.addr_size)
        if self._table is not None:
            return self._find_in_table(pc)
        if self._los is None:
            self._scan()
        assert self._los is not None and self._his is not None and self._offs is not None
        i = bisect.bisect_right(self._los, pc) - 1
        # Ranges may nest or overlap: look back while an earlier one could still reach pc.
        while i >= 0:
            if pc < self._his[i]:
                return CfiRange(self.name, self._los[i], self._his[i], self._offs[i])
            i -= 1
            if i >= 0 and self._los[i] < self._los[i + 1] and self._his[i] <= self._los[i + 1]:
                break
        return None

    def _find_in_table(self, pc: int) -> Optional[CfiRange]:
        assert self._table is not None
        hr, toff, count, table_addr = self._table
        big = ">" if hr.big else "<"
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            start = struct.unpack_from(big + "i", hr.data, toff + 8 * mid)[0] + table_addr
            if (start & MASK64) <= pc:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        at = toff + 8 * (lo - 1)
        fde_addr = (struct.unpack_from(big + "i", hr.data, at + 4)[0] + table_addr) & MASK64
        off = fde_addr - self.address
        if not 0 <= off < self.r.end:
            raise hr.fail(at + 4, "search table entry %d points outside .eh_frame" % (lo - 1))
        rng = self.fde_range(off)
        if rng is None:
            raise hr.fail(at + 4, "search table entry %d points at a CIE" % (lo - 1))
        return rng if rng.lo <= pc < rng.hi else None


def _hdr_table(hr: _Reader, hdr_address: int, addr_size: int):
    """(reader, table offset, FDE count, hdr address) of a usable .eh_frame_hdr search table, or
    None when it has none (then the .eh_frame is read in full instead)."""
    version = hr.fixed(0, "B", "version")
    if version != 1:
        raise hr.fail(0, "version %d is not 1" % version)
    ptr_enc, count_enc, table_enc = hr.fixed(1, "B", "eh_frame_ptr encoding"), hr.fixed(2, "B", "fde_count encoding"), \
        hr.fixed(3, "B", "table encoding")
    if ptr_enc == PE_OMIT:
        return None
    p = 4 + hr.pointer_size(4, ptr_enc, addr_size, "eh_frame_ptr")
    # The only table layout a binary search can use in place: 4-byte entries relative to the header.
    if count_enc == PE_OMIT or table_enc != (PE_DATAREL | PE_SDATA4):
        return None
    at = p
    count, p = hr.pointer(p, count_enc, hdr_address + p, addr_size, "fde_count", datarel_base=hdr_address)
    if p + 8 * count > hr.end:
        raise hr.fail(at, "search table of %d entries runs past the end of the section" % count)
    return hr, p, count, hdr_address


class CfiIndex:
    """The CFI coverage of one loaded file: which of its addresses some FDE covers.

    `load` gives the file's CfiSections; it is called on the first query, so nothing is read
    before.  A section that turns out malformed is dropped (logged once); the others still count.
    """

    MEMO_LIMIT = 4096

    def __init__(self, load: Callable[[], Sequence[CfiSection]], log: Optional[Callable[[str], None]] = None):
        self._load: Optional[Callable[[], Sequence[CfiSection]]] = load
        self._sections: Optional[List[CfiSection]] = None
        self._memo: dict = {}
        self.errors: List[str] = []
        self.log = log or (lambda msg: None)

    def sections(self) -> List[CfiSection]:
        if self._sections is None:
            assert self._load is not None
            self._sections = list(self._load())
            self._load = None
        return self._sections

    def find(self, pc: int) -> Optional[CfiRange]:
        """The FDE range covering pc in any of the sections, or None."""
        memo = self._memo
        if pc in memo:
            return memo[pc]
        found = None
        for sec in list(self.sections()):
            try:
                found = sec.find(pc)
            except CfiError as exc:
                self.sections().remove(sec)
                self.errors.append(str(exc))
                self.log("%s; that section counts as no CFI" % exc)
                memo.clear()
                continue
            if found is not None:
                break
        if len(memo) >= self.MEMO_LIMIT:
            memo.clear()
        memo[pc] = found
        return found
