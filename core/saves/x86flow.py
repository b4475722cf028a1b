"""x86-64 instructions as core.saves.flow Ops: the data flow that follows saves made by `mov`.

GCC 16 shrink-wraps x86-64 functions: it allocates the frame first (`sub $0x58, %rsp`) and saves a
callee-saved register with `mov %r15, 0x50(%rsp)` only on the paths that use it, restoring it with
`mov 0x50(%rsp), %r15`.  SFrame's CFA offset moves only with the allocation, so the push analysis
(core.saves.x86) cannot see these saves; the flow over every path can.  Each instruction measured
by core.saves.x86insn becomes an Op:

- push/pop of a register: a store/load at SP - 8 / SP, SP moved; a push of anything else, SP moved;
- a 64-bit `mov` of a register to, or from, memory at SP or FP + displacement: a store/load of it
  (with an index register: a store that cannot be placed);
- a store of a register through any other base is not taken for a save (GCC and Clang save only
  relative to SP or the frame pointer; a register saved elsewhere and then changed is UNKNOWN
  anyway, since only a load from its slot makes it the caller's again);
- any other instruction with a memory operand at SP or FP + displacement may write there
  (`clobbers`), except the ones known to read only; its register writes come from x86insn;
- SP: add/sub of an immediate, `lea d(%rsp), %rsp`, `mov %rbp, %rsp` and `leave` are followed;
  any other write of SP leaves it unknown here (SFrame gives it again where the CFA is SP-based);
- control: jcc/loop/xbegin branch, jmp jumps (outside the function: a tail call), call returns
  (and the memory below SP is the callee's), an indirect jmp goes to its jump table's targets
  (found by _jump_tables) or anywhere SFrame allows, ret/ud2/hlt stop.
"""

from typing import List, Optional, Tuple, Union

from . import jumptables
from . import x86insn as X
from .flow import Flow, Op

_D = X.DWARF_OF_HW
_SP_HW, _FP_HW = 4, 5
_SP, _FP = _D[_SP_HW], _D[_FP_HW]

# A call writes its return address below SP, and the callee its frame: whatever was kept there
# (a leaf's red zone) is gone.
_BELOW_SP = ((_SP, -(1 << 20), 1 << 20),)

# One-byte opcodes whose memory operand is only read (loads into a register, compares, tests).
_READS_ONE = frozenset((0x8A, 0x8B, 0x63, 0x69, 0x6B, 0x84, 0x85, 0x38, 0x39, 0x3A, 0x3B)
                       + tuple(b + k for b in range(0x00, 0x38, 8) for k in (2, 3)))
# 0F-map opcodes that only read theirs: movzx/movsx, bt, imul, cmov, the SSE loads into registers
# and compares (ucomis*, comis*).
_READS_TWO = frozenset((0xB6, 0xB7, 0xBE, 0xBF, 0xA3, 0xAF, 0x2E, 0x2F, 0x28, 0x10, 0x12, 0x16, 0x6F, 0x6E)
                       + tuple(range(0x40, 0x50)) + tuple(range(0x51, 0x60)))


class _Form:
    """The parts of an instruction the flow needs beyond x86insn's Insn."""
    __slots__ = ("map", "op", "modrm", "rex", "opsize16", "mem", "size")

    def __init__(self, code: bytes, pos: int):
        pos, self.opsize16, addr32, self.rex, _rep = X._prefixes(code, pos)
        pos, self.map, self.op = _opcode(code, pos)
        # (VEX/EVEX: up to a 512-bit operand)
        self.size = (8 if self.rex & 8 else 4) if self.map == 0 else 64 if self.map == 2 else 16
        self.modrm = -1
        self.mem: Optional[Tuple[Optional[int], bool, int]] = None
        if self._has_modrm():
            self.modrm = code[pos]
            if self.modrm >> 6 != 3:
                self.mem = _memory(code, pos, self.rex)
                self.size = self._width()

    def _width(self) -> int:
        """How many bytes at its memory operand the instruction may write: at least as many as
        it does (a write counted too wide can only make a saved register unknown)."""
        op, sub = self.op, (self.modrm >> 3) & 7
        if self.map == 0:
            if 0xD8 <= op <= 0xDF:                    # x87: fnsave 108, fnstenv 28, m80 10
                return 108 if (op, sub) in ((0xD9, 6), (0xDD, 6)) else 10
            if op == 0x8F:
                return 8                              # pop to memory: 64-bit in 64-bit mode
            if op in X._BYTE_OPS:
                return 1
            if self.rex & 8:
                return 8
            return 2 if self.opsize16 else 4
        if self.map == 1:
            if 0x90 <= op <= 0x9F:
                return 1                              # setcc r/m8
            if op == 0xAE and sub in (0, 4, 5, 6) or op == 0xC7 and sub in (3, 4, 5):
                return 4096                           # fxsave, xsave*: the whole extended state
            if op == 0x01 and sub in (0, 1):
                return 10                             # sgdt, sidt
        return self.size

    def _has_modrm(self) -> bool:
        if self.map == 0:
            spec = X._ONE.get(self.op)
            return spec is not None and spec[0] == "M"
        if self.map == 1:
            return self.op not in X._TWO_NONE and not 0x80 <= self.op <= 0x8F
        return not (self.map == 2 and self.op == 0x77)


