"""The ABI descriptions: every per-ABI fact the codec, the unwinder and the adapters need, as data.

Code elsewhere asks an `ABIInfo` what it needs ("is the RA in a register?", "is there a
frame-pointer chain?") instead of comparing ABI names; adding an ABI means adding one description
here (and its signal-frame layouts in `sigframe`).
"""

from __future__ import annotations  # annotations stay text: importing typing costs the CLI 5 ms

from dataclasses import dataclass, field
from functools import cached_property

from ..sframe import format as F
from . import sigframe as S


@dataclass(frozen=True)
class RelocKind:
    """An ELF relocation type that may complete an FDE start field in a relocatable file."""
    name: str
    size: int        # bytes written: 4 (V1/V2 start fields) or 8 (V3)
    pcrel: bool = False   # S + A - P (else S + A)


@dataclass(frozen=True)
class ABIInfo:
    name: str                 # for messages only: never compared
    title: str                # as `info sframe` and `sframe info` print it
    sframe_abi: F.ABI         # the header's ABI/arch identifier
    big_endian: bool
    sp: int                   # DWARF number of the stack pointer
    fp: int                   # DWARF number of the frame pointer
    ra: int                   # DWARF number of the return-address column/register
    regnames: dict[int, str] = field(repr=False)
    ra_in_register: bool = True        # the RA is a register (x30, r14); x86-64: only a stack slot
    pointer_auth: bool = False         # return addresses may be signed (AArch64 PAC)
    fp_chain: bool = True              # [FP] = caller's FP, [FP + ptr] = RA, CFA = FP + 2 ptr
    sframe_slot_registers: bool = False  # s390x: a V2 slot word may name a register; RA word 0 = padding
    sp_val_offset: int = 0    # caller's SP = CFA + this (s390x: -160)
    cfa_scale: int = 1        # default-FDE CFA offset = stored * scale - adjustment
    cfa_adjust: int = 0
    ptr_size: int = 8
    elf_machine: str = ""     # e_machine as pyelftools names it
    aliases: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)  # e.g. x29: fp
    callee_saved: tuple[int, ...] = ()   # DWARF numbers the psABI says a callee preserves
    entry_cfa_offset: int = 0            # at a function's first instruction, CFA = SP + this
    saves_move_cfa: bool = True          # a register save moves the CFA (s390x: STMG into the caller's area)
    sigframes: tuple[S.Layout, ...] = ()  # signal-frame layouts; the first is a V3 signal FDE's default
    sigframe_symbols: dict[str, S.Layout] = field(default_factory=dict, repr=False)
    relocations: dict[int, RelocKind] = field(default_factory=dict, repr=False)  # r_type -> kind (core.elf.reloc)
    relative_reloc: int = -1             # the dynamic R_*_RELATIVE type: a word the loader sets to base + addend
    # Callee-saved registers of which a callee preserves only the low `ptr_size` bytes, which are
    # what the unwinder recovers (AArch64: v8-v15, whose d8-d15 are preserved; a restore of d8
    # zeroes the rest of v8).
    partial: frozenset = frozenset()

    @cached_property
    def analysed(self) -> tuple[int, ...]:
        """The callee-saved registers the save-slot analysis answers for: all but the frame
        pointer, which SFrame's own FP rule covers.  (Worked out once: every function asks.)"""
        return tuple(r for r in self.callee_saved if r != self.fp)

    def regname(self, n: int | None) -> str:
        return self.regnames.get(n, "r%s" % n) if n is not None else "r%s" % n

    def regnum(self, name: str) -> int | None:
        """DWARF number for a register name (or None)."""
        for n, r in self.regnames.items():
            if r == name:
                return n
        return None

    def is_register(self, n: int) -> bool:
        """False for the x86-64 return-address column (DWARF 16), which no register holds."""
        return self.ra_in_register or n != self.ra

    @property
    def fp_chain_ra_offset(self) -> int:
        return self.ptr_size


AMD64 = ABIInfo(
    "amd64", "AMD64 little-endian", F.ABI.AMD64_ENDIAN_LITTLE, False, sp=7, fp=6, ra=16,
    regnames=dict(enumerate(["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"]
                            + ["r%d" % i for i in range(8, 16)] + ["rip"])),
    ra_in_register=False, elf_machine="EM_X86_64",
    callee_saved=(3, 6, 12, 13, 14, 15), entry_cfa_offset=8,
    sigframes=(S.AMD64_RT,), sigframe_symbols={"__restore_rt": S.AMD64_RT},
    relative_reloc=8,
    relocations={1: RelocKind("R_X86_64_64", 8), 2: RelocKind("R_X86_64_PC32", 4, True), 10: RelocKind("R_X86_64_32", 4),
                 11: RelocKind("R_X86_64_32S", 4), 24: RelocKind("R_X86_64_PC64", 8, True)})

