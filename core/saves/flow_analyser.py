"""The save-slot analysers that follow core.saves.flow from a function's entry over its
instructions decoded into `flow.Op`s: AArch64 and s390x, and x86-64's saves by `mov`."""

import bisect
import functools
from typing import Dict, List, Optional

from ..sframe import format as F
from ..sframe.rules import RuleKind
from . import a64insn, flow, noreturn, s390insn, x86flow, x86insn
from .save import UNCHANGED, Plan, Save, SaveKind, cfa_offsets, function_code, landing_pads, saved, starts_as_function, unknown

DECODED_LIMIT = 256     # functions' decoded instructions remembered per index


class FlowFunction:
    """The save facts of one function of an ISA whose instructions core.saves.flow follows."""

    unreadable = False     # (set where the function's code cannot be read)
    tables_later = False   # `control` leaves the targets of indirect jumps out (see there)

    @staticmethod
    def decode(abi, code: bytes, start: int, read=None, sp_at=None, measured=None, elsewhere=None
               ) -> Optional[List[flow.Op]]:
        raise NotImplementedError

    @classmethod
    def control(cls, abi, code: bytes, start: int, read=None, elsewhere=None, index=None) -> Optional[List[flow.Op]]:
        """`decode` for a question of paths only (core.saves.noreturn): the Ops' flow, target,
        targets and returns must be decode's; the rest may be left out (an ISA's cheaper way), and
        where `tables_later`, an indirect jump's targets too (the question asks `decode` for
        them where it reaches one: a jump table takes more to find than the rest)."""
        return cls.decode(abi, code, start, read, None, None, elsewhere)

    @classmethod
    def measured_ahead(cls, index, code: bytes, start: int, own: bool):
        """The instructions of the function at `start` for `decode`'s `measured`, where the ISA
        measures them apart (x86-64) and keeps them for the function's own analysis (`own`: this
        is it); None: decode measures them."""
        return None

    @classmethod
    def instruction_starts(cls, abi, code: bytes, start: int) -> Optional[List[int]]:
        """The addresses of the instructions of `code` (at `start`), or None."""
        ops = cls.decode(abi, code, start)
        return [op.addr for op in ops] if ops else None

    def __init__(self, abi, index, fde, read_code, measured=None, symbolize=None):
        """`measured`: the function's instructions as another analyser measured them (the
        decoder may take them instead of measuring again); `symbolize`: names the callees (a
        call to a function that never returns does not go on: core.saves.noreturn)."""
        self.abi = abi
        self.regs = [r for r in abi.callee_saved if r != abi.fp]
        self.fde = fde
        self.failed: Optional[str] = None
        self.plans: Dict[int, Plan] = {}
        self.states: List[Optional[flow.State]] = []
        self.starts: List[int] = []
        code = function_code(fde, read_code)
        if code is None:
            self.failed = "the function's code at %#x cannot be read" % fde.start
            self.unreadable = True
            return
        rows = index.rows(fde)
        starts = [r[0] for r in rows]
        if not starts_as_function(abi, rows, fde.start):
            self.failed = "the FDE does not start as a function does (CFA = SP + %d)" % abi.entry_cfa_offset
            return

        facts = [_facts(abi, rules) for _addr, rules in rows]

        def facts_at(addr):
            k = bisect.bisect_right(starts, addr) - 1
            return facts[k] if k >= 0 else _NO_FACTS

        def rules_at(addr):
            return facts_at(addr)[0]
        ops = self._decoded(abi, index, code, fde.start, read_code, lambda addr: rules_at(addr)[0], measured)
        if not ops:
            self.failed = "the function's size is not whole instructions"
            return
        ops = self._noreturn_calls(abi, index, ops, read_code, symbolize)
        pads, self.failed = landing_pads(index, (fde,), ops)
        if self.failed:
            return
        def frame_at(addr):
            return facts_at(addr)[1]
        self.states, self.failed = flow.analyse(ops, self.regs, abi.sp, abi.fp, abi.entry_cfa_offset, rules_at,
                                                pads=pads, frame_at=frame_at, facts=_per_op(ops, starts, facts))
        self.starts = [op.addr for op in ops]

    @classmethod
    def cold_part(cls, abi, index, fde, parent, read_code, symbolize=None):
        """The answers for `fde`, a part of the function whose FDE is `parent` placed elsewhere
        (GCC's `.cold`): the two pieces analysed as one function, from the parent's entry, so
        each instruction of the part gets what the parent's paths into it bring."""
        self = cls.__new__(cls)
        self.abi, self.fde = abi, fde
        self.regs = [r for r in abi.callee_saved if r != abi.fp]
        self.failed, self.plans, self.states, self.starts = None, {}, [], []
        if not starts_as_function(abi, index.rows(parent), parent.start) \
                or parent.start < fde.start + fde.size and fde.start < parent.start + parent.size:
            self.failed = "its function at %#x does not start as a function does" % parent.start
            return self

        facts_at = _facts_in(abi, index, (parent, fde))

        def rules_at(addr):
            return facts_at(addr)[0]
        ops: List[flow.Op] = []
        for piece in (parent, fde):
            code = function_code(piece, read_code)
            # (The parent's decoding is its own turn's where its CFA - SP comes from its own rows,
            # and that turn is still to come: kept for it.)
            rowed = _rowed(index, piece)
            got = self._decoded(abi, index, code, piece.start, read_code, lambda addr: rules_at(addr)[0],
                                own=piece is fde, rowed=rowed,
                                keep=piece is parent and rowed and parent.index > fde.index) if code else None
            if not got:
                self.failed = "the code of %#x cannot be read or measured" % piece.start
                self.unreadable = code is None
                return self
            ops.extend(got)
        ops.sort(key=lambda op: op.addr)
        ops = self._noreturn_calls(abi, index, ops, read_code, symbolize)
        entry = [k for k, op in enumerate(ops) if op.addr == parent.start][0]
        pads, self.failed = landing_pads(index, (parent, fde), ops)
        if self.failed:
            return self
        def frame_at(addr):
            return facts_at(addr)[1]
        states, self.failed = flow.analyse(ops, self.regs, abi.sp, abi.fp, abi.entry_cfa_offset, rules_at, entry,
                                           pads, frame_at, facts=[facts_at(op.addr) for op in ops])
        mine = [(op.addr, state) for op, state in zip(ops, states) if fde.start <= op.addr < fde.start + fde.size]
        self.starts = [addr for addr, _state in mine]
        self.states = [state for _addr, state in mine]
        return self

    def _noreturn_calls(self, abi, index, ops, read_code, symbolize):
        """The ops, a call to a function that never returns made a stop."""
        def decode(code, start):
            return _remembered(index, (type(self), "control", start, len(code), id(read_code)),
                               lambda: self.control(abi, code, start, read_code, case_elsewhere(abi, index), index))

        def tables(code, start):
            return self._decoded(abi, index, code, start, read_code)
        search = noreturn.Search(abi, index, read_code, symbolize, decode, tables if self.tables_later else None)
        call, stop = flow.Flow.CALL, flow.Flow.STOP
        return [op._replace(flow=stop, gone=True) if op.flow is call and op.target is not None
                and search.never_returns(op.target) else op
                for op in ops]

    @classmethod
    def _decoded(cls, abi, index, code: bytes, start: int, read_code, sp_at=None, measured=None, own=None,
                 rowed=True, keep=False) -> Optional[List[flow.Op]]:
        """`decode` of a function's code, its jump tables followed (with SFrame's CFA - SP
        `sp_at`, or without), remembered on the index: a function is decoded as itself and as
        the parent of its .cold part, the same each time.  (`sp_at` from the function's own rows,
        whoever asks, gives the same; `rowed` False: `sp_at` is index.lookup's, which another FDE
        starting inside the function makes another, remembered apart.)  `own` (without
        `measured`): where not remembered, its instructions are `measured_ahead`'s.  `keep` (a
        .cold part's parent, whose own turn is to come): the decoding is also kept for that turn,
        where the index's Ahead keeps one (x86insn.Ahead.keep: the remembered ones are forgotten
        by hundreds, and the parts come first, in .text.unlikely, their parents later); the own
        turn (`own` not False) claims it."""
        key = (cls, start, len(code), None if sp_at is None else rowed, id(read_code))
        ahead = x86insn.ahead_of(index)

        def make():
            kept = None if ahead is None or own is False else ahead.claim(start, key)
            if kept is not None:
                return kept
            given = measured if own is None else cls.measured_ahead(index, code, start, own)
            return cls.decode(abi, code, start, read_code, sp_at, given, case_elsewhere(abi, index))
        got = _remembered(index, key, make)
        if keep and ahead is not None and got and start not in index.saves:
            ahead.keep(start, key, len(code), got)
        return got

    def change_points(self) -> List[int]:
        """The instructions whose state differs from the one before (and the entry): between two
        of them `at`'s answer is the same."""
        if self.failed or not self.starts:
            return [self.fde.start]
        out, prev, last = [], object(), None
        for addr, state in zip(self.starts, self.states):
            regs = None if state is None else state.regs
            if regs is not None and regs is last:
                continue                # (the op before's registers, the same tuple: most ops)
            last = regs
            key = None if regs is None else tuple(None if type(r) is flow.Restored else r for r in regs)
            if key != prev:
                out.append(addr)
                prev = key
        return out

    def at(self, match) -> Dict[int, Save]:
        if self.failed:
            bad = unknown(self.failed)
            return {r: bad for r in self.regs}
        fde, pc = self.fde, match.pc
        if fde.pc_type is F.PCType.MASK and fde.block_size:
            pc = fde.start + (pc - fde.start) % fde.block_size
        k = bisect.bisect_right(self.starts, pc) - 1
        state = self.states[k] if k >= 0 else None
        if state is None:
            bad = unknown("no path from the function's entry reaches %#x" % pc)
            return {r: bad for r in self.regs}
        out = {}
        for reg, where in zip(self.regs, state.regs):
            if where is None or type(where) is flow.Restored:
                out[reg] = UNCHANGED
            elif where == flow.UNKNOWN:
                out[reg] = unknown("saved differently on different paths, or where this analysis cannot place it")
            elif isinstance(where, tuple):
                out[reg] = Save(SaveKind.IN_REGISTER, 0, where[1])
            else:
                out[reg] = saved(where)  # type: ignore[arg-type]  # an int: CFA offset
        return out


