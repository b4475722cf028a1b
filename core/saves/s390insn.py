"""Just enough of the s390x (z/Architecture) instruction set for the save-slot analysis (core.saves.analysis).

An instruction is 2, 4 or 6 bytes long, as the two top bits of its first byte say, so a function
is walked without tables.  What the analysis needs from each instruction: the stores and loads of
registers relative to %r15 (the SP) or %r11 (the frame pointer) — STMG/STG/STD and LMG/LG/LD in
their short and long-displacement forms —, every way %r15 can change (AGHI, AGFI, LAY, LA, LGR,
and, conservatively, any other instruction that names %r15 as its first operand), and the control
flow (relative branches and calls, BCR returns, BC and BCR jumps to a computed address).

A callee-saved register copied into a floating-point register (LDGR: GCC's leaf functions park
r6-r13 there) is a save this analysis does not follow: it makes the register unknown.
"""

from typing import Dict, List, Optional, Tuple

from . import jumptables
from .flow import TO_TARGET, Flow, Op

SP, FP = 15, 11


def _sext(value, bits):
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def length(first: int) -> int:
    return (2, 4, 4, 6)[first >> 6]


def _disp20(b):
    """The signed 20-bit displacement of an RXY/RSY instruction (DL in bytes 2-3, DH in byte 4)."""
    return _sext(b[4] << 12 | (b[2] & 0xF) << 8 | b[3], 20)


def decode(b: bytes, addr: int, fpr_dwarf) -> Op:
    """The Op of the instruction in b (its whole length), at addr.  fpr_dwarf(n): DWARF number of %fn."""
    n = len(b)
    op = _branch(b, addr, n)
    if op is not None:
        return op
    first = b[0]
    if n == 6 and first in (0xEB, 0xE3, 0xED):
        got = _long_memory(b, addr, fpr_dwarf)
        if got is not None:
            return got
    if n == 4 and first in (0x60, 0x68):                         # STD, LD (12-bit unsigned displacement)
        x, base, disp = b[1] & 0xF, b[2] >> 4, (b[2] & 0xF) << 8 | b[3]
        places = ((fpr_dwarf(b[1] >> 4), base, None if x else disp),)
        return Op(addr, 4, stores=places) if first == 0x60 else Op(addr, 4, loads=places)
    if n == 4 and first == 0x50:                                 # ST: 32 bits of a register
        return Op(addr, 4, stores=((b[1] >> 4, b[2] >> 4, None),))
    if n == 4 and first == 0xB3 and b[1] == 0xC1:                # LDGR %fR1,%rR2: a GPR parked in an FPR
        return Op(addr, 4, writes=(fpr_dwarf(b[3] >> 4),), copy=(fpr_dwarf(b[3] >> 4), b[3] & 0xF))
    op = _sp_writes(b, addr, n)
    if n == 4 and first == 0xB3 and b[1] == 0xCD:                # LGDR %rR1,%fR2: and back
        return op._replace(writes=(b[3] >> 4,), copy=(b[3] >> 4, fpr_dwarf(b[3] & 0xF)))
    writes = _writes(b, n, fpr_dwarf)
    return op._replace(writes=writes) if writes else op


# First bytes of floating-point instructions whose first operand is a floating-point register.
_FP_FIRST = frozenset(tuple(range(0x20, 0x40)) + tuple(range(0x60, 0x80)) + (0xED,))
# B3xx instructions whose first operand is a general register.
_B3_GPR_RESULT = frozenset((0xCD, 0x8C, 0x98, 0x99, 0x9A, 0x9C, 0x9D, 0x9E, 0xA8, 0xA9, 0xAA, 0xAC, 0xAD, 0xAE,
                            0xE1, 0xE2, 0xE3, 0xE5, 0xE7, 0xE9, 0xEA, 0xEB, 0xED, 0xEF))
