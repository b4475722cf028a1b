"""Where a function has put each callee-saved register, at every instruction: a forward data-flow
analysis over the function's control-flow graph.

The instruction decoders (core.saves.a64insn, s390insn, x86flow) turn each instruction
into an `Op`: its stores and loads of registers relative to SP or the frame pointer, how it moves
SP, and where control goes next.  `analyse` then follows every path from the function's entry:

- a register is UNCHANGED until a store saves it, then SAVED at the slot the store wrote
  (CFA-relative), until a load from that slot restores it: then it is both (`Restored`) while the
  slot stays at or above SP and only loads and jumps run (a restored slot is free again: compiled
  code may reuse it, and the decoders do not name every write); an instruction that may write it
  while it is UNCHANGED (a move, a load from elsewhere: code that keeps it in another register, or
  does not preserve it) makes it UNKNOWN;
- SP relative to the CFA comes from SFrame where the CFA is SP-based, and is followed through
  the instructions elsewhere; where both are known and differ (CFI written late), from neither;
- where paths meet with different answers, the answer is UNKNOWN, except that a register restored
  from its intact slot agrees with both (a restore, then a jump to where another path has it saved
  in that slot: AArch64's epilogue joined by a branch past it); a store that cannot be placed
  (SP not known, a register base) of a register still unchanged makes it UNKNOWN too;
- a store over a slot that holds a saved register (any store, or memory an instruction may write
  otherwise: `clobbers`) makes that register UNKNOWN;
- a copy of an unchanged register into another (`copy`: s390x's `ldgr %f5,%r6`) parks it there,
  until a copy back restores it; anything else that writes the holder, and any call (which may
  change it), makes it UNKNOWN.

An indirect jump whose table is not known may land anywhere in the function where SFrame's rules
are those at the jump (a jump moves no register: the compiler's CFI, which SFrame's rules come from,
is the same on both sides of any jump it makes; so a tail call after the epilogue lands at no
instruction after the prologue's saves): its state flows into each such instruction.  A call an exception may leave through one of the
function's landing pads (its exception table: core.saves.lsda) flows into that pad too, with the
state it returns with: the unwinder restores the callee-saved registers as they were at the call.

Code no path from the entry reaches gets no answer, except alignment padding and the code after a
call that never returns (as far as it goes without meeting code a path reaches), which take the
state the code before them leaves, as the CFI's rows carry on over them; so does an instruction only
an s390x EXRL executes (never a PC of its own: it runs as part of the EXRL).
"""

# (Annotations not evaluated: a function defined inside another, as for each instruction, then
# costs no typing look-ups.)
from __future__ import annotations

import dataclasses
import enum
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple


class Flow(enum.Enum):
    NEXT = 0        # falls through
    BRANCH = 1      # conditional: falls through or goes to target
    JUMP = 2        # goes to target only (outside the function: a tail call)
    CALL = 3        # returns to the next instruction
    INDIRECT = 4    # a jump through a register: anywhere in the function (or a tail call)
    STOP = 5        # return, trap: no successor in the function
    INDIRECT_OR_NEXT = 6   # a conditional jump through a register


# The flows by what follows them (tuples: `in` compares members by identity first).
FALLS_THROUGH = (Flow.NEXT, Flow.BRANCH, Flow.CALL, Flow.INDIRECT_OR_NEXT)   # to the next op
TO_TARGET = (Flow.BRANCH, Flow.JUMP)                                          # to `target`
INDIRECT = (Flow.INDIRECT, Flow.INDIRECT_OR_NEXT)                             # through a register


