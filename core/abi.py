"""Per-ABI facts the unwinder and the printers need: DWARF register numbers and names."""

from dataclasses import dataclass, field

from . import format as F

_S390X_FPRS = [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15]   # DWARF 16..31 -> f<n>


@dataclass(frozen=True)
class ABIInfo:
    name: str
    big_endian: bool
    sp: int                   # DWARF number of the stack pointer
    fp: int                   # DWARF number of the frame pointer
    ra: int                   # DWARF number of the return-address column/register
    regnames: dict = field(repr=False)
    sp_val_offset: int = 0    # caller's SP = CFA + this (s390x: -160)
    cfa_scale: int = 1        # default-FDE CFA offset = stored * scale - adjustment
    cfa_adjust: int = 0
    ptr_size: int = 8

    def regname(self, n):
        return self.regnames.get(n, "r%d" % n)

    def regnum(self, name):
        """DWARF number for a register name (or None)."""
        for n, r in self.regnames.items():
            if r == name:
                return n
        return None


AMD64 = ABIInfo(
    "amd64", False, sp=7, fp=6, ra=16,
    regnames=dict(enumerate(["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"]
                            + ["r%d" % i for i in range(8, 16)] + ["rip"])))

_A64_NAMES = {i: "x%d" % i for i in range(31)}
_A64_NAMES[31] = "sp"
AARCH64_LE = ABIInfo("aarch64", False, sp=31, fp=29, ra=30, regnames=_A64_NAMES)
AARCH64_BE = ABIInfo("aarch64_be", True, sp=31, fp=29, ra=30, regnames=_A64_NAMES)

_S390_NAMES = {i: "r%d" % i for i in range(16)}
_S390_NAMES.update({16 + i: "f%d" % n for i, n in enumerate(_S390X_FPRS)})
S390X = ABIInfo("s390x", True, sp=15, fp=11, ra=14, regnames=_S390_NAMES,
                sp_val_offset=F.S390X_SP_VAL_OFFSET,
                cfa_scale=F.S390X_CFA_OFFSET_ALIGNMENT_FACTOR, cfa_adjust=F.S390X_CFA_OFFSET_ADJUSTMENT)

BY_ABI = {
    F.ABI.AMD64_ENDIAN_LITTLE: AMD64,
    F.ABI.AARCH64_ENDIAN_LITTLE: AARCH64_LE,
    F.ABI.AARCH64_ENDIAN_BIG: AARCH64_BE,
    F.ABI.S390X_ENDIAN_BIG: S390X,
}


def info(abi):
    return BY_ABI[F.ABI(abi)]