# B9 decimal floating point conversions from general registers: an FPR (pair) result.
_B9_FPR_RESULT = frozenset((0x51, 0x52, 0x53, 0x59, 0x5A, 0x5B))
# B3 binary floating point on extended (128-bit) operands, whose R1 names a pair of FPRs (n, n + 2):
# LPXBR LNXBR LTXBR LCXBR LDXBR LEXBR FIXBR AXBR SXBR MXBR DXBR SQXBR MXDBR LXDBR LXEBR CXFBR
# CXGBR CXLFBR CXLGBR LXR LZXR and their ...A forms.
# (and the hexadecimal multiply-and-adds B338-B33F, some of which write a pair).
_B3_EXTENDED = frozenset((0x40, 0x41, 0x42, 0x43, 0x45, 0x46, 0x47, 0x4A, 0x4B, 0x4C, 0x4D, 0x16, 0x07, 0x05,
                          0x06, 0x96, 0x92, 0xA6, 0xA2, 0x65, 0x76) + tuple(range(0x38, 0x40)))
# B3 binary floating point in the RRD format (multiply and add or subtract), R1 in the third byte.
_B3_RRD = frozenset((0x0E, 0x0F, 0x1E, 0x1F))
# Instructions that write an even-odd pair of general registers (R1, R1 + 1).
_PAIR_ONE = frozenset((0x1C, 0x1D, 0x5C, 0x5D, 0x0E, 0x0F, 0xA8, 0xA9, 0xBB))
_PAIR_B9 = frozenset((0x86, 0x87, 0x96, 0x97, 0x0D, 0x1D))
_PAIR_E3 = frozenset((0x86, 0x87, 0x96, 0x97, 0x0D, 0x1D))


# Formats whose second byte is no register: SI (TM, MVI, NI, CLI, OI, XI), SS (MVC, XC, CLC, ...,
# SRP, PACK, ...), SIL and SSE (E5xx), SSF (C8x).  SIY and the prefetches are told by their last
# byte, or by the low nibble of the second.
# (E8-EA: MVCIN, PKA, UNPKA; not EB-EF, which name registers: RSY shifts and rotates, RIE
# RISBG and compare-and-branch, RXE floating point, PLO, LMD)
_NO_REGISTER_FIRST = frozenset((0x91, 0x92, 0x94, 0x95, 0x96, 0x97, 0xE5, 0xC8) + tuple(range(0xD0, 0xE0))
                               + (0xE8, 0xE9, 0xEA) + tuple(range(0xF0, 0x100)))
_SIY = frozenset((0x51, 0x52, 0x54, 0x55, 0x56, 0x57, 0x6A, 0x6E, 0x7A, 0x7E))


def _names_no_register(b, n):
    first = b[0]
    return (first in _NO_REGISTER_FIRST or n == 6 and first == 0xEB and b[5] in _SIY
            or n == 6 and first == 0xE3 and b[5] == 0x36 or n == 6 and first == 0xC6 and b[1] & 0xF == 2)


def _self_copy(b, n) -> bool:
    """LR, LTR, LGR, LTGR of a register to itself (`ltgr %r6,%r6`: a test of the fifth argument,
    which is callee-saved): the register keeps its value."""
    if n == 2 and b[0] in (0x18, 0x12):
        return b[1] >> 4 == b[1] & 0xF
    return n == 4 and b[0] == 0xB9 and b[1] in (0x04, 0x02) and b[3] >> 4 == b[3] & 0xF