def _remembered(index, key, make):
    """make(), remembered on the index under `key` (at most DECODED_LIMIT functions' decodings)."""
    cache = index.decoded
    if key not in cache:
        if len(cache) >= DECODED_LIMIT:
            cache.clear()
        cache[key] = make()
    return cache[key]


def _facts(abi, rules) -> tuple:
    """What the data flow asks of SFrame's rules at an instruction, worked out once per row:
    (CFA - SP, CFA - FP) and the frame's state (frame_state)."""
    return cfa_offsets(abi, rules), frame_state(rules)


_NO_FACTS = ((None, None), None)     # _facts where no rules are known


def _per_op(ops, starts, facts) -> list:
    """`facts` of the row each op (in address order) is in: one walk along the rows' `starts`,
    not a search per op."""
    out = []
    k, n = -1, len(starts)
    nxt = starts[0] if n else None
    for op in ops:
        addr = op.addr
        while nxt is not None and addr >= nxt:
            k += 1
            nxt = starts[k + 1] if k + 1 < n else None
        out.append(facts[k] if k >= 0 else _NO_FACTS)
    return out


def _rowed(index, piece) -> bool:
    """Does index.lookup give the FDE `piece`'s own rows at each of its addresses (it has rows, is
    no PC-mask FDE, and find_fde gives it at both ends: no other FDE starts inside it)?"""
    if not index.rows(piece) or piece.pc_type is F.PCType.MASK:
        return False
    return all(e is not None and e.index == piece.index for e in (index.find_fde(piece.start), index.find_fde(piece.end - 1)))


