"""Where an indirect jump through a jump table can go: its table's targets, read from the program,
instead of "anywhere SFrame's CFA allows" (which merges every case of a `switch` with the code
before the saves and after the restores, and leaves the registers UNKNOWN there).

The ISA decoders (core.saves.x86flow, core.saves.a64jumps) recognise the instructions that load a
table entry and jump, and say so as a `Table`: which instruction reads the entry, which register
holds the table's address, and which instructions put an address there.  What that register
holds on every path comes from a small data flow of that one register (`_base_states`); the
paths depend on the tables' targets, so the tables are found again until they no longer change
(first with the jumps not yet resolved going nowhere, then anywhere SFrame allows), and the
answer is one the whole function agrees with.  A path that comes in between the entry's load and
the jump, a register that may hold anything else, or no agreement: no targets, so "anywhere".

A table's length comes from the bound check where the decoder reads it (`entries`); a case GCC
placed in the function's .cold part is then not followed here.  Without it, entries are taken
while each lands on an instruction of the code analysed: an entry read past the table that
happens to land on one only adds a target (an answer UNKNOWN, never wrong).  The first that does
not ends the table, unless it lands where a case may be (`elsewhere`: a part of a function, or
code no FDE covers): the table then goes unresolved, since the cases after it would be missed.
"""

import bisect
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from .flow import FALLS_THROUGH, INDIRECT, TO_TARGET, Flow, Op, anywhere

MAX_TABLE = 4096
MAX_BASES = 4          # tables one register may hold at a jump (GCC's cross-jumped switches)
TOP = frozenset([-1])  # a register's state where it may hold anything (no table's address: none is -1)
_ROUNDS = 6


class Table(NamedTuple):
    """A jump through a table, as the ISA decoder recognised it."""
    load: int                     # index of the instruction that reads the entry
    base: int                     # DWARF register holding the table's address there
    defs: Dict[int, int]          # index of an instruction -> the table address it puts in `base`
    size: int                     # bytes per entry
    signed: bool
    anchor: Optional[int] = None  # target = anchor + (entry << shift); None: the table's own address
    shift: int = 0
    entries: Optional[int] = None  # how many, where the bound check says
    absolute: bool = False        # entries are the targets themselves (a table of label addresses)
    since: Optional[int] = None   # the shape's first instruction, if before `load`: no path may come in after it
    other_base: Optional[int] = None  # where the shape cannot tell the base from the index: the other one


WINDOW = 8


def last_write(out: List[Op], j: int, regs) -> Optional[int]:
    """The last instruction before out[j], in a straight line within the window, that writes one
    of the DWARF registers `regs` (a load into one included), or that is not straight-line code
    (the decoder then finds it is not the instruction its shape wants); None past the window."""
    for i in range(j - 1, max(j - 1 - WINDOW, -1), -1):
        op = out[i]
        if op.writes_all or op.flow is not Flow.NEXT or any(r in op.writes for r in regs) \
                or any(load[0] in regs for load in op.loads):
            return i
    return None


def resolve(out: List[Op], tables: Dict[int, Table], read, kept, sp_at: Callable[[int], Optional[int]],
            big_endian: bool = False, elsewhere: Optional[Callable[[int], bool]] = None,
            spills: Optional[Tuple[int, int, Dict[int, Tuple[int, int]]]] = None) -> Dict[int, Tuple[int, ...]]:
    """{index of an indirect jump in `out`: its targets} for the `tables` (by jump index) that
    resolve.  `kept`: the DWARF registers a call preserves; `sp_at(addr)`: SFrame's CFA - SP;
    `elsewhere(addr)`: may code outside `out` at addr be a case of the function (its .cold part)?
    `spills`: (SP's and FP's DWARF numbers, {index: (register, address)} of every instruction that
    puts a table's address in a register): where the base register's own defs do not reach the load on
    every path, the address is also followed through other registers and the stack
    (`_bases_spilled`)."""
    if not tables:
        return {}
    starts = {op.addr for op in out}
    addrs = [op.addr for op in out]

    def inside(addr: int) -> bool:
        k = bisect.bisect_right(addrs, addr) - 1
        return k >= 0 and addr < out[k].addr + out[k].length
    sps = [sp_at(op.addr) for op in out]
    branched_to = {op.target for op in out if op.flow in TO_TARGET}
    where = {op.addr: i for i, op in enumerate(out)}
    anywhere_at: Dict[Optional[int], List[int]] = {}
    fixed = _fixed(out, where)
    # A register's states depend on its defs and on the jumps' targets, not on the jump asked
    # about: tables sharing them, and the round that checks the targets found, ask once.
    flows: Dict[tuple, List[Optional[frozenset]]] = {}

    def one_round(found: Dict[int, Tuple[int, ...]], optimistic: bool) -> Dict[int, Tuple[int, ...]]:
        new = {}
        landing = branched_to.union(*found.values())
        found_key = (tuple(sorted(found.items())), optimistic)
        for k, t in tables.items():
            first = t.load if t.since is None else min(t.since, t.load)
            if any(out[i].addr in landing for i in range(first + 1, k + 1)):
                continue          # a path comes in after the table's entry is loaded
            key = (t.base, tuple(sorted(t.defs.items())), found_key)
            states = flows.get(key)
            if states is None:
                states = flows[key] = _base_states(out, t.base, t.defs, kept, sps, found, optimistic, where,
                                                   anywhere_at, fixed)
            bases = _bases_at(states, t.load)
            if bases is None and spills is not None:
                for base in (t.base,) if t.other_base is None else (t.base, t.other_base):
                    bases = _bases_spilled(out, t.load, base, spills[2], kept, sps, found, optimistic, spills[:2],
                                           where, anywhere_at, fixed)
                    if bases is not None:
                        break
            targets = _read(t, bases, read, starts, big_endian, inside, elsewhere) if bases else None
            if targets is not None:
                new[k] = targets
        return new

    # First with the jumps not resolved yet going nowhere: code that only a table's targets reach
    # (a second table among them) comes in as the tables resolve.
    found: Dict[int, Tuple[int, ...]] = {}
    for _ in range(_ROUNDS):
        new = one_round(found, True)
        if new == found:
            break
        found = new
    # Then checked as they will be used, every jump not resolved going anywhere: a table that does
    # not come out the same is dropped, until all do.
    for _ in range(_ROUNDS):
        new = one_round(found, False)
        same = {k: v for k, v in found.items() if new.get(k) == v}
        if same == found:
            return found
        found = same
    return {}


