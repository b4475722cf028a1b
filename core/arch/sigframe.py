"""Linux signal frames: recognising the signal-return trampoline and reading the saved registers.

When a signal handler returns, it returns into a tiny trampoline that calls rt_sigreturn.  At
that point SP points at the frame the kernel pushed (rt_sigframe), which holds the interrupted
context's registers at fixed offsets.  The offsets below were measured on real programs (see
tests/test_unwind.py): x86-64 under GDB 13 on Linux, AArch64 and s390x under qemu-user with
gdb-multiarch, in each case comparing GDB's own signal-frame unwinding against SP at the trampoline.

    x86-64  rt_sigframe: return address, then ucontext at SP; uc_mcontext.gregs at SP+40
            in the order r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip.
    AArch64 rt_sigframe: siginfo (128), ucontext (mcontext at +176); sigcontext.regs[0..30],
            sp, pc start at SP+312.
    s390x   rt (svc 173): _sigregs at SP+336: psw mask, psw addr, gprs[0..15] (psw addr at +344),
            access registers, fpc, fprs[0..15].
            non-rt (svc 119, handlers without SA_SIGINFO): sigcontext at SP+160 whose second
            word points at the _sigregs (psw mask, psw addr, gprs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Literal, Mapping, Optional, Protocol, Tuple


@dataclass(frozen=True)
class Layout:
    """Where one kind of signal frame keeps the interrupted registers."""
    name: str
    code: bytes           # the trampoline's instruction bytes, as they sit in memory
    insn_starts: tuple    # offsets of each instruction in `code` (a stopped PC may be on any of them)
    pointer_at: Optional[int]   # offset from SP of a pointer to the register block (None: block at SP + block_at)
    block_at: int         # offset of the register block from SP, or from the pointer
    slots: tuple          # one entry per 8-byte word of the block: DWARF regnum, "pc", a register
                          # name (the ABI gives its DWARF number), or None (skip)
    extra: tuple = ()     # more words after `slots`, read when readable (s390x floating-point registers)

    @property
    def block_size(self) -> int:
        return 8 * len(self.slots)


# gregs order r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip as DWARF numbers
_AMD64_ORDER = (8, 9, 10, 11, 12, 13, 14, 15, 5, 4, 6, 3, 1, 0, 2, 7, "pc")

AMD64_RT = Layout("x86-64 rt_sigframe", bytes.fromhex("48c7c00f000000" "0f05"), (0, 7),
                  None, 40, _AMD64_ORDER)

# Instructions are little-endian on AArch64 even in big-endian mode.
AARCH64_RT = Layout("AArch64 rt_sigframe", bytes.fromhex("681180d2" "010000d4"), (0, 4),
                    None, 312, tuple(range(31)) + (31, "pc"))

# psw addr, r0..r15, then the access registers (16 x 4 bytes), the floating-point control word
# (4 bytes and 4 of padding) and f0..f15: GCC's -O0 leaf functions keep r11 and r15 in
# floating-point registers, which the SFrame rules of the interrupted frame then name.
_S390_BLOCK = ("pc",) + tuple(range(16))
_S390_FPRS = (None,) * 9 + tuple("f%d" % n for n in range(16))
S390X_RT = Layout("s390x rt_sigframe", bytes.fromhex("0aad"), (0,), None, 344, _S390_BLOCK, _S390_FPRS)
S390X_NONRT = Layout("s390x sigframe", bytes.fromhex("0a77"), (0,), 168, 8, _S390_BLOCK, _S390_FPRS)

# Which ABI uses which layouts, and the trampolines' symbol names (glibc, musl, the kernel's
# vDSO), are in each ABI's description (core.arch.abi: sigframes, sigframe_symbols).


class SignalABI(Protocol):
    """What the functions below read of an ABI description (core.arch.abi.ABIInfo), named here so
    that this module, which the descriptions import for their layouts, does not import them."""
    big_endian: bool
    sigframes: Tuple[Layout, ...]
    sigframe_symbols: Mapping[str, Layout]

    def regnum(self, name: str) -> Optional[int]: ...


def layouts(abi: SignalABI) -> Tuple[Layout, ...]:
    """The signal-frame layouts of an ABI (first one: the default for a V3 signal FDE)."""
    return abi.sigframes


def by_symbol(abi: SignalABI, name: Optional[str]) -> Optional[Layout]:
    """Layout for a trampoline symbol name, or None."""
    if not name:
        return None
    return abi.sigframe_symbols.get(name)


def by_code(abi: SignalABI, pc: int, fetch: Callable[[int, int], Optional[bytes]], exact: bool) -> Optional[Layout]:
    """Layout whose trampoline code is at pc, or None.

    `fetch(addr, size)` returns bytes or None.  With `exact` (a topmost or interrupted frame)
    the PC may also sit on a later instruction of the sequence; a return address is always
    the trampoline's first instruction, so then only one read is made.
    """
    for lay in layouts(abi):
        starts = lay.insn_starts if exact else lay.insn_starts[:1]
        for k in starts:
            if pc < k:
                continue
            code = fetch(pc - k, len(lay.code))
            if code == lay.code:
                return lay
    return None


def recover(abi: SignalABI, lay: Layout, sp: int, read_exact: Callable[[int, int], bytes]) -> Tuple[Optional[int], Dict[int, int]]:
    """(pc, {dwarf regnum: value}) saved by the kernel, given SP at the trampoline.

    `read_exact(addr, size)` returns exactly `size` bytes or raises the unwinder's read error.
    """
    order: Literal["big", "little"] = "big" if abi.big_endian else "little"
    base = sp + lay.block_at
    if lay.pointer_at is not None:
        ptr = int.from_bytes(read_exact(sp + lay.pointer_at, 8), order)
        base = ptr + lay.block_at
    data = read_exact(base, lay.block_size)
    slots = lay.slots
    if lay.extra:
        try:
            data += read_exact(base + lay.block_size, 8 * len(lay.extra))
            slots += lay.extra
        except Exception:      # the general registers are enough to go on
            pass
    pc = None
    regs: Dict[int, int] = {}
    for i, slot in enumerate(slots):
        if slot is None:
            continue
        v = int.from_bytes(data[8 * i:8 * i + 8], order)
        if slot == "pc":
            pc = v
        elif isinstance(slot, str):
            num = abi.regnum(slot)
            if num is not None:
                regs[num] = v
        else:
            regs[slot] = v
    return pc, regs
