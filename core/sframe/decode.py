"""Bounds-checked decoding of one SFrame section, record by record, on demand.

`Section(data)` checks only the header (O(1)); `fde(i)` and `fres(fde)` decode single records.
Every read is checked against the section first, so malformed input raises SFrameError naming
the byte offset and the rule, and no claimed count is trusted before it is checked against the
bytes that could hold it (memory stays proportional to the section size).
"""

import array
import bisect
import itertools
import operator
import struct
import sys
from typing import Iterator, List, Optional, Tuple

from ..arch import abi as abimod
from ..errors import SFrameError
from . import format as F
from .records import FDE, FRE, Header

RawFRE = Tuple[int, int, bytes]     # (offset, start, info byte and data-word bytes)

# Plain ints for the per-FRE loop (enum lookups cost more than the decoding itself).
_MAX_FDE_TYPE = max(F.FDEType)
_MAX_FRE_TYPE = max(F.FREType)
_START_BYTES = tuple(F.FRE_START_SIZE[t] for t in F.FREType)
_RUN = 1024          # functions read per call in whole-section walks (memory stays bounded)


def parse_header(data: bytes) -> Header:
    """Decode and check the header (preamble, header, auxiliary header, sub-section bounds)."""
    n = len(data)
    if n < F.HEADER_SIZE:
        raise SFrameError(0, "section is %d bytes, shorter than the %d-byte SFrame header" % (n, F.HEADER_SIZE))
    magic = struct.unpack_from("<" + F.MAGIC_FORMAT, data, 0)[0]
    if magic == F.MAGIC:
        e = "<"
    elif magic == F.MAGIC_SWAPPED:
        e = ">"
    else:
        raise SFrameError(0, "bad magic %#06x (expected 0xdee2 in either byte order)" % magic)
    version, flags, abi, fixed_fp, fixed_ra, auxlen = struct.unpack_from(e + F.HEADER_FIELDS_FORMAT, data,
                                                                           F.HEADER_FIELDS_AT)
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
    num_fdes, num_fres, fre_len, fdeoff, freoff = struct.unpack_from(e + F.HEADER_COUNTS_FORMAT, data,
                                                                     F.HEADER_COUNTS_AT)
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

    def __init__(self, data: bytes, section_addr: int = 0):
        self.data = bytes(data)
        self.header = h = parse_header(self.data)
        self.section_addr = section_addr
        self.fde_base = h.size + h.fdeoff
        self.fre_base = h.size + h.freoff
        self.fre_end = self.fre_base + h.fre_len
        self.pcrel = h.has(F.Flag.FDE_FUNC_START_PCREL)
        e = h.endian
        self._start_fmt = struct.Struct(e + F.FDE_START_FORMAT[h.version])
        self._fde_fmt = struct.Struct(e + F.FDE_FORMAT[h.version])
        self._attr_unpack = struct.Struct(e + F.V3_ATTR_FORMAT).unpack_from
        self._v3 = h.version == 3
        self._fres_at = self.fre_base + (F.V3_ATTR_SIZE if self._v3 else 0)   # + fre_off: an FDE's first FRE
        self._start_readers = tuple(_field_reader(self.data, e + F.FRE_START_FORMAT[t]) for t in F.FREType)
        self._words: dict = {}    # info byte -> unpacker of its data words
        self._fde_size = h.fde_size
        self._starts = self._start_view()
        self._samples: Optional[array.array] = None
        self._records = _Records(self)

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
        code = F.FDE_START_FORMAT[h.version]
        width = struct.calcsize(code)
        n = h.num_fdes * h.fde_size
        if n == 0:
            return None
        try:
            return memoryview(self.data)[self.fde_base:self.fde_base + n].cast(code), h.fde_size // width
        except (TypeError, ValueError):
            return None

    @property
    def version(self) -> int:
        return self.header.version

    @property
    def abi(self) -> F.ABI:
        return self.header.abi

    def __len__(self):
        return self.header.num_fdes

    def start_of(self, i: int) -> int:
        """Resolved start address of FDE i without decoding the rest of it (for binary search)."""
        off = self.fde_base + i * self._fde_size
        if self._starts is not None:
            view, stride = self._starts
            field = view[i * stride]
        else:
            field = self._start_fmt.unpack_from(self.data, off)[0]
        return self.section_addr + (off if self.pcrel else 0) + field

    SAMPLE = 32       # every SAMPLE-th FDE's start is in the sample table of start_search

    def _sample(self) -> "array.array":
        """The start address of FDEs 0, SAMPLE, 2 * SAMPLE, ...: made at the first search (in C
        where the start fields can be viewed in place), so that a search bisects it with the
        bisect module and then probes at most SAMPLE - 1 FDEs in Python."""
        n, k = len(self), self.SAMPLE
        base = self.section_addr
        if self._starts is not None:
            view, stride = self._starts
            fields = view[::stride * k]
            if self.pcrel:
                step = k * self._fde_size
                base += self.fde_base
                starts = map(operator.add, fields, range(base, base + len(fields) * step, step))
            else:
                starts = map(operator.add, fields, itertools.repeat(base))
        else:
            starts = map(self.start_of, range(0, n, k))
        table = array.array("Q")
        try:
            table.extend(starts)
        except OverflowError:     # out of the table's range: no sample, every search probes in Python
            table = array.array("Q")
        self._samples = table
        return table

    def start_search(self, pc: int, n: int) -> int:
        """Number of FDEs (in stored order, assumed sorted) whose start is <= pc: a bisect."""
        lo, hi = 0, n
        samples = self._samples
        if samples is None:
            samples = self._sample()
        if samples and len(samples) == (n + self.SAMPLE - 1) // self.SAMPLE:
            j = bisect.bisect_right(samples, pc)
            if j == 0:
                return 0
            lo = (j - 1) * self.SAMPLE + 1
            hi = min(j * self.SAMPLE, n)
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

    def fde(self, i: int) -> FDE:
        if not 0 <= i < self.header.num_fdes:
            raise IndexError(i)
        return FDE._make(self._records.fdes(i, i + 1)[0])

    def fres_start(self, fde: FDE) -> int:
        """Byte offset in the section of FDE's first FRE."""
        return self._fres_at + fde.fre_off

    def raw_fres(self, fde: FDE) -> List[RawFRE]:
        """[(offset, start, info and data-word bytes)] of one FDE's FREs, checked as `records` checks them."""
        return self._records._fres(fde.index, fde.fre_off, fde.num_fres, fde.info & F.FDE_INFO_FRE_TYPE_MASK, fde.size)

    def fres(self, fde: FDE) -> Tuple[FRE, ...]:
        """Decode all FREs of one FDE (a tuple), checking bounds, order and widths."""
        return self._decode_fres(self.raw_fres(fde))

    def decode_fre(self, raw: RawFRE) -> FRE:
        """One FRE of `raw_fres`, decoded."""
        return self._decode_fres([raw])[0]

    def _decode_fres(self, raw: List[RawFRE]) -> Tuple[FRE, ...]:
        words = self._words
        out = []
        for off, start, key in raw:
            info = key[0]
            unpack = words.get(info) or self._words_unpacker(info)
            out.append(FRE(off, start, info, unpack(key, 1)))
        return tuple(out)

    def _words_unpacker(self, info):
        """unpack_from for the data words an FRE info byte announces (made once per info byte)."""
        fmt = struct.Struct(self.header.endian + F.fre_words_format(info)[2])
        unpack = self._words[info] = fmt.unpack_from
        return unpack

    def fdes(self, begin: int = 0, stop: Optional[int] = None) -> Iterator[FDE]:
        """Every FDE (or those numbered begin..stop-1), in stored order (checked as `fde` checks them)."""
        n, new = self.header.num_fdes, tuple.__new__     # (`_fde` gives every field: FDE._make's check spared)
        n = n if stop is None else max(0, min(stop, n))
        for first in range(max(0, begin), n, _RUN):
            for fields in self._records.fdes(first, min(first + _RUN, n)):
                yield new(FDE, fields)

    def records(self) -> Iterator[Tuple[tuple, List[RawFRE]]]:
        """(an FDE record's fields as a plain tuple, its raw FREs) for every function, checked in
        full: each FDE and its FREs, the FDE order when flagged sorted and the FRE total.  The one
        walk over a whole section, shared by `check_all` and the dump."""
        for run in self.runs():
            yield from run

    def runs(self) -> Iterator[List[Tuple[tuple, List[RawFRE]]]]:
        """`records` in runs of up to _RUN functions (lists): memory stays bounded, and a consumer
        as hot as the dump pays the generator once per run."""
        h = self.header
        n = h.num_fdes
        walk = _Walk()
        for first in range(0, n, _RUN):
            yield self._records.walk(first, min(first + _RUN, n), walk)
        if walk.fres != h.num_fres:
            raise SFrameError(0x0C, "the FDEs hold %d FREs, the header says num_fres %d" % (walk.fres, h.num_fres))

    def check_all(self, keep: bool = True) -> List[Tuple[FDE, Tuple[FRE, ...]]]:
        """Decode everything and check what a single lookup cannot: the FRE total and the FDE order.

        Returns [(fde, fres), ...], or with keep=False nothing (memory stays flat: one function's
        records at a time).
        """
        out = []
        decode = self._decode_fres
        for fields, raw in self.records():
            fres = decode(raw)
            if keep:
                out.append((FDE._make(fields), fres))
        return out



