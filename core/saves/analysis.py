"""Where a frame's callee-saved registers are: the save-slot analysis.

DWARF CFI says, for each callee-saved register, "saved at CFA+N" or "same value"; SFrame leaves
that out (it has only CFA, RA and FP).  The function's own code says it, and SFrame says exactly
where the CFA moves, so the two together prove where each register is.  For every callee-saved
register the answer at a PC is a `Save`:

- SAVED: its caller's value is in the stack slot at CFA + offset (or at a register of this
  frame + offset, for slots addressed from the frame pointer of a realigned frame);
- UNCHANGED: no save of it is on any path to the PC, so (the ABI promises it) the register still
  holds its caller's value;
- UNKNOWN: the analysis cannot prove either (an instruction it cannot measure, a save on one path
  and not another, a store of the register it cannot place).  Never a guess.

x86-64 (the one ABI analysed so far; the others answer UNKNOWN for every register):
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

Results are cached per function (the index's `saves` cache) and per FRE.
"""

import bisect
import enum
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from ..arch import abi as abimod
from ..sframe import format as F
from ..sframe.rules import RuleKind
from . import a64insn, flow, s390insn
from . import x86insn as X

CodeReader = Callable[[int, int], Optional[bytes]]


class SaveKind(enum.Enum):
    SAVED = "saved"
    UNCHANGED = "unchanged"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Save:
    """Where one callee-saved register's caller value is, at one PC."""
    kind: SaveKind
    offset: int = 0
    base: Optional[int] = None     # SAVED: None for CFA + offset, else DWARF register + offset
    why: str = ""                  # UNKNOWN: the reason

    def describe(self, abi: abimod.ABIInfo) -> str:
        """e.g. 'saved at CFA - 24', 'saved at [rbp - 16]', 'unchanged', 'unknown (...)'."""
        if self.kind is SaveKind.SAVED:
            base = "CFA" if self.base is None else abi.regname(self.base)
            off = "" if not self.offset else " %s %d" % ("+" if self.offset > 0 else "-", abs(self.offset))
            return "saved at %s%s" % (base, off)
        if self.kind is SaveKind.UNCHANGED:
            return "unchanged (not saved on the way to this PC: still the caller's value)"
        return "unknown (%s)" % self.why if self.why else "unknown"


UNCHANGED = Save(SaveKind.UNCHANGED)


def _unknown(why: str) -> Save:
    return Save(SaveKind.UNKNOWN, why=why)


CACHE_LIMIT = 1024
# The largest function whose code is read and analysed (a malformed FDE may claim gigabytes).
MAX_FUNCTION_SIZE = 1 << 20


# symbolize(addr) -> (name, offset) of the function symbol containing addr, or None.
Symbolize = Callable[[int], Optional[Tuple[str, int]]]
_COLD = re.compile(r"\.cold(\.\d+)?$")


def _entry_problem(abi: abimod.ABIInfo, fde, symbolize: Optional[Symbolize]) -> Optional[str]:
    """Why the FDE cannot be taken for a function's first instruction (its state at entry: every
    register the caller's), or None.  A symbol settles it; without one, the CFA test of the
    analysers decides, except on s390x, where a save does not move the CFA."""
    sym = None
    if symbolize is not None:
        try:
            sym = symbolize(fde.start)
        except Exception:
            sym = None
    if sym is not None:
        name, offset = sym
        if offset:
            return "%#x is inside %s (at + %d): a part of a function" % (fde.start, name, offset)
        if _COLD.search(name):
            return "%s is a part of a function (GCC's .cold)" % name
        return None
    if not abi.saves_move_cfa:
        return ("no symbol says %#x starts a function (on %s a save does not move the CFA, so the CFA "
                "cannot tell)" % (fde.start, abi.name))
    return None


class _Refused:
    """A function the analysis does not take: every register UNKNOWN, for one reason."""

    def __init__(self, regs, why):
        self.plans: Dict[int, Plan] = {}
        self._answer = {r: _unknown(why) for r in regs}

    def at(self, match) -> Dict[int, Save]:
        return self._answer


