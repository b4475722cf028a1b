"""Tests for core.unwind.unwinder: SFrame, frame-pointer and signal-frame unwinding, and every stop reason.

Sections are made with core.sframe.encode.build, stacks live in a fake memory that raises outside what
was written, and each test checks the recovered PCs, SPs, FPs and CFAs.  The signal-frame tests
also replay memory dumped from real processes stopped in a signal handler (see REAL_DUMPS).
"""

import base64
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sframekit.core.arch import abi as A
from sframekit.core.arch import sigframe
from sframekit.core.sframe import format as F
from sframekit.core.sframe.encode import Func, Row, build
from sframekit.core.sframe.index import SFrameIndex
from sframekit.core.unwind.unwinder import DEFAULT_PAC_MASK, Frame, Method, Stop, StopReason, backtrace, step, strip_pac, walk

SFP = F.BaseReg.FP
FLEX = F.FDEType.FLEX
SECTION = 0x500000          # where the test sections are "loaded"
STACK = 0x7FFF_0000


class Mem:
    """Sparse byte-addressed memory; reading any byte never written raises, like unmapped memory."""

    def __init__(self, big=False):
        self.big = big
        self.data = {}
        self.reads = []

    def put(self, addr, blob):
        for i, b in enumerate(blob):
            self.data[addr + i] = b

    def word(self, addr, value):
        self.put(addr, (value & (2 ** 64 - 1)).to_bytes(8, "big" if self.big else "little"))

    def read(self, addr, size):
        self.reads.append((addr, size))
        try:
            return bytes(self.data[addr + i] for i in range(size))
        except KeyError:
            raise OSError("unmapped %#x" % addr) from None


def index_of(version, abi, funcs, **kw):
    return SFrameIndex(build(version, abi, funcs, section_addr=SECTION, **kw), SECTION)


def finder(*indexes, text=(0x400000, 0x500000)):
    """find(pc): the index for PCs in the module's text range, else None."""
    def find(pc):
        if text[0] <= pc < text[1]:
            return indexes[0], "module"
        return None
    return find


def no_module(pc):
    return None


def run(frame, abi, mem, find, topmost, **kw):
    return step(frame, abi=abi, read=mem.read, find=find, topmost=topmost, **kw)


def assert_stop(res, reason):
    assert isinstance(res, Stop), res
    assert res.reason is reason, res
    return res


# ---------------------------------------------------------------------------------------------
# AMD64: a three-frame program  start -> main -> a -> b


START, MAIN, FA, FB = 0x400F00, 0x401000, 0x401100, 0x401200
RET_START, RET_MAIN, RET_A = START + 0x10, MAIN + 0x25, FA + 0x15


def amd64_funcs():
    return [
        Func(START, 0x20, [Row(0, ())]),                                     # outermost: RA undefined
        Func(MAIN, 0x80, [Row(0, (8,)), Row(1, (16, -16)), Row(4, (16, -16), SFP)]),
        Func(FA, 0x40, [Row(0, (8,)), Row(4, (32,))]),
        Func(FB, 0x20, [Row(0, (8,))]),
    ]


def amd64_stack(mem, sp0, rbp):
    mem.word(sp0, RET_A)                 # b's return address (b just entered)
    cfa_a = sp0 + 8 + 32
    mem.word(cfa_a - 8, RET_MAIN)
    cfa_main = rbp + 16
    mem.word(cfa_main - 8, RET_START)
    mem.word(cfa_main - 16, 0)           # start's rbp
    return cfa_a, cfa_main


@pytest.mark.parametrize("version", [1, 2, 3])
def test_amd64_walk_to_outermost(version):
    idx = index_of(version, F.ABI.AMD64_ENDIAN_LITTLE, amd64_funcs())
    mem = Mem()
    sp0, rbp = STACK, STACK + 0x100
    cfa_a, cfa_main = amd64_stack(mem, sp0, rbp)
    frames, stop = backtrace(Frame(FB, sp0, rbp), abi=A.AMD64, read=mem.read, find=finder(idx))
    got = [(f.level, f.pc, f.sp, f.fp, f.cfa, f.method) for f in frames]
    assert got == [
        (0, FB, sp0, rbp, None, None),
        (1, RET_A, sp0 + 8, rbp, sp0 + 8, Method.SFRAME),
        (2, RET_MAIN, cfa_a, rbp, cfa_a, Method.SFRAME),
        (3, RET_START, cfa_main, 0, cfa_main, Method.SFRAME),
    ]
    assert all(f.ra is None for f in frames)          # x86-64 has no RA register
    assert stop.reason is StopReason.OUTERMOST and not stop.is_error
    assert stop.pc == RET_START


def test_amd64_reads_per_frame_at_most_three():
    idx = index_of(3, F.ABI.AMD64_ENDIAN_LITTLE, amd64_funcs())
    mem = Mem()
    amd64_stack(mem, STACK, STACK + 0x100)
    frame = Frame(FB, STACK, STACK + 0x100)
    prev = None
    for level in range(3):
        before = len(mem.reads)
        frame2 = run(frame, A.AMD64, mem, finder(idx), level == 0, prev_cfa=prev)
        assert isinstance(frame2, Frame)
        assert len(mem.reads) - before <= 3
        frame, prev = frame2, frame2.cfa


def test_return_address_looked_up_at_pc_minus_one():
    # A call that ends function g (noreturn): the return address is g's end, i.e. the next function.
    g, h = 0x401000, 0x401010
    idx = index_of(3, F.ABI.AMD64_ENDIAN_LITTLE, [
        Func(g, 0x10, [Row(0, (8,)), Row(1, (16,))]),
        Func(h, 0x10, [Row(0, (8,))])])
    mem = Mem()
    mem.word(STACK + 8, 0x401234)
    mem.word(STACK, 0x405678)
    res = run(Frame(h, STACK, 0), A.AMD64, mem, finder(idx), topmost=False)
    assert res.pc == 0x401234 and res.cfa == STACK + 16       # g's rules (CFA = SP+16)
    res = run(Frame(h, STACK, 0), A.AMD64, mem, finder(idx), topmost=True)
    assert res.pc == 0x405678 and res.cfa == STACK + 8        # h's rules at h's first byte


def test_amd64_plt_mask_fde():
    plt = 0x401000
    idx = index_of(3, F.ABI.AMD64_ENDIAN_LITTLE, [
        Func(plt, 0x40, [Row(0, (8,)), Row(11, (16,))], pc_type=F.PCType.MASK, rep_size=16)])
    mem = Mem()
    mem.word(STACK + 8, 0x401999)
    mem.word(STACK, 0x401888)
    res = run(Frame(plt + 16 + 12, STACK, 0), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.cfa) == (0x401999, STACK + 16)          # second entry, past the push
    res = run(Frame(plt + 32 + 3, STACK, 0), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.cfa) == (0x401888, STACK + 8)


def test_amd64_fixed_fp_offset_from_header():
    idx = index_of(2, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401000, 0x20, [Row(0, (16,))])], fixed_fp=-16)
    mem = Mem()
    mem.word(STACK + 8, 0x401500)
    mem.word(STACK, 0xABC0)
    res = run(Frame(0x401004, STACK, 7), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.sp, res.fp) == (0x401500, STACK + 16, 0xABC0)


# ---------------------------------------------------------------------------------------------
# V3 flex FDEs (AMD64): DRAP, register-based and non-dereferenced rules

RBP, RBX, R10 = 6, 3, 10
REG_DEREF = 3   # reg_p | deref_p
REG_ONLY = 1


def ctrl(reg, flags):
    return reg << 3 | flags