class Op(NamedTuple):
    addr: int
    length: int
    flow: Flow = Flow.NEXT
    target: Optional[int] = None
    stores: Tuple[Tuple[int, int, Optional[int]], ...] = ()   # (DWARF reg, base reg, offset or None)
    loads: Tuple[Tuple[int, int, Optional[int]], ...] = ()
    sp: Optional[int] = 0             # SP += this afterwards; None: SP gets a value not followed here
    sp_from_fp: Optional[int] = None  # with sp None: SP = FP + this
    fp_from_sp: Optional[int] = None  # FP = SP + this (informational)
    writes: Tuple[int, ...] = ()      # DWARF registers it may write otherwise (over-approximated)
    writes_all: bool = False          # it may write any register (an instruction executed by EXRL)
    clobbers: Tuple[Tuple[int, int, int], ...] = ()   # (base reg, offset, size) of memory it may write otherwise
    nop: bool = False                 # does nothing: alignment padding, never a jump table's target
    targets: Optional[Tuple[int, ...]] = None   # INDIRECT: where it can go, when known (a jump table's)
    derives: Optional[Tuple[int, int, int]] = None  # (dst, src, imm): dst = src + imm (a copy, an add of a constant)
    gone: bool = False                # a call that never returns (a STOP): what follows is not its continuation
    returns: bool = False             # it may return to the caller (a STOP: always; s390x's bner %r14: or go on)
    copy: Optional[Tuple[int, int]] = None   # (dst, src): a register copied into another (s390x ldgr, lgdr)
    executes: Optional[int] = None    # s390x EXRL: the instruction it executes, which runs as part of it


UNKNOWN = "unknown"     # a register's state: None (unchanged), an int (saved at CFA + int), UNKNOWN,
#                         ("in", R): parked in register R of this frame (s390x's leaf functions: ldgr),
#                         or Restored(k): unchanged, and a copy is still at CFA + k


@dataclasses.dataclass(frozen=True)
class Restored:
    """A register loaded back from its save slot at CFA + `slot`, which still holds the same value:
    UNCHANGED and SAVED at `slot` are both right (a path that jumps back after the restore meets one
    that saved it there)."""
    slot: int


class State(NamedTuple):
    sp: Optional[int]           # CFA - SP, None if not known
    regs: Tuple[object, ...]    # per tracked register: None, CFA offset, or UNKNOWN
    rel: Tuple[Tuple[int, int], ...] = ()   # (register, k): it holds CFA + k (an address in the frame), sorted


def _meet(a: State, b: State) -> State:
    if a == b:
        return a
    sp = a.sp if a.sp == b.sp else None
    regs = tuple(x if x == y else _meet_reg(x, y) for x, y in zip(a.regs, b.regs))
    return State(sp, regs, tuple(sorted(set(a.rel) & set(b.rel))))


def _kept(regs: Sequence[object], sp: Optional[int]) -> Sequence[object]:
    """`regs` with each Restored register whose slot is below SP (CFA - `sp`; or SP not known),
    where anything may write it (a signal handler), taken as merely UNCHANGED."""
    if Restored not in map(type, regs):
        return regs
    return [None if isinstance(r, Restored) and (sp is None or r.slot < -sp) else r for r in regs]


def _arriving(out: State, sp_there: Optional[int]) -> State:
    """The state `out` as it reaches an instruction where SFrame says CFA - SP = `sp_there`:
    its restored registers checked against the SP there (after an instruction that loads SP,
    SFrame's SP at the next one is the one known)."""
    if Restored not in map(type, out.regs):
        return out
    sp = sp_there if out.sp is None else out.sp if sp_there is None or sp_there == out.sp else None
    return out._replace(regs=tuple(_kept(out.regs, sp)))


# The flows of an instruction that writes no memory, unless it says so (`stores`, `clobbers`):
# control transfers.  The decoders name the stores of registers and some other writes, not all
# (a slot that holds a saved register is never written by compiled code; a restored one may be).
_MEMORY_FREE_FLOWS = frozenset((Flow.BRANCH, Flow.JUMP, Flow.INDIRECT, Flow.INDIRECT_OR_NEXT, Flow.STOP))


def _writes_no_memory(op: Op) -> bool:
    """Does `op` certainly write no memory: a load (a restore's kind), a jump, padding?"""
    if op.stores or op.clobbers or op.writes_all or op.gone:
        return False
    return bool(op.loads) or op.nop or op.flow in _MEMORY_FREE_FLOWS