def _facts_in(abi, index, pieces):
    """facts_at(addr): `_facts` of the rules `index.lookup(addr)` gives, for addresses in the FDEs
    `pieces`, found in the piece's rows (a bisect) where that is the same: no other FDE starts
    inside the piece (find_fde gives it at both ends) and it has rows; elsewhere by the lookup."""
    rowed = []
    for piece in pieces:
        if _rowed(index, piece):
            rows = index.rows(piece)
            rowed.append((piece.start, piece.end, [a for a, _rules in rows], [_facts(abi, r) for _a, r in rows]))

    def facts_at(addr):
        for lo, hi, starts, facts in rowed:
            if lo <= addr < hi:
                k = bisect.bisect_right(starts, addr) - 1
                return facts[k] if k >= 0 else _NO_FACTS
        m = index.lookup(addr)
        return _facts(abi, m.rules if m is not None else None)
    return facts_at


@functools.lru_cache(maxsize=1024)
def frame_state(rules) -> Optional[tuple]:
    """What SFrame's rules say of the frame, apart from how the FRE encodes it (a flex or a
    default FDE, the header's fixed RA offset, s390x's padding word): where the CFA, the RA and
    the FP are.  Two instructions a jump joins have the same (flow.anywhere); None: not known."""
    if rules is None or rules.cfa is None:
        return None

    def where(rule):
        kind = RuleKind.AT_CFA if rule.kind is RuleKind.FIXED else rule.kind
        if kind in (RuleKind.UNCHANGED, RuleKind.UNDEFINED):
            return (kind,)
        return (kind, rule.offset, rule.reg, rule.deref)
    return where(rules.cfa), where(rules.ra), where(rules.fp), rules.ra_mangled