def flex_index(words, base=F.BaseReg.SP):
    return index_of(3, F.ABI.AMD64_ENDIAN_LITTLE,
                    [Func(0x401000, 0x40, [Row(0, tuple(words), base)], fde_type=FLEX)])


def test_flex_drap_cfa_deref_rbp():
    # CFA = [rbp - 8], RA at its default place (padding word), FP = [rbp + 0]
    idx = flex_index([ctrl(RBP, REG_DEREF), -8, 0, ctrl(RBP, REG_DEREF), 0])
    mem = Mem()
    rbp, sp = STACK + 0x80, STACK
    cfa = STACK + 0x200
    mem.word(rbp - 8, cfa)
    mem.word(cfa - 8, 0x402222)
    mem.word(rbp, STACK + 0x400)
    for topmost in (True, False):
        mem.reads.clear()
        res = run(Frame(0x401010, sp, rbp), A.AMD64, mem, finder(idx), topmost)
        assert (res.pc, res.sp, res.cfa, res.fp) == (0x402222, cfa, cfa, STACK + 0x400)
        assert res.match.rules.flex
        assert len(mem.reads) == 3


def test_flex_cfa_from_other_register_only_topmost():
    # CFA = r10 + 0 (DRAP register live in the prologue), RA default, FP unchanged
    idx = flex_index([ctrl(R10, REG_ONLY), 0])
    mem = Mem()
    cfa = STACK + 0x100
    mem.word(cfa - 8, 0x403000)
    top = Frame(0x401004, STACK, 0x55, regs={R10: cfa})
    res = run(top, A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.sp, res.cfa, res.fp) == (0x403000, cfa, cfa, 0x55)
    stop = assert_stop(run(top, A.AMD64, mem, finder(idx), topmost=False), StopReason.UNSAFE_UNWIND)
    assert "r10" in stop.message
    # topmost, but the caller did not supply r10
    stop = assert_stop(run(Frame(0x401004, STACK, 0x55), A.AMD64, mem, finder(idx), topmost=True),
                       StopReason.UNSAFE_UNWIND)
    assert "not known" in stop.detail


def test_flex_cfa_plus_and_register_value_rules():
    # CFA = rsp + 32; RA = [CFA - 8] spelled out; FP = CFA - 48 (reg_p 0, deref_p 0, nonzero control word)
    idx = flex_index([ctrl(7, REG_ONLY), 32, ctrl(0, 2), -8, ctrl(1, 0), -48])
    rules = idx.lookup(0x401000).rules
    assert rules.fp.kind.name == "CFA_PLUS" and rules.ra.kind.name == "AT_CFA"
    mem = Mem()
    mem.word(STACK + 24, 0x404040)
    res = run(Frame(0x401008, STACK, 0), A.AMD64, mem, finder(idx), topmost=False)
    assert (res.pc, res.cfa, res.fp) == (0x404040, STACK + 32, STACK + 32 - 48)
    # FP = rbx (value, no dereference): only in the topmost frame
    idx = flex_index([ctrl(7, REG_ONLY), 16, 0, ctrl(RBX, REG_ONLY), 0])
    mem.word(STACK + 8, 0x404444)
    res = run(Frame(0x401000, STACK, 0, regs={RBX: 0x9999}), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.fp) == (0x404444, 0x9999)
    assert_stop(run(Frame(0x401008, STACK, 0, regs={RBX: 0x9999}), A.AMD64, mem, finder(idx), topmost=False),
                StopReason.UNSAFE_UNWIND)


def test_flex_ra_from_sp_register():
    # RA = [rsp + 8] via the SP register, FP untouched
    idx = flex_index([ctrl(7, REG_ONLY), 16, ctrl(7, REG_DEREF), 8])
    mem = Mem()
    mem.word(STACK + 8, 0x405050)
    res = run(Frame(0x401008, STACK, 0x77), A.AMD64, mem, finder(idx), topmost=False)
    assert (res.pc, res.cfa, res.fp) == (0x405050, STACK + 16, 0x77)


# ---------------------------------------------------------------------------------------------
# AArch64 (both byte orders): frame records, leaf functions, pointer authentication

A64 = [(F.ABI.AARCH64_ENDIAN_LITTLE, A.AARCH64_LE, False), (F.ABI.AARCH64_ENDIAN_BIG, A.AARCH64_BE, True)]
X29, X30 = 29, 30


def a64_funcs(mangled=False):
    # stp x29, x30, [sp, #-32]! ; mov x29, sp ; ... ; bl ; ...
    return [
        Func(0x401000, 0x40, [Row(0, (0,)), Row(4, (32, -24, -32), mangled=mangled),
                              Row(8, (32, -24, -32), SFP, mangled=mangled)]),
        Func(0x402000, 0x10, [Row(0, (0,)), Row(4, (16,))]),         # leaf: RA stays in x30
    ]


@pytest.mark.parametrize("sabi,abi,big", A64)
def test_aarch64_frame_record(sabi, abi, big):
    idx = index_of(3, sabi, a64_funcs())
    mem = Mem(big)
    fp = STACK + 0x40                 # x29 = sp after mov x29, sp (CFA = fp + 32)
    mem.word(fp + 8, 0x403008)        # saved x30
    mem.word(fp, STACK + 0x300)       # saved x29
    res = run(Frame(0x401020, fp, fp), abi, mem, finder(idx), topmost=False)
    assert (res.pc, res.sp, res.fp, res.ra, res.cfa) == (0x403008, fp + 32, STACK + 0x300, 0x403008, fp + 32)
    assert not res.ra_stripped
    # the same through the SP-based row, in the topmost frame
    res = run(Frame(0x401004, fp, 0x1234), abi, mem, finder(idx), topmost=True)
    assert (res.pc, res.sp, res.fp) == (0x403008, fp + 32, STACK + 0x300)


@pytest.mark.parametrize("sabi,abi,big", A64)
def test_aarch64_leaf_ra_unchanged(sabi, abi, big):
    idx = index_of(3, sabi, a64_funcs())
    mem = Mem(big)
    res = run(Frame(0x402000, STACK, 0x99, ra=0x401014), abi, mem, finder(idx), topmost=True)
    assert (res.pc, res.sp, res.fp, res.ra, res.cfa) == (0x401014, STACK, 0x99, 0x401014, STACK)
    assert mem.reads == []
    res = run(Frame(0x402004, STACK, 0x99, regs={X30: 0x401018}), abi, mem, finder(idx), topmost=True)
    assert (res.pc, res.sp) == (0x401018, STACK + 16)
    stop = assert_stop(run(Frame(0x402008, STACK, 0x99, ra=0x401014), abi, mem, finder(idx), topmost=False),
                       StopReason.UNSAFE_UNWIND)     # sub sp, sp, #16 done: CFA = SP + 16, RA in x30
    assert "x30" in stop.detail
    assert_stop(run(Frame(0x402000, STACK, 0x99), abi, mem, finder(idx), topmost=True), StopReason.UNSAFE_UNWIND)


@pytest.mark.parametrize("sabi,abi,big", A64)
def test_aarch64_pauth_strip(sabi, abi, big):
    idx = index_of(3, sabi, a64_funcs(mangled=True), )
    mem = Mem(big)
    fp = STACK + 0x40
    signed = 0x2A15_0000_0040_3008        # PAC in bits 48-54 and 56-63, bit 55 clear
    mem.word(fp + 8, signed)
    mem.word(fp, STACK + 0x300)
    res = run(Frame(0x401020, fp, fp), abi, mem, finder(idx), topmost=False)
    assert (res.pc, res.ra, res.ra_stripped) == (0x403008, signed, True)
    # bit 55 set: a kernel-range address keeps its top bits set
    mem.word(fp + 8, 0x0080_FFFF_8000_1234)
    res = run(Frame(0x401020, fp, fp), abi, mem, finder(idx), topmost=False)
    assert res.pc == 0xFFFF_FFFF_8000_1234
    # a caller-supplied mask (52-bit VA): bits 48-51 are address bits and stay
    mem.word(fp + 8, 0x2A1F_0000_0040_3008)
    res = run(Frame(0x401020, fp, fp), abi, mem, finder(idx), topmost=False, pac_mask=0xFF70_0000_0000_0000)
    assert res.pc == 0x000F_0000_0040_3008
    # the FRE says the RA is not signed: nothing is stripped
    idx2 = index_of(3, sabi, a64_funcs(mangled=False))
    mem.word(fp + 8, signed)
    res = run(Frame(0x401020, fp, fp), abi, mem, finder(idx2), topmost=False)
    assert (res.pc, res.ra_stripped) == (signed, False)