class _Walk:
    """What a walk over the whole section carries from one run of functions to the next."""
    __slots__ = ("fres", "previous_start")

    def __init__(self) -> None:
        self.fres = 0                               # FREs of the functions walked so far
        self.previous_start: Optional[int] = None   # the last function's start (the sorted check)


class _Records:
    """The one reader of a section's FDE and FRE records: every bound, type and order is checked
    here, and nowhere else.  The section's constants are bound once, and each entry point reads a
    run of functions, so that a dump pays per run, not per function, and a look-up pays no set-up:

    - `fdes(first, stop)`: the FDE records first..stop-1, as plain tuples of FDE's fields;
    - `_fres(i, fre_off, num, type, size)`: one function's FREs, raw: (offset, start, info and
      data-word bytes) (`Section.raw_fres` takes them from an FDE);
    - `walk(first, stop, state)`: (FDE fields, raw FREs) of first..stop-1, with the checks only a
      walk over the whole section can make (the FRE total, the order when flagged sorted),
      `state` carried from one run to the next.
    """

    def __init__(self, section: "Section"):
        h = section.header
        self.data, self.fre_end = section.data, section.fre_end
        self.fre_base, self.fre_len, self.fres_at = section.fre_base, h.fre_len, section._fres_at
        self.v3, self.has_rep = section._v3, h.version >= 2
        self.addr, self.pcrel, self.attr_unpack = section.section_addr, section.pcrel, section._attr_unpack
        self.fde_base, self.fde_size, self.fde_format = section.fde_base, h.fde_size, section._fde_fmt.format
        self.start_readers = section._start_readers
        self.num_fres, self.sorted = h.num_fres, h.has(F.Flag.FDE_SORTED)

    def fdes(self, first: int, stop: int) -> List[tuple]:
        check = self._fde
        off, size = self.fde_base + first * self.fde_size, self.fde_size
        out = []
        for i, vals in enumerate(struct.iter_unpack(self.fde_format, self.data[off:self.fde_base + stop * size]), first):
            out.append(check(i, off, vals))
            off += size
        return out

    def walk(self, first: int, stop: int, state: _Walk) -> List[Tuple[tuple, List[RawFRE]]]:
        check, read_fres = self._fde, self._fres
        type_mask, num_fres, flagged = F.FDE_INFO_FRE_TYPE_MASK, self.num_fres, self.sorted
        off, size = self.fde_base + first * self.fde_size, self.fde_size
        out = []
        for i, vals in enumerate(struct.iter_unpack(self.fde_format, self.data[off:self.fde_base + stop * size]), first):
            fields = check(i, off, vals)
            _, _, _, start, fsize, fre_off, num, info = fields[:8]
            raw = read_fres(i, fre_off, num, info & type_mask, fsize)
            state.fres += num
            if state.fres > num_fres:
                raise SFrameError(0x0C, "the FDEs hold more FREs than the header's num_fres %d" % num_fres)
            if flagged and state.previous_start is not None and start < state.previous_start:
                raise SFrameError(off, "FDE %d starts at %#x, before FDE %d (%#x), though the section is "
                                       "flagged sorted" % (i, start, i - 1, state.previous_start))
            state.previous_start = start
            out.append((fields, raw))
            off += size
        return out

    def _fde(self, i: int, off: int, vals: tuple) -> tuple:
        """FDE i's fields (FDE's order) from its record at `off` (V3: and its attribute record), checked."""
        start_field, size, fre_off = vals[0], vals[1], vals[2]
        start = self.addr + (off if self.pcrel else 0) + start_field
        if self.v3:
            if fre_off + F.V3_ATTR_SIZE > self.fre_len:
                raise SFrameError(off + 12, "FDE %d: attribute record at FRE offset %#x overruns "
                                            "fre_len %#x" % (i, fre_off, self.fre_len))
            attr = self.fre_base + fre_off
            num, info, info2, rep = self.attr_unpack(self.data, attr)
            pad = 0
            if info2 & F.FDE_INFO2_TYPE_MASK > _MAX_FDE_TYPE:
                raise SFrameError(attr + 3, "FDE %d: unknown FDE type %d" % (i, info2 & F.FDE_INFO2_TYPE_MASK))
            info_off = attr + 2
        else:
            num, info = vals[3], vals[4]
            info2 = 0
            rep, pad = (vals[5], vals[6]) if self.has_rep else (0, 0)
            if fre_off > self.fre_len:
                raise SFrameError(off + 8, "FDE %d: start_fre_off %#x is beyond fre_len %#x" % (i, fre_off, self.fre_len))
            info_off = off + 16
        stype = info & F.FDE_INFO_FRE_TYPE_MASK
        if stype > _MAX_FRE_TYPE:
            raise SFrameError(info_off, "FDE %d: invalid FRE type %d" % (i, stype))
        if rep == 0 and (info >> F.FDE_INFO_PCTYPE_BIT) & 1 and self.has_rep:
            raise SFrameError(info_off + 2 if self.v3 else off + 17, "FDE %d: PC type MASK with repetition block size 0" % i)
        return (i, off, start_field, start, size, fre_off, num, info, info2, rep, pad)

    def _fres(self, i: int, fre_off: int, num: int, stype: int, size: int) -> List[RawFRE]:
        """FDE i's `num` FREs of start type `stype`, raw, checked: inside fre_len, valid data-word
        sizes, starts increasing and within the function's `size`."""
        data, end = self.data, self.fre_end
        pos = self.fres_at + fre_off
        ssize = _START_BYTES[stype]
        if num * (ssize + 1) > end - pos:
            raise SFrameError(pos, "FDE %d: %d FREs cannot fit in the %d bytes left of fre_len"
                              % (i, num, max(end - pos, 0)))
        read_start, data_bytes = self.start_readers[stype], F.FRE_DATA_BYTES
        raw: List[RawFRE] = []
        prev = -1
        for _ in range(num):
            q = pos + ssize
            if q >= end:
                self._bad_fre(i, stype, size, len(raw), pos, prev)
            n = data_bytes[data[q]]
            if n is None:
                self._bad_fre(i, stype, size, len(raw), pos, prev)
            r = q + 1 + n
            fre_start = read_start(pos)
            if r > end or fre_start > size or fre_start <= prev:
                self._bad_fre(i, stype, size, len(raw), pos, prev)
            raw.append((pos, fre_start, data[q:r]))
            prev = fre_start
            pos = r
        return raw

    def _bad_fre(self, i: int, stype: int, size: int, k: int, pos: int, prev: int) -> None:
        """Raise the error of FDE i's FRE k at pos, which failed `_fres`' checks (the slow path)."""
        end, data = self.fre_end, self.data
        ssize = _START_BYTES[stype]
        if pos + ssize + 1 > end:
            raise SFrameError(pos, "FDE %d: FRE %d overruns fre_len" % (i, k))
        info = data[pos + ssize]
        n = F.FRE_DATA_BYTES[info]
        if n is None:
            raise SFrameError(pos + ssize, "FDE %d: FRE %d has invalid data-word size code %d"
                              % (i, k, (info >> F.FRE_INFO_SIZE_SHIFT) & F.FRE_INFO_SIZE_MASK))
        if pos + ssize + 1 + n > end:
            count = (info >> F.FRE_INFO_COUNT_SHIFT) & F.FRE_INFO_COUNT_MASK
            raise SFrameError(pos, "FDE %d: FRE %d's %d data words overrun fre_len" % (i, k, count))
        start = self.start_readers[stype](pos)
        if start > size:
            raise SFrameError(pos, "FDE %d: FRE %d starts at %#x, beyond the function size %#x"
                              % (i, k, start, size))
        raise SFrameError(pos, "FDE %d: FRE %d start %#x does not increase (previous %#x)" % (i, k, start, prev))


def _field_reader(data, fmt):
    """read(pos) -> the value of struct format `fmt` at pos in data (one byte: a plain index)."""
    if struct.calcsize(fmt) == 1:
        return data.__getitem__
    unpack = struct.Struct(fmt).unpack_from
    return lambda pos: unpack(data, pos)[0]
