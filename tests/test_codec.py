"""Decoder, encoder, index and rule interpretation on synthetic sections built with our encoder."""

import struct

import pytest
from helpers.synthetic import ctrl

from sframekit.core.arch import abi as abimod
from sframekit.core.errors import SFrameError
from sframekit.core.sframe import format as F
from sframekit.core.sframe.decode import Section, parse_header
from sframekit.core.sframe.encode import Func, Row, build, encode
from sframekit.core.sframe.index import SFrameIndex
from sframekit.core.sframe.rules import RuleKind

AMD64, A64LE, A64BE, S390X = (F.ABI.AMD64_ENDIAN_LITTLE, F.ABI.AARCH64_ENDIAN_LITTLE,
                              F.ABI.AARCH64_ENDIAN_BIG, F.ABI.S390X_ENDIAN_BIG)
SP, FP = F.BaseReg.SP, F.BaseReg.FP


def two_funcs(version=3, abi=AMD64, **kw):
    words = (16, -16) if abi == AMD64 else (16, -8, -16)
    funcs = [Func(0x1000, 0x40, [Row(0, (8,)), Row(4, words), Row(0x30, (8,))]),
             Func(0x1040, 0x10, [Row(0, (8,))])]
    return build(version, abi, funcs, **kw)


def roundtrip(data):
    s = Section(data)
    assert encode(s.header, s.check_all()) == data


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("abi", [AMD64, A64LE, A64BE, S390X])
def test_roundtrip_and_lookup_every_version_and_abi(version, abi):
    data = two_funcs(version, abi, section_addr=0x5000)
    roundtrip(data)
    idx = SFrameIndex(data, 0x5000)
    assert idx.header.big_endian == (abi in (A64BE, S390X))
    m = idx.lookup(0x1005)
    assert (m.fde.start, m.fde.size, m.fre.start) == (0x1000, 0x40, 4)
    assert m.rules.cfa.reg == abimod.info(abi).sp
    assert idx.lookup(0x1040).fde.index == 1
    assert idx.lookup(0x1050) is None and idx.lookup(0xfff) is None


def test_function_start_absolute_and_pcrel():
    for flags in (F.Flag.FDE_SORTED, F.Flag.FDE_SORTED | F.Flag.FDE_FUNC_START_PCREL):
        data = two_funcs(2, flags=flags, section_addr=0x8000)
        s = Section(data, 0x8000)
        fde = s.fde(0)
        assert fde.start == 0x1000
        if flags & F.Flag.FDE_FUNC_START_PCREL:
            assert fde.start_field == 0x1000 - 0x8000 - (28 + 0)
        else:
            assert fde.start_field == 0x1000 - 0x8000


def test_aux_header_is_skipped():
    data = two_funcs(3, auxhdr=b"\xaa\xbb\xcc")
    s = Section(data)
    assert s.header.auxhdr_len == 3 and s.header.auxhdr == b"\xaa\xbb\xcc"
    assert s.fde(1).start == 0x1040
    roundtrip(data)


@pytest.mark.parametrize("size,ftype", [(0x80, F.FREType.ADDR1), (0x1000, F.FREType.ADDR2), (0x20000, F.FREType.ADDR4)])
def test_fre_start_widths(size, ftype):
    data = build(3, AMD64, [Func(0x1000, size, [Row(0, (8,)), Row(size - 1, (16,))])])
    idx = SFrameIndex(data)
    fde = idx.section.fde(0)
    assert fde.fre_type is ftype
    assert idx.lookup(0x1000 + size - 1).rules.cfa.offset == 16
    assert idx.lookup(0x1000 + size - 2).rules.cfa.offset == 8
    roundtrip(data)


@pytest.mark.parametrize("cfa,size", [(100, 1), (1000, 2), (100000, 4), (-100, 1), (-1000, 2)])
def test_data_word_widths(cfa, size):
    data = build(2, AMD64, [Func(0x1000, 0x10, [Row(0, (cfa, -16))])])
    m = SFrameIndex(data).lookup(0x1000)
    assert m.fre.word_size == size
    assert m.rules.cfa.offset == cfa and m.rules.fp.kind is RuleKind.AT_CFA and m.rules.fp.offset == -16
    roundtrip(data)


def test_mask_fde_matches_modulo_rep_size():
    plt = Func(0x2000, 0x40, [Row(0, (8,)), Row(11, (16,))], pc_type=F.PCType.MASK, rep_size=16)
    for version in (2, 3):
        idx = SFrameIndex(build(version, AMD64, [plt]))
        assert idx.lookup(0x2000 + 16 * 2 + 3).rules.cfa.offset == 8
        assert idx.lookup(0x2000 + 16 * 2 + 12).rules.cfa.offset == 16
        assert idx.lookup(0x2000 + 16 * 3 + 15).rules.cfa.offset == 16
    # V1 has no rep_size: its MASK FDEs are 16-byte PLT entries.
    idx = SFrameIndex(build(1, AMD64, [plt]))
    assert idx.lookup(0x2000 + 16 + 12).rules.cfa.offset == 16