def test_strip_pac_function():
    assert strip_pac(0x7F12_3456_789A_BCDE) == 0x3456_789A_BCDE
    assert strip_pac(0x0080_1234_5678_9ABC) == 0xFFFF_1234_5678_9ABC
    assert DEFAULT_PAC_MASK == 0xFF7F_0000_0000_0000


# ---------------------------------------------------------------------------------------------
# s390x: scaled CFA, SP = CFA - 160, RA padding, V2 register encodings

S390 = F.ABI.S390X_ENDIAN_BIG
R11, R14 = 11, 14


def s390_funcs(version):
    # stmg %r6,%r15,48(%r15) ; aghi %r15,-160 ; ... ; brasl ; ...   (CFA stays SP_entry + 160)
    return [
        Func(0x401000, 0x60, [Row(0, (0,)), Row(6, (0, -48, -72)), Row(10, (20, -48, -72))]),
        Func(0x402000, 0x20, [Row(0, (0,)), Row(6, (0, 0, -72))]),        # RA padding: FP saved, RA in r14
    ]


@pytest.mark.parametrize("version", [2, 3])
def test_s390x_scaled_cfa_and_sp_offset(version):
    idx = index_of(version, S390, s390_funcs(version))
    mem = Mem(big=True)
    sp = STACK
    cfa = sp + 20 * 8 + 160
    mem.word(cfa - 48, 0x403000)
    mem.word(cfa - 72, STACK + 0x800)
    res = run(Frame(0x401020, sp, 0x11), A.S390X, mem, finder(idx), topmost=False)
    assert (res.pc, res.cfa, res.sp, res.fp, res.ra) == (0x403000, cfa, cfa - 160, STACK + 0x800, 0x403000)
    # at entry: CFA = SP + 160, RA and FP still in r14/r11
    res = run(Frame(0x401000, sp, 0x11, ra=0x404000), A.S390X, mem, finder(idx), topmost=True)
    assert (res.pc, res.cfa, res.sp, res.fp) == (0x404000, sp + 160, sp, 0x11)


@pytest.mark.parametrize("version", [2, 3])
def test_s390x_ra_padding_topmost_only(version):
    idx = index_of(version, S390, s390_funcs(version))
    mem = Mem(big=True)
    mem.word(STACK + 160 - 72, 0x5151)
    res = run(Frame(0x402008, STACK, 0x11, regs={R14: 0x401030}), A.S390X, mem, finder(idx), topmost=True)
    assert (res.pc, res.fp, res.sp) == (0x401030, 0x5151, STACK)
    assert idx.lookup(0x402008).rules.ra.padding
    stop = assert_stop(run(Frame(0x402008, STACK, 0x11, ra=0x401030), A.S390X, mem, finder(idx), topmost=False),
                       StopReason.UNSAFE_UNWIND)
    assert "padding" in stop.detail


def test_s390x_v2_register_encoding():
    # RA saved in f8 (DWARF 24), FP in f10 (DWARF 25): odd words, regnum = word >> 1
    idx = index_of(2, S390, [Func(0x401000, 0x20, [Row(0, (0, 24 << 1 | 1, 25 << 1 | 1))])])
    rules = idx.lookup(0x401004).rules
    assert (rules.ra.kind.name, rules.ra.reg, rules.fp.reg) == ("REGISTER", 24, 25)
    mem = Mem(big=True)
    top = Frame(0x401004, STACK, 0x11, regs={24: 0x401234, 25: 0x7777})
    res = run(top, A.S390X, mem, finder(idx), topmost=True)
    assert (res.pc, res.fp, res.sp, res.cfa) == (0x401234, 0x7777, STACK, STACK + 160)
    assert mem.reads == []
    stop = assert_stop(run(top, A.S390X, mem, finder(idx), topmost=False), StopReason.UNSAFE_UNWIND)
    assert "f8" in stop.detail


def test_s390x_v3_flex_register_rules():
    # flex: CFA = r15 + 160 (stored scaled, as in default FDEs: 0 * 8 + 160), RA = r14 value,
    # FP = f8 value (DWARF 24): a leaf saving r11 in an FPR
    idx = index_of(3, S390, [Func(0x401000, 0x20, [Row(0, (ctrl(15, 1), 0, ctrl(14, 1), 0, ctrl(24, 1), 0),
                                                       word_size=2)], fde_type=FLEX)])
    mem = Mem(big=True)
    res = run(Frame(0x401004, STACK, 0x11, regs={14: 0x401500, 24: 0x6666}), A.S390X, mem, finder(idx),
              topmost=True)
    assert (res.pc, res.fp, res.sp, res.cfa) == (0x401500, 0x6666, STACK, STACK + 160)


# ---------------------------------------------------------------------------------------------
# Outermost frames


def test_outermost_zero_words_and_empty_v3_fde_and_zero_ra():
    idx = index_of(3, F.ABI.AMD64_ENDIAN_LITTLE, [
        Func(0x401000, 0x10, [Row(0, ())]),
        Func(0x401010, 0x10, []),                 # V3 default FDE without FREs
        Func(0x401020, 0x10, [Row(0, (8,))])])
    assert idx.lookup(0x401014).fre is None
    mem = Mem()
    mem.word(STACK, 0)
    for pc in (0x401004, 0x401014):
        stop = assert_stop(run(Frame(pc, STACK, 0), A.AMD64, mem, finder(idx), topmost=True), StopReason.OUTERMOST)
        assert stop.pc == pc and not stop.is_error
    assert mem.reads == []
    stop = assert_stop(run(Frame(0x401024, STACK, 0), A.AMD64, mem, finder(idx), topmost=True), StopReason.OUTERMOST)
    assert "zero" in stop.detail


# ---------------------------------------------------------------------------------------------
# Safety checks: one stop reason each


def amd64_one(words, base=F.BaseReg.SP, version=3):
    return index_of(version, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401000, 0x40, [Row(0, tuple(words), base)])])


def test_cfa_not_above_sp_except_topmost():
    idx = amd64_one([0, -8])            # CFA = SP + 0: nonsense except where the checks are waived
    mem = Mem()
    mem.word(STACK - 8, 0x402000)
    mem.word(STACK - 16, 0x1)
    assert_stop(run(Frame(0x401008, STACK, 0x1), A.AMD64, mem, finder(idx), topmost=False),
                StopReason.CFA_NOT_ABOVE_SP)
    res = run(Frame(0x401008, STACK, 0x1), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.cfa) == (0x402000, STACK)


def test_cfa_misaligned():
    idx = amd64_one([12])
    stop = assert_stop(run(Frame(0x401008, STACK, 0), A.AMD64, Mem(), finder(idx), topmost=True),
                       StopReason.CFA_MISALIGNED)
    assert "%#x" % (STACK + 12) in stop.message


