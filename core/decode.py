"""Bounds-checked decoding of one SFrame section, record by record, on demand.

`Section(data)` checks only the header (O(1)); `fde(i)` and `fres(fde)` decode single records.
Every read is checked against the section first, so malformed input raises SFrameError naming
the byte offset and the rule, and no claimed count is trusted before it is checked against the
bytes that could hold it (memory stays proportional to the section size).
"""

import struct
import sys

from . import abi as abimod
from . import format as F
from .errors import SFrameError
from .records import FDE, FRE, Header

_WORD_CODES = {1: "b", 2: "h", 4: "i"}
_START_CODES = {F.FREType.ADDR1: "B", F.FREType.ADDR2: "H", F.FREType.ADDR4: "I"}
# Plain ints for the per-FRE loop (enum lookups cost more than the decoding itself).
_MAX_FDE_TYPE = max(F.FDEType)
_MAX_FRE_TYPE = max(F.FREType)
_WORD_BYTES = (1, 2, 4)          # by data-word size code; code 3 is invalid


def parse_header(data):
    """Decode and check the header (preamble, header, auxiliary header, sub-section bounds)."""
    n = len(data)
    if n < F.HEADER_SIZE:
        raise SFrameError(0, "section is %d bytes, shorter than the %d-byte SFrame header" % (n, F.HEADER_SIZE))
    magic = struct.unpack_from("<H", data, 0)[0]
    if magic == F.MAGIC:
        e = "<"
    elif magic == 0xE2DE:
        e = ">"
    else:
        raise SFrameError(0, "bad magic %#06x (expected 0xdee2 in either byte order)" % magic)
    version, flags, abi, fixed_fp, fixed_ra, auxlen = struct.unpack_from(e + "BBBbbB", data, 2)
    if version not in (1, 2, 3):
        raise SFrameError(2, "unknown version %d (known: 1, 2, 3)" % version)
    unknown = flags & ~int(F.ALLOWED_FLAGS[version]) & 0xFF
    if unknown:
        raise SFrameError(3, "unknown flag bits %#04x for version %d" % (unknown, version))
    try:
        abi = F.ABI(abi)
    except ValueError:
        raise SFrameError(4, "unknown ABI/arch identifier %d" % abi) from None
    abi_big = abimod.BY_ABI[abi].big_endian
    if abi_big != (e == ">"):
        raise SFrameError(0, "magic says %s-endian but ABI %s is %s-endian" % (
            "big" if e == ">" else "little", abi.name, "big" if abi_big else "little"))
    num_fdes, num_fres, fre_len, fdeoff, freoff = struct.unpack_from(e + "5I", data, 8)
    hsize = F.HEADER_SIZE + auxlen
    if hsize > n:
        raise SFrameError(7, "auxiliary header of %d bytes runs past the end of the %d-byte section" % (auxlen, n))
    if hsize + fdeoff > n:
        raise SFrameError(0x14, "fdeoff %#x points past the end of the section" % fdeoff)
    if hsize + freoff > n:
        raise SFrameError(0x18, "freoff %#x points past the end of the section" % freoff)
    if fdeoff > freoff:
        raise SFrameError(0x14, "fdeoff %#x is beyond freoff %#x" % (fdeoff, freoff))
    if hsize + freoff + fre_len > n:
        raise SFrameError(0x10, "fre_len %#x runs past the end of the section (FRE sub-section at %#x, section %#x bytes)"
                          % (fre_len, hsize + freoff, n))
    fde_size = F.FDE_SIZE[version]
    if num_fdes * fde_size > freoff - fdeoff:
        raise SFrameError(0x08, "%d FDEs of %d bytes overrun the FRE sub-section (only %d bytes between fdeoff and freoff)"
                          % (num_fdes, fde_size, freoff - fdeoff))
    if num_fres * 2 > fre_len:
        raise SFrameError(0x0C, "%d FREs cannot fit in fre_len %d (an FRE takes at least 2 bytes)" % (num_fres, fre_len))
    return Header(version, flags, abi, fixed_fp, fixed_ra, auxlen, num_fdes, num_fres, fre_len,
                  fdeoff, freoff, e == ">", bytes(data[F.HEADER_SIZE:hsize]))