def _meet_reg(x: object, y: object) -> object:
    """Two different answers for one register where paths meet: what both prove, else UNKNOWN."""
    if isinstance(y, Restored):
        x, y = y, x
    if isinstance(x, Restored):
        if y is None or isinstance(y, Restored):
            return None                 # unchanged on both paths
        if y == x.slot:
            return y                    # the slot holds it on both paths
    return UNKNOWN


# rules_at(addr) -> (CFA - SP or None, CFA - FP or None): what SFrame says at an instruction.
RulesAt = Callable[[int], Tuple[Optional[int], Optional[int]]]


def analyse(ops: Sequence[Op], regs: Sequence[int], sp_reg: int, fp_reg: int, entry_sp: int,
            rules_at: RulesAt, entry: int = 0, pads: Optional[Dict[int, int]] = None,
            frame_at: Optional[Callable[[int], object]] = None, facts: Optional[Sequence[tuple]] = None,
            ) -> Tuple[List[Optional[State]], Optional[str]]:
    """(the state before each op, None where no path reaches it; or an error text).  The ops
    are in address order and may come from several pieces of code (a function and its .cold
    part): control falls through only to the op right after; `entry`: the function's first op;
    `pads`: op number of a call -> op number of the landing pad an exception leaves it for;
    `frame_at(addr)`: what SFrame says of the frame there (where the CFA, RA and FP are; compared
    whole), None where not known.  `facts`: (rules_at(op.addr), frame_at(op.addr)) of each op, in
    place of the two calls per op, where the caller has them."""
    n = len(ops)
    addrs = [op[0] for op in ops]          # (an Op's address and length: its first two fields)
    where = dict(zip(addrs, range(n)))
    slot_of = {r: k for k, r in enumerate(regs)}
    states: List[Optional[State]] = [None] * n
    if facts is not None:
        sframe = [f[0] for f in facts]
        frames: Optional[List[object]] = [f[1] for f in facts]
    else:
        sframe = [rules_at(op.addr) for op in ops]
        frames = [frame_at(op.addr) for op in ops] if frame_at is not None else None
    sps = [cfa_sp for cfa_sp, _cfa_fp in sframe]
    joined = [op[0] + op[1] == after for op, after in zip(ops, addrs[1:])] + [False] if n else []
    inside = _lands_inside(ops, where, joined)
    if inside:
        return states, inside
    # What each op is, worked out once (the ops of a loop are visited again): does it leave the
    # registers alone (_quiet_ops), does control only fall through from it to the next op?
    quiet = _quiet_ops(ops, slot_of)
    straight = _straight(ops, joined, pads)

    def run(work: List[int], frozen: Sequence[bool]) -> None:
        queued = set(work)
        while work:
            k = work.pop()
            queued.discard(k)
            state = states[k]
            assert state is not None
            while True:
                op = ops[k]
                out = _transfer(op, state, sframe[k], slot_of, sp_reg, fp_reg, quiet[k])
                if straight[k]:
                    # (Straight on: the next op is the one the stack would give next, taken at once.)
                    j = k + 1
                    if frozen[j]:
                        break
                    old = states[j]
                    # (Registers the transfer left as they were hold nothing restored: _quiet_state.)
                    arrived = out if out.regs is state.regs else _arriving(out, sps[j])
                    new = arrived if old is None else _meet(old, arrived)
                    if new == old:
                        break
                    states[j] = new
                    if j in queued:
                        break
                    k, state = j, new
                    continue
                for j in _successors(ops, k, out, joined, where, sps, frames, pads):
                    if frozen[j]:
                        continue
                    old = states[j]
                    arrived = out if out.regs is state.regs else _arriving(out, sps[j])
                    new = arrived if old is None else _meet(old, arrived)
                    if new != old:
                        states[j] = new
                        if j not in queued:
                            queued.add(j)
                            work.append(j)
                break

    states[entry] = State(entry_sp, (None,) * len(regs))
    run([entry], [False] * n)
    # Code no path reaches is never executed: alignment padding (after a jump or a return), what
    # the compiler placed after a call it did not know never returns, and EXRL's targets (run as
    # part of the EXRL: never the PC).  It gets what the instruction before it leaves, as the CFI's
    # rows carry on over it; what follows on from there (the compiler's view: as if the call
    # returned), but nothing any path reaches.
    executed = {where[op.executes] for op in ops if op.executes in where}
    reached = [state is not None for state in states]
    seeds = []
    for k in range(1, n):
        if states[k] is None and (ops[k].nop or ops[k - 1].gone or k in executed) and states[k - 1] is not None \
                and joined[k - 1]:
            states[k] = _transfer(ops[k - 1], states[k - 1], sframe[k - 1], slot_of, sp_reg, fp_reg,  # type: ignore[arg-type]
                                  quiet[k - 1])
            if ops[k - 1].gone:
                seeds.append(k)
    run(seeds, reached)
    return states, None


