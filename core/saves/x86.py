"""The save-slot analyser of x86-64, from the pushes at the places SFrame says the CFA moves.

- The function's code is read once and measured instruction by instruction (core.saves.x86insn), so
  every instruction start is known.
- Where the CFA is SP-based, SFrame gives the CFA offset at every instruction.  A `push %reg`
  whose end is an FRE boundary where the offset grows by 8 saved the register at CFA - offset;
  any other growth (sub, push of memory or immediate) allocates.  At a PC whose CFA offset is K,
  a register pushed at depth D <= K is saved there, provided nothing else in the function creates
  depth D (one slot, one register, on every path); a register pushed only deeper has not been
  pushed yet, or has been popped again: unchanged.
- Where the CFA is based on the frame pointer, SFrame no longer sees the stack pointer move.  The
  pushes that follow the `mov %rsp, %rbp` at which the CFA switched to %rbp save at %rbp - 8,
  - 16, ... (CFA-relative when the offset before the switch is known, %rbp-relative otherwise:
  realigned and DRAP frames).
- A register pushed anywhere else, or stored to memory without being pushed, is UNKNOWN.
- The frame pointer itself is left to SFrame's FP rule.
"""

import bisect
import functools
from types import MappingProxyType
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ..sframe import format as F
from ..sframe.rules import RuleKind
from . import x86insn as X
from .save import UNCHANGED, Save, SaveKind, function_code, saved, sp_offset, starts_as_function, unknown


@functools.lru_cache(maxsize=None)
def _hardware(regs: Tuple[int, ...]) -> frozenset:
    """The hardware numbers of DWARF registers `regs`."""
    return frozenset(X.DWARF_OF_HW.index(r) for r in regs)


@functools.lru_cache(maxsize=None)
def _all_unchanged(regs: Tuple[int, ...]) -> Dict[int, Save]:
    """Every register of `regs` UNCHANGED (one answer, shared: answers are never modified)."""
    return {r: UNCHANGED for r in regs}


# Empty, and raising on any write: the defaults of X86Function's containers.
_READ_ONLY_LIST: Any = ()
_READ_ONLY_DICT: Any = MappingProxyType({})
_READ_ONLY_SET: Any = frozenset()


def saves_nothing(insns: List[X.Insn], wanted_hw: frozenset) -> bool:
    """Does the function push no register, store or write no callee-saved one (`wanted_hw`: their
    hardware numbers) and set up no frame pointer?  (Most do: then X86Function's passes would
    find nothing.)  The first instruction that does ends the search: most often a push at the
    entry."""
    push, mov_fp_sp, store = X.Kind.PUSH, X.Kind.MOV_FP_SP, X.Kind.STORE
    # (An Insn's fields unpacked in their order: fewer look-ups per instruction than by name.)
    for _addr, _length, kind, reg, _t, _sp_write, _transfer, _nop, writes in insns:
        if kind is push or kind is mov_fp_sp or kind is store and reg in wanted_hw \
                or writes and not wanted_hw.isdisjoint(writes):
            return False
    return True