def at(abi: abimod.ABIInfo, index, match, read_code: CodeReader, symbolize: Optional[Symbolize] = None
       ) -> Dict[int, Save]:
    """{DWARF regnum: Save} for the callee-saved registers (except the FP) at `match.pc`.

    `index` is the SFrameIndex `match` came from (its per-function cache is used), `read_code`
    reads code bytes (the debugger's memory or the ELF file): None or an exception means
    unreadable, and every register is then UNKNOWN.  `symbolize` (optional) names the function
    symbol at an address: a `.cold` part or an FDE inside a function is refused, and on s390x
    only an FDE a symbol starts at is taken.
    """
    analyser = _ANALYSERS.get(abi.sframe_abi)
    regs = [r for r in abi.callee_saved if r != abi.fp]
    if analyser is None:
        return {r: _unknown("no save-slot analysis for %s" % abi.name) for r in regs}
    if match.fde.size > MAX_FUNCTION_SIZE:
        return {r: _unknown("the function is larger than %d bytes: not analysed" % MAX_FUNCTION_SIZE) for r in regs}
    cache = index.saves
    fde = match.fde
    func = cache.get(fde.start)
    if func is None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        why = _entry_problem(abi, fde, symbolize)
        func = cache[fde.start] = analyser(abi, index, fde, read_code) if why is None else _Refused(regs, why)
    return func.at(match)


class Plan(NamedTuple):
    """What the unwinder does with `at`'s answer, ready for its hot path: the slots to read as
    (reg, base reg or None for the CFA, offset), and the registers to carry over unchanged."""
    slots: Tuple[Tuple[int, Optional[int], int], ...]
    unchanged: Tuple[int, ...]


def plan(abi: abimod.ABIInfo, index, match, read_code: CodeReader, symbolize: Optional[Symbolize] = None) -> Plan:
    """`at` as a Plan, memoized per function and PC."""
    cache = index.saves
    func = cache.get(match.fde.start)
    plans = getattr(func, "plans", None)
    if plans is not None:
        got = plans.get(match.pc)
        if got is not None:
            return got
    where = at(abi, index, match, read_code, symbolize)
    got = Plan(tuple((r, s.base, s.offset) for r, s in where.items() if s.kind is SaveKind.SAVED),
               tuple(r for r, s in where.items() if s.kind is SaveKind.UNCHANGED))
    func = cache.get(match.fde.start)
    if func is not None:
        if len(func.plans) >= 256:
            func.plans.clear()
        func.plans[match.pc] = got
    return got


def _function_code(fde, read_code: CodeReader) -> Optional[bytes]:
    """The function's code bytes, read once; None if they cannot all be read."""
    try:
        code = read_code(fde.start, fde.size)
    except Exception:
        return None
    return bytes(code) if code is not None and len(code) >= fde.size else None


# -- x86-64 -----------------------------------------------------------------------------------------