def _straight(ops: Sequence[Op], joined: Sequence[bool], pads: Optional[Dict[int, int]]) -> List[bool]:
    """Per op: does control only fall through from it to the next op (no jump, call or landing pad)?"""
    return [joined[k] and op.flow is Flow.NEXT and not (pads and k in pads) for k, op in enumerate(ops)]


def _successors(ops: Sequence[Op], k: int, out: State, joined: Sequence[bool], where: Dict[int, int],
                sps: Sequence[Optional[int]], frames: Optional[Sequence[object]],
                pads: Optional[Dict[int, int]]) -> List[int]:
    """Where control goes from op k (`out`: the state after it), as op numbers."""
    op = ops[k]
    succ = []
    if op.flow in FALLS_THROUGH and joined[k]:
        succ.append(k + 1)
    if op.flow in TO_TARGET and op.target in where:
        succ.append(where[op.target])
    if op.flow in INDIRECT and op.targets is not None:
        succ.extend(where[t] for t in op.targets if t in where)
    elif op.flow in INDIRECT:
        succ.extend(anywhere(ops, sps, out.sp, frames, None if frames is None else frames[k]))
    if pads and k in pads:
        succ.append(pads[k])
    return succ


def _lands_inside(ops: Sequence[Op], where: Dict[int, int], joined: Sequence[bool]) -> Optional[str]:
    """Why the ops cannot be followed where a branch lands inside an instruction, or None."""
    n = len(ops)
    pieces = [ops[0].addr] + [ops[k + 1].addr for k in range(n - 1) if not joined[k]]
    ends = [op.addr + op.length for k, op in enumerate(ops) if not joined[k]]
    for op in ops:
        if op.target is not None and op.flow in TO_TARGET and op.target not in where \
                and any(a <= op.target < b for a, b in zip(pieces, ends)):
            return "a branch at %#x lands inside the instruction at %#x" % (op.addr, op.target)
    return None


def anywhere(ops: Sequence[Op], sps: Sequence[Optional[int]], sp: Optional[int],
             frames: Optional[Sequence[object]] = None, frame: object = None) -> List[int]:
    """Where an indirect jump whose table is not known may go: anywhere SFrame does not rule out.
    Where the CFA is SP-based (`sps`: SFrame's CFA - SP at each op), only instructions with the
    jump's SP `sp` (a jump table's targets; a tail call's SP matches none of the body); where
    SFrame's rules are known (`frames`; `frame`: the jump's), only instructions with the same (the
    RA and FP saved or not as at the jump); never alignment padding, which only the code before
    it can fall into."""
    return [j for j, op in enumerate(ops) if not op.nop and (sps[j] is None or sp is None or sps[j] == sp)
            and (frame is None or frames is None or frames[j] is None or frames[j] == frame)]