def _writes(b, n, fpr_dwarf):
    """The registers (DWARF numbers) an instruction not modelled otherwise may write: its first
    operand (a general or a floating-point register by the opcode; both where not known), the
    pair partner of even-odd pair instructions, R1-R3 of load-multiple, and the second operand of
    the string and crypto instructions that advance it."""
    first = b[0]
    if _reads_only(b, n) or _names_no_register(b, n) or n == 4 and first in (0x60, 0x70) \
            or n == 6 and first == 0xED and b[5] in (0x66, 0x67) or _self_copy(b, n):
        return ()
    rre = n == 4 and first in (0xB2, 0xB3, 0xB9)
    r1 = b[3] >> 4 if rre else b[1] >> 4
    gprs, fprs = [r1], []
    if first in _FP_FIRST:
        gprs, fprs = [], [r1]
    elif rre and first == 0xB9 and b[1] in _B9_FPR_RESULT:
        gprs, fprs = [], [r1, r1 + 2]
    elif first == 0xB3 and b[1] in _B3_GPR_RESULT:
        gprs = [r1]                   # LGDR, conversions to integers, extractions, EFPC
    elif first == 0xB3 and b[1] < 0xD0 and b[1] not in _B3_EXTENDED:
        gprs = []                     # short and long binary floating point: R1 alone (RRD: in the third byte)
        fprs = [r1] + ([b[2] >> 4] if b[1] in _B3_RRD else [])
    elif first == 0xB3:               # extended formats use pairs (f n, f n+2); decimal floating point
        gprs = []
        fprs = [r1, r1 + 2, b[2] >> 4, (b[2] >> 4) + 2]
    elif n == 6 and first == 0xE7:
        fprs = [r1]                   # vector: v0-v15 hold f0-f15
    if first in _PAIR_ONE or rre and first == 0xB9 and b[1] in _PAIR_B9 or n == 6 and (
            first == 0xE3 and b[5] in _PAIR_E3 or first == 0xEB and b[5] in (0x3E, 0x31)):
        gprs.append(r1 + 1)
    if first in (0x98, 0xEF) or n == 6 and first == 0xEB and b[5] in (0x98, 0x96):   # LM, LMD, LMY, LMH: R1..R3
        r, r3 = r1, b[1] & 0xF
        while r != r3:
            r = (r + 1) % 16
            gprs.append(r)
    if first == 0xB2 or first == 0xB9 and (0x2A <= b[1] <= 0x3F or 0xB0 <= b[1] <= 0xBF):
        r2 = b[3] & 0xF
        gprs += [r2, r2 + 1]          # string and crypto instructions advance their operands
    return tuple(r for r in gprs if r < 16) + tuple(fpr_dwarf(f) for f in fprs if f < 16)


def _branch(b, addr, n):
    first = b[0]
    if n == 4 and first == 0xA7 and b[1] & 0xF in (4, 5, 6, 7):   # BRC, BRAS, BRCT, BRCTG
        target = addr + 2 * _sext(b[2] << 8 | b[3], 16)
        kind = b[1] & 0xF
        if kind == 5:
            return Op(addr, 4, Flow.CALL, target=target)
        if kind == 4:
            return _conditional(addr, 4, b[1] >> 4, target)
        return Op(addr, 4, Flow.BRANCH, target=target)
    if n == 6 and first == 0xC0 and b[1] & 0xF in (4, 5):         # BRCL, BRASL
        target = addr + 2 * _sext(int.from_bytes(b[2:6], "big"), 32)
        if b[1] & 0xF == 5:
            return Op(addr, 6, Flow.CALL, target=target)
        return _conditional(addr, 6, b[1] >> 4, target)
    if n == 6 and first == 0xEC and b[5] in (0x76, 0x64, 0x77, 0x65, 0x7E, 0x7C, 0x7F, 0x7D, 0x44, 0x45):
        return Op(addr, 6, Flow.BRANCH, target=addr + 2 * _sext(b[2] << 8 | b[3], 16))   # compare and branch
    if n == 6 and first == 0xEC and b[5] in (0xF6, 0xE4, 0xF7, 0xE5, 0xFE, 0xFC, 0xFF, 0xFD):
        return Op(addr, 6, Flow.INDIRECT_OR_NEXT)     # compare and branch to a computed address (CRB, CIB, ...)
    if n == 6 and first == 0xE3 and b[5] == 0x47:                 # BIC M1,D2(X2,B2)
        return Op(addr, 6, Flow.INDIRECT if b[1] >> 4 == 15 else Flow.INDIRECT_OR_NEXT)
    if n == 2 and first == 0x07:                                  # BCR M1,R2
        mask, reg = b[1] >> 4, b[1] & 0xF
        if mask == 0 or reg == 0:
            return Op(addr, 2, nop=mask == 0 and reg != 0)       # a no-op (nopr: padding), a serialisation
        if mask == 15:
            return Op(addr, 2, Flow.STOP, returns=True) if reg == 14 else Op(addr, 2, Flow.INDIRECT)
        return Op(addr, 2, Flow.NEXT, returns=True) if reg == 14 else Op(addr, 2, Flow.INDIRECT_OR_NEXT)
    if n == 4 and first == 0x47:                                  # BC M1,D2(X2,B2): to a computed address
        mask = b[1] >> 4
        if mask == 0:
            return Op(addr, 4, nop=True)                          # nop: padding
        return Op(addr, 4, Flow.INDIRECT if mask == 15 else Flow.INDIRECT_OR_NEXT)
    if n == 2 and first in (0x0D, 0x05) or n == 4 and first in (0x4D, 0x45):      # BASR, BALR, BAS, BAL
        return Op(addr, n, Flow.CALL)
    if n == 4 and first in (0x84, 0x85):                          # BRXH, BRXLE
        return Op(addr, 4, Flow.BRANCH, target=addr + 2 * _sext(b[2] << 8 | b[3], 16))
    if n == 6 and first == 0xCC and b[1] & 0xF == 6:              # BRCTH
        return Op(addr, 6, Flow.BRANCH, target=addr + 2 * _sext(int.from_bytes(b[2:6], "big"), 32))
    if n == 2 and first == 0x06 or n == 4 and first in (0x46, 0x86, 0x87, 0x44) or n == 6 and (
            first == 0xE3 and b[5] == 0x46 or first == 0xC6 and b[1] & 0xF == 0):
        ex = n == 4 and first == 0x44 or n == 6 and first == 0xC6
        return Op(addr, n, Flow.INDIRECT_OR_NEXT, writes_all=ex)  # BCTR, BCT, BXH, BXLE, BCTG; EX, EXRL
    if n == 2 and first == 0x00:
        return Op(addr, 2, Flow.STOP)                             # an illegal instruction (a trap)
    return None