def _opcode(code: bytes, pos: int) -> Tuple[int, int, int]:
    """(where the ModRM byte would be, opcode map, opcode) of the instruction whose opcode starts
    at pos (after its prefixes): map 0 the one-byte map, 1 0F, 0x38 and 0x3A the three-byte maps,
    2 VEX and EVEX."""
    op = code[pos]
    if op == 0x0F:
        op = code[pos + 1]
        if op in (0x38, 0x3A):
            return pos + 3, op, code[pos + 2]
        return pos + 2, 1, op
    if op in (0xC4, 0xC5, 0x62):
        pos += 1 + {0xC5: 1, 0xC4: 2, 0x62: 3}[op]
        return pos + 1, 2, code[pos]
    return pos + 1, 0, op


class _Head:
    """The opcode map and opcode of an instruction: all a branch's or another transfer's flow
    asks of it (_branch_flow, _transfer_flow, _returns), without the rest _Form works out."""
    __slots__ = ("map", "op")

    def __init__(self, code: bytes, pos: int):
        _after, self.map, self.op = _opcode(code, X._prefixes(code, pos)[0])


def _memory(code: bytes, pos: int, rex: int) -> Tuple[Optional[int], bool, int]:
    """(base register (hardware number; None: RIP-relative or absolute), indexed?, displacement)
    of the ModRM memory operand at pos."""
    modrm = code[pos]
    mod, rm = modrm >> 6, modrm & 7
    pos += 1
    base: Optional[int] = rm | (rex & 1) << 3
    indexed = False
    if rm == 4:
        sib = code[pos]
        pos += 1
        indexed = ((sib >> 3) & 7 | (rex >> 1 & 1) << 3) != 4
        base = sib & 7 | (rex & 1) << 3
        if mod == 0 and sib & 7 == 5:
            return None, indexed, int.from_bytes(code[pos:pos + 4], "little", signed=True)
    elif mod == 0 and rm == 5:
        return None, False, 0                  # RIP-relative: not the stack
    if mod == 1:
        disp = int.from_bytes(code[pos:pos + 1], "little", signed=True)
    elif mod == 2:
        disp = int.from_bytes(code[pos:pos + 4], "little", signed=True)
    else:
        disp = 0
    return base, indexed, disp


def _frame_base(mem) -> Optional[int]:
    """The DWARF number of SP or FP if the operand is SP/FP + displacement (no index), else None."""
    if mem is None or mem[1] or mem[0] not in (_SP_HW, _FP_HW):
        return None
    return _D[mem[0]]


def ops(code: bytes, start: int, read=None, kept=(), sp_at=None, measured=None, elsewhere=None) -> Optional[List[Op]]:
    """The Ops of a function's code, or None if an instruction cannot be measured or the last
    one runs past the end.  `read(addr, size)` (optional) reads the program's data: the jump
    tables, whose targets then replace "anywhere" as an indirect jump's successors.  `kept`: the
    DWARF registers a call preserves (the ABI's callee-saved ones); `sp_at(addr)`: SFrame's
    CFA - SP there, or None; `measured`: the instructions as x86insn measured them already;
    `elsewhere(addr)`: may a case of a switch outside this code be at addr (core.saves.jumptables)."""
    out: List[Op] = []
    if measured is not None:
        out = [_op(code, ins.addr - start, ins) for ins in measured]
    else:
        insns, pos = X.decode_all(code, start, len(code))
        if pos != len(code):
            return None
        out = [_op(code, ins.addr - start, ins) for ins in insns]
    if read is not None:
        for k, targets in _jump_tables(code, start, out, read, kept, sp_at or (lambda addr: None), elsewhere).items():
            out[k] = out[k]._replace(targets=targets)
    return out


