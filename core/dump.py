"""Text dump of an SFrame section in the layout of binutils 2.47's `readelf --sframe`.

`dump(data, addr)` gives, byte for byte, what `readelf --sframe` of binutils 2.47 prints for a
V2 or V3 section loaded at `addr` (trailing spaces and blank lines included).  2.47 refuses V1
sections; for those the same layout is used, with the table rows (start PC, CFA, FP, RA) as the
V1-era readelf (binutils 2.40) prints them.  The rules below were learnt by feeding real and
synthetic sections to those readelf builds (tests/test_dump.py compares them byte for byte).

Header: "Flags:" lists the set flags one per line (or NONE); "CFA fixed FP/RA offset" lines only
when the offset is non-zero; the auxiliary header is not shown.

Function line: the size is printed as a signed 32-bit int; then `, attr = "S"` (FDE info bit 7,
whatever the version), `"F"` (V3 flex FDE) or `"SF"`, then `, pauth = B key` (AArch64 ABIs only).
`STARTPC[m]` for PC-type MASK FDEs, whose rows show the raw FRE start offset, not an address.

Row columns: CFA `%-10s`, FP `%-10s`, RA `%-13s` of the RA text followed by `[s]` (mangled RA)
or three spaces; longer texts push the next column right.  An FRE without data words prints
"RA undefined" instead of the three columns (V1 too: 2.40 prints garbage for it).
  default FDEs (V2/V3): CFA `sp+N`/`fp+N` (N printed with `%d`, so `sp+-20`; on s390x the stored
    offset is decoded, * 8 + 160, wrapping around in 32 bits as readelf does).  RA: `f` when the
    header has a fixed RA offset, else word 1 as `c+N`/`c-N`, `U` for a 0 word (RA padding), `u`
    without it.  FP: `c+N` of the header's fixed FP offset when non-zero, else the next word, `u`
    without it.  V2 s390x: an odd FP/RA word (or odd fixed FP offset) is a DWARF register number,
    printed `r<word >> 1>`.  Words after the third are ignored.
  flex FDEs (V3): pairs (control word, offset word) for CFA, RA, FP.  A rule prints as
    `<base><%+d offset>`, in parentheses when dereferenced; the base is `sp`/`fp` for the ABI's
    SP/FP DWARF numbers, `r<n>` for other registers, `c` when the control word has no register
    bit (the dereference bit is then not shown).  The CFA offset is decoded on s390x as above.
    An RA control word of 0 prints `U` and moves the FP pair one word earlier; without RA words,
    RA prints as for default FDEs (`f`/`u`); without FP words, FP prints `u`.  A control word
    whose offset word is missing takes the header's fixed offset (RA: -1 if none; FP: `u`).
  V1, as 2.40 prints it: RA `u` when the header has a fixed RA offset, else word 1 as `c+N`
    (0 too); FP `u` when the header has a fixed FP offset, else the next word; no s390x decoding.

Malformed input raises core.errors.SFrameError: everything the decoder rejects (with the
decoder's own error, which takes precedence), and FREs that readelf cannot print: more data words than libsframe accepts
(6; V1: 3), for which readelf silently prints the previous row again, and flex FREs with a single
data word, on which readelf aborts.
"""

import struct

from . import abi as abimod
from . import format as F
from .decode import Section
from .errors import SFrameError