def _read(t: Table, bases, read, starts, big_endian, inside=lambda addr: False, elsewhere=None
          ) -> Optional[Tuple[int, ...]]:
    """The targets of the tables at `bases`: with the count known, every entry (one that leaves the
    code analysed, a case GCC placed in the function's .cold part, is not followed; one that lands
    `inside` an instruction makes it no table); else the entries while each lands on one, where
    the first that does not is no case `elsewhere` (else no answer)."""
    targets: List[int] = []
    if t.entries is not None and t.entries > MAX_TABLE:
        return None                                   # (its every entry would not be read)
    for table in bases:
        for n in range(MAX_TABLE if t.entries is None else t.entries):
            try:
                word = read(table + t.size * n, t.size)
            except Exception:
                word = None
            if word is None or len(word) < t.size:
                if t.entries is not None:
                    return None                       # the table the bound check says is not all there
                break
            entry = int.from_bytes(bytes(word[:t.size]), "big" if big_endian else "little", signed=t.signed)
            target = entry if t.absolute else (table if t.anchor is None else t.anchor) + (entry << t.shift)
            if target not in starts:
                if t.entries is None:
                    if not inside(target) and elsewhere is not None and elsewhere(target):
                        return None                   # perhaps a case in the .cold part: the table may go on
                    break
                if inside(target):
                    return None                       # into the middle of an instruction: not this table
                continue
            targets.append(target)
    return tuple(sorted(set(targets))) if targets else None


def _successors(out: List[Op], i: int, where: Dict[int, int], sps, found: dict, optimistic: bool,
                anywhere_at: Dict[Optional[int], List[int]], fixed: Optional[list] = None) -> List[int]:
    """Where control goes after out[i]: an indirect jump to its targets in `found`, else nowhere
    (`optimistic`) or anywhere SFrame's CFA allows (`anywhere_at`: those places by CFA - SP, as
    they are found).  `fixed`: the answers for the ops that are no indirect jump (None for those
    that are), worked out once for every question of the function (`_fixed`)."""
    if fixed is not None and fixed[i] is not None:
        return fixed[i]
    op = out[i]
    succ: List[int] = []
    if op.flow in FALLS_THROUGH and i + 1 < len(out):
        succ.append(i + 1)
    if op.flow in TO_TARGET and op.target in where:
        succ.append(where[op.target])
    if op.flow in INDIRECT:
        if i in found:
            succ.extend(where[t] for t in found[i])
        elif not optimistic:
            places = anywhere_at.get(sps[i])
            if places is None:
                places = anywhere_at[sps[i]] = anywhere(out, sps, sps[i])
            succ.extend(places)
    return succ


def _fixed(out: List[Op], where: Dict[int, int]) -> List[Optional[List[int]]]:
    """_successors of each op that is no indirect jump (the same whatever is found), None for those."""
    return [None if op.flow in INDIRECT else _successors(out, i, where, (), {}, True, {})
            for i, op in enumerate(out)]