def _forget_overwritten(op: Op, regs: list, place: Callable[..., Optional[int]]) -> None:
    """Memory written over a slot that holds a saved register: the caller's value is gone from it
    (its own register stored there again included: it may have changed since).  A write at a
    place not known here is not taken to hit one: compilers never write a live save slot."""
    if not (op.clobbers or op.stores):
        return
    for base, off, size in op.clobbers + tuple((base, off, 8) for _reg, base, off in op.stores):
        at = place(base, off, False)
        if at is not None:
            for k, where in enumerate(regs):
                if isinstance(where, int) and at < where + 8 and where < at + size:
                    regs[k] = UNKNOWN


def _transfer(op: Op, state: State, sframe, slot_of: Dict[int, int], sp_reg: int, fp_reg: int,
              quiet: bool) -> State:
    """The state after `op` from the state before it; `quiet`: _quiet_ops' answer for it."""
    cfa_sp, cfa_fp = sframe
    state_sp, state_regs, state_rel = state
    if cfa_sp is not None and state_sp is not None and cfa_sp != state_sp:
        sp = None               # SFrame and the instructions disagree (CFI written late): trust neither
    else:
        sp = cfa_sp if cfa_sp is not None else state_sp
    if quiet and _quiet_state(op, state):
        return _new(State, (_sp_after(op, sp, cfa_fp), state_regs, state_rel))
    regs = list(_kept(state_regs, sp))
    if not _writes_no_memory(op) and Restored in map(type, regs):
        regs = [None if isinstance(r, Restored) else r for r in regs]   # (a restored one's slot is free again)
    rel = dict(state_rel)

    def place(base: int, off: Optional[int], below: bool = True) -> Optional[int]:
        """The CFA-relative slot of [base + off] (below the CFA, where a save lies), or None."""
        got: Optional[int] = None
        if off is None:
            return None
        if base == sp_reg and sp is not None:
            got = off - sp
        elif base == fp_reg and cfa_fp is not None:
            got = off - cfa_fp
        elif base in rel:
            got = off + rel[base]
        return got if got is not None and (got < 0 or not below) else None
    _forget_overwritten(op, regs, place)
    _saves_and_restores(op, regs, place, slot_of)
    _follow_addresses(op, rel, sp, sp_reg)
    return _new(State, (_sp_after(op, sp, cfa_fp), tuple(regs), tuple(sorted(rel.items())) if rel else ()))


_new = tuple.__new__     # (a State from its fields, without the NamedTuple's Python-level constructor)


def _sp_after(op: Op, sp: Optional[int], cfa_fp: Optional[int]) -> Optional[int]:
    """CFA - SP after `op`, from `sp` before it (and SFrame's CFA - FP there)."""
    if op.sp is None:
        if op.sp_from_fp is not None and cfa_fp is not None:
            return cfa_fp - op.sp_from_fp        # SP = FP + imm: CFA - SP = (CFA - FP) - imm
        return None
    if op.sp and sp is not None:
        return sp - op.sp
    return sp


def _quiet_ops(ops: Sequence[Op], slot_of: Dict[int, int]) -> List[bool]:
    """Per op: does it leave the registers' states as they are, whatever they are but restored or
    parked ones, and the frame addresses but those in the registers it writes (most instructions):
    no store, load, copy or other write of memory or of a tracked register, no call?  (With
    _quiet_state: what the rest of _transfer would leave alone.)  (The fields unpacked by
    position: every op of every function analysed is asked.)"""
    tracked, call = slot_of.keys(), Flow.CALL
    return [not (stores or loads or clobbers or copy is not None or derives is not None or flow is call
                 or writes_all or not tracked.isdisjoint(writes))
            for (_addr, _length, flow, _target, stores, loads, _sp, _sp_from_fp, _fp_from_sp, writes, writes_all,
                 clobbers, _nop, _targets, derives, _gone, _returns, copy, _executes) in ops]


# The registers' tuple _quiet_state last found holding nothing restored or parked (most ops pass
# the one before's on: checked once).  Kept here, it stays alive, so that its identity is its own.
_CLEAN: List[Tuple[object, ...]] = [()]