def test_cfa_must_increase():
    idx = amd64_one([16])
    mem = Mem()
    mem.word(STACK + 8, 0x402000)
    for prev in (STACK + 16, STACK + 0x100):
        stop = assert_stop(run(Frame(0x401008, STACK, 0), A.AMD64, mem, finder(idx), topmost=False, prev_cfa=prev),
                           StopReason.CFA_NOT_INCREASING)
        assert stop.message == ("Backtrace stopped: previous frame inner to this frame (corrupt stack?): "
                                "CFA %#x, previous frame's CFA %#x" % (STACK + 16, prev))
    res = run(Frame(0x401008, STACK, 0), A.AMD64, mem, finder(idx), topmost=False, prev_cfa=STACK + 15)
    assert res.cfa == STACK + 16


def test_fp_below_sp_when_cfa_fp_based():
    idx = amd64_one([16, -16], SFP)
    mem = Mem()
    fp = STACK - 0x20
    mem.word(fp + 8, 0x402000)
    mem.word(fp, 0)
    assert_stop(run(Frame(0x401008, STACK, fp), A.AMD64, mem, finder(idx), topmost=True), StopReason.FP_BELOW_SP)
    res = run(Frame(0x401008, fp, fp), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.cfa, res.fp) == (0x402000, fp + 16, 0)
    # an FP-based CFA with FP unknown
    stop = assert_stop(run(Frame(0x401008, STACK), A.AMD64, mem, finder(idx), topmost=True),
                       StopReason.UNSAFE_UNWIND)
    assert "rbp" in stop.detail


def _fails_short(mem):
    return lambda addr, size: mem.read(addr, size)[:-1]


def _fails_none(addr, size):
    return None


def _fails_raise(addr, size):
    raise RuntimeError("boom")


@pytest.mark.parametrize("kind", ["unmapped", "short", "none", "raise"])
def test_memory_read_failure(kind):
    idx = amd64_one([16, -16])
    mem = Mem()
    mem.word(STACK + 8, 0x402000)          # RA readable, saved FP slot (STACK) not
    read = {"unmapped": mem.read, "short": _fails_short(mem), "none": _fails_none, "raise": _fails_raise}[kind]
    res = step(Frame(0x401008, STACK, 0), abi=A.AMD64, read=read, find=finder(idx), topmost=True)
    stop = assert_stop(res, StopReason.MEMORY_READ)
    want = STACK if kind == "unmapped" else STACK + 8
    assert stop.address == want
    assert stop.message == "Backtrace stopped: Cannot access memory at address %#x" % want


def test_depth_limit():
    # f calls itself: every frame has CFA = SP + 16, RA at CFA - 8
    f = 0x401000
    idx = amd64_one([16])
    mem = Mem()
    for i in range(50):
        mem.word(STACK + 16 * i + 8, f + 9)
    items = list(walk(Frame(f + 9, STACK, 0), abi=A.AMD64, read=mem.read, find=finder(idx), limit=10))
    frames, stop = items[:-1], items[-1]
    assert len(frames) == 10 and [fr.sp for fr in frames] == [STACK + 16 * i for i in range(10)]
    assert_stop(stop, StopReason.DEPTH_LIMIT)
    assert "10" in stop.message
    # the default limit is 100,000
    frames, stop = backtrace(Frame(f + 9, STACK, 0), abi=A.AMD64, read=mem.read, find=finder(idx))
    assert len(frames) == 51 and stop.reason is StopReason.MEMORY_READ and stop.address == STACK + 16 * 50 + 8


def test_walk_stops_on_loop():
    # a corrupt stack pointing back at itself: the CFA stops increasing
    idx = amd64_one([16, -16], SFP)
    mem = Mem()
    fp = STACK
    mem.word(fp + 8, 0x401008)
    mem.word(fp, fp)                        # saved rbp = itself
    frames, stop = backtrace(Frame(0x401008, fp, fp), abi=A.AMD64, read=mem.read, find=finder(idx))
    assert [f.cfa for f in frames[1:]] == [fp + 16]
    assert stop.reason is StopReason.FP_BELOW_SP      # frame 1: SP = fp + 16, FP = fp


def test_walk_stops_when_cfa_repeats_s390x():
    # s390x: SP = CFA - 160, so CFA > SP alone cannot catch a frame that repeats its CFA
    idx = index_of(3, S390, [Func(0x401000, 0x40, [Row(0, (0,)), Row(8, (0, -48, -72), SFP)])])
    mem = Mem(big=True)
    r11 = STACK + 0x100
    mem.word(r11 + 160 - 48, 0x401010)     # returns into itself
    mem.word(r11 + 160 - 72, r11)          # and restores the same r11
    frames, stop = backtrace(Frame(0x401010, r11, r11, ra=0x5), abi=A.S390X, read=mem.read, find=finder(idx))
    assert [(f.pc, f.sp, f.fp, f.cfa) for f in frames] == [(0x401010, r11, r11, None), (0x401010, r11, r11, r11 + 160)]
    assert stop.reason is StopReason.CFA_NOT_INCREASING


# ---------------------------------------------------------------------------------------------
# No SFrame: frame-pointer fallback or NO_SFRAME


def fp_chain(mem, frames):
    """frames: [(fp, ra, caller_fp)] written as x86-64/AArch64 frame records."""
    for fp, ra, caller in frames:
        mem.word(fp, caller)
        mem.word(fp + 8, ra)


X86_FP_PROLOGUE = bytes.fromhex("f30f1efa554889e5")          # endbr64; push %rbp; mov %rsp,%rbp
X86_DRAP_PROLOGUE = bytes.fromhex("4c8d542408" "4883e4c0" "41ff72f8" "55" "4889e5")   # lea 8(%rsp),%r10; and $-64,%rsp; ...
A64_FP_PROLOGUE = bytes.fromhex("3f2303d5" "fd7bbda9" "fd030091")   # paciasp; stp x29, x30, [sp, #-48]!; mov x29, sp


def functions(mem, prologue, starts):
    """symbolize(addr) for functions at `starts` (each up to the next 4 KiB page), whose code
    begins with `prologue`."""
    for start in starts:
        mem.put(start, prologue.ljust(64, b"\0"))

    def symbolize(addr):
        start = addr & ~0xFFF
        return ("f%x" % start, addr - start) if start in starts else None
    return symbolize


@pytest.mark.parametrize("version", [1, 2])
def test_fp_fallback_promised_by_header(version):
    flags = F.Flag.FDE_SORTED | F.Flag.FRAME_POINTER
    idx = index_of(version, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401000, 0x10, [Row(0, (8,))])], flags=flags)
    mem = Mem()
    fp1, fp2 = STACK + 0x40, STACK + 0x100
    fp_chain(mem, [(fp1, 0x401234, fp2), (fp2, 0x401444, 0)])
    # 0x401100 is in the module but in no FDE
    sym = functions(mem, X86_FP_PROLOGUE, (0x401000,))
    res = run(Frame(0x401100, STACK, fp1), A.AMD64, mem, finder(idx), topmost=False, symbolize=sym)
    assert (res.pc, res.sp, res.fp, res.cfa, res.method) == (0x401234, fp1 + 16, fp2, fp1 + 16, Method.FRAME_POINTER)
    # without the flag: no fallback
    idx2 = index_of(version, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401000, 0x10, [Row(0, (8,))])])
    stop = assert_stop(run(Frame(0x401100, STACK, fp1), A.AMD64, mem, finder(idx2), topmost=False),
                       StopReason.NO_SFRAME)
    assert "0x401100" in stop.detail