def control(code: bytes, start: int, measured: Optional[Tuple[List[X.Insn], int]] = None) -> Optional[List[Op]]:
    """`ops` for a question of paths only (core.saves.noreturn): each Op with where control goes
    (flow, target, returns) and nothing of registers or memory, which takes a fraction of the
    time; an indirect jump's targets are not looked for (its jump table needs `ops`: asked for
    where the question reaches one).  `measured`: decode_all(code, start, len(code)), where known."""
    insns, pos = measured or X.decode_all(code, start, len(code))
    if pos != len(code):
        return None
    out: List[Op] = []
    append = out.append
    branch, jump_indirect = X.Kind.BRANCH, X.Kind.JUMP_INDIRECT
    # (An Insn's fields unpacked in their order: every instruction of every callee asked about.)
    for addr, length, kind, _reg, target, _sp_write, transfer, quiet, _writes in insns:
        if quiet:
            append(_AT(Op, (addr, length) + _NOP))
        elif kind is branch or transfer:
            try:
                f = _Head(code, addr - start)
            except IndexError:
                append(Op(addr, length, sp=None, writes_all=True))
                continue
            if kind is branch:
                append(_AT(Op, (addr, length, _branch_flow(f), target) + _AFTER_TARGET))
            elif kind is jump_indirect:
                append(Op(addr, length, Flow.INDIRECT))
            else:
                flow = _transfer_flow(f)
                append(Op(addr, length, flow, returns=_returns(f, flow)))
        else:
            append(_AT(Op, (addr, length) + _PLAIN))
    return out


# The fields after the address and length of a plain Op (control's: no jump, nothing known of
# registers) and of a no-op's, made into Ops by tuple.__new__: most of the ops control makes.
_PLAIN = Op(0, 0)[2:]
_NOP = Op(0, 0, nop=True)[2:]
_AFTER_TARGET = _PLAIN[2:]
_AFTER_CALL = Op(0, 0, clobbers=_BELOW_SP)[4:]     # (a call's Op after its target: what it may write below SP)
_AT = tuple.__new__


def _jump_tables(code: bytes, start: int, out: List[Op], read, kept, sp_at, elsewhere=None) -> dict:
    """{index of an indirect jump: its targets} for the jumps through GCC's and Clang's
    position-independent jump tables (32-bit entries, offsets from the table's start):

        lea    table(%rip), %rB     (on every path to the jump: core.saves.jumptables)
        movslq (%rB,%rI,4), %rA
        add    %rB, %rA             (or: add %rA, %rB and jmp *%rB)
        jmp    *%rA

    with other instructions in between that leave those registers alone; the table's length from
    the bound check before it, where it is plain (`_bound`)."""
    tables = {k: t for k in range(3, len(out)) if out[k].flow is Flow.INDIRECT
              for t in [_table_pattern(code, start, out, k)] if t is not None}
    return jumptables.resolve(out, tables, read, kept, sp_at, elsewhere=elsewhere)