class X86Function:
    """The save facts of one x86-64 function, found once; `at(match)` answers per PC."""

    # What a function has until its analysis finds otherwise (most find nothing: read-only
    # defaults here, a function's own containers made where its analysis fills them: _analyse,
    # _sp_growth).
    failed: Optional[str] = None
    plt0 = unreadable = False
    insns: Optional[List[X.Insn]] = None
    rows: Sequence = ()
    k0: Optional[int] = None                 # the SP offset at the frame-pointer prologues (_fp_prologues)
    runs: List[Tuple[int, int, Optional[int], Dict[int, Tuple[int, int]]]] = _READ_ONLY_LIST
    unexplained: Dict[int, str] = _READ_ONLY_DICT   # reg -> why it cannot be UNCHANGED (where not saved)
    poisoned: Dict[int, str] = _READ_ONLY_DICT      # reg -> why nothing about it is proved
    run_saves: Dict[int, Tuple[int, int]] = _READ_ONLY_DICT
    run_conflict: Set[int] = _READ_ONLY_SET
    sp_pushes: Dict[int, List[int]] = _READ_ONLY_DICT     # DWARF reg -> depths it is pushed at (_sp_growth)
    sp_depth: Dict[int, int] = _READ_ONLY_DICT            # DWARF reg -> the least of them
    depth_regs: Dict[int, set] = _READ_ONLY_DICT          # depth -> registers pushed there
    allocs: List[Tuple[int, int]] = _READ_ONLY_LIST       # (k1, k2]: depths created by allocations
    _per_pc: Optional[Dict[int, Dict[int, Save]]] = None  # `at`'s answers (made at its first question)
    ends: Dict[int, int] = _READ_ONLY_DICT               # instruction end -> its number (_measure, two rows or more)
    _by_frame: Optional[Dict[tuple, Dict[int, Save]]] = None   # _compute's, by what they depend on

    def __init__(self, abi, index, fde, read_code):
        self.abi = abi
        self.regs = abi.analysed
        self._wanted_hw = _hardware(self.regs)
        self.index = index
        self.fde = fde
        code = function_code(fde, read_code)
        if code is None:
            self.failed = "the function's code at %#x cannot be read" % fde.start
            self.unreadable = True
            return
        self._analyse(code)

    @property
    def starts(self) -> Optional[List[int]]:
        """The addresses of the function's instructions, where they were measured (else None)."""
        return None if self.insns is None else [i.addr for i in self.insns]

    def _sp_offset(self, rules):
        return sp_offset(self.abi, rules)

    def _fp_based(self, rules):
        cfa = rules.cfa
        return cfa is not None and cfa.kind is RuleKind.REGISTER and cfa.reg == self.abi.fp

    def _rules_at(self, addr):
        m = self.index.lookup(addr)
        return None if m is None or m.fde.start != self.fde.start else m.rules

    def _analyse(self, code):
        insns = self._measure(code)
        if insns is None:
            return
        fde = self.fde
        lo = fde.start
        hi = lo + fde.size
        branch = X.Kind.BRANCH
        targets = []
        # Up to here the only way from the entry is straight down: no jump lands in between, none leaves.
        straight = hi
        # (An Insn's fields unpacked in their order: fewer look-ups per instruction than by name.)
        for addr, length, kind, _reg, t, _sp_write, transfer, _nop, _writes in insns:
            if kind is branch and t is not None:
                targets.append(t)
                if lo < t < straight:
                    straight = t
            if (transfer or kind is branch) and addr + length < straight:
                straight = addr + length
        self.straight_until = straight
        if saves_nothing(insns, self._wanted_hw):
            return    # (no push: _sp_growth would find no save, and its allocations count only beside one)
        self.runs, self.unexplained, self.poisoned, self.run_saves, self.run_conflict = [], {}, {}, {}, set()
        in_run = self._fp_prologues(insns, targets)
        if not self._sp_growth(insns, in_run):
            return
        self._other_saves(insns, in_run)
        self._unsaved_writes(insns)

    @staticmethod
    def constant_at_once(abi, index, fde, read_code, ahead: Optional[X.Ahead]) -> Optional[Dict[int, Save]]:
        """`constant()` of the function of `fde` without making the object, where it is one and
        the same answer by the simplest proof: one row, the function's entry's, and code that
        saves nothing (`saves_nothing`): every register UNCHANGED.  None: not proved so (make the
        object; the instructions measured here are kept in `ahead`, where there is one, for
        it).  The caller has checked the FDE's entry (core.saves.analysis._function)."""
        rows = index.rows(fde)
        if len(rows) != 1 or not starts_as_function(abi, rows, fde.start):
            return None
        code = function_code(fde, read_code)
        if code is None:
            return None
        insns, pos = ahead.get(code, fde.start) if ahead is not None else X.decode_all(code, fde.start, fde.size)
        if pos != fde.size or not saves_nothing(insns, _hardware(abi.analysed)):
            return None
        return _all_unchanged(abi.analysed)

    @staticmethod
    def instruction_starts(abi, code: bytes, start: int) -> Optional[List[int]]:
        """The addresses of the instructions of `code` (at `start`), or None where one cannot be
        decoded or the last runs past the end."""
        insns, pos = X.decode_all(code, start, len(code))
        out = [i.addr for i in insns]
        return out if pos == len(code) else None

    def _measure(self, code) -> Optional[List[X.Insn]]:
        """The function's instructions, each FRE starting at one; None (and `failed`) otherwise."""
        fde = self.fde
        ahead = X.ahead_of(self.index)
        insns, pos = ahead.take(code, fde.start, fde.size) if ahead is not None else X.decode_all(code, fde.start, fde.size)
        if pos < fde.size:
            self.failed = "cannot decode the instruction at %#x" % (fde.start + pos)
            return None
        if pos != fde.size:
            self.failed = "the last instruction runs past the function's end"
            return None
        self.insns = insns        # (the data flow takes them too, where it runs: X86FlowFunction)
        self.rows = rows = self.index.rows(fde)
        abi = self.abi
        if not starts_as_function(abi, rows, fde.start):
            # (A lazy PLT0's first row has CFA = SP + the entry offset + a word: not a function's.)
            if rows and sp_offset(abi, rows[0][1]) == abi.entry_cfa_offset + abi.ptr_size and self._lazy_plt0(insns):
                self.plt0 = True
                return None
            # A part of another function (GCC's .cold parts): its registers were saved elsewhere.
            self.failed = "the FDE does not start as a function does (CFA = SP + %d)" % self.abi.entry_cfa_offset
            return None
        if len(rows) > 1:
            # The end of each instruction -> its number (where FREs follow the first: _sp_growth).
            ends: Dict[int, int] = {}
            if insns:
                ends.update(zip([i.addr for i in insns[1:]], range(len(insns) - 1)))
                ends[fde.start + pos] = len(insns) - 1
            self.ends = ends
            for start, _rules in rows[1:]:
                if start not in ends:
                    self.failed = "the FRE at %#x does not start at an instruction" % start
                    return None
        return insns

    def _lazy_plt0(self, insns) -> bool:
        """The lazy-binding PLT0 (`push GOT+8(%rip); jmp *GOT+16(%rip)`), entered by a jump from a PLT
        entry that pushed one word (its first row's CFA is SP + the entry offset + a word: the
        caller checks): neither writes a register, so every one is the caller's."""
        kinds = [i.kind for i in insns if not i.quiet]
        return kinds == [X.Kind.PUSH_OTHER, X.Kind.JUMP_INDIRECT]

    def _fp_prologues(self, insns, targets) -> set:
        """The pushes after each `mov %rsp, %rbp` save at %rbp - 8, - 16, ... (they count where the
        CFA is %rbp-based, i.e. where %rbp still holds that value).  Returns the pushes' indexes."""
        dwarf, mov_fp_sp = X.DWARF_OF_HW, X.Kind.MOV_FP_SP
        in_run = set()
        for k, ins in enumerate(insns):
            if ins.kind is not mov_fp_sp:
                continue
            after = ins.addr + ins.length
            r_before = self._rules_at(ins.addr)
            k0 = None if r_before is None else self._sp_offset(r_before)
            saves: Dict[int, Tuple[int, int]] = {}
            depth, end, j = 0, after, k + 1
            while j < len(insns):
                nxt = insns[j]
                if nxt.kind is X.Kind.PUSH:
                    depth += 8
                    saves.setdefault(dwarf[nxt.reg], (-depth, nxt.addr))
                    in_run.add(j)
                    end = nxt.addr + nxt.length
                elif nxt.kind is not X.Kind.OTHER or nxt.sp_write:
                    break     # the stack pointer may move: no further push is at a known slot
                j += 1
            if any(after < t < end for t in targets):
                for reg in saves:     # a second way into the prologue: its slots are not proved
                    self.unexplained[reg] = "a branch lands inside the prologue that saves it"
                continue
            self.runs.append((after, end, k0, saves))
        # The SP offset at the frame-pointer switch, if there is one (and one only).
        k0s = {r[2] for r in self.runs}
        self.k0 = k0s.pop() if len(k0s) == 1 else None
        for _after, _end, _k0, saves in self.runs:
            for reg, val in saves.items():
                old = self.run_saves.setdefault(reg, val)
                if old[0] != val[0]:
                    self.run_conflict.add(reg)
        for _after, _end, _k0, saves in self.runs:
            self.run_conflict.update(r for r in self.run_saves if r not in saves)   # saved by one prologue only
        return in_run

    def _in_run(self, reg, pc):
        """For a pc inside a frame-pointer prologue: has it pushed reg yet?  None: pc is in none."""
        for after, end, _k0, saves in self.runs:
            if after <= pc <= end:
                return reg in saves and pc > saves[reg][1]
        return None

    def _sp_growth(self, insns, in_run) -> bool:
        """Where the CFA is SP-based, the stack grows at FRE boundaries: by a push of a register
        (a save at that depth) or by an allocation."""
        rows = self.rows
        if len(rows) < 2:
            return True           # (one row: the stack grows nowhere; the defaults are empty)
        dwarf = X.DWARF_OF_HW
        self.sp_pushes, self.depth_regs, self.allocs = {}, {}, []
        for (_s1, r1), (s2, r2) in zip(rows, rows[1:]):
            k1, k2 = self._sp_offset(r1), self._sp_offset(r2)
            if k1 is None or k2 is None or k2 <= k1:
                continue
            last = self.ends[s2]
            ins = insns[last]
            if ins.transfer or ins.kind is X.Kind.BRANCH or ins.kind is X.Kind.OTHER and not ins.sp_write:
                continue      # not a growth: a new path's CFA (after a jmp, ret, noreturn call, padding)
            if ins.kind is X.Kind.PUSH and k2 == k1 + 8:
                reg = dwarf[ins.reg]
                self.sp_pushes.setdefault(reg, []).append(k2)
                self.depth_regs.setdefault(k2, set()).add(reg)
                in_run.add(last)
            else:
                self.allocs.append((k1, k2))
        self.sp_depth = {reg: min(depths) for reg, depths in self.sp_pushes.items()}
        return True

    def _other_saves(self, insns, in_run):
        """Pushes SFrame does not show: a register with one cannot be called unchanged where no
        proved save covers it."""
        dwarf, push = X.DWARF_OF_HW, X.Kind.PUSH
        wanted = set(self.regs)
        for k, ins in enumerate(insns):
            if ins.kind is push and k not in in_run:
                reg = dwarf[ins.reg]
                if reg in wanted:
                    self.unexplained.setdefault(reg, "pushed at %#x where SFrame does not show the push" % ins.addr)

    def _unsaved_writes(self, insns):
        """A register written, or stored to memory, where no proved save covers it (hand-written
        code that keeps it in another register or saves it with a `mov`, a function that does not
        preserve it) cannot be called unchanged."""
        dwarf = X.DWARF_OF_HW
        wanted = set(self.regs)
        wanted_hw, store = self._wanted_hw, X.Kind.STORE
        starts = [r[0] for r in self.rows]
        for ins in insns:
            writes = ins.writes
            if (not writes or wanted_hw.isdisjoint(writes)) and (ins.kind is not store or ins.reg not in wanted_hw):
                continue      # (most: neither writes nor stores a register of `wanted`)
            stored = (ins.reg,) if ins.kind is store else ()
            for hw in writes + stored:
                reg = dwarf[hw]
                if reg not in wanted or reg in self.poisoned:
                    continue
                k = bisect.bisect_right(starts, ins.addr) - 1
                got = self._proved(reg, sp_offset(self.abi, self.rows[k][1]), self._fp_based(self.rows[k][1]),
                                   ins.addr) if k >= 0 else None
                if got is None or got.kind is not SaveKind.SAVED:
                    # Changed (or saved some other way) before any proved save: a later push of
                    # it may hold the changed value too, so nothing about it is proved.
                    what = "stored to memory" if stored and hw == ins.reg else "written"
                    self.poisoned[reg] = "%s at %#x where it is not saved" % (what, ins.addr)

    def _clean(self, reg, depth):
        """Only `reg` is ever pushed at `depth`, and no allocation creates it."""
        pushed = self.depth_regs.get(depth)
        if pushed is None or len(pushed) != 1 or reg not in pushed:
            return False
        for k1, k2 in self.allocs:
            if k1 < depth <= k2:
                return False
        return True

    def change_points(self) -> List[int]:
        """The addresses from which `at`'s answer may differ from the one before: the entry, the
        FREs, and the thresholds a PC is compared with (the end of the straight way in, the
        frame-pointer prologues and their pushes).  Between two of them the answer is the same."""
        fde = self.fde
        points = {fde.start} | {a for a, _rules in self.rows}
        if not self.failed and not self.plt0 and hasattr(self, "straight_until"):
            points.add(self.straight_until)
            for after, end, _k0, saves in self.runs:
                points.update((after, end + 1))
                points.update(at + 1 for _slot, at in saves.values())
        return sorted(p for p in points if fde.start <= p < fde.start + fde.size)

    def constant(self) -> Optional[Dict[int, Save]]:
        """The answer at every PC where it is one and the same: a function that saves, pushes and
        writes no callee-saved register, each of whose FREs has an SP- or FP-based CFA (every
        register UNCHANGED throughout; a lazy PLT0 too).  None otherwise (ask `at`)."""
        if self.plt0:
            return _all_unchanged(self.regs)
        if self.failed or self.sp_pushes or self.run_saves or self.poisoned or self.unexplained \
                or not self.rows or self.rows[0][0] != self.fde.start:
            return None
        # (The first row's CFA is SP + the entry offset: starts_as_function.)
        rows = self.rows
        if len(rows) > 1:
            abi = self.abi
            for _a, rules in rows[1:]:
                if sp_offset(abi, rules) is None and not self._fp_based(rules):
                    return None
        return _all_unchanged(self.regs)

    def at(self, match) -> Dict[int, Save]:
        per_pc = self._per_pc
        if per_pc is None:
            per_pc = self._per_pc = {}
        got = per_pc.get(match.pc)
        if got is None:
            if len(per_pc) >= 256:
                per_pc.clear()
            got = per_pc[match.pc] = self._compute(match)
        return got

    def _compute(self, match):
        if self.plt0:
            return {r: UNCHANGED for r in self.regs}
        if self.failed:
            bad = unknown(self.failed)
            return {r: bad for r in self.regs}
        rules, pc, fde = match.rules, match.pc, self.fde
        if fde.pc_type is F.PCType.MASK and fde.block_size:
            pc = fde.start + (pc - fde.start) % fde.block_size    # the same place in the first block
        k_pc = self._sp_offset(rules)
        fp_based = self._fp_based(rules)
        if not self.run_saves:
            # (No frame-pointer prologue saves: the answer depends on the PC only through the
            # straight way in, and only where the CFA is neither SP- nor FP-based (_at_other):
            # one answer per key, shared by the PCs that have it.)
            key = (k_pc, fp_based, k_pc is None and not fp_based and pc >= self.straight_until)
            by_frame = self._by_frame
            if by_frame is None:
                by_frame = self._by_frame = {}
            got = by_frame.get(key)
            if got is None:
                got = by_frame[key] = {reg: self._one(reg, k_pc, fp_based, pc) for reg in self.regs}
            return got
        return {reg: self._one(reg, k_pc, fp_based, pc) for reg in self.regs}

    def _one(self, reg, k_pc, fp_based, pc):
        if reg in self.poisoned:
            return unknown(self.poisoned[reg])
        got = self._proved(reg, k_pc, fp_based, pc)
        if got is not None:
            return got
        why = self.unexplained.get(reg)
        return UNCHANGED if why is None else unknown(why)

    def _proved(self, reg, k_pc, fp_based, pc):
        """SAVED or UNKNOWN where the saves say so; None: no save covers pc."""
        if reg in self.run_conflict:
            return unknown("saved at different places by different prologues")
        d = self.sp_depth.get(reg)
        run = self.run_saves.get(reg)
        if k_pc is not None:
            return self._at_sp_based(reg, d, run, k_pc, pc)
        if fp_based:
            return self._at_fp_based(reg, d, run, pc)
        return self._at_other(reg, d, run, pc)

    def _at_sp_based(self, reg, d, run, k_pc, pc):
        """CFA = SP + k_pc: a register pushed at depth d <= k_pc is saved there (if that slot is
        only ever its); None: not saved on the way here."""
        if d is not None and d <= k_pc:
            if self._clean(reg, d):
                return saved(-d)
            return unknown("the slot at CFA - %d holds different things on different paths" % d)
        if run is None:
            return None
        if self.k0 is None:
            if pc < self.straight_until and all(pc < r[0] for r in self.runs):
                return None       # on the one way in, before the frame-pointer prologue
            return unknown("saved relative to the frame pointer, which this PC does not use")
        slot = self.k0 - run[0]     # run[0] is negative: rbp - n
        return saved(-slot) if slot <= k_pc else None

    def _at_fp_based(self, reg, d, run, pc):
        """CFA based on %rbp: the frame-pointer prologue ran (up to pc, if pc is inside it)."""
        if d is not None:
            if self.k0 is not None and d <= self.k0 and self._clean(reg, d):
                return saved(-d)
            return unknown("pushed before the frame pointer was set up, at a depth not proved")
        if run is None or self._in_run(reg, pc) is False:
            return None           # not pushed by the prologue, or not yet
        if self.k0 is not None:
            return saved(run[0] - self.k0)
        return saved(run[0], self.abi.fp)

    def _at_other(self, reg, d, run, pc):
        """The CFA is based on another register (a DRAP prologue or epilogue): only a PC on the
        function's one straight-line way in, or inside a frame-pointer prologue, is proved."""
        refused = unknown("the CFA is neither SP- nor FP-based here")
        if d is not None or reg in self.unexplained:
            return refused
        if run is not None:
            pushed = self._in_run(reg, pc)
            if pushed:
                return saved(run[0], self.abi.fp)
            if pushed is None and pc >= self.straight_until:
                return refused
        elif pc >= self.straight_until:
            return refused
        return None