def test_unsorted_section_is_sorted_on_first_use():
    funcs = [Func(0x3000, 0x10, [Row(0, (8,))]), Func(0x1000, 0x10, [Row(0, (16,))]), Func(0x2000, 0x10, [Row(0, (24,))])]
    data = build(2, AMD64, funcs, flags=F.Flag.FDE_FUNC_START_PCREL, sort=False)
    idx = SFrameIndex(data)
    assert [idx.lookup(a).rules.cfa.offset for a in (0x1001, 0x2001, 0x3001)] == [16, 24, 8]
    assert idx.text_range() == (0x1000, 0x3010)


def test_amd64_rules():
    idx = SFrameIndex(two_funcs(3))
    r = idx.lookup(0x1000).rules
    assert (r.cfa.reg, r.cfa.offset) == (7, 8)
    assert r.ra.kind is RuleKind.FIXED and r.ra.offset == -8
    assert r.fp.kind is RuleKind.UNCHANGED
    assert r.describe(abimod.AMD64) == ["CFA = rsp + 8", "RA = [CFA - 8] (fixed offset from the header)", "rbp unchanged"]
    r = idx.lookup(0x1004).rules
    assert r.fp.kind is RuleKind.AT_CFA and r.fp.offset == -16


def test_amd64_fp_based_cfa():
    idx = SFrameIndex(build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (16, -16), base=FP)])]))
    r = idx.lookup(0x1000).rules
    assert r.cfa.reg == abimod.AMD64.fp and r.describe(abimod.AMD64)[0] == "CFA = rbp + 16"


def test_aarch64_rules_and_mangled_ra():
    data = build(3, A64LE, [Func(0x1000, 0x20, [Row(0, (0,)), Row(4, (16, -8, -16), mangled=True)],
                                 pauth_key=F.PAuthKey.B)])
    idx = SFrameIndex(data)
    r0 = idx.lookup(0x1000).rules
    assert r0.ra.kind is RuleKind.UNCHANGED and r0.fp.kind is RuleKind.UNCHANGED
    m = idx.lookup(0x1008)
    assert m.fde.pauth_key is F.PAuthKey.B
    assert m.rules.ra_mangled and m.rules.ra.offset == -8 and m.rules.fp.offset == -16
    assert m.rules.describe(abimod.AARCH64_LE)[1] == "RA = [CFA - 8] (signed: pointer authentication)"


def test_s390x_scaled_cfa_and_ra_padding():
    # stored 2 -> 2*8 + 160 = 176
    data = build(3, S390X, [Func(0x1000, 0x20, [Row(0, (0,)), Row(6, (2, 0, -72))])])
    idx = SFrameIndex(data)
    assert idx.lookup(0x1000).rules.cfa.offset == 160
    r = idx.lookup(0x1006).rules
    assert r.cfa.offset == 176 and r.cfa.reg == 15
    assert r.ra.kind is RuleKind.UNCHANGED and r.ra.padding
    assert r.fp.kind is RuleKind.AT_CFA and r.fp.offset == -72


def test_s390x_v2_register_encoded_slots():
    # V2 s390x: an odd RA/FP word is DWARF register (word >> 1): RA in f8 (24), FP in f9 (28).
    data = build(2, S390X, [Func(0x1000, 0x20, [Row(0, (0, 24 * 2 + 1, 28 * 2 + 1))])])
    r = SFrameIndex(data).lookup(0x1000).rules
    assert r.ra.kind is RuleKind.REGISTER and r.ra.reg == 24 and not r.ra.deref
    assert r.fp.kind is RuleKind.REGISTER and r.fp.reg == 28
    assert r.describe(abimod.S390X)[1:] == ["RA = f8", "FP = f9"]
    # The same words in V3 are plain offsets.
    r3 = SFrameIndex(build(3, S390X, [Func(0x1000, 0x20, [Row(0, (0, -48, -72))])])).lookup(0x1000).rules
    assert r3.ra.kind is RuleKind.AT_CFA and r3.ra.offset == -48