def _table_pattern(code: bytes, start: int, out: List[Op], k: int):
    """The jumptables.Table where out[k] ends the pattern (other instructions may stand in
    between, writing none of its registers), else None."""
    def raw(j):
        op = out[j]
        return code[op.addr - start:op.addr - start + op.length]

    def last_write(regs, j):
        return jumptables.last_write(out, j, [_D[r] for r in regs])

    m = _reg_only(raw(k), 0xFF)
    if m is None or (m[0] & 7) != 4:
        return None
    a = last_write([m[1]], k)
    add = _reg_only(raw(a), 0x01) or _reg_only(raw(a), 0x03) if a is not None else None
    if add is None or raw(a)[0] & 0xF8 != 0x48:
        return None
    src, dst = (add[0], add[1]) if raw(a)[1] == 0x01 else (add[1], add[0])
    if dst != m[1]:
        return None
    n = last_write([src, dst], a)
    load = raw(n) if n is not None else b""
    if len(load) < 4 or load[0] & 0xF8 != 0x48 or load[1] != 0x63:
        return None
    rex, modrm, sib = load[0], load[2], load[3]
    if modrm & 7 != 4 or sib >> 6 != 2 or modrm >> 6 == 3 or modrm >> 6 == 0 and sib & 7 == 5 \
            or any(load[4:]):                       # (%rB,%rI,4), with no displacement (or a zero one)
        return None
    base = sib & 7 | (rex & 1) << 3
    if {base, (modrm >> 3) & 7 | (rex >> 2 & 1) << 3} != {src, dst}:
        return None
    leas = {}
    for j, op in enumerate(out):
        lea = raw(j)
        if len(lea) == 7 and lea[0] & 0xFB == 0x48 and lea[1] == 0x8D and lea[2] & 0xC7 == 0x05 \
                and ((lea[2] >> 3) & 7 | (lea[0] >> 2 & 1) << 3) == base:
            leas[j] = op.addr + 7 + int.from_bytes(lea[3:7], "little", signed=True)
    index = (sib >> 3) & 7 | (rex >> 1 & 1) << 3
    return jumptables.Table(n, _D[base], leas, size=4, signed=True, entries=_bound(code, start, out, n, index))


# cmp $imm, reg (unsigned bound checks): opcode -> (width, ModRM follows?, immediate bytes)
_CMP_IMM = {0x3C: (8, False, 1), 0x3D: (32, False, 4), 0x80: (8, True, 1), 0x83: (32, True, 1), 0x81: (32, True, 4)}


def _bound(code: bytes, start: int, out: List[Op], n: int, index: int) -> Optional[int]:
    """The entries of the table whose entry out[n] loads with index register `index` (hardware
    number), where the bound check before it is plain, else None:

        cmp    $imm, %S             (any width at least the one the index is taken at)
        ja|jae default              (unsigned: the index is at most imm, or below it)
        ...                         (nothing writes the index but a zero-extension of S:
        movslq (%rB,%rI,4), %rA      movzbl, movzwl, a 32-bit mov; nothing writes S)

    or the index loaded after the check from the memory it compared, as wide (`cmpl $imm, M; ja;
    ...; mov M, %eI`, or cmpb and movzbl; nothing in between that may write memory or M's
    registers).  GCC's
    switch: the table has exactly as many entries as the check lets through."""
    def raw(j):
        op = out[j]
        return code[op.addr - start:op.addr - start + op.length]
    src, width = index, 64
    mem: Optional[Tuple] = None               # (memory operand, its registers): the index loaded from it
    j = n - 1
    while True:
        if j < 0 or n - j > jumptables.WINDOW:
            return None
        op = out[j]
        if op.flow is Flow.BRANCH:
            break
        if op.flow is not Flow.NEXT or op.writes_all:
            return None
        if mem is not None:
            if not _keeps_memory(raw(j)) or any(_D[r] in op.writes for r in mem[1]):
                return None
        elif _D[src] in op.writes or any(load[0] == _D[src] for load in op.loads):
            if src != index:
                return None
            ext = _zero_extension(raw(j))
            if ext is not None and ext[0] == index:
                src, width = ext[1], ext[2]
            else:
                mem = _load(raw(j))
                if mem is None or mem[0] != index:
                    return None
                mem = mem[1:]
        j -= 1
    b = raw(j)
    cond = b[0] if len(b) == 2 else b[1] - 0x10 if len(b) == 6 and b[0] == 0x0F else None
    if cond not in (0x77, 0x73) or j == 0:                         # ja / jae
        return None
    if mem is not None:
        got = _cmp_imm(raw(j - 1), mem[0])
        if got is None or got[1] != mem[2] or got[2] < 0:
            return None
    else:
        got = _cmp_imm(raw(j - 1))
        if got is None or got[0] != src or got[2] < 0:
            return None
        # Compared narrower than the index is used (cmp $0xa,%ebx; ja; movslq (%r15,%rbx,4)): GCC's
        # table still has the entries the check lets through; a byte or word compared is taken
        # where what wrote the register before left nothing above those bits.
        if got[1] < min(width, 32) and not (src == index and _zero_extended_before(code, start, out, j - 1, src,
                                                                                   got[1])):
            return None
    return got[2] + 1 if cond == 0x77 else got[2]