def test_fp_fallback_by_parameter_and_chain_end():
    mem = Mem()
    fp1, fp2 = STACK + 0x40, STACK + 0x100
    fp_chain(mem, [(fp1, 0x601234, fp2), (fp2, 0x601444, 0)])
    sym = functions(mem, X86_FP_PROLOGUE, (0x601000,))
    frames, stop = backtrace(Frame(0x601010, STACK, fp1), abi=A.AMD64, read=mem.read, find=no_module,
                             fp_fallback=True, symbolize=sym)
    assert [(f.pc, f.sp, f.fp, f.method) for f in frames] == [
        (0x601010, STACK, fp1, None),
        (0x601234, fp1 + 16, fp2, Method.FRAME_POINTER),
        (0x601444, fp2 + 16, 0, Method.FRAME_POINTER)]
    assert stop.reason is StopReason.OUTERMOST and "frame pointer is zero" in stop.detail
    frames, stop = backtrace(Frame(0x601000, STACK, fp1), abi=A.AMD64, read=mem.read, find=no_module)
    assert len(frames) == 1 and stop.reason is StopReason.NO_SFRAME


def test_fp_fallback_checks():
    mem = Mem()
    sym = functions(mem, X86_FP_PROLOGUE, (0x601000,))

    def fp_run(frame, abi=A.AMD64, memory=mem, **kw):
        return run(frame, abi, memory, no_module, False, fp_fallback=True, symbolize=sym, **kw)
    assert_stop(fp_run(Frame(0x601010, STACK, STACK + 4)), StopReason.CFA_MISALIGNED)
    assert_stop(fp_run(Frame(0x601010, STACK, STACK - 0x40)), StopReason.FP_BELOW_SP)
    assert_stop(fp_run(Frame(0x601010, STACK, STACK + 0x40), prev_cfa=STACK + 0x80), StopReason.CFA_NOT_INCREASING)
    stop = assert_stop(fp_run(Frame(0x601010, STACK, STACK + 0x40)), StopReason.MEMORY_READ)
    assert stop.address == STACK + 0x48
    mem.word(STACK + 0x48, 0)
    assert_stop(fp_run(Frame(0x601010, STACK, STACK + 0x40)), StopReason.OUTERMOST)
    assert_stop(fp_run(Frame(0x601010, STACK)), StopReason.NO_SFRAME)
    assert_stop(fp_run(Frame(0x601010, STACK, STACK + 0x40), A.S390X, Mem(True)), StopReason.NO_SFRAME)


def test_fp_fallback_only_through_a_frame_record():
    """`sframe bt -f` never gives a wrong frame: the frame pointer is followed only where the
    function's prologue made it a frame record before the PC; a stack-realigning (DRAP) function,
    one without a frame pointer, one whose start no symbol gives, or a PC before the prologue's end
    (or after the epilogue restored FP, in the topmost frame) stops the walk, saying why."""
    mem = Mem()
    fp1 = STACK + 0x40
    fp_chain(mem, [(fp1, 0x601234, STACK + 0x100)])
    sym = functions(mem, X86_FP_PROLOGUE, (0x601000,))
    sym_drap = functions(mem, X86_DRAP_PROLOGUE, (0x701000,))
    sym_none = functions(mem, bytes.fromhex("4883ec18"), (0x801000,))      # sub $0x18,%rsp

    def fp_run(pc, symbolize, topmost=False, abi=A.AMD64, memory=mem):
        return run(Frame(pc, STACK, fp1), abi, memory, no_module, topmost, fp_fallback=True, symbolize=symbolize)
    assert fp_run(0x601010, sym).pc == 0x601234
    for pc, symbolize, words in ((0x701020, sym_drap, "realigns its stack first"),
                                 (0x801020, sym_none, "keeps no frame pointer"),
                                 (0x601010, lambda addr: None, "no symbol gives the start"),
                                 (0x601005, sym, "not set up yet")):
        stop = assert_stop(fp_run(pc, symbolize, topmost=pc == 0x601005), StopReason.FP_UNTRUSTED)
        assert words in stop.detail, stop
    # the topmost frame past `leave`: FP is the caller's again
    mem.put(0x601008, b"\x90" * 0x18 + bytes.fromhex("90c9c3") + b"\x90" * 0x40)     # (nops, leave, ret)
    stop = assert_stop(fp_run(0x601022, sym, topmost=True), StopReason.FP_UNTRUSTED)
    assert "restored its caller's frame pointer" in stop.detail


@pytest.mark.parametrize("prologue,cfa_offset", [
    (A64_FP_PROLOGUE, 48),
    (bytes.fromhex("ff0301d1" "fd7b02a9" "fd830091"), 0x40 - 0x20),    # sub sp, sp, #64; stp x29, x30, [sp, #32]; add x29, sp, #32
])
def test_fp_fallback_aarch64_frame_records(prologue, cfa_offset):
    mem = Mem()
    fp1 = STACK + 0x40
    fp_chain(mem, [(fp1, 0x601234, STACK + 0x100)])
    sym = functions(mem, prologue, (0x601000,))
    res = run(Frame(0x601020, STACK, fp1), A.AARCH64_LE, mem, no_module, False, fp_fallback=True, symbolize=sym)
    assert (res.pc, res.cfa, res.sp) == (0x601234, fp1 + cfa_offset, fp1 + cfa_offset)
    # the topmost frame after `ldp x29, x30, [sp], #48`: x29 is the caller's again
    sym_end = functions(mem, A64_FP_PROLOGUE + bytes.fromhex("1f2003d5" "fd7bc3a8" "c0035fd6"), (0x801000,))
    stop = assert_stop(run(Frame(0x801014, STACK, fp1), A.AARCH64_LE, mem, no_module, True, fp_fallback=True,
                           symbolize=sym_end), StopReason.FP_UNTRUSTED)
    assert "restored its caller's frame pointer" in stop.detail
    assert run(Frame(0x801010, STACK, fp1), A.AARCH64_LE, mem, no_module, True, fp_fallback=True,
               symbolize=sym_end).pc == 0x601234
    sym_bad = functions(mem, bytes.fromhex("ff4300d1"), (0x701000,))      # sub sp, sp, #16: no frame record
    stop = assert_stop(run(Frame(0x701020, STACK, fp1), A.AARCH64_LE, mem, no_module, False, fp_fallback=True,
                           symbolize=sym_bad), StopReason.FP_UNTRUSTED)
    assert "does not begin by setting up its frame record" in stop.detail


@pytest.mark.parametrize("sabi,abi,big", A64)
def test_fp_fallback_aarch64_strips_signed_lr(sabi, abi, big):
    mem = Mem(big)
    fp1 = STACK + 0x40
    fp_chain(mem, [(fp1, 0x3C00_0000_0060_1234, STACK + 0x100)])
    sym = functions(mem, A64_FP_PROLOGUE, (0x601000,))
    res = run(Frame(0x601010, STACK, fp1), abi, mem, no_module, False, fp_fallback=True, symbolize=sym)
    assert (res.pc, res.ra, res.ra_stripped, res.sp, res.fp) == (
        0x601234, 0x3C00_0000_0060_1234, True, fp1 + 48, STACK + 0x100)


# ---------------------------------------------------------------------------------------------
# Malformed sections never raise


def test_malformed_section_is_a_stop():
    data = bytearray(build(2, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401000, 0x10, [Row(0, (8,))])],
                           section_addr=SECTION))
    struct.pack_into("<I", data, F.HEADER_SIZE + 12, 0xFFFF)        # FDE 0's num_fres
    idx = SFrameIndex(bytes(data), SECTION)
    stop = assert_stop(run(Frame(0x401004, STACK, 0), A.AMD64, Mem(), finder(idx), True), StopReason.MALFORMED)
    assert "malformed SFrame section at byte offset" in stop.detail and stop.is_error