FLEX_SHAPES = [
    # words, (cfa reg, off, deref), ra (kind, reg, off, deref), fp
    ((ctrl(7), 8), (7, 8, False), (RuleKind.FIXED, None, -8, False), (RuleKind.UNCHANGED, None, 0, False)),
    ((ctrl(6, True), -8), (6, -8, True), (RuleKind.FIXED, None, -8, False), (RuleKind.UNCHANGED, None, 0, False)),
    ((ctrl(6, True), -8, 0, ctrl(6, True), 0), (6, -8, True), (RuleKind.FIXED, None, -8, False),
     (RuleKind.REGISTER, 6, 0, True)),
    ((ctrl(10), 0, ctrl(None, True), -8, ctrl(None, True), -16), (10, 0, False), (RuleKind.AT_CFA, None, -8, False),
     (RuleKind.AT_CFA, None, -16, False)),
    ((ctrl(7), 16, ctrl(3), 0), (7, 16, False), (RuleKind.REGISTER, 3, 0, False), (RuleKind.UNCHANGED, None, 0, False)),
    ((ctrl(16), 1000, 0, ctrl(12, True), 4), (16, 1000, False), (RuleKind.FIXED, None, -8, False),
     (RuleKind.REGISTER, 12, 4, True)),
]


@pytest.mark.parametrize("words,cfa,ra,fp", FLEX_SHAPES)
def test_flex_fde_shapes(words, cfa, ra, fp):
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, words)], fde_type=F.FDEType.FLEX)])
    roundtrip(data)
    r = SFrameIndex(data).lookup(0x1000).rules
    assert r.flex
    assert (r.cfa.reg, r.cfa.offset, r.cfa.deref) == cfa
    for rule, want in ((r.ra, ra), (r.fp, fp)):
        assert rule.kind is want[0] and rule.offset == want[2]
        if want[0] is RuleKind.REGISTER:
            assert (rule.reg, rule.deref) == (want[1], want[3])


def test_flex_drap_description():
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (ctrl(6, True), -8, 0, ctrl(6, True), 0))],
                                 fde_type=F.FDEType.FLEX)])
    assert SFrameIndex(data).lookup(0x1000).rules.describe(abimod.AMD64) == [
        "CFA = [rbp - 8]", "RA = [CFA - 8] (fixed offset from the header)", "FP = [rbp]"]


def test_outermost_zero_words_and_v3_fde_without_fres():
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, ())]), Func(0x1010, 0x10, [])])
    idx = SFrameIndex(data)
    assert idx.lookup(0x1000).rules.outermost
    m = idx.lookup(0x1014)
    assert m.fre is None and m.rules.outermost and m.rules.cfa is None
    roundtrip(data)


def test_signal_and_pauth_bits():
    data = build(3, A64LE, [Func(0x1000, 0x10, [Row(0, (0,))], signal=True, pauth_key=F.PAuthKey.B)])
    fde = Section(data).fde(0)
    assert fde.signal and fde.pauth_key is F.PAuthKey.B and fde.fde_type is F.FDEType.DEFAULT


def test_lazy_index_touches_only_the_function_looked_up():
    funcs = [Func(0x1000 + 0x10 * i, 0x10, [Row(0, (8,)), Row(4, (16,))]) for i in range(100)]
    data = bytearray(build(3, AMD64, funcs))
    s = Section(bytes(data))
    last = s.fde(99)
    # Corrupt function 99's FRE data: lookups elsewhere still work, its own raises.
    data[s.fres_start(last)] = 0xFF
    idx = SFrameIndex(bytes(data))
    assert idx.lookup(0x1005).rules.cfa.offset == 16
    with pytest.raises(SFrameError, match="beyond the function size"):
        idx.lookup(0x1000 + 0x10 * 99 + 5)


# --------------------------------------------------------------------------------------------
# Malformed sections: one error type, naming the byte offset and the rule.


def patch(data, off, fmt, *vals, endian="<"):
    b = bytearray(data)
    struct.pack_into(endian + fmt, b, off, *vals)
    return bytes(b)


def full_decode(data):
    s = Section(data)
    s.check_all()
    idx = SFrameIndex(data)
    for fde in s.fdes():
        idx.lookup(fde.start)


BASE3 = two_funcs(3)
BASE2 = two_funcs(2)
BASE1 = two_funcs(1)
H = 28


