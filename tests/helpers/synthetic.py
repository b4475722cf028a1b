"""Synthetic SFrame sections of every shape, built with our encoder (for what no toolchain here emits)."""

from sframekit.core.sframe import format as F
from sframekit.core.sframe.encode import Func, Row, build

AMD64, A64LE, A64BE, S390X = (F.ABI.AMD64_ENDIAN_LITTLE, F.ABI.AARCH64_ENDIAN_LITTLE,
                              F.ABI.AARCH64_ENDIAN_BIG, F.ABI.S390X_ENDIAN_BIG)


def ctrl(reg=None, deref=False):
    """A flex-FDE control word: base register (None: the CFA) and dereference flag."""
    return (reg << 3 | 1 if reg is not None else 0) | (2 if deref else 0)


def funcs_for(abi, version):
    ra_fp = (-16,) if abi == AMD64 else (-8, -16)
    out = [
        Func(0x1000, 0x40, [Row(0, (8 if abi == AMD64 else 0,)), Row(4, (16,) + ra_fp), Row(0x30, (16,) + ra_fp, base=F.BaseReg.FP)]),
        Func(0x1040, 0x800, [Row(0, (1000,)), Row(0x100, (40000,) + ra_fp)]),
        Func(0x2000, 0x20000, [Row(0, (8,)), Row(0x10000, (100000,) + ra_fp)]),
        Func(0x30000, 0x40, [Row(0, (8,)), Row(11, (16,))], pc_type=F.PCType.MASK, rep_size=16),
    ]
    if version >= 3:
        out.append(Func(0x31000, 0x10, []))      # outermost: no FREs
        out.append(Func(0x31010, 0x10, [Row(0, ())], signal=True))
        out.append(Func(0x31020, 0x30, [Row(0, (ctrl(7), 8)), Row(4, (ctrl(6, True), -8, 0, ctrl(6, True), 0)),
                                        Row(8, (ctrl(10), 0, ctrl(None, True), -8, ctrl(None, True), -16)),
                                        Row(12, (ctrl(7), 16, ctrl(3), 0))], fde_type=F.FDEType.FLEX))
    if abi in (A64LE, A64BE):
        out.append(Func(0x32000, 0x20, [Row(0, (0,)), Row(4, (16, -16, -8), mangled=True)], pauth_key=F.PAuthKey.B))
    if abi == S390X:
        out.append(Func(0x33000, 0x20, [Row(0, (0,)), Row(6, (2, 0, -72))]))
        if version == 2:
            out.append(Func(0x34000, 0x20, [Row(0, (0, 24 * 2 + 1, 28 * 2 + 1))]))
    return out


def sections():
    """One section per (version, ABI), plus variants: absolute starts, unsorted, aux header."""
    out = []
    for version in (1, 2, 3):
        for abi in (AMD64, A64LE, A64BE, S390X):
            if version == 1 and abi == S390X:
                continue
            out.append(build(version, abi, funcs_for(abi, version), section_addr=0x1000))
    out.append(build(2, AMD64, funcs_for(AMD64, 2), flags=F.Flag.FDE_SORTED, section_addr=0x1000))
    out.append(build(2, AMD64, funcs_for(AMD64, 2)[::-1], flags=F.Flag.FDE_FUNC_START_PCREL, sort=False, section_addr=0x1000))
    out.append(build(3, AMD64, funcs_for(AMD64, 3), auxhdr=b"\x01\x02\x03\x04", section_addr=0x1000))
    out.append(build(1, AMD64, funcs_for(AMD64, 1), flags=F.Flag.FDE_SORTED | F.Flag.FRAME_POINTER, section_addr=0x1000))
    return out