def _kept(abi) -> frozenset:
    """The registers a call preserves: the ABI's callee-saved ones and SP."""
    return frozenset(abi.callee_saved) | {abi.sp}


def case_elsewhere(abi, index):
    """elsewhere(addr) for core.saves.jumptables: may a switch's case outside the function's own
    code be at addr?  Where a part of a function is (an FDE that does not start as a function
    does: GCC's .cold), or code no FDE covers, inside the section's range."""
    def elsewhere(addr: int) -> bool:
        fde = index.find_fde(addr)
        if fde is None:
            lo, hi = index.text_range()
            return lo <= addr < hi
        return not starts_as_function(abi, index.rows(fde), fde.start)
    return elsewhere


class A64Function(FlowFunction):
    @staticmethod
    def decode(abi, code, start, read=None, sp_at=None, measured=None, elsewhere=None):
        return a64insn.words(code, start, read, _kept(abi), sp_at, abi.big_endian, elsewhere)


class S390Function(FlowFunction):
    @staticmethod
    def decode(abi, code, start, read=None, sp_at=None, measured=None, elsewhere=None):
        return s390insn.words(code, start, lambda n: abi.regnum("f%d" % n), read, _kept(abi), sp_at, elsewhere)


class X86FlowFunction(FlowFunction):
    @staticmethod
    def decode(abi, code, start, read=None, sp_at=None, measured=None, elsewhere=None):
        return x86flow.ops(code, start, read, _kept(abi), sp_at, measured, elsewhere)

    tables_later = True

    @classmethod
    def control(cls, abi, code, start, read=None, elsewhere=None, index=None):
        return x86flow.control(code, start, cls._ahead(index, code, start, False))

    @classmethod
    def measured_ahead(cls, index, code, start, own):
        got = cls._ahead(index, code, start, own)
        return got[0] if got is not None and got[1] == len(code) else None

    @staticmethod
    def _ahead(index, code, start, own):
        """x86insn.decode_all of a whole function from the index's Ahead: kept for the
        function's own analysis where that is still to come (it has no answers on the index
        yet), given up where this is it (`own`).  None: measure it where it is decoded."""
        ahead = None if index is None else x86insn.ahead_of(index)
        if ahead is None:
            return None
        if own:
            return ahead.take(code, start, len(code))
        return None if start in index.saves else ahead.get(code, start)