class _X86Function:
    """The save facts of one x86-64 function, found once; `at(match)` answers per PC."""

    def __init__(self, abi, index, fde, read_code):
        self.abi = abi
        self.regs = [r for r in abi.callee_saved if r != abi.fp]
        self.index = index
        self.fde = fde
        self.failed: Optional[str] = None
        self._per_pc: Dict[int, Dict[int, Save]] = {}
        self.plans: Dict[int, Plan] = {}
        self.runs: List[Tuple[int, int, Optional[int], Dict[int, Tuple[int, int]]]] = []
        self.plt0 = False
        code = _function_code(fde, read_code)
        if code is None:
            self.failed = "the function's code at %#x cannot be read" % fde.start
            return
        self._analyse(code)

    def _sp_offset(self, rules):
        return _sp_offset(self.abi, rules)

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
        targets = [i.target for i in insns if i.kind is X.Kind.BRANCH and i.target is not None]
        fde = self.fde
        # Up to here the only way from the entry is straight down: no jump lands in between, none leaves.
        self.straight_until = min([t for t in targets if fde.start < t < fde.end]
                                  + [i.addr + i.length for i in insns if i.transfer or i.kind is X.Kind.BRANCH]
                                  + [fde.end])
        self.unexplained: Dict[int, str] = {}    # reg -> why it cannot be UNCHANGED (where not saved)
        self.poisoned: Dict[int, str] = {}       # reg -> why nothing about it is proved
        in_run = self._fp_prologues(insns, targets)
        if not self._sp_growth(insns, in_run):
            return
        self._other_saves(insns, in_run)
        self._unsaved_writes(insns)

    def _measure(self, code) -> Optional[List[X.Insn]]:
        """The function's instructions, each FRE starting at one; None (and `failed`) otherwise."""
        fde = self.fde
        insns: List[X.Insn] = []
        pos = 0
        while pos < fde.size:
            ins = X.decode(code, pos, fde.start + pos)
            if ins is None:
                self.failed = "cannot decode the instruction at %#x" % (fde.start + pos)
                return None
            insns.append(ins)
            pos += ins.length
        if pos != fde.size:
            self.failed = "the last instruction runs past the function's end"
            return None
        self.ends = {i.addr + i.length: k for k, i in enumerate(insns)}
        self.rows = self.index.rows(fde)
        if self.rows and self._lazy_plt0(insns):
            self.plt0 = True
            return None
        if not self.rows or self.rows[0][0] != fde.start \
                or self._sp_offset(self.rows[0][1]) != self.abi.entry_cfa_offset:
            # A part of another function (GCC's .cold parts): its registers were saved elsewhere.
            self.failed = "the FDE does not start as a function does (CFA = SP + %d)" % self.abi.entry_cfa_offset
            return None
        for start, _rules in self.rows[1:]:
            if start not in self.ends:
                self.failed = "the FRE at %#x does not start at an instruction" % start
                return None
        return insns

    def _lazy_plt0(self, insns) -> bool:
        """The lazy-binding PLT0 (`push GOT+8(%rip); jmp *GOT+16(%rip)`), entered by a jump from a PLT
        entry that pushed one word: neither writes a register, so every one is the caller's."""
        if self._sp_offset(self.rows[0][1]) != self.abi.entry_cfa_offset + self.abi.ptr_size:
            return False
        kinds = [i.kind for i in insns if not i.quiet]
        return kinds == [X.Kind.PUSH_OTHER, X.Kind.JUMP_INDIRECT]

    def _fp_prologues(self, insns, targets) -> set:
        """The pushes after each `mov %rsp, %rbp` save at %rbp - 8, - 16, ... (they count where the
        CFA is %rbp-based, i.e. where %rbp still holds that value).  Returns the pushes' indexes."""
        dwarf = X.DWARF_OF_HW
        in_run = set()
        for k, ins in enumerate(insns):
            if ins.kind is not X.Kind.MOV_FP_SP:
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
        self.run_saves: Dict[int, Tuple[int, int]] = {}
        self.run_conflict = set()
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
        dwarf = X.DWARF_OF_HW
        self.sp_pushes: Dict[int, List[int]] = {}   # DWARF reg -> depths it is pushed at
        self.depth_regs: Dict[int, set] = {}        # depth -> registers pushed there
        self.allocs: List[Tuple[int, int]] = []     # (k1, k2]: depths created by allocations
        rows = self.rows
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
        return True

    def _other_saves(self, insns, in_run):
        """Pushes SFrame does not show: a register with one cannot be called unchanged where no
        proved save covers it."""
        dwarf = X.DWARF_OF_HW
        wanted = set(self.regs)
        for k, ins in enumerate(insns):
            if ins.kind is X.Kind.PUSH and k not in in_run:
                reg = dwarf[ins.reg]
                if reg in wanted:
                    self.unexplained.setdefault(reg, "pushed at %#x where SFrame does not show the push" % ins.addr)

    def _unsaved_writes(self, insns):
        """A register written, or stored to memory, where no proved save covers it (hand-written
        code that keeps it in another register or saves it with a `mov`, a function that does not
        preserve it) cannot be called unchanged."""
        dwarf = X.DWARF_OF_HW
        wanted = set(self.regs)
        starts = [r[0] for r in self.rows]
        for ins in insns:
            stored = (ins.reg,) if ins.kind is X.Kind.STORE else ()
            for hw in ins.writes + stored:
                reg = dwarf[hw]
                if reg not in wanted or reg in self.poisoned:
                    continue
                k = bisect.bisect_right(starts, ins.addr) - 1
                got = self._proved(reg, _sp_offset(self.abi, self.rows[k][1]), self._fp_based(self.rows[k][1]),
                                   ins.addr) if k >= 0 else None
                if got is None or got.kind is not SaveKind.SAVED:
                    # Changed (or saved some other way) before any proved save: a later push of
                    # it may hold the changed value too, so nothing about it is proved.
                    what = "stored to memory" if stored and hw == ins.reg else "written"
                    self.poisoned[reg] = "%s at %#x where it is not saved" % (what, ins.addr)

    def _clean(self, reg, depth):
        """Only `reg` is ever pushed at `depth`, and no allocation creates it."""
        if self.depth_regs.get(depth) != {reg}:
            return False
        return not any(k1 < depth <= k2 for k1, k2 in self.allocs)

    def at(self, match) -> Dict[int, Save]:
        got = self._per_pc.get(match.pc)
        if got is None:
            if len(self._per_pc) >= 256:
                self._per_pc.clear()
            got = self._per_pc[match.pc] = self._compute(match)
        return got

    def _compute(self, match):
        if self.plt0:
            return {r: UNCHANGED for r in self.regs}
        if self.failed:
            bad = _unknown(self.failed)
            return {r: bad for r in self.regs}
        rules, pc, fde = match.rules, match.pc, self.fde
        if fde.pc_type is F.PCType.MASK and fde.block_size:
            pc = fde.start + (pc - fde.start) % fde.block_size    # the same place in the first block
        k_pc = self._sp_offset(rules)
        fp_based = self._fp_based(rules)
        out = {}
        for reg in self.regs:
            out[reg] = self._one(reg, k_pc, fp_based, pc)
        return out

    def _one(self, reg, k_pc, fp_based, pc):
        if reg in self.poisoned:
            return _unknown(self.poisoned[reg])
        got = self._proved(reg, k_pc, fp_based, pc)
        if got is not None:
            return got
        why = self.unexplained.get(reg)
        return UNCHANGED if why is None else _unknown(why)

    def _proved(self, reg, k_pc, fp_based, pc):
        """SAVED or UNKNOWN where the saves say so; None: no save covers pc."""
        if reg in self.run_conflict:
            return _unknown("saved at different places by different prologues")
        depths = self.sp_pushes.get(reg)
        d = min(depths) if depths else None
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
                return Save(SaveKind.SAVED, -d)
            return _unknown("the slot at CFA - %d holds different things on different paths" % d)
        if run is None:
            return None
        if self.k0 is None:
            if pc < self.straight_until and all(pc < r[0] for r in self.runs):
                return None       # on the one way in, before the frame-pointer prologue
            return _unknown("saved relative to the frame pointer, which this PC does not use")
        slot = self.k0 - run[0]     # run[0] is negative: rbp - n
        return Save(SaveKind.SAVED, -slot) if slot <= k_pc else None

    def _at_fp_based(self, reg, d, run, pc):
        """CFA based on %rbp: the frame-pointer prologue ran (up to pc, if pc is inside it)."""
        if d is not None:
            if self.k0 is not None and d <= self.k0 and self._clean(reg, d):
                return Save(SaveKind.SAVED, -d)
            return _unknown("pushed before the frame pointer was set up, at a depth not proved")
        if run is None or self._in_run(reg, pc) is False:
            return None           # not pushed by the prologue, or not yet
        if self.k0 is not None:
            return Save(SaveKind.SAVED, run[0] - self.k0)
        return Save(SaveKind.SAVED, run[0], base=self.abi.fp)

    def _at_other(self, reg, d, run, pc):
        """The CFA is based on another register (a DRAP prologue or epilogue): only a PC on the
        function's one straight-line way in, or inside a frame-pointer prologue, is proved."""
        unknown = _unknown("the CFA is neither SP- nor FP-based here")
        if d is not None or reg in self.unexplained:
            return unknown
        if run is not None:
            pushed = self._in_run(reg, pc)
            if pushed:
                return Save(SaveKind.SAVED, run[0], base=self.abi.fp)
            if pushed is None and pc >= self.straight_until:
                return unknown
        elif pc >= self.straight_until:
            return unknown
        return None


