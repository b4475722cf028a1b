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
from typing import List, Optional

from ..arch import abi as abimod
from ..errors import SFrameError
from ..sframe import format as F
from ..sframe.decode import Section
from ..sframe.records import Header

_VERSION_NAMES = {1: "SFRAME_VERSION_1", 2: "SFRAME_VERSION_2", 3: "SFRAME_VERSION_3"}
_FLAG_NAMES = ((F.Flag.FDE_SORTED, "SFRAME_F_FDE_SORTED"),
               (F.Flag.FRAME_POINTER, "SFRAME_F_FRAME_POINTER"),
               (F.Flag.FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL"))
_ROW = "    %016x  %s"
# A function's heading: blank line, function line (index, pc, size, then attributes), column
# titles (STARTPC[m] for PC-type MASK).  Filled once per kind of function with the attributes and
# the [m] mark: what remains are the index, pc and size.
_HEAD = ("\n    func idx [%%d]: pc = 0x%%x, size = %%d bytes%s"
         "\n    STARTPC%s      CFA       FP        RA           ")
_UNDEFINED = "RA undefined"
_MAX_WORDS = {1: 3, 2: 6, 3: 6}    # more and libsframe refuses the FRE (readelf repeats the previous row)


def header_lines(header: Header, name: str = ".sframe") -> List[str]:
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


def function_suffix(header: Header, info: int, info2: int = 0) -> str:
    """What follows `size = N bytes` on a function line: attr and pauth, from the FDE info bytes."""
    attr = ""
    if (info >> F.FDE_INFO_SIGNAL_BIT) & 1:
        attr = "S"
    if header.version == 3 and (info2 & F.FDE_INFO2_TYPE_MASK) == F.FDEType.FLEX:
        attr += "F"
    s = ', attr = "%s"' % attr if attr else ""
    if abimod.info(header.abi).pointer_auth and (info >> F.FDE_INFO_PAUTH_BIT) & 1:
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
        self.abi = a = abimod.info(header.abi)
        self.names = {a.sp: "sp", a.fp: "fp"}
        # V2 s390x: odd slot words are DWARF registers.
        self.slot_regs = header.version == 2 and a.sframe_slot_registers
        self.default = {}
        self.flex = {}

    def words(self, key, offset):
        info = key[0]
        count, wsize, fmt = F.fre_words_format(info)
        if count > _MAX_WORDS[self.h.version]:
            raise SFrameError(offset, "FRE with %d data words: readelf (libsframe) accepts at most %d"
                              % (count, _MAX_WORDS[self.h.version]))
        return info, wsize, struct.unpack(self.e + fmt, key[1:])

    @staticmethod
    def columns(cfa, fp, ra, info):
        return "%-10s%-10s%-13s" % (cfa, fp, ra + ("[s]" if (info >> F.FRE_INFO_MANGLED_BIT) & 1 else "   "))

    def cfa_offset(self, w):
        a = self.abi
        if a.cfa_scale == 1 and a.cfa_adjust == 0:
            return w
        # readelf decodes in 32-bit int arithmetic: the result wraps around.
        v = (w * a.cfa_scale - a.cfa_adjust) & 0xFFFFFFFF
        return v - (1 << 32) if v & 0x80000000 else v

    def default_text(self, key, offset):
        info, _, w = self.words(key, offset)
        n = len(w)
        if n == 0:
            return _UNDEFINED
        h = self.h
        base = "sp" if (info >> F.FRE_INFO_BASE_BIT) & 1 else "fp"
        if h.version == 1:
            fp, ra = self._v1_fp_ra(w)
            return self.columns("%s+%d" % (base, w[0]), fp, ra, info)
        cfa = "%s+%d" % (base, self.cfa_offset(w[0]))
        regs = self.slot_regs
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


def dump(section_data: bytes, section_addr: int, name: str = ".sframe") -> str:
    """The `readelf --sframe` text of one SFrame section loaded at section_addr (a str)."""
    sec = Section(section_data, section_addr)
    h = sec.header
    out = header_lines(h, name)
    rt = _RowText(h)
    flex_type = int(F.FDEType.FLEX) if h.version == 3 else -1
    kinds: dict = {}    # info | info2 << 8 -> (function heading, row text cache, row text maker, mask?)
    append = out.append
    row, m64 = _ROW, F.MASK64
    unprintable = None
    for run in sec.runs():
        for (i, _off, _field, start, size, _fre_off, _num, info, info2, _rep, _pad), raw in run:
            kind = kinds.get(info | info2 << 8)
            if kind is None:
                flex = (info2 & F.FDE_INFO2_TYPE_MASK) == flex_type
                mask = (info >> F.FDE_INFO_PCTYPE_BIT) & 1
                heading = _HEAD % (function_suffix(h, info, info2).replace("%", "%%"), "[m]" if mask else "   ")
                kind = kinds[info | info2 << 8] = (heading, rt.flex if flex else rt.default,
                                                    rt.flex_text if flex else rt.default_text, mask)
            heading, cache, text, mask = kind
            # readelf prints the size with %d: as a signed 32-bit int.
            append(heading % (i, start & m64, size - (size >> 31 << 32)))
            base = 0 if mask else start
            for pos, st, key in raw:
                t = cache.get(key)
                if t is None:
                    try:
                        t = cache[key] = text(key, pos)
                    except SFrameError as exc:      # unprintable: raised once the decoder's checks passed
                        unprintable = unprintable or exc
                        t = ""
                append(row % ((base + st) & m64, t))
    if unprintable:
        raise unprintable
    out.append("")
    return "\n".join(out)


def dump_empty(name: str = ".sframe") -> str:
    """What readelf 2.47 prints (exit status 0) for a zero-byte SFrame section."""
    return "\nSection '%s' has no debugging data.\n" % name


def dump_file(path: str, name: Optional[str] = None) -> str:
    """`readelf --sframe` text for the SFrame section of the ELF file at path."""
    from ..elf.image import ElfImage
    img = ElfImage(path, readelf_layout=True)
    if img.sframe is not None and not img.sframe.data:
        return dump_empty(name or img.sframe.name)
    sf = img.require_sframe()
    return dump(sf.data, sf.address, name or sf.name)