def _exrl_of_storage_op(code, pos) -> Optional[int]:
    """The offset in code of the target of the instruction at code[pos:], if it is an EXRL whose
    target, in the same code, is a storage-to-storage instruction (MVC, XC, CLC, ...: no register
    written, whatever length EXRL puts in).  Then it is an ordinary instruction for the analysis."""
    b = code[pos:pos + 6]
    if len(b) < 6 or b[0] != 0xC6 or b[1] & 0xF:
        return None
    target = pos + 2 * _sext(int.from_bytes(b[2:6], "big"), 32)
    return target if 0 <= target < len(code) and 0xD0 <= code[target] <= 0xDF else None


def _conditional(addr, n, mask, target):
    if mask == 0:
        return Op(addr, n)
    return Op(addr, n, Flow.JUMP if mask == 15 else Flow.BRANCH, target=target)


def _long_memory(b, addr, fpr_dwarf) -> Optional[Op]:
    """STMG/LMG (RSY), STG/LG and LAY (RXY), STDY/LDY: long-displacement forms."""
    first, last = b[0], b[5]
    r1, r3x, base, disp = b[1] >> 4, b[1] & 0xF, b[2] >> 4, _disp20(b)
    if first == 0xEB and last in (0x24, 0x04):                   # STMG / LMG R1,R3,D(B)
        regs, r = [], r1
        while True:
            regs.append(r)
            if r == r3x:
                break
            r = (r + 1) % 16
        places = tuple((reg, base, disp + 8 * k) for k, reg in enumerate(regs))
        if last == 0x24:
            return Op(addr, 6, stores=places)
        return Op(addr, 6, loads=places, sp=None if SP in regs else 0)
    if first == 0xE3 and last in (0x24, 0x04):                   # STG / LG R1,D(X,B)
        places = ((r1, base, None if r3x else disp),)
        if last == 0x24:
            return Op(addr, 6, stores=places)
        return Op(addr, 6, loads=places, sp=None if r1 == SP else 0)
    if first == 0xED and last in (0x67, 0x65):                   # STDY / LDY
        places = ((fpr_dwarf(r1), base, None if r3x else disp),)
        return Op(addr, 6, stores=places) if last == 0x67 else Op(addr, 6, loads=places)
    if first == 0xE3 and last == 0x71 and r1 == SP:              # LAY %r15,D(X,B)
        return _set_sp(addr, 6, base, r3x, disp)
    return None