def _bases_spilled(out: List[Op], k: int, reg: int, defs: Dict[int, Tuple[int, int]], kept, sps, found: dict,
                   optimistic: bool, frame_regs: Tuple[int, int], where: Dict[int, int],
                   anywhere_at: Dict[Optional[int], List[int]], fixed: Optional[list] = None) -> Optional[frozenset]:
    """The table addresses `reg` holds before out[k] on every path, where the address comes
    through other registers and the stack (AArch64's zstd: `str x0, [sp, #192]` ... `ldr x1,
    [sp, #192]`): the state is every register and SP-based slot (CFA-relative, by SFrame's
    CFA - SP) known to hold table addresses, set by `defs`, carried by copies, loads and stores,
    dropped by any other write (a store or clobber over a slot; a call, of the registers it does
    not keep).  A compiler's spill slot is written by the stores to it alone: its address is never
    taken, and a store this cannot place (a half register, an index, a base other than SP) is
    not taken to hit a live one, as core.saves.flow takes it for a save slot.  None where some
    path brings anything else."""
    sp_reg = frame_regs[0]
    n = len(out)
    states: List[Optional[Dict[object, frozenset]]] = [None] * n
    states[0] = {}
    work = [0]
    while work:
        i = work.pop()
        state = dict(states[i] or {})
        op, sp = out[i], sps[i]

        if op.writes_all:
            state = {}
        else:
            for r, base, off in op.stores:
                if base == sp_reg and off is not None and sp is not None:
                    value = state.get(r)
                    _drop_slots(state, off - sp, off - sp + 8)
                    if value is not None:
                        state[("slot", off - sp)] = value
            for base, off, size in op.clobbers:
                if base != sp_reg or sp is None:
                    state = {r: v for r, v in state.items() if not isinstance(r, tuple)}
                else:
                    _drop_slots(state, off - sp, off - sp + size)
            for r in op.writes:
                state.pop(r, None)
            for r, base, off in op.loads:
                value = state.get(("slot", off - sp)) if base == sp_reg and off is not None and sp is not None else None
                if value is None:
                    state.pop(r, None)
                else:
                    state[r] = value
            if op.derives is not None:
                dst, src, imm = op.derives
                value = state.get(src) if imm == 0 and src != sp_reg else None
                if value is None:
                    state.pop(dst, None)
                else:
                    state[dst] = value
            if i in defs:
                r, addr = defs[i]
                state[r] = frozenset([addr])
            if op.flow is Flow.CALL:
                state = {r: v for r, v in state.items() if isinstance(r, tuple) or r in kept}
        for j in _successors(out, i, where, sps, found, optimistic, anywhere_at, fixed):
            old = states[j]
            if old is None:
                new = state
            else:
                new = {key: old[key] | state[key] for key in old.keys() & state.keys()}
                new = {key: v for key, v in new.items() if len(v) <= MAX_BASES}
            if new != old:
                states[j] = new
                work.append(j)
    got = states[k]
    return got.get(reg) if got is not None else None


def _drop_slots(state: Dict[object, frozenset], lo: int, hi: int) -> None:
    """Forget the slots (8 bytes each) that [lo, hi) overlaps."""
    for key in [key for key in state if isinstance(key, tuple) and key[1] < hi and lo < key[1] + 8]:
        del state[key]


def _base_states(out: List[Op], reg: int, defs: Dict[int, int], kept, sps, found: dict, optimistic: bool,
                 where: Dict[int, int], anywhere_at: Dict[Optional[int], List[int]], fixed: Optional[list] = None
                 ) -> List[Optional[frozenset]]:
    """The table addresses `reg` holds before each op on every path from the function's entry
    (`_bases_at` reads them): an instruction of `defs` sets it; any other write, a call that does
    not keep it, or the entry leave it unknown (TOP).  An indirect jump goes to its targets in
    `found`, else nowhere (`optimistic`) or anywhere SFrame's CFA allows (`sps`: its CFA - SP at
    each op)."""
    n = len(out)
    states: List[Optional[frozenset]] = [None] * n
    states[0] = TOP
    work = [0]
    call, top = Flow.CALL, next(iter(TOP))
    while work:
        i = work.pop()
        state, op = states[i] or TOP, out[i]
        if i in defs:
            state = frozenset([defs[i]])
        elif reg in op.writes or op.writes_all or op.loads and any(load[0] == reg for load in op.loads):
            state = TOP
        if op.flow is call and reg not in kept:
            state = TOP
        for j in _successors(out, i, where, sps, found, optimistic, anywhere_at, fixed):
            old = states[j]
            new = state if old is None else old | state
            if top in new or len(new) > MAX_BASES:     # (TOP's one member: TOP & new)
                new = TOP
            if new != old:
                states[j] = new
                work.append(j)
    return states


def _bases_at(states: List[Optional[frozenset]], k: int) -> Optional[frozenset]:
    """The table addresses the register holds before out[k]; None where some path brings anything else."""
    got = states[k]
    return None if got is None or got & TOP else got
