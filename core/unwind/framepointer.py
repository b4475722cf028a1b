"""Whether a frame pointer is a frame record, for the frame-pointer fallback (`--fp-fallback`,
`sframe bt -f`, a module whose SFrame header promises frame pointers).

Following [FP] and [FP + ptr] is right only where the function's own prologue made FP point at
its frame record, at a known distance below its CFA: x86-64 `push %rbp; mov %rsp,%rbp` as its
first instructions (CFA = FP + 16); AArch64 `stp x29, x30, [sp, #-N]!; mov x29, sp` (CFA = FP +
N) or `sub sp, sp, #M; stp x29, x30, [sp, #K]; add x29, sp, #K` (CFA = FP + M - K), after the
pointer-authentication and branch-target hints.  A function that realigns its stack before it
sets FP up (GCC's DRAP: `lea 8(%rsp),%r10; and $-64,%rsp; push -8(%r10); push %rbp; ...`)
keeps a copy of the return address at FP + 8 but its CFA elsewhere, and one compiled without
frame pointers leaves its caller's FP there: following either gives a wrong caller.  So the
function's start must be known (its symbol) and its code readable; otherwise the walk stops.
"""

from typing import Callable, Optional, Tuple, Union

from ..arch import abi as abimod
from ..saves import x86insn

PROLOGUE_WINDOW = 64          # bytes of a function's start read to find its prologue
_X86_RBP = 5                  # hardware number of %rbp
_X86_LEAVE = 0xC9
_A64_HINTS = (0xD503233F, 0xD503237F, 0xD503245F, 0xD50324DF, 0xD503241F)   # paciasp, pacibsp, bti c/jc, bti


def record_cfa_offset(abi: abimod.ABIInfo, start: int, pc: int, read: Callable[[int, int], Optional[bytes]],
                      topmost: bool) -> Union[int, str]:
    """CFA - FP in the frame at `pc` (its look-up address) of the function starting at `start`,
    where its prologue made FP its frame record before `pc`; else why the frame pointer cannot
    be trusted there."""
    if abi.sframe_abi == abimod.AMD64.sframe_abi:
        return _x86(start, pc, read, topmost)
    if abi.sframe_abi in (abimod.AARCH64_LE.sframe_abi, abimod.AARCH64_BE.sframe_abi):
        return _a64(start, pc, read, topmost)
    return "%s has no frame-pointer chain" % abi.name


def _code(read, start: int, size: int) -> Optional[bytes]:
    """Up to `size` bytes from `start`, as many as can be read (halving: a function may end a
    mapping), or None."""
    while size >= 4:
        try:
            data = read(start, size)
        except Exception:          # the reader may fail however it likes: unreadable
            data = None
        if data:
            return bytes(data)
        size //= 2
    return None


def _x86(start: int, pc: int, read, topmost: bool) -> Union[int, str]:
    span = max(PROLOGUE_WINDOW, pc - start + 16) if topmost else PROLOGUE_WINDOW
    code = _code(read, start, min(span, 1 << 16))
    if not code:
        return "the code at the function's start (%#x) cannot be read" % start
    insns, _end = x86insn.decode_all(bytes(code), start, len(code))
    body = [i for i in insns if not i.quiet]
    if len(body) < 2 or not (body[0].kind is x86insn.Kind.PUSH and body[0].reg == _X86_RBP
                             and body[1].kind is x86insn.Kind.MOV_FP_SP):
        return ("the function at %#x does not begin by setting up its frame pointer (push %%rbp; mov %%rsp,%%rbp): "
                "it realigns its stack first or keeps no frame pointer" % start)
    ready = body[1].addr + body[1].length
    if pc < ready:
        return "the frame pointer is not set up yet at %#x (from %#x on)" % (pc, ready)
    if topmost:
        if _end < pc - start:
            return "the code from the function's start (%#x) to %#x cannot be read or decoded" % (start, pc)
        for ins in body[2:]:
            if ins.addr >= pc:
                break
            if (ins.kind is x86insn.Kind.POP and ins.reg == _X86_RBP) or \
                    (ins.length == 1 and code[ins.addr - start] == _X86_LEAVE):
                return "the function restored its caller's frame pointer at %#x, before %#x" % (ins.addr, pc)
    return 16


def _words(code: bytes) -> Tuple[int, ...]:
    """AArch64 instructions are little-endian words in either data byte order."""
    return tuple(int.from_bytes(code[k:k + 4], "little") for k in range(0, len(code) - 3, 4))


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def _a64(start: int, pc: int, read, topmost: bool) -> Union[int, str]:
    span = max(PROLOGUE_WINDOW, pc - start + 4) if topmost else PROLOGUE_WINDOW
    code = _code(read, start, min(span, 1 << 16))
    if not code:
        return "the code at the function's start (%#x) cannot be read" % start
    words = _words(code)
    k = 0
    while k < len(words) and words[k] in _A64_HINTS:
        k += 1
    why = ("the function at %#x does not begin by setting up its frame record (stp x29, x30, [sp, #-N]!; "
           "mov x29, sp)" % start)
    if k + 1 >= len(words):
        return why
    w = words[k]
    if w & 0xFFC07FFF == 0xA9807BFD and words[k + 1] == 0x910003FD:     # stp x29, x30, [sp, #-N]!; mov x29, sp
        offset, ready = -8 * _sext((w >> 15) & 0x7F, 7), start + 4 * (k + 2)
    elif w & 0xFFC003FF == 0xD10003FF and k + 2 < len(words) and words[k + 1] & 0xFFC07FFF == 0xA9007BFD \
            and words[k + 2] & 0xFFC003FF == 0x910003FD and not w & 0x400000:
        # sub sp, sp, #M; stp x29, x30, [sp, #K]; add x29, sp, #K
        m, kk = (w >> 10) & 0xFFF, 8 * _sext((words[k + 1] >> 15) & 0x7F, 7)
        if (words[k + 2] >> 10) & 0xFFF != kk or words[k + 2] & 0x400000:
            return why
        offset, ready = m - kk, start + 4 * (k + 3)
    else:
        return why
    if offset <= 0:
        return why
    if pc < ready:
        return "the frame record is not set up yet at %#x (from %#x on)" % (pc, ready)
    if topmost:
        if start + 4 * len(words) < pc:
            return "the code from the function's start (%#x) to %#x cannot be read" % (start, pc)
        for k in range((ready - start) // 4, (pc - start) // 4):
            w = words[k]
            # ldp x29, x30, [sp], #N / [sp, #K]; mov sp, x29: the caller's frame pointer again
            if w & 0xFFC07FFF in (0xA8C07BFD, 0xA9407BFD) or w == 0x910003BF:
                return "the function restored its caller's frame pointer at %#x, before %#x" % (start + 4 * k, pc)
    return offset