def _set_sp(addr, n, base, index, disp):
    if index == 0 and base == SP:
        return Op(addr, n, sp=disp)
    if index == 0 and base == FP:
        return Op(addr, n, sp=None, sp_from_fp=disp)
    return Op(addr, n, sp=None)


def _sp_writes(b, addr, n):
    """The known ways to move %r15, and any other instruction whose first operand is %r15."""
    first = b[0]
    if n == 4 and first == 0xA7 and b[1] & 0xF == 0xB and b[1] >> 4 == SP:        # AGHI %r15,I
        return Op(addr, 4, sp=_sext(b[2] << 8 | b[3], 16))
    if n == 6 and first == 0xC2 and b[1] & 0xF == 8 and b[1] >> 4 == SP:          # AGFI %r15,I
        return Op(addr, 6, sp=_sext(int.from_bytes(b[2:6], "big"), 32))
    if n == 4 and first == 0x41 and b[1] >> 4 == SP:                               # LA %r15,D(X,B)
        return _set_sp(addr, 4, b[2] >> 4, b[1] & 0xF, (b[2] & 0xF) << 8 | b[3])
    if n == 4 and first == 0xB9 and b[1] == 0x04:                                  # LGR R1,R2
        r1, r2 = b[3] >> 4, b[3] & 0xF
        if r1 == SP:
            return Op(addr, 4, sp=None, sp_from_fp=0 if r2 == FP else None)
        return Op(addr, 4, fp_from_sp=0 if r1 == FP and r2 == SP else None, derives=(r1, r2, 0))
    if n == 4 and first == 0xA7 and b[1] & 0xF == 0xB:                            # AGHI R1,I
        return Op(addr, 4, derives=(b[1] >> 4, b[1] >> 4, _sext(b[2] << 8 | b[3], 16)))
    if n == 6 and first == 0xC2 and b[1] & 0xF == 8:                              # AGFI R1,I
        return Op(addr, 6, derives=(b[1] >> 4, b[1] >> 4, _sext(int.from_bytes(b[2:6], "big"), 32)))
    if n == 4 and first == 0x41 and not b[1] & 0xF and b[2] >> 4:                # LA R1,D(,B)
        return Op(addr, 4, derives=(b[1] >> 4, b[2] >> 4, (b[2] & 0xF) << 8 | b[3]))
    if n == 6 and first == 0xE3 and b[5] == 0x71 and not b[1] & 0xF and b[2] >> 4:   # LAY R1,D(,B)
        return Op(addr, 6, derives=(b[1] >> 4, b[2] >> 4, _disp20(b)))
    r1 = (b[3] >> 4) if n == 4 and first in (0xB2, 0xB3, 0xB9) else (b[1] >> 4)
    if r1 == SP and not _reads_only(b, n) and not _names_no_register(b, n):
        return Op(addr, n, sp=None)
    return Op(addr, n)


def _reads_only(b, n):
    """Instructions whose first operand is only read: stores, compares, tests."""
    first = b[0]
    if n == 6 and first in (0xE3, 0xEB) and b[5] in (0x24, 0x50, 0x20, 0x21, 0x30, 0x31, 0x3E, 0x3F, 0x72,
                                                      0x02, 0x8E, 0x26, 0x2F):
        return True                        # STG, STY, CG, CLG, CGF, CLGF, STRV, STCY, ... STMG (handled above)
    if n == 4 and first == 0xA7 and b[1] & 0xF in (0, 1, 2, 3, 0xE, 0xF):
        return True                        # TMxx, CHI, CGHI
    return n == 4 and first in (0x50, 0x42, 0x40, 0x59, 0x55, 0x49)   # ST, STC, STH, C, CL, CH