def test_finder_raising_sframe_error_is_malformed():
    def find(pc):
        SFrameIndex(b"\xe2\xde\x09" + bytes(40), SECTION)              # bad version
    stop = assert_stop(run(Frame(0x401004, STACK, 0), A.AMD64, Mem(), find, True), StopReason.MALFORMED)
    assert "version" in stop.detail


def test_abi_mismatch_is_malformed():
    idx = index_of(3, F.ABI.AARCH64_ENDIAN_LITTLE, [Func(0x401000, 0x10, [Row(0, (0,))])])
    assert_stop(run(Frame(0x401004, STACK, 0), A.AMD64, Mem(), finder(idx), True), StopReason.MALFORMED)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_sections_never_raise(data):
    version = data.draw(st.sampled_from([1, 2, 3]))
    sabi = data.draw(st.sampled_from(list(F.ABI)))
    flex = version == 3 and data.draw(st.booleans())
    words = data.draw(st.lists(st.integers(-128, 127), max_size=6))
    funcs = [Func(0x401000, 0x40, [Row(0, tuple(words)), Row(8, (16, -16))], fde_type=FLEX if flex else 0,
                  signal=version == 3 and data.draw(st.booleans()))]
    blob = bytearray(build(version, sabi, funcs, section_addr=SECTION))
    for _ in range(data.draw(st.integers(0, 4))):
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    abi = A.info(sabi)
    mem = Mem(abi.big_endian)
    for k in range(-8, 24):
        mem.word(STACK + 8 * k, data.draw(st.integers(0, 2 ** 64 - 1)))

    def find(pc):
        return SFrameIndex(bytes(blob), SECTION), None

    pc = data.draw(st.integers(0x400FF0, 0x401050))
    for topmost in (True, False):
        res = step(Frame(pc, STACK, data.draw(st.integers(0, 2 ** 64 - 1)), regs={3: 5, 10: STACK}),
                   abi=abi, read=mem.read, find=find, topmost=topmost, fp_fallback=data.draw(st.booleans()))
        assert isinstance(res, (Frame, Stop))
        if isinstance(res, Frame):
            assert res.pc != 0 and 0 <= res.sp < 2 ** 64 and res.level == 1


# ---------------------------------------------------------------------------------------------
# Signal frames


TRAMP = 0x7000_1000               # the C library's (or vDSO's) trampoline: in no SFrame module
INTR_PC = 0x401008                # interrupted function: mid-body of g below


def write_sigframe(mem, abi, lay, sp, pc, regs):
    """Lay out a kernel signal frame at sp: the block of saved registers `lay` describes."""
    base = sp + lay.block_at
    if lay.pointer_at is not None:
        ptr = sp + 176
        mem.word(sp + lay.pointer_at, ptr)
        base = ptr + lay.block_at
    for i, slot in enumerate(lay.slots):
        value = pc if slot == "pc" else regs.get(slot, 0x1000 + i)
        mem.word(base + 8 * i, value)


CASES = [
    ("amd64", F.ABI.AMD64_ENDIAN_LITTLE, A.AMD64, sigframe.AMD64_RT),
    ("aarch64", F.ABI.AARCH64_ENDIAN_LITTLE, A.AARCH64_LE, sigframe.AARCH64_RT),
    ("aarch64_be", F.ABI.AARCH64_ENDIAN_BIG, A.AARCH64_BE, sigframe.AARCH64_RT),
    ("s390x-rt", S390, A.S390X, sigframe.S390X_RT),
    ("s390x", S390, A.S390X, sigframe.S390X_NONRT),
]


def interrupted_funcs(sabi):
    # g's body at INTR_PC: a leaf still at "CFA = SP + k", RA in the link register (x86-64: on the stack)
    if sabi == F.ABI.AMD64_ENDIAN_LITTLE:
        rows = [Row(0, (8,)), Row(4, (16,))]
    elif sabi == S390:
        rows = [Row(0, (0,))]
    else:
        rows = [Row(0, (0,))]
    return [Func(0x401000, 0x20, rows), Func(0x402000, 0x20, rows[:1] if sabi != F.ABI.AMD64_ENDIAN_LITTLE
                                              else [Row(0, (8,))])]


@pytest.mark.parametrize("name,sabi,abi,lay", CASES, ids=[c[0] for c in CASES])
def test_signal_frame_by_code_bytes(name, sabi, abi, lay):
    mem = Mem(abi.big_endian)
    mem.put(TRAMP, lay.code)
    sp_tramp = STACK
    intr_sp = STACK + 0x2000
    regs = {abi.sp: intr_sp, abi.fp: 0xF00D, abi.ra: 0x402010, 3: 0x333}
    write_sigframe(mem, abi, lay, sp_tramp, INTR_PC, regs)
    res = run(Frame(TRAMP, sp_tramp, 0x1), abi, mem, no_module, topmost=False, prev_cfa=sp_tramp)
    assert isinstance(res, Frame), res
    assert (res.pc, res.sp, res.fp, res.cfa, res.method, res.interrupted) == (
        INTR_PC, intr_sp, 0xF00D, sp_tramp, Method.SIGNAL, True)
    assert res.regs[3] == 0x333
    assert res.ra == (None if name == "amd64" else 0x402010)
    # the interrupted frame unwinds like a topmost one: exact PC, its registers all valid
    idx = index_of(3, sabi, interrupted_funcs(sabi))
    if name == "amd64":
        mem.word(intr_sp + 8, 0x402010)
        want_cfa = intr_sp + 16
    else:
        want_cfa = intr_sp + (160 if sabi == S390 else 0)
    nxt = run(res, abi, mem, finder(idx), topmost=False, prev_cfa=STACK + 0x10000)
    assert (nxt.pc, nxt.cfa, nxt.sp, nxt.method) == (0x402010, want_cfa, want_cfa + abi.sp_val_offset, Method.SFRAME)
    # interrupted at the first byte of a function: looked up at the PC itself, not PC - 1
    res2 = Frame(0x402000, intr_sp, 0xF00D, ra=0x401010, regs=res.regs, interrupted=True)
    mem.word(intr_sp, 0x401010)
    nxt = run(res2, abi, mem, finder(idx), topmost=False)
    assert nxt.pc == 0x401010 and nxt.method is Method.SFRAME


@pytest.mark.parametrize("name,sabi,abi,lay", CASES, ids=[c[0] for c in CASES])
def test_signal_frame_topmost_inside_trampoline(name, sabi, abi, lay):
    mem = Mem(abi.big_endian)
    mem.put(TRAMP, lay.code)
    regs = {abi.sp: STACK + 0x2000, abi.fp: 0xF00D}
    write_sigframe(mem, abi, lay, STACK, INTR_PC, regs)
    for k in lay.insn_starts:
        res = run(Frame(TRAMP + k, STACK, 0), abi, mem, no_module, topmost=True)
        assert (res.pc, res.sp, res.method) == (INTR_PC, STACK + 0x2000, Method.SIGNAL)
    if len(lay.insn_starts) > 1:
        # a return address is always the trampoline's start: mid-sequence is not a signal frame
        k = lay.insn_starts[1]
        assert_stop(run(Frame(TRAMP + k, STACK, 0), abi, mem, no_module, topmost=False), StopReason.NO_SFRAME)


@pytest.mark.parametrize("name,sabi,abi,lay", CASES, ids=[c[0] for c in CASES])
def test_signal_frame_by_symbol(name, sabi, abi, lay):
    mem = Mem(abi.big_endian)                 # trampoline code not readable (e.g. a core file)
    write_sigframe(mem, abi, lay, STACK, INTR_PC, {abi.sp: STACK + 0x2000, abi.fp: 0xF00D})
    names = {v: k for k, v in abi.sigframe_symbols.items()}
    sym = {TRAMP: names[lay]}.get
    res = run(Frame(TRAMP, STACK, 0), abi, mem, no_module, topmost=False, symbol=sym)
    assert (res.pc, res.sp, res.fp, res.method) == (INTR_PC, STACK + 0x2000, 0xF00D, Method.SIGNAL)
    assert_stop(run(Frame(TRAMP, STACK, 0), abi, mem, no_module, topmost=False), StopReason.NO_SFRAME)
    assert_stop(run(Frame(TRAMP, STACK, 0), abi, mem, no_module, topmost=False, symbol=lambda pc: "memcpy"),
                StopReason.NO_SFRAME)