class Section:
    """A lazily decoded SFrame section.

    `section_addr` is the address the section is loaded at (link-time address in the ELF file,
    plus a load bias at run time); FDE start addresses are resolved against it.
    """

    def __init__(self, data, section_addr=0):
        self.data = bytes(data)
        self.header = h = parse_header(self.data)
        self.section_addr = section_addr
        self.fde_base = h.size + h.fdeoff
        self.fre_base = h.size + h.freoff
        self.fre_end = self.fre_base + h.fre_len
        self.pcrel = h.has(F.Flag.FDE_FUNC_START_PCREL)
        e = h.endian
        self._start_fmt = struct.Struct(e + ("q" if h.version == 3 else "i"))
        self._fde_fmt = struct.Struct(e + {1: "iIIIB", 2: "iIIIBBH", 3: "qII"}[h.version])
        self._attr_fmt = struct.Struct(e + "HBBB")
        self._fde_size = h.fde_size
        self._starts = self._start_view()

    def _start_view(self):
        """A zero-copy view of the raw start fields (element stride), when the layout allows one.

        Native byte order and a record size that is a multiple of the field size (V2: 20/4,
        V3: 16/8) let a memoryview cast index the fields directly: a binary search then reads
        one element per probe instead of calling struct.  Otherwise (V1's 17-byte records, a
        foreign byte order) start_of falls back to struct.
        """
        h = self.header
        if h.version == 1 or h.big_endian != (sys.byteorder == "big"):
            return None
        code, width = ("q", 8) if h.version == 3 else ("i", 4)
        n = h.num_fdes * h.fde_size
        if n == 0:
            return None
        try:
            return memoryview(self.data)[self.fde_base:self.fde_base + n].cast(code), h.fde_size // width
        except (TypeError, ValueError):
            return None

    @property
    def version(self):
        return self.header.version

    @property
    def abi(self):
        return self.header.abi

    def __len__(self):
        return self.header.num_fdes

    def start_of(self, i):
        """Resolved start address of FDE i without decoding the rest of it (for binary search)."""
        off = self.fde_base + i * self._fde_size
        if self._starts is not None:
            view, stride = self._starts
            field = view[i * stride]
        else:
            field = self._start_fmt.unpack_from(self.data, off)[0]
        return self.section_addr + (off if self.pcrel else 0) + field

    def start_search(self, pc, n):
        """Number of FDEs (in stored order, assumed sorted) whose start is <= pc: a bisect."""
        lo, hi = 0, n
        base = self.section_addr
        size = self._fde_size
        if self.pcrel:
            base += self.fde_base
        else:
            size = 0
        if self._starts is not None:
            view, stride = self._starts
            while lo < hi:
                mid = (lo + hi) >> 1
                if base + mid * size + view[mid * stride] <= pc:
                    lo = mid + 1
                else:
                    hi = mid
            return lo
        unpack = self._start_fmt.unpack_from
        data = self.data
        fde_base, rec = self.fde_base, self._fde_size
        while lo < hi:
            mid = (lo + hi) >> 1
            if base + mid * size + unpack(data, fde_base + mid * rec)[0] <= pc:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def fde(self, i):
        h = self.header
        if not 0 <= i < h.num_fdes:
            raise IndexError(i)
        off = self.fde_base + i * h.fde_size
        vals = self._fde_fmt.unpack_from(self.data, off)
        start_field, size, fre_off = vals[0], vals[1], vals[2]
        start = self.section_addr + (off if self.pcrel else 0) + start_field
        info2 = rep = pad = 0
        if h.version == 3:
            attr = self.fre_base + fre_off
            if fre_off > h.fre_len or fre_off + F.V3_ATTR_SIZE > h.fre_len:
                raise SFrameError(off + 12, "FDE %d: attribute record at FRE offset %#x overruns fre_len %#x"
                                  % (i, fre_off, h.fre_len))
            num_fres, info, info2, rep = self._attr_fmt.unpack_from(self.data, attr)
            info_off, rep_off = attr + 2, attr + 4
            ftype = info2 & F.FDE_INFO2_TYPE_MASK
            if ftype > _MAX_FDE_TYPE:
                raise SFrameError(attr + 3, "FDE %d: unknown FDE type %d" % (i, ftype))
        else:
            num_fres, info = vals[3], vals[4]
            info_off, rep_off = off + 16, off + 17
            if h.version == 2:
                rep, pad = vals[5], vals[6]
            if fre_off > h.fre_len:
                raise SFrameError(off + 8, "FDE %d: start_fre_off %#x is beyond fre_len %#x" % (i, fre_off, h.fre_len))
        if info & F.FDE_INFO_FRE_TYPE_MASK > _MAX_FRE_TYPE:
            raise SFrameError(info_off, "FDE %d: invalid FRE type %d" % (i, info & F.FDE_INFO_FRE_TYPE_MASK))
        if (info >> F.FDE_INFO_PCTYPE_BIT) & 1 and h.version >= 2 and rep == 0:
            raise SFrameError(rep_off, "FDE %d: PC type MASK with repetition block size 0" % i)
        return FDE(i, off, start_field, start, size, fre_off, num_fres, info, info2, rep, pad)

    def fres_start(self, fde):
        """Byte offset in the section of FDE's first FRE."""
        return self.fre_base + fde.fre_off + (F.V3_ATTR_SIZE if self.header.version == 3 else 0)

    def fres(self, fde):
        """Decode all FREs of one FDE (a tuple), checking bounds, order and widths."""
        data = self.data
        e = self.header.endian
        pos = self.fres_start(fde)
        end = self.fre_end
        stype = fde.fre_type
        ssize = F.FRE_START_SIZE[stype]
        if fde.num_fres * (ssize + 1) > end - pos:
            raise SFrameError(pos, "FDE %d: %d FREs cannot fit in the %d bytes left of fre_len"
                              % (fde.index, fde.num_fres, max(end - pos, 0)))
        sfmt = e + _START_CODES[stype]
        out = []
        prev = -1
        for k in range(fde.num_fres):
            fre_off = pos
            if pos + ssize + 1 > end:
                raise SFrameError(pos, "FDE %d: FRE %d overruns fre_len" % (fde.index, k))
            start = struct.unpack_from(sfmt, data, pos)[0]
            info = data[pos + ssize]
            pos += ssize + 1
            wcode = (info >> F.FRE_INFO_SIZE_SHIFT) & F.FRE_INFO_SIZE_MASK
            if wcode > 2:
                raise SFrameError(pos - 1, "FDE %d: FRE %d has invalid data-word size code %d" % (fde.index, k, wcode))
            wsize = _WORD_BYTES[wcode]
            count = (info >> F.FRE_INFO_COUNT_SHIFT) & F.FRE_INFO_COUNT_MASK
            if pos + count * wsize > end:
                raise SFrameError(fre_off, "FDE %d: FRE %d's %d data words overrun fre_len" % (fde.index, k, count))
            words = struct.unpack_from("%s%d%s" % (e, count, _WORD_CODES[wsize]), data, pos) if count else ()
            pos += count * wsize
            if start > fde.size:
                raise SFrameError(fre_off, "FDE %d: FRE %d starts at %#x, beyond the function size %#x"
                                  % (fde.index, k, start, fde.size))
            if start <= prev:
                raise SFrameError(fre_off, "FDE %d: FRE %d start %#x does not increase (previous %#x)"
                                  % (fde.index, k, start, prev))
            prev = start
            out.append(FRE(fre_off, start, info, words))
        return tuple(out)



    def fdes(self):
        for i in range(self.header.num_fdes):
            yield self.fde(i)

    def check_all(self, keep=True):
        """Decode everything and check what a single lookup cannot: the FRE total and the FDE order.

        Returns [(fde, fres), ...], or with keep=False nothing (memory stays flat: one function's
        records at a time).
        """
        h = self.header
        out = []
        total = 0
        prev = None
        for fde in self.fdes():
            fres = self.fres(fde)
            total += len(fres)
            if total > h.num_fres:
                raise SFrameError(0x0C, "the FDEs hold more FREs than the header's num_fres %d" % h.num_fres)
            if prev is not None and h.has(F.Flag.FDE_SORTED) and fde.start < prev.start:
                raise SFrameError(fde.offset, "FDE %d starts at %#x, before FDE %d (%#x), though the section is flagged sorted"
                                  % (fde.index, fde.start, prev.index, prev.start))
            prev = fde
            if keep:
                out.append((fde, fres))
        if total != h.num_fres:
            raise SFrameError(0x0C, "the FDEs hold %d FREs, the header says num_fres %d" % (total, h.num_fres))
        return out