def _quiet_state(op: Op, state: State) -> bool:
    """Does `state` hold no register restored or parked (whose state SP and writes of memory or of
    other registers move), and no frame address in a register `op` writes?"""
    regs = state.regs
    if regs is not _CLEAN[0]:
        for r in regs:
            if type(r) is Restored or type(r) is tuple:
                return False
        _CLEAN[0] = regs
    writes = op.writes
    return not (writes and state.rel and any(r in writes for r, _k in state.rel))


def _saves_and_restores(op: Op, regs: list, place: Callable[..., Optional[int]], slot_of: Dict[int, int]) -> None:
    """What `op`'s stores, loads and other writes do to the registers' states.  (An op that may
    write memory, as any that stores, reaches here with no register Restored: see _transfer.)"""
    for reg, base, off in op.stores:
        k = slot_of.get(reg)
        if k is not None and regs[k] is None:
            at = place(base, off)
            regs[k] = UNKNOWN if at is None else at
    for reg, base, off in op.loads:
        k = slot_of.get(reg)
        if k is None:
            continue
        where = regs[k]
        if isinstance(where, Restored):
            if place(base, off) != where.slot:
                regs[k] = where.slot             # changed: its slot keeps the caller's value
        elif isinstance(where, int) and place(base, off) == where:
            regs[k] = Restored(where)            # restored from its slot, which still holds it
        elif where is None:
            regs[k] = UNKNOWN                    # loaded from elsewhere while not saved
    writes = op.writes
    if op.copy is not None or op.flow is Flow.CALL or op.writes_all or tuple in map(type, regs):
        writes = _parking(op, regs, slot_of)
    for reg in writes:
        k = slot_of.get(reg)
        if k is not None:
            where = regs[k]
            if where is None:
                regs[k] = UNKNOWN                # changed while not saved: not the caller's any more
            elif isinstance(where, Restored):
                regs[k] = where.slot             # changed: its slot keeps the caller's value
    if op.writes_all:
        for k, where in enumerate(regs):
            regs[k] = UNKNOWN if where is None else where


def _parking(op: Op, regs: list, slot_of: Dict[int, int]) -> Tuple[int, ...]:
    """Registers parked in others (s390x's leaf functions keep r6-r13 in f0-f7): a copy of an
    unchanged register parks it, a copy back from its holder restores it; a write of a holder
    otherwise, or a call, loses what it holds.  The writes `op` still makes (a restore is none)."""
    holders_written = set(op.writes) | {load[0] for load in op.loads}
    writes = op.writes
    for k, where in enumerate(regs):
        if isinstance(where, tuple) and (op.writes_all or op.flow is Flow.CALL or where[1] in holders_written):
            regs[k] = UNKNOWN                    # its holder changed (a call may change any)
    if op.copy is not None:
        dst, src = op.copy
        kd, ks = slot_of.get(dst), slot_of.get(src)
        if kd is not None and regs[kd] == ("in", src):
            regs[kd] = None                      # copied back from where it was parked: restored
            writes = tuple(r for r in writes if r != dst)
        elif ks is not None and regs[ks] is None and dst not in slot_of:
            regs[ks] = ("in", dst)
    return writes


def _follow_addresses(op: Op, rel: Dict[int, int], sp: Optional[int], sp_reg: int) -> None:
    """The registers holding an address in the frame (CFA + k) after `op`: set by a copy or an
    add of a constant to SP or to such a register (s390x saves f8-f15 through one), forgotten
    when anything else writes them or a call may have."""
    if op.flow is Flow.CALL or op.writes_all:
        rel.clear()
        return
    new: Optional[int] = None
    if op.derives is not None:
        dst, src, imm = op.derives
        if src == sp_reg and sp is not None:
            new = imm - sp
        elif src in rel and src != sp_reg:
            new = rel[src] + imm
    for reg in op.writes:
        rel.pop(reg, None)
    for load in op.loads:
        rel.pop(load[0], None)
    if op.derives is not None:
        if new is None:
            rel.pop(op.derives[0], None)
        else:
            rel[op.derives[0]] = new