_CALLEE_SAVED_HW = frozenset((3, 5, 12, 13, 14, 15))


def _zero_extended_before(code: bytes, start: int, out: List[Op], k: int, reg: int, width: int) -> bool:
    """Does what last wrote `reg` before out[k], in a straight line (calls, which keep a callee-saved
    register, included), leave nothing above its low `width` bits (movzbl 0x171(%rsp),%eax
    before cmp $0x13,%al; sub $9,%eax before cmp $0xa,%eax)?"""
    for i in range(k - 1, max(k - 1 - jumptables.WINDOW, -1), -1):
        op = out[i]
        if op.flow is Flow.CALL and reg in _CALLEE_SAVED_HW and not op.writes_all:
            continue
        if op.flow is not Flow.NEXT or op.writes_all:
            return False
        if _D[reg] in op.writes or any(load[0] == _D[reg] for load in op.loads):
            got = _writes_zero_extended(code[op.addr - start:op.addr - start + op.length])
            return got is not None and got[0] == reg and got[1] <= width
    return False


def _modrm_memory(body: bytes, rex: int) -> Optional[Tuple[bytes, Tuple[int, ...]]]:
    """(the memory operand's bytes, with the ModRM reg field masked and REX's X and B bits; its
    base and index registers) of `opcode ModRM ...` whose r/m is memory, not RIP-relative."""
    if len(body) < 2 or body[1] >> 6 == 3:
        return None
    mod, rm = body[1] >> 6, body[1] & 7
    if mod == 0 and rm == 5:
        return None                                            # RIP-relative: another address elsewhere
    regs = [rm | (rex & 1) << 3]
    if rm == 4:
        if len(body) < 3:
            return None
        sib = body[2]
        regs = [sib & 7 | (rex & 1) << 3] if not (mod == 0 and sib & 7 == 5) else []
        if (sib >> 3) & 7 != 4 or rex & 2:
            regs.append((sib >> 3) & 7 | (rex >> 1 & 1) << 3)
    return bytes([rex & 3, body[1] & 0xC7]) + body[2:], tuple(regs)


def _load(raw: bytes) -> Optional[Tuple[int, bytes, Tuple[int, ...], int]]:
    """(destination, memory operand, its registers, width) of a load that zero-extends what it
    reads (`mov M, %r32`, movzbl, movzwl), else None."""
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if body[:1] == b"\x8b" and not rex & 8:
        width = 32
    elif body[:1] == b"\x0f" and body[1:2] in (b"\xb6", b"\xb7"):
        width, body = 8 if body[1] == 0xB6 else 16, body[1:]
    else:
        return None
    m = _modrm_memory(body, rex)
    return None if m is None else ((body[1] >> 3) & 7 | (rex >> 2 & 1) << 3, m[0], m[1], width)


def _keeps_memory(raw: bytes) -> bool:
    """Is the instruction one that writes no memory but a new stack slot: a register push, SP
    moved by a constant, lea, a load or a move between registers?"""
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if len(body) == 1 and 0x50 <= body[0] <= 0x57:
        return True
    if len(body) >= 2 and body[0] in (0x83, 0x81) and body[1] in (0xC4, 0xEC) and rex == 0x48:
        return True                                            # add/sub $imm, %rsp
    if len(body) >= 2 and (body[0] in (0x8B, 0x8D) or body[0] == 0x89 and body[1] >> 6 == 3):
        return True
    return len(body) >= 3 and body[0] == 0x0F and body[1] in (0xB6, 0xB7)