def words(code: bytes, start: int, fpr_dwarf, read=None, kept=(), sp_at=None, elsewhere=None) -> Optional[List[Op]]:
    """The Ops of a function's code, or None if its last instruction runs past its end.  With
    `read(addr, size)` (the program's data), a branch through a jump table goes to its targets
    (core.saves.jumptables; `kept`: the registers a call preserves, `sp_at`: SFrame's CFA - SP,
    `elsewhere`: where a case outside this code may be)."""
    ops = []
    pos = 0
    while pos < len(code):
        n = length(code[pos])
        if pos + n > len(code):
            return None
        executed = _exrl_of_storage_op(code, pos)
        if executed is not None:
            ops.append(Op(start + pos, n, executes=start + executed))
        else:
            ops.append(decode(code[pos:pos + n], start + pos, fpr_dwarf))
        pos += n
    ops = _traps(ops, code, start)
    if read is not None:
        found: list = []

        def all_defs():                 # (one scan of the function for every table, and the spills)
            if not found:
                found.append(_larl_defs_all(code, start, ops))
            return found[0]
        tables = jump_tables(code, start, ops, all_defs)
        spills = (15, 11, all_defs()) if tables else None
        for k, targets in jumptables.resolve(ops, tables, read, kept, sp_at or (lambda addr: None), True,
                                             elsewhere, spills).items():
            ops[k] = ops[k]._replace(targets=targets)
    return ops


def _traps(ops: List[Op], code: bytes, start: int) -> List[Op]:
    """GCC's trap (`__builtin_trap`, `__builtin_unreachable` checks) branches into the middle of
    an instruction whose second halfword starts with 0x00, an invalid opcode: the branch goes
    nowhere in the function (a jump stops; a conditional branch only falls through)."""
    starts = {op.addr for op in ops}
    end = start + len(code)
    for k, op in enumerate(ops):
        t = op.target
        if op.flow in TO_TARGET and t is not None and start <= t < end and t not in starts \
                and t % 2 == 0 and code[t - start] == 0:
            ops[k] = op._replace(flow=Flow.NEXT if op.flow is Flow.BRANCH else Flow.STOP, target=None)
    return ops


# -- jump tables (core.saves.jumptables) -----------------------------------------------------------


def jump_tables(code: bytes, start: int, ops: List[Op], all_defs=None) -> Dict[int, jumptables.Table]:
    """{index of a branch: its jumptables.Table} for GCC's two shapes of jump table:

        larl %rB, table                      larl %rB, table
        lg   %rE, 0(%rI,%rB)                 lg   %rT, 0(%rI,%rB)
        b    0(%rE,%rB)                      br   %rT

    a `switch` (64-bit entries: offsets from the table) and a table of label addresses (GCC's
    computed goto); other instructions may stand in between, writing none of their registers."""
    def raw(j):
        op = ops[j]
        return code[op.addr - start:op.addr - start + op.length]

    found: Dict[int, jumptables.Table] = {}
    defs_of: Dict[int, Dict[int, int]] = {}
    for k, op in enumerate(ops):
        if op.flow is not Flow.INDIRECT:
            continue
        b = raw(k)
        if len(b) == 4 and b[0] == 0x47 and b[1] >> 4 == 15 and not (b[2] & 0xF) << 8 | b[3]:
            x, bb = b[1] & 0xF, b[2] >> 4                  # b 0(%rX,%rB): the entry and the table, either way
            shapes = [(x, bb), (bb, x)] if x and bb else []
        elif len(b) == 2 and b[0] == 0x07 and b[1] >> 4 == 15:
            shapes = [(b[1] & 0xF, None)]                  # br %rT
        else:
            continue
        for target_reg, base in shapes:
            j = jumptables.last_write(ops, k, (target_reg,) if base is None else (target_reg, base))
            if j is None:
                continue
            lg = raw(j)
            if len(lg) != 6 or lg[0] != 0xE3 or lg[5] != 0x04 or lg[1] >> 4 != target_reg or _disp20(lg):
                continue                                   # lg %rE, 0(%rX,%rB), the table one of X and B
            pair = {lg[1] & 0xF, lg[2] >> 4} - {0}
            tables = pair if base is None else pair & {base}
            if len(tables) != 1 and base is not None:
                # GCC may load the table's address twice (`larl %r1,T; larl %r2,T`): one register
                # for the lg, the other for the branch, each set by a larl of the same address.
                tables = {r for r in pair if _same_larl(code, start, ops, j, r, k, base)}
            other = None
            if len(tables) == 2 and base is None:
                # lg %rT, 0(%rX,%rB): which of the two holds the table, which the index, only the
                # data flow can tell (jumptables: the one holding a table's address on every path)
                table_base, other = sorted(tables)
            elif len(tables) != 1:
                continue
            else:
                (table_base,) = tables
            if all_defs is None:
                all_defs = lambda: _larl_defs_all(code, start, ops)     # noqa: E731
            defs = defs_of.setdefault(table_base, {i: a for i, (r, a) in all_defs().items() if r == table_base})
            index = (pair - {table_base}).pop() if base is not None and len(pair) == 2 else None
            found[k] = jumptables.Table(j, table_base, defs, 8, base is not None, absolute=base is None,
                                        other_base=other,
                                        entries=_bound(code, start, ops, j, index) if index is not None else None)
            break
    return found