@pytest.mark.parametrize("name,sabi,abi,lay", CASES, ids=[c[0] for c in CASES])
def test_signal_frame_by_v3_signal_bit(name, sabi, abi, lay):
    tramp = 0x401100
    funcs = [Func(tramp, 0x10, [Row(0, (8,) if sabi == F.ABI.AMD64_ENDIAN_LITTLE else (0,))], signal=True)]
    idx = index_of(3, sabi, funcs)
    mem = Mem(abi.big_endian)
    if name == "s390x":
        mem.put(tramp, lay.code)               # s390x tells its two layouts apart by the code
    write_sigframe(mem, abi, lay, STACK, INTR_PC, {abi.sp: STACK + 0x2000, abi.fp: 0xF00D})
    # the handler returns to the FDE's first byte: PC - 1 is outside it, PC itself is the signal FDE
    res = run(Frame(tramp, STACK, 0), abi, mem, finder(idx), topmost=False)
    assert (res.pc, res.sp, res.fp, res.method) == (INTR_PC, STACK + 0x2000, 0xF00D, Method.SIGNAL)
    res = run(Frame(tramp + lay.insn_starts[-1], STACK, 0), abi, mem, finder(idx), topmost=True)
    assert (res.pc, res.method) == (INTR_PC, Method.SIGNAL)


def test_signal_bit_ignored_before_v3():
    data = bytearray(build(2, F.ABI.AMD64_ENDIAN_LITTLE, [Func(0x401100, 0x10, [Row(0, (8,))])],
                           section_addr=SECTION))
    data[F.HEADER_SIZE + 16] |= 0x80              # V2 FDE info byte: bit 7 is unused there
    idx = SFrameIndex(bytes(data), SECTION)
    assert idx.lookup(0x401104).fde.signal
    mem = Mem()
    mem.word(STACK, 0x401500)
    res = run(Frame(0x401104, STACK, 0), A.AMD64, mem, finder(idx), topmost=True)
    assert (res.pc, res.method) == (0x401500, Method.SFRAME)


def test_signal_frame_unreadable_is_memory_read():
    mem = Mem()
    mem.put(TRAMP, sigframe.AMD64_RT.code)
    stop = assert_stop(run(Frame(TRAMP, STACK, 0), A.AMD64, mem, no_module, topmost=False), StopReason.MEMORY_READ)
    assert stop.address == STACK + 40


def test_signal_frame_restoring_itself_stops():
    mem = Mem()
    mem.put(TRAMP, sigframe.AMD64_RT.code)
    write_sigframe(mem, A.AMD64, sigframe.AMD64_RT, STACK, TRAMP, {7: STACK})
    assert_stop(run(Frame(TRAMP, STACK, 0), A.AMD64, mem, no_module, topmost=False), StopReason.CFA_NOT_INCREASING)
    write_sigframe(mem, A.AMD64, sigframe.AMD64_RT, STACK, 0, {7: STACK + 64})
    assert_stop(run(Frame(TRAMP, STACK, 0), A.AMD64, mem, no_module, topmost=False), StopReason.OUTERMOST)


def test_walk_through_signal_handler_amd64():
    # raise_it -> (signal) -> handler -> in_handler; stopped in in_handler
    handler, in_handler, raise_it, start = 0x401100, 0x401200, 0x401300, 0x401400
    idx = index_of(3, F.ABI.AMD64_ENDIAN_LITTLE, [
        Func(handler, 0x20, [Row(0, (8,)), Row(4, (16,))]),
        Func(in_handler, 0x20, [Row(0, (8,))]),
        Func(raise_it, 0x40, [Row(0, (8,)), Row(1, (16, -16)), Row(4, (16, -16), SFP)]),
        Func(start, 0x20, [Row(0, ())])])
    mem = Mem()
    mem.put(TRAMP, sigframe.AMD64_RT.code)
    # main stack: raise_it interrupted at raise_it+0x10 with rbp-based frame
    intr_sp = STACK + 0x8000
    rbp = intr_sp + 0x20
    mem.word(rbp + 8, start + 5)
    mem.word(rbp, 0)
    # signal frame below the red zone, then handler's frames
    sig_sp = STACK + 0x1000
    write_sigframe(mem, A.AMD64, sigframe.AMD64_RT, sig_sp, raise_it + 0x10, {7: intr_sp, 6: rbp})
    h_sp = sig_sp - 16                          # handler: CFA = SP + 16, RA = TRAMP
    mem.word(sig_sp - 8, TRAMP)
    top_sp = h_sp - 8
    mem.word(top_sp, handler + 9)               # in_handler just entered
    frames, stop = backtrace(Frame(in_handler, top_sp, 0x4444), abi=A.AMD64, read=mem.read, find=finder(idx))
    assert [(f.pc, f.sp, f.fp, f.method) for f in frames] == [
        (in_handler, top_sp, 0x4444, None),
        (handler + 9, h_sp, 0x4444, Method.SFRAME),
        (TRAMP, sig_sp, 0x4444, Method.SFRAME),
        (raise_it + 0x10, intr_sp, rbp, Method.SIGNAL),
        (start + 5, rbp + 16, 0, Method.SFRAME)]
    assert stop.reason is StopReason.OUTERMOST
    assert frames[3].cfa == sig_sp and frames[4].cfa == rbp + 16