def _zero_extension(raw: bytes) -> Optional[Tuple[int, int, int]]:
    """(destination, source, source width) of movzbl/movzwl/32-bit mov between registers, else None."""
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if len(body) == 3 and body[0] == 0x0F and body[1] in (0xB6, 0xB7) and body[2] >> 6 == 3:
        dst, src = (body[2] >> 3) & 7 | (rex >> 2 & 1) << 3, body[2] & 7 | (rex & 1) << 3
        if body[1] == 0xB6 and not rex and src >= 4:
            return None                                        # %ah..%bh: not a low byte
        return dst, src, 8 if body[1] == 0xB6 else 16
    if len(body) == 2 and body[0] in (0x89, 0x8B) and body[1] >> 6 == 3 and not rex & 8:
        r, m = (body[1] >> 3) & 7 | (rex >> 2 & 1) << 3, body[1] & 7 | (rex & 1) << 3
        return (m, r, 32) if body[0] == 0x89 else (r, m, 32)
    return None


def _writes_zero_extended(raw: bytes) -> Optional[Tuple[int, int]]:
    """(register, width) where the instruction writes a value of `width` bits zero-extended to
    the whole register (movzbl/movzwl from a register or memory; a 32-bit mov, lea or arithmetic
    operation), else None."""
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if len(body) >= 3 and body[0] == 0x0F and body[1] in (0xB6, 0xB7):
        return (body[2] >> 3) & 7 | (rex >> 2 & 1) << 3, 8 if body[1] == 0xB6 else 16
    if rex & 8 or len(body) < 2:
        return None
    if body[0] in (0x8B, 0x8D) and not (body[0] == 0x8D and body[1] >> 6 == 3):
        return (body[1] >> 3) & 7 | (rex >> 2 & 1) << 3, 32
    if body[0] == 0x89 and body[1] >> 6 == 3:
        return body[1] & 7 | (rex & 1) << 3, 32
    if 0xB8 <= body[0] <= 0xBF and len(body) == 5:
        return body[0] & 7 | (rex & 1) << 3, 32
    reg, rm = (body[1] >> 3) & 7, body[1] & 7 | (rex & 1) << 3
    if body[1] >> 6 == 3 and (body[0] in _ALU_TO_RM or body[0] in (0x83, 0x81) and reg != 7
                              or body[0] in (0xC1, 0xD1, 0xD3) or body[0] == 0xFF and reg in (0, 1)
                              or body[0] == 0xF7 and reg in (2, 3)):
        return rm, 32                                          # a 32-bit operation on a register
    if body[0] in _ALU_EAX and len(body) == 5:
        return 0, 32                                           # (the short forms on %eax)
    if body[0] in _ALU_TO_REG or body[:2] == b"\x0f\xaf":
        if body[0] == 0x0F:
            return None if len(body) < 3 else ((body[2] >> 3) & 7 | (rex >> 2 & 1) << 3, 32)
        return reg | (rex >> 2 & 1) << 3, 32
    return None


# 32-bit add, or, adc, sbb, and, sub, xor: into the r/m register, into the reg one
_ALU_TO_RM = frozenset((0x01, 0x09, 0x11, 0x19, 0x21, 0x29, 0x31))
_ALU_TO_REG = frozenset((0x03, 0x0B, 0x13, 0x1B, 0x23, 0x2B, 0x33))
_ALU_EAX = frozenset((0x05, 0x0D, 0x15, 0x1D, 0x25, 0x2D, 0x35))


def _cmp_imm(raw: bytes, memory: Optional[bytes] = None) -> Optional[Tuple[int, int, int]]:
    """(register, width, immediate) of `cmp $imm, %reg` (the immediate as the unsigned comparison
    takes it: negative where it is sign-extended to a value no unsigned bound is), else None;
    with `memory` (an operand as _modrm_memory gives it): of `cmp $imm, M` with that M."""
    wide = raw[:1] == b"\x66"
    raw = raw[1:] if wide else raw
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if not body or body[0] not in _CMP_IMM:
        return None
    width, has_modrm, size = _CMP_IMM[body[0]]
    if width == 32:
        width = 64 if rex & 8 else 16 if wide else 32
    if wide and size == 4:
        size = 2
    reg = 0
    if memory is not None:
        m = _modrm_memory(body, rex) if has_modrm and (body[1] >> 3) & 7 == 7 else None
        if m is None or len(m[0]) <= size or m[0][:-size] != memory:
            return None
        imm = m[0][-size:]
    else:
        if has_modrm:
            if len(body) < 2 or body[1] >> 6 != 3 or (body[1] >> 3) & 7 != 7:
                return None
            reg = body[1] & 7 | (rex & 1) << 3
            if width == 8 and not rex and reg >= 4:
                return None                                    # %ah..%bh
        imm = body[1 + has_modrm:]
    if len(imm) != size:
        return None
    # (an immediate as wide as the operand compares as it is; a narrower one is sign-extended first)
    return reg, width, int.from_bytes(imm, "little", signed=size * 8 < width)