# -- fixed-layout ISAs: data flow over the function (core.saves.flow) ------------------------------------

class _FlowFunction:
    """The save facts of one function of an ISA whose instructions core.saves.flow follows."""

    def decode(self, code: bytes, start: int) -> Optional[List[flow.Op]]:
        raise NotImplementedError

    def __init__(self, abi, index, fde, read_code):
        self.abi = abi
        self.regs = [r for r in abi.callee_saved if r != abi.fp]
        self.fde = fde
        self.failed: Optional[str] = None
        self.plans: Dict[int, Plan] = {}
        self.states: List[Optional[flow.State]] = []
        self.starts: List[int] = []
        code = _function_code(fde, read_code)
        if code is None:
            self.failed = "the function's code at %#x cannot be read" % fde.start
            return
        ops = self.decode(code, fde.start)
        if not ops:
            self.failed = "the function's size is not whole instructions"
            return
        rows = index.rows(fde)
        starts = [r[0] for r in rows]
        if not rows or rows[0][0] != fde.start or _sp_offset(abi, rows[0][1]) != abi.entry_cfa_offset:
            self.failed = "the FDE does not start as a function does (CFA = SP + %d)" % abi.entry_cfa_offset
            return

        def rules_at(addr):
            k = bisect.bisect_right(starts, addr) - 1
            rules = rows[k][1] if k >= 0 else None
            return (_sp_offset(abi, rules), _fp_offset(abi, rules)) if rules is not None else (None, None)
        self.states, self.failed = flow.analyse(ops, self.regs, abi.sp, abi.fp, abi.entry_cfa_offset, rules_at)
        self.starts = [op.addr for op in ops]

    def at(self, match) -> Dict[int, Save]:
        if self.failed:
            bad = _unknown(self.failed)
            return {r: bad for r in self.regs}
        fde, pc = self.fde, match.pc
        if fde.pc_type is F.PCType.MASK and fde.block_size:
            pc = fde.start + (pc - fde.start) % fde.block_size
        k = bisect.bisect_right(self.starts, pc) - 1
        state = self.states[k] if k >= 0 else None
        if state is None:
            bad = _unknown("no path from the function's entry reaches %#x" % pc)
            return {r: bad for r in self.regs}
        out = {}
        for reg, where in zip(self.regs, state.regs):
            if where is None:
                out[reg] = UNCHANGED
            elif where == flow.UNKNOWN:
                out[reg] = _unknown("saved differently on different paths, or where this analysis cannot place it")
            else:
                out[reg] = Save(SaveKind.SAVED, where)  # type: ignore[arg-type]  # an int: CFA offset
        return out


def _sp_offset(abi, rules):
    """The CFA offset where the CFA is SP + offset; None where it is based on anything else."""
    cfa = rules.cfa
    if cfa is not None and cfa.kind is RuleKind.REGISTER and not cfa.deref and cfa.reg == abi.sp:
        return cfa.offset
    return None


def _fp_offset(abi, rules):
    cfa = rules.cfa
    if cfa is not None and cfa.kind is RuleKind.REGISTER and not cfa.deref and cfa.reg == abi.fp:
        return cfa.offset
    return None


class _A64Function(_FlowFunction):
    def decode(self, code, start):
        return a64insn.words(code, start)


class _S390Function(_FlowFunction):
    def decode(self, code, start):
        abi = self.abi
        return s390insn.words(code, start, lambda n: abi.regnum("f%d" % n))


_ANALYSERS = {abimod.AMD64.sframe_abi: _X86Function, abimod.AARCH64_LE.sframe_abi: _A64Function,
              abimod.AARCH64_BE.sframe_abi: _A64Function, abimod.S390X.sframe_abi: _S390Function}