MALFORMED = [
    ("short", BASE3[:27], 0, "shorter than the 28-byte"),
    ("empty", b"", 0, "shorter than"),
    ("magic", patch(BASE3, 0, "H", 0x1234), 0, "bad magic"),
    ("version", patch(BASE3, 2, "B", 4), 2, "unknown version 4"),
    ("version0", patch(BASE3, 2, "B", 0), 2, "unknown version 0"),
    ("flags", patch(BASE3, 3, "B", 0x81), 3, "unknown flag bits 0x80"),
    ("fp-flag-v3", patch(BASE3, 3, "B", 0x3), 3, "unknown flag bits 0x02"),
    ("abi", patch(BASE3, 4, "B", 9), 4, "unknown ABI"),
    ("endian", patch(BASE3, 4, "B", int(S390X)), 0, "big-endian"),
    ("aux", patch(BASE3, 7, "B", 255), 7, "auxiliary header"),
    ("fdeoff", patch(BASE3, 0x14, "I", 0x10000), 0x14, "fdeoff"),
    ("freoff", patch(BASE3, 0x18, "I", 0x10000), 0x18, "freoff"),
    ("fdeoff>freoff", patch(BASE3, 0x14, "I", 40), 0x14, "beyond freoff"),
    ("fre_len", patch(BASE3, 0x10, "I", 0x1000), 0x10, "fre_len"),
    ("num_fdes", patch(BASE3, 0x08, "I", 3), 0x08, "overrun the FRE sub-section"),
    ("num_fdes-huge", patch(BASE3, 0x08, "I", 0xFFFFFFFF), 0x08, "overrun"),
    ("num_fres-huge", patch(BASE3, 0x0C, "I", 0xFFFFFFFF), 0x0C, "cannot fit"),
    ("num_fres-total", patch(BASE3, 0x0C, "I", 2), 0x0C, "num_fres"),
    ("v3-attr", patch(BASE3, H + 16 + 12, "I", BASE3[0x10] - 2), H + 16 + 12, "attribute record"),
    ("v2-fre-off", patch(BASE2, H + 20 + 8, "I", 0x7000), H + 20 + 8, "start_fre_off"),
    ("v3-fre-count", patch(BASE3, H + 32 + 0, "H", 50), H + 32 + 5, "cannot fit"),
    ("v2-fre-count", patch(BASE2, H + 12, "I", 0x40000000), H + 40, "cannot fit"),
    ("v1-fre-count", patch(BASE1, H + 12, "I", 4), H + 34 + 10, "does not increase"),
    ("v1-fre-count-huge", patch(BASE1, H + 12, "I", 0x10000000), H + 34, "cannot fit"),
    ("fre-type", patch(BASE3, H + 32 + 2, "B", 0x3), H + 32 + 2, "invalid FRE type"),
    ("fde-type", patch(BASE3, H + 32 + 3, "B", 0x7), H + 32 + 3, "unknown FDE type"),
    ("mask-rep0-v3", patch(BASE3, H + 32 + 2, "B", 0x10), H + 32 + 4, "repetition block size 0"),
    ("mask-rep0-v2", patch(BASE2, H + 16, "B", 0x10), H + 17, "repetition block size 0"),
    ("word-size", patch(BASE3, H + 32 + 5 + 1, "B", 0x63), H + 32 + 6, "data-word size"),
    ("fre-beyond-size", patch(BASE3, H + 32 + 5 + 3, "B", 0x41), H + 32 + 8, "beyond the function size"),
    ("fre-not-increasing", patch(BASE3, H + 32 + 5 + 3, "B", 0), H + 32 + 8, "does not increase"),
]


@pytest.mark.parametrize("name,data,offset,rule", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_sections_raise_sframe_error(name, data, offset, rule):
    with pytest.raises(SFrameError) as ei:
        full_decode(data)
    assert ei.value.offset == offset, str(ei.value)
    assert rule in ei.value.rule
    assert ("%#x" % offset) in str(ei.value)


def test_fre_start_equal_to_function_size_is_tolerated():
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (8,)), Row(0x10, (16,))])])
    full_decode(data)
    assert SFrameIndex(data).lookup(0x100f).rules.cfa.offset == 8


def test_unsorted_though_flagged_sorted():
    funcs = [Func(0x3000, 0x10, [Row(0, (8,))]), Func(0x1000, 0x10, [Row(0, (16,))]), Func(0x2000, 0x10, [Row(0, (24,))])]
    data = build(3, AMD64, funcs, sort=False)
    with pytest.raises(SFrameError, match="flagged sorted"):
        Section(data).check_all()
    with pytest.raises(SFrameError, match="flagged sorted"):
        SFrameIndex(data).lookup(0x1005)


def test_word_counts_the_abi_cannot_use():
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (8, -16, -24))])])
    with pytest.raises(SFrameError, match="more than amd64 uses"):
        SFrameIndex(data).lookup(0x1000)
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (ctrl(7),))], fde_type=F.FDEType.FLEX)])
    with pytest.raises(SFrameError, match="control and an offset"):
        SFrameIndex(data).lookup(0x1000)
    data = build(3, AMD64, [Func(0x1000, 0x10, [Row(0, (ctrl(None, True), 8))], fde_type=F.FDEType.FLEX)])
    with pytest.raises(SFrameError, match="names no base register"):
        SFrameIndex(data).lookup(0x1000)


def test_header_of_a_real_shape():
    h = parse_header(BASE3)
    assert (h.version, h.num_fdes, h.num_fres, h.fdeoff, h.freoff) == (3, 2, 4, 0, 32)