def _bound(code: bytes, start: int, ops: List[Op], j: int, index: int) -> Optional[int]:
    """The entries of the switch table whose entry ops[j] loads at index register `index`, where
    the bound check before it is plain, else None:

        clfi   %rI, n               (a 32-bit unsigned compare)
        jh     default              (the index is at most n where it falls through)
        ...                         (nothing else writes rI or rX)
        risbgz %rX, %rI, 29, 60, 3  (rX = the low 32 bits of rI, times 8)
        lg     %rE, 0(%rX,%rB)

    GCC's switch: the table has exactly as many entries as the check lets through."""
    def raw(i):
        op = ops[i]
        return code[op.addr - start:op.addr - start + op.length]
    scale, source = None, None
    i = j - 1
    while i >= 0 and j - i <= jumptables.WINDOW:
        op, b = ops[i], raw(i)
        if op.flow is Flow.BRANCH:
            break
        if op.flow is not Flow.NEXT or op.writes_all:
            return None
        if scale is None and index in op.writes:
            # RISBG(Z) %rX,%rI,I3,I4,I5 with I3 = 32 - 3, I4 = 63 - 3 (zero the rest), I5 = 3
            if len(b) != 6 or b[0] != 0xEC or b[5] not in (0x55, 0x59) or b[1] >> 4 != index \
                    or (b[2] & 0x3F, b[3], b[4]) != (29, 0x80 | 60, 3):
                return None
            scale, source = True, b[1] & 0xF
        elif scale is not None and source in op.writes:
            return None
        elif scale is None and any(load[0] == index for load in op.loads):
            return None
        i -= 1
    if scale is None or i < 1:
        return None
    b = raw(i)
    if not (len(b) == 4 and b[0] == 0xA7 and b[1] == 0x24 or len(b) == 6 and b[0] == 0xC0 and b[1] == 0x24):
        return None                                              # jh (BRC / BRCL with mask 2)
    c = raw(i - 1)
    if len(c) != 6 or c[0] != 0xC2 or c[1] & 0xF != 0xF or c[1] >> 4 != source:
        return None                                              # clfi %rI, n
    return int.from_bytes(c[2:6], "big") + 1


def _same_larl(code: bytes, start: int, ops: List[Op], j: int, reg: int, k: int, other: int) -> bool:
    """Do `reg` before ops[j] and `other` before ops[k] come from larl's of one address, each the
    register's last write within the window?"""
    def larl_before(at, r):
        i = jumptables.last_write(ops, at, (r,))
        return None if i is None else _larl_defs(code, start, ops[i:i + 1], r).get(0)
    a = larl_before(j, reg)
    return a is not None and a == larl_before(k, other)


def _larl_defs(code: bytes, start: int, ops: List[Op], reg: int) -> Dict[int, int]:
    """{index: address} of the `larl %reg, address` of the function."""
    return {i: addr for i, (r, addr) in _larl_defs_all(code, start, ops).items() if r == reg}


def _larl_defs_all(code: bytes, start: int, ops: List[Op]) -> Dict[int, Tuple[int, int]]:
    """{index: (register, address)} of every `larl` of the function."""
    defs = {}
    for i, op in enumerate(ops):
        b = code[op.addr - start:op.addr - start + op.length]
        if len(b) == 6 and b[0] == 0xC0 and b[1] & 0xF == 0:
            defs[i] = (b[1] >> 4, op.addr + 2 * _sext(int.from_bytes(b[2:6], "big"), 32))
    return defs