def _reg_only(raw: bytes, opcode: int) -> Optional[Tuple[int, int]]:
    """(reg field, r/m register) of `[REX] opcode modrm` with a register operand (mod 3), else None."""
    if raw[:1] == b"\x3e":
        raw = raw[1:]                  # notrack (CET): jmp *%reg through a jump table
    rex = raw[0] if raw and 0x40 <= raw[0] <= 0x4F else 0
    body = raw[1:] if rex else raw
    if len(body) != 2 or body[0] != opcode or body[1] >> 6 != 3:
        return None
    return (body[1] >> 3) & 7 | (rex >> 2 & 1) << 3, body[1] & 7 | (rex & 1) << 3


_OPS: dict = {}      # an instruction's bytes -> its Op's fields after the address
_BRANCH = X.Kind.BRANCH


def _op(code: bytes, pos: int, ins: X.Insn) -> Op:
    """The Op of the measured instruction `ins` at code[pos:].  Each but a relative branch's is
    its bytes' alone, apart from its address: made once per bytes (a function repeats most)."""
    if ins.kind is _BRANCH:
        # (_made's, from prebuilt fields: a relative branch's Op is its flow's and its target's)
        try:
            flow = _branch_flow(_Head(code, pos))
        except IndexError:
            return _made(code, pos, ins)
        return _AT(Op, (ins.addr, ins.length, flow, ins.target) + (_AFTER_CALL if flow is Flow.CALL else _AFTER_TARGET))
    raw = code[pos:pos + ins.length]
    got = _OPS.get(raw)
    if got is None:
        if len(_OPS) >= 65536:
            _OPS.clear()
        got = _OPS[raw] = _made(code, pos, ins._replace(addr=0))[1:]
    return _AT(Op, (ins.addr,) + got)


def _made(code: bytes, pos: int, ins: X.Insn) -> Op:
    addr, length, kind = ins.addr, ins.length, ins.kind
    if ins.quiet:
        return Op(addr, length, nop=True)
    if kind is X.Kind.PUSH:
        return Op(addr, length, stores=((_D[ins.reg], _SP, -8),), sp=-8)
    if kind is X.Kind.POP:
        return Op(addr, length, loads=((_D[ins.reg], _SP, 0),), sp=None if ins.reg == _SP_HW else 8)
    if kind is X.Kind.BRANCH:
        try:
            flow = _branch_flow(_Head(code, pos))
        except IndexError:        # (x86insn measured it: cannot happen; never a guess if it does)
            return Op(addr, length, sp=None, writes_all=True)
        return Op(addr, length, flow, ins.target, clobbers=_BELOW_SP if flow is Flow.CALL else ())
    try:
        f = _Form(code, pos)
    except IndexError:            # (x86insn measured it: cannot happen; never a guess if it does)
        return Op(addr, length, sp=None, writes_all=True)
    if kind is X.Kind.PUSH_OTHER:
        return Op(addr, length, sp=None if f.opsize16 else -8, clobbers=((_SP, -8, 8),))
    if kind is X.Kind.MOV_FP_SP:
        return Op(addr, length, writes=(_FP,), fp_from_sp=0)
    if kind is X.Kind.STORE:
        base = _frame_base(f.mem)
        if base is not None:
            return Op(addr, length, stores=((_D[ins.reg], base, f.mem[2]),))       # type: ignore[index]
        if f.mem is not None and f.mem[0] in (_SP_HW, _FP_HW):
            return Op(addr, length, stores=((_D[ins.reg], _D[f.mem[0]], None),))   # indexed: not placed
        return Op(addr, length)
    if kind is X.Kind.JUMP_INDIRECT:
        return Op(addr, length, Flow.INDIRECT)
    return _other(f, addr, length, ins, code[pos:pos + length])