# Memory dumped from real processes stopped in a signal handler (tests/fixtures/signal.c), at the
# trampoline frame: `dump binary memory F $sp $sp+N` in GDB at "<signal handler called>", with
# the interrupted frame's registers as GDB's own signal-frame unwinder reported them.
#   x86-64: host GDB 13.1, Linux, gcc 12 -O2 -no-pie; trampoline glibc __restore_rt.
#   AArch64: gdb-multiarch 16 + qemu-aarch64 (sid); trampoline qemu's vDSO __kernel_rt_sigreturn.
#   s390x: gdb-multiarch + qemu-s390x; sa_handler (non-rt sigframe, svc 119) and SA_SIGINFO (rt, svc 173).
REAL_DUMPS = {
    "amd64": dict(
        abi=A.AMD64, tramp=0x7FFFF7E11050, sp=0x7FFFFFFFD980, code="48c7c00f0000000f05",
        pc=0x7FFFF7E5FEEC, intr_sp=0x7FFFFFFFE680, fp=0x1, ra=None,
        z="eNpjZ8AN/tdjil149uc7SFxgyT0w7cYEEeeCynO8+P8frM/OAcxXuPAfrI6RByIPpxlQ+Vxo9rz59xSsr+EZxDwYH2afMZjU"
          "ZgAAoRQklg=="),
    "aarch64": dict(
        abi=A.AARCH64_LE, tramp=0x7FEB527434EC, sp=0x7FEB48BFE460, code="681180d2010000d4",
        pc=0x7FEB482CB5BC, intr_sp=0x7FEB48BFF6C0, fp=0x7FEB48BFF6D0, ra=0x7FEB482CB5A8,
        z="eNpjYBicgIlUDRckwdSGQ6g0AwMjijJWuHopCK0gDaZWiEJogfvSqPqg5jLjsDZIAEJzEXKfnL3H63oEtxlKQ7UznFBQBcsv"
          "ECsJQlYHAxM5ILSDcCFY/kGZOtQ8iHpGNPc8kEMV//FjP1g9zJ0N7EVo9kDMvfC3GEX8wjeIvhVbdcD0ASh/D5QPAE6FOOo="),
    "s390x": dict(
        abi=A.S390X, tramp=0x7FA0569A361C, sp=0x7FA04D1FEF78, code="0a77",
        pc=0x7FA04C8B3F28, intr_sp=0x7FA04D1FF388, fp=0xA, ra=0x7FA04C8B3F1A,
        z="eNpjYKhf4Cv/uYMBSPs0vpzAAAZsh8D8ptYbIDpslgADA1jdBwUoLQNSZfuA7ziIH2pvHACh93MwoIPvDdah9k8fAFnsvvKf"
          "HCDmmclAzHlfwYATgNwz1QOZD7RXg52VgbEBJt9tr4Gm6SMqVyAGyuCC0hwIPtMqBgbZGwh1IHepK0DlGRHqQP46vwJCX4DZ"
          "K8WAFG5I+sgFjMj+DLW/vgNi/k+Ie8Uz3kH4vzOh8hMwjQD5h30FurkAdGNNqg=="),
    "s390x-rt": dict(
        abi=A.S390X, tramp=0x7F4C6B88C61E, sp=0x7F4C61FFEE50, code="0aad",
        pc=0x7F4C6A0B3F28, intr_sp=0x7F4C61FFF378, fp=0xA, ra=0x7F4C6A0B3F1A,
        z="eNpjYKj3Sfz/uYIBTL8zYCAIwOo80PgGUFoCKMAExMwgfnb3pQSEOIh+rwEW7zgmBxUPANFZTK03wOINDVDz3kP1vY8B2bDw"
          "/LYeIMUFYv////8XxF6BNAb6AyZsYon/PwjAOOysDIwN0HDJ4rbXQFP7EZUL9wMXlOZA8JlWMTDI3kCoA4XPdAU0d3BBwnn/"
          "Cgh9AGavFAM0XgHQgEiX"),
}


@pytest.mark.parametrize("name", sorted(REAL_DUMPS))
def test_signal_frame_real_dumps(name):
    d = REAL_DUMPS[name]
    abi = d["abi"]
    mem = Mem(abi.big_endian)
    mem.put(d["sp"], zlib.decompress(base64.b64decode(d["z"])))
    mem.put(d["tramp"], bytes.fromhex(d["code"]))
    res = run(Frame(d["tramp"], d["sp"], 0x1), abi, mem, no_module, topmost=False)
    assert isinstance(res, Frame), res
    assert (res.pc, res.sp, res.fp, res.ra, res.method) == (d["pc"], d["intr_sp"], d["fp"], d["ra"], Method.SIGNAL)


def test_stop_messages():
    s = Stop(StopReason.MEMORY_READ, pc=1, address=0x10)
    assert str(s) == "Backtrace stopped: Cannot access memory at address 0x10"
    s = Stop(StopReason.DEPTH_LIMIT, "limit of 5 frames")
    assert s.message == "Backtrace stopped: backtrace limit exceeded: limit of 5 frames" and s.is_error


def test_frame_reg_lookup():
    f = Frame(1, sp=0x10, fp=0x20, ra=0x30, regs={0: 5, 29: 99, 30: 98})
    assert [f.reg(A.AARCH64_LE, n) for n in (31, 29, 30, 0, 7)] == [0x10, 0x20, 0x30, 5, None]
    g = Frame(1, sp=0x10, regs={29: 99, 30: 98})
    assert (g.reg(A.AARCH64_LE, 29), g.reg(A.AARCH64_LE, 30)) == (99, 98)


def test_step_accepts_abi_number_and_bare_index():
    idx = amd64_one([16])
    mem = Mem()
    mem.word(STACK + 8, 0x402000)
    res = step(Frame(0x401008, STACK, 0), abi=int(F.ABI.AMD64_ENDIAN_LITTLE), read=mem.read,
               find=lambda pc: idx, topmost=True)
    assert res.pc == 0x402000


# ---------------------------------------------------------------------------------------------
# DWARF CFI where no SFrame covers the PC (the CLI's backtraces)

def _cfi_at(row):
    """cfi(pc) giving `row` for PCs of a module without SFrame at 0x601000-0x602000."""
    return lambda pc: row if 0x601000 <= pc < 0x602000 else None


def test_cfi_step_rules_and_trust():
    from sframekit.core.dwarf.rows import CfiRow
    from sframekit.core.sframe.rules import UNCHANGED, Rule, RuleKind
    from sframekit.core.unwind.unwinder import Method
    mem = Mem()
    mem.word(STACK + 0x18, 0x601234)           # RA at CFA - 8 (CFA = SP + 32)
    mem.word(STACK + 0x10, 0x1111)              # rbx at CFA - 16
    row = CfiRow(Rule(RuleKind.REGISTER, 32, reg=7), {16: Rule(RuleKind.AT_CFA, -8), 3: Rule(RuleKind.AT_CFA, -16),
                                                      12: UNCHANGED, 13: None}, "test FDE")
    regs = {3: 0xAAAA, 12: 0xC12, 13: 0xD13, 0: 0x1234}
    res = run(Frame(0x601100, STACK, 0x5555, regs=regs), A.AMD64, mem, no_module, True, cfi=_cfi_at(row))
    assert res.method is Method.CFI and (res.pc, res.sp, res.cfa) == (0x601234, STACK + 32, STACK + 32)
    # rbx from its slot, r12 unchanged, r13 (an expression) unknown, rax (caller-saved) not carried, FP unchanged
    assert res.regs == {3: 0x1111, 12: 0xC12, 6: 0x5555} and res.fp == 0x5555
    # Without the option, the same PC has no unwind information.
    assert_stop(run(Frame(0x601100, STACK, 0x5555, regs=regs), A.AMD64, mem, no_module, True), StopReason.NO_SFRAME)
    # A CFA based on a register the frame does not know, RA undefined: stops, with their reasons.
    odd = CfiRow(Rule(RuleKind.REGISTER, 16, reg=10), row.regs, "drap FDE")
    stop = assert_stop(run(Frame(0x601100, STACK, 0x5555), A.AMD64, mem, no_module, False, cfi=_cfi_at(odd)),
                       StopReason.UNSAFE_UNWIND)
    assert "r10" in stop.detail and "drap FDE" in stop.detail
    end = CfiRow(row.cfa, {16: Rule(RuleKind.UNDEFINED)}, "_start")
    assert_stop(run(Frame(0x601100, STACK, 0x5555), A.AMD64, mem, no_module, False, cfi=_cfi_at(end)),
                StopReason.OUTERMOST)


def test_cfi_step_ra_in_its_register_only_at_the_top():
    """AArch64: a CFI row with no rule for x30 keeps the RA in x30, which is true in the topmost
    frame only: a caller's x30 is its own return address (the same frame again)."""
    from sframekit.core.dwarf.rows import CfiRow
    from sframekit.core.sframe.rules import Rule, RuleKind
    row = CfiRow(Rule(RuleKind.REGISTER, 16, reg=31), {}, "leaf FDE")
    frame = Frame(0x601100, STACK, STACK + 0x40, ra=0x601800, regs={30: 0x601800})
    res = run(frame, A.AARCH64_LE, Mem(), no_module, True, cfi=_cfi_at(row))
    assert res.pc == 0x601800 and res.cfa == STACK + 16
    stop = assert_stop(run(frame, A.AARCH64_LE, Mem(), no_module, False, cfi=_cfi_at(row)), StopReason.UNSAFE_UNWIND)
    assert "still in x30" in stop.detail