_M64 = (1 << 64) - 1
_VERSION_NAMES = {1: "SFRAME_VERSION_1", 2: "SFRAME_VERSION_2", 3: "SFRAME_VERSION_3"}
_FLAG_NAMES = ((F.Flag.FDE_SORTED, "SFRAME_F_FDE_SORTED"),
               (F.Flag.FRAME_POINTER, "SFRAME_F_FRAME_POINTER"),
               (F.Flag.FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL"))
_ROW = "    %016x  %s"
_FUNC = "    func idx [%d]: pc = 0x%x, size = %d bytes%s"
# A function's heading: blank line, function line, column titles.
_HEAD = "\n" + _FUNC + "\n    STARTPC%s      CFA       FP        RA           "
_UNDEFINED = "RA undefined"
_WORD_CODES = {1: "b", 2: "h", 4: "i"}
_MAX_WORDS = {1: 3, 2: 6, 3: 6}    # more and libsframe refuses the FRE (readelf repeats the previous row)
_BAD = 1 << 40                     # "bytes of data words" for an invalid data-word size code: overruns any section
_AARCH64 = (F.ABI.AARCH64_ENDIAN_BIG, F.ABI.AARCH64_ENDIAN_LITTLE)

# Per FRE info byte: number of data-word bytes after it (_BAD for the invalid size code 3, even
# without words, as the decoder rejects it).
_WORD_BYTES = [_BAD if (i >> F.FRE_INFO_SIZE_SHIFT) & 3 == 3 else
               ((i >> F.FRE_INFO_COUNT_SHIFT) & F.FRE_INFO_COUNT_MASK) * (1, 2, 4)[(i >> F.FRE_INFO_SIZE_SHIFT) & 3]
               for i in range(256)]


def header_lines(header, name=".sframe"):
    """The lines before the first function, as a list (no newlines)."""
    h = header
    flags = [n for f, n in _FLAG_NAMES if h.flags & f] or ["NONE"]
    out = ["Contents of the SFrame section %s:" % name,
           "  Header :",
           "",
           "    Version: %s" % _VERSION_NAMES[h.version],
           "    Flags: " + ",\n           ".join(flags)]
    if h.cfa_fixed_fp_offset:
        out.append("    CFA fixed FP offset: %d" % h.cfa_fixed_fp_offset)
    if h.cfa_fixed_ra_offset:
        out.append("    CFA fixed RA offset: %d" % h.cfa_fixed_ra_offset)
    out += ["    Num FDEs: %d" % h.num_fdes,
            "    Num FREs: %d" % h.num_fres,
            "",
            "  Function Index :"]
    return out


def function_suffix(header, info, info2=0):
    """What follows `size = N bytes` on a function line: attr and pauth, from the FDE info bytes."""
    attr = ""
    if (info >> F.FDE_INFO_SIGNAL_BIT) & 1:
        attr = "S"
    if header.version == 3 and (info2 & F.FDE_INFO2_TYPE_MASK) == F.FDEType.FLEX:
        attr += "F"
    s = ', attr = "%s"' % attr if attr else ""
    if header.abi in _AARCH64 and (info >> F.FDE_INFO_PAUTH_BIT) & 1:
        s += ", pauth = B key"
    return s


class _RowText:
    """Turns an FRE's info byte and data-word bytes into its CFA/FP/RA columns, memoized.

    Rows repeat a lot (the same prologue in every function), so the text is computed once per
    distinct (info byte, data words) byte string and per FDE kind (default or flex).
    """

    def __init__(self, header):
        self.h = header
        self.e = header.endian
        a = abimod.info(header.abi)
        self.s390x = header.abi is F.ABI.S390X_ENDIAN_BIG
        self.names = {a.sp: "sp", a.fp: "fp"}
        self.default = {}
        self.flex = {}

    def words(self, key, offset):
        info = key[0]
        count = (info >> F.FRE_INFO_COUNT_SHIFT) & F.FRE_INFO_COUNT_MASK
        wsize = (1, 2, 4)[(info >> F.FRE_INFO_SIZE_SHIFT) & 3]
        if count > _MAX_WORDS[self.h.version]:
            raise SFrameError(offset, "FRE with %d data words: readelf (libsframe) accepts at most %d"
                              % (count, _MAX_WORDS[self.h.version]))
        return info, wsize, struct.unpack(self.e + "%d%s" % (count, _WORD_CODES[wsize]), key[1:])

    @staticmethod
    def columns(cfa, fp, ra, info):
        return "%-10s%-10s%-13s" % (cfa, fp, ra + ("[s]" if (info >> F.FRE_INFO_MANGLED_BIT) & 1 else "   "))

    def cfa_offset(self, w):
        if not self.s390x:
            return w
        # readelf decodes in 32-bit int arithmetic: the result wraps around.
        v = (w * F.S390X_CFA_OFFSET_ALIGNMENT_FACTOR - F.S390X_CFA_OFFSET_ADJUSTMENT) & 0xFFFFFFFF
        return v - (1 << 32) if v & 0x80000000 else v

    def default_text(self, key, offset):
        info, _, w = self.words(key, offset)
        n = len(w)
        if n == 0:
            return _UNDEFINED
        h = self.h
        base = "sp" if (info >> F.FRE_INFO_BASE_BIT) & 1 else "fp"
        if h.version == 1:
            return self.columns("%s+%d" % (base, w[0]), *self._v1_fp_ra(w), info)
        cfa = "%s+%d" % (base, self.cfa_offset(w[0]))
        regs = h.version == 2 and self.s390x     # V2 s390x: odd words are DWARF registers
        if h.cfa_fixed_ra_offset:
            ra, idx = "f", 1
        else:
            idx = 2
            if n > 1:
                x = w[1]
                ra = "U" if x == 0 else "r%d" % (x >> 1) if regs and x & 1 else "c%+d" % x
            else:
                ra = "u"
        x = h.cfa_fixed_fp_offset
        if x:
            fp = "r%d" % (x >> 1) if regs and x & 1 else "c%+d" % x
        elif n > idx:
            x = w[idx]
            fp = "r%d" % (x >> 1) if regs and x & 1 else "c%+d" % x
        else:
            fp = "u"
        return self.columns(cfa, fp, ra, info)

    def _v1_fp_ra(self, w):
        h = self.h
        n = len(w)
        if h.cfa_fixed_ra_offset:
            ra, idx = "u", 1
        else:
            ra, idx = ("c%+d" % w[1] if n > 1 else "u"), 2
        fp = "c%+d" % w[idx] if not h.cfa_fixed_fp_offset and n > idx else "u"
        return fp, ra

    def rule(self, ctrl, off):
        if ctrl & F.FLEX_REG_P:
            reg = ctrl >> F.FLEX_REGNUM_SHIFT
            s = "%s%+d" % (self.names.get(reg) or "r%d" % reg, off)
            return "(%s)" % s if ctrl & F.FLEX_DEREF_P else s
        return "c%+d" % off

    def flex_text(self, key, offset):
        info, wsize, w = self.words(key, offset)
        n = len(w)
        if n == 0:
            return _UNDEFINED
        if n == 1:
            raise SFrameError(offset, "flex FRE with a single data word: the CFA rule needs a control and an "
                                      "offset word (readelf aborts on it)")
        h = self.h
        mask = (1 << (8 * wsize)) - 1
        cfa = self.rule(w[0] & mask, self.cfa_offset(w[1]))
        fp = "u"
        if n == 2:
            ra = "f" if h.cfa_fixed_ra_offset else "u"
        else:
            ctrl = w[2] & mask
            if ctrl == 0:
                ra, idx = "U", 3
            else:
                ra = self.rule(ctrl, w[3] if n > 3 else h.cfa_fixed_ra_offset or -1)
                idx = 4
            if n > idx:
                ctrl = w[idx] & mask
                if n > idx + 1:
                    fp = self.rule(ctrl, w[idx + 1])
                elif h.cfa_fixed_fp_offset:
                    fp = self.rule(ctrl, h.cfa_fixed_fp_offset)
        return self.columns(cfa, fp, ra, info)


def _decoder_error(sec, i, offset):
    """Let the decoder raise its own error for FDE i (or the whole section); it must raise."""
    fde = sec.fde(i)
    sec.fres(fde)
    sec.check_all()
    raise SFrameError(offset, "FDE %d: malformed (decoder disagreement)" % i)   # not reached


def dump(section_data, section_addr, name=".sframe"):
    """The `readelf --sframe` text of one SFrame section loaded at section_addr (a str)."""
    sec = Section(section_data, section_addr)
    h = sec.header
    out = header_lines(h, name)
    data = sec.data
    e = h.endian
    ver = h.version
    nfdes = h.num_fdes
    fde_base = sec.fde_base
    fre_base = sec.fre_base
    fre_end = sec.fre_end
    fre_len = h.fre_len
    fde_size = h.fde_size
    pcrel = sec.pcrel
    sorted_flag = h.has(F.Flag.FDE_SORTED)
    rt = _RowText(h)
    caches = (rt.default, rt.flex)
    texts = (rt.default_text, rt.flex_text)
    word_bytes = _WORD_BYTES
    suffixes = {}
    readers = (data.__getitem__,
               lambda p, u=struct.Struct(e + "H").unpack_from: u(data, p)[0],
               lambda p, u=struct.Struct(e + "I").unpack_from: u(data, p)[0])
    attr_fmt = struct.Struct(e + "HBBB").unpack_from
    recs = struct.iter_unpack(e + {1: "iIIIB", 2: "iIIIBBH", 3: "qII"}[ver],
                              data[fde_base:fde_base + nfdes * fde_size])
    append = out.append
    # Loop constants as plain local ints (module and enum lookups cost more than the work).
    ATTR, TYPE_MASK, FLEX = F.V3_ATTR_SIZE, F.FDE_INFO2_TYPE_MASK, int(F.FDEType.FLEX)
    FRE_TYPE_MASK, PCTYPE_BIT, ADDR4 = F.FDE_INFO_FRE_TYPE_MASK, F.FDE_INFO_PCTYPE_BIT, int(F.FREType.ADDR4)
    head, row, m64, start_sizes = _HEAD, _ROW, _M64, (1, 2, 4)
    num_fres_total = h.num_fres
    total = 0
    prev_start = None
    unprintable = None
    for i, rec in enumerate(recs):
        off = fde_base + i * fde_size
        field, size, fre_off = rec[0], rec[1], rec[2]
        start = section_addr + (off if pcrel else 0) + field
        info2 = 0
        if ver == 3:
            if fre_off + ATTR > fre_len:
                _decoder_error(sec, i, off)
            num_fres, info, info2, rep = attr_fmt(data, fre_base + fre_off)
            if info2 & TYPE_MASK > FLEX:
                _decoder_error(sec, i, off)
            pos = fre_base + fre_off + ATTR
        else:
            num_fres, info = rec[3], rec[4]
            rep = rec[5] if ver == 2 else 16     # V1 has no rep_size field: MASK needs none
            if fre_off > fre_len:
                _decoder_error(sec, i, off)
            pos = fre_base + fre_off
        ftype = info & FRE_TYPE_MASK
        mask = (info >> PCTYPE_BIT) & 1
        if ftype > ADDR4 or (mask and rep == 0):
            _decoder_error(sec, i, off)
        if sorted_flag and prev_start is not None and start < prev_start:
            _decoder_error(sec, i, off)
        prev_start = start
        total += num_fres
        if total > num_fres_total:
            _decoder_error(sec, i, off)
        sk = (info, info2)
        suffix = suffixes.get(sk)
        if suffix is None:
            suffix = suffixes[sk] = function_suffix(h, info, info2)
        # readelf prints the size with %d: as a signed 32-bit int.
        append(head % (i, start & m64, size - (size >> 31 << 32), suffix, "[m]" if mask else "   "))
        ssize = start_sizes[ftype]
        if num_fres * (ssize + 1) > fre_end - pos:
            _decoder_error(sec, i, off)
        flex = int(ver == 3 and (info2 & TYPE_MASK) == FLEX)
        cache = caches[flex]
        text = texts[flex]
        rd = readers[ftype]
        base = 0 if mask else start
        prev = -1
        for _ in range(num_fres):
            q = pos + ssize
            if q >= fre_end:
                _decoder_error(sec, i, off)
            st = rd(pos)
            r = q + 1 + word_bytes[data[q]]
            if r > fre_end or st > size or st <= prev:
                _decoder_error(sec, i, off)
            prev = st
            key = data[q:r]
            t = cache.get(key)
            if t is None:
                try:
                    t = cache[key] = text(key, pos)
                except SFrameError as exc:      # unprintable: raised once the decoder's checks passed
                    unprintable = unprintable or exc
                    t = ""
            append(row % ((base + st) & m64, t))
            pos = r
    if total != h.num_fres:
        sec.check_all()
        raise SFrameError(0x0C, "the FDEs hold %d FREs, the header says num_fres %d" % (total, h.num_fres))
    if unprintable:
        raise unprintable
    out.append("")
    return "\n".join(out)


def dump_file(path, name=None):
    """`readelf --sframe` text for the SFrame section of the ELF file at path."""
    from .elf import ElfImage
    sf = ElfImage(path).require_sframe()
    return dump(sf.data, sf.address, name or sf.name)