_A64_NAMES = {i: "x%d" % i for i in range(31)}
_A64_NAMES[31] = "sp"
# DWARF 64-95 are v0-v31; what a callee preserves of v8-v15, and what the analysis follows, is
# their low 64 bits: d8-d15, the names they are shown by.
_A64_NAMES.update({64 + i: "d%d" % i for i in range(32)})


def _aarch64(name: str, title: str, sframe_abi: F.ABI, big_endian: bool) -> ABIInfo:
    """AArch64 in either byte order: everything else is the same."""
    return ABIInfo(name, title, sframe_abi, big_endian, sp=31, fp=29, ra=30, regnames=_A64_NAMES,
                   pointer_auth=True, elf_machine="EM_AARCH64", aliases={29: ("fp",), 30: ("lr",)},
                   callee_saved=tuple(range(19, 29)) + tuple(range(72, 80)), partial=frozenset(range(72, 80)),
                   sigframes=(S.AARCH64_RT,),
                   sigframe_symbols={"__kernel_rt_sigreturn": S.AARCH64_RT, "__restore_rt": S.AARCH64_RT},
                   relative_reloc=1027,
                   relocations={257: RelocKind("R_AARCH64_ABS64", 8), 258: RelocKind("R_AARCH64_ABS32", 4),
                                260: RelocKind("R_AARCH64_PREL64", 8, True), 261: RelocKind("R_AARCH64_PREL32", 4, True)})


AARCH64_LE = _aarch64("aarch64", "AArch64 little-endian", F.ABI.AARCH64_ENDIAN_LITTLE, False)
AARCH64_BE = _aarch64("aarch64_be", "AArch64 big-endian", F.ABI.AARCH64_ENDIAN_BIG, True)

# DWARF 16 + i is f<_S390X_FPRS[i]> (the s390x ELF ABI's register numbering).
_S390X_FPRS = (0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15)
_S390_NAMES = {i: "r%d" % i for i in range(16)}
_S390_NAMES.update({16 + i: "f%d" % n for i, n in enumerate(_S390X_FPRS)})
S390X = ABIInfo(
    "s390x", "s390x big-endian", F.ABI.S390X_ENDIAN_BIG, True, sp=15, fp=11, ra=14, regnames=_S390_NAMES,
    fp_chain=False, sframe_slot_registers=True,
    sp_val_offset=F.S390X_SP_VAL_OFFSET,
    cfa_scale=F.S390X_CFA_OFFSET_ALIGNMENT_FACTOR, cfa_adjust=F.S390X_CFA_OFFSET_ADJUSTMENT,
    elf_machine="EM_S390",
    callee_saved=tuple(range(6, 14)) + tuple(16 + _S390X_FPRS.index(n) for n in range(8, 16)),
    entry_cfa_offset=-F.S390X_SP_VAL_OFFSET, saves_move_cfa=False,
    sigframes=(S.S390X_RT, S.S390X_NONRT),
    sigframe_symbols={"__kernel_rt_sigreturn": S.S390X_RT, "__restore_rt": S.S390X_RT,
                      "__kernel_sigreturn": S.S390X_NONRT, "__restore": S.S390X_NONRT},
    relative_reloc=12,
    relocations={4: RelocKind("R_390_32", 4), 5: RelocKind("R_390_PC32", 4, True), 22: RelocKind("R_390_64", 8),
                 23: RelocKind("R_390_PC64", 8, True)})

ALL = (AMD64, AARCH64_LE, AARCH64_BE, S390X)
BY_ABI = {a.sframe_abi: a for a in ALL}


def info(abi: int) -> ABIInfo:
    """The description of a section's ABI/arch identifier (KeyError/ValueError if unknown)."""
    return BY_ABI[F.ABI(abi)]


def for_elf(machine: str, big_endian: bool) -> ABIInfo | None:
    """The description for an ELF file's e_machine and byte order (the machine's only ABI if the
    byte order matches none), or None."""
    same = [a for a in ALL if a.elf_machine == machine]
    for a in same:
        if a.big_endian == big_endian:
            return a
    return same[0] if same else None