def _other(f: _Form, addr: int, length: int, ins: X.Insn, raw: bytes) -> Op:
    writes = tuple(_D[hw] for hw in ins.writes if hw != _SP_HW)
    flow = Flow.NEXT
    clobbers: Tuple = ()
    if ins.transfer:
        flow = _transfer_flow(f)
        clobbers = _BELOW_SP if flow is Flow.CALL else ()
    loads: Tuple = ()
    base = _frame_base(f.mem)
    reg = (f.modrm >> 3) & 7 | (f.rex >> 2 & 1) << 3 if f.modrm >= 0 else -1
    if base is not None:
        disp = f.mem[2]                                                 # type: ignore[index]
        if f.map == 0 and f.op == 0x8B and f.rex & 8:
            loads = ((_D[reg], base, disp),)                            # a restore, if from its slot
            writes = tuple(w for w in writes if w != _D[reg])
        elif not (f.map == 0 and (f.op in _READS_ONE or f.op == 0x8D)) and not (f.map == 1 and f.op in _READS_TWO):
            clobbers += ((base, disp, f.size),)
    sp, sp_from_fp = _sp_change(f, ins, reg, raw)
    return Op(addr, length, flow, None, loads=loads, sp=sp, sp_from_fp=sp_from_fp, writes=writes,
              clobbers=clobbers, returns=_returns(f, flow))


_RETURNS = frozenset((0xC3, 0xC2, 0xCB, 0xCA, 0xCF))        # ret, ret $n, lret, lret $n, iret


def _branch_flow(f: Union[_Form, _Head]) -> Flow:
    """A relative branch's flow: a call, a jump, or a conditional branch (jcc, loop, xbegin)."""
    if f.map == 0 and f.op == 0xE8:
        return Flow.CALL
    if f.map == 0 and f.op in (0xE9, 0xEB):
        return Flow.JUMP
    return Flow.BRANCH


def _transfer_flow(f: Union[_Form, _Head]) -> Flow:
    """Any other transfer's: a call through a register or memory returns; ret, hlt and the rest stop."""
    return Flow.CALL if f.map == 0 and f.op == 0xFF else Flow.STOP


def _returns(f: Union[_Form, _Head], flow: Flow) -> bool:
    """Does the instruction return to the caller (a STOP that is a return, not a trap)?"""
    return flow is Flow.STOP and f.map == 0 and f.op in _RETURNS


def _sp_change(f: _Form, ins: X.Insn, reg: int, raw: bytes) -> Tuple[Optional[int], Optional[int]]:
    """(SP += this, or None; with None: SP = FP + the second, if known)."""
    if not ins.sp_write:
        return 0, None
    op, modrm = (f.op, f.modrm) if f.map == 0 else (-1, f.modrm)
    rm = (modrm & 7) | (f.rex & 1) << 3 if modrm >= 0 and modrm >> 6 == 3 else -1
    if op == 0xC9:
        return None, 8                          # leave: SP = FP, then pop %rbp
    if op == 0x9C:
        return -8, None                         # pushf
    if op == 0x9D:
        return 8, None                          # popf
    if op == 0x8F:
        return 8, None                          # pop to memory
    if f.map == 1 and f.op in (0xA1, 0xA9):
        return 8, None                          # pop %fs, pop %gs
    if modrm < 0:
        return (None, None) if op != -1 or _SP_HW in ins.writes else (0, None)
    if _SP_HW not in ins.writes:
        return 0, None                          # it writes %rbp (or memory), not SP
    if op in (0x81, 0x83) and rm == _SP_HW and f.rex & 8 and (modrm >> 3) & 7 in (0, 5):
        imm = int.from_bytes(raw[-1:] if op == 0x83 else raw[-4:], "little", signed=True)
        return (imm if (modrm >> 3) & 7 == 0 else -imm), None          # add / sub $imm, %rsp
    if op == 0x8D and reg == _SP_HW and f.rex & 8 and f.mem is not None and not f.mem[1] \
            and f.mem[0] == _SP_HW:
        return f.mem[2], None                   # lea d(%rsp), %rsp
    if (op == 0x89 and rm == _SP_HW and reg == _FP_HW or op == 0x8B and reg == _SP_HW and rm == _FP_HW) \
            and f.rex & 8:
        return None, 0                          # mov %rbp, %rsp
    return None, None

