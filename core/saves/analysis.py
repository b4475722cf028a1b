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

The analysers: x86-64 in core.saves.x86 (pushes where SFrame says the CFA moves; where that
cannot tell, the data flow too, for saves by `mov`), AArch64 and s390x in
core.saves.flow_analyser (a data flow over the decoded instructions).  A function none
can take is UNKNOWN throughout.

Results are cached per function (the index's `saves` cache) and per FRE.
"""

import bisect
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ..arch import abi as abimod
from ..errors import CfiError
from ..sframe import format as F
from ..sframe.index import Match
from . import s390insn, x86insn
from .flow_analyser import A64Function, S390Function, X86FlowFunction
from .save import MAX_FUNCTION_SIZE, UNCHANGED, CodeReader, Plan, Save, SaveKind, Symbolize, function_code, symbol_of, unknown
from .x86 import X86Function

__all__ = ["at", "plan", "table", "writing", "instruction_starts", "Plan", "Save", "SaveKind", "UNCHANGED", "CodeReader", "Symbolize"]

CACHE_LIMIT = 1024


_COLD = re.compile(r"\.cold(\.\d+)?$")
# A C++ constructor's or destructor's base-object symbol (C2, D2: GCC names its .cold part after
# it), whose address often has the complete-object name (C1, D1) too, the one a symbolizer may give.
_BASE_OBJECT = re.compile(r"(?<=[0-9A-Za-z_])([CD])2(?=[EIB])")


def _entry_problem(abi: abimod.ABIInfo, fde, sym: Optional[Tuple[str, int]]) -> Optional[str]:
    """Why the FDE cannot be taken for a function's first instruction (its state at entry: every
    register the caller's), or None.  Its symbol `sym` settles it; without one, the CFA test of
    the analysers decides, except on s390x, where a save does not move the CFA."""
    if sym is not None:
        name, offset = sym
        if offset:
            return "%#x is inside %s (at + %d): a part of a function" % (fde.start, name, offset)
        if ".cold" in name and _COLD.search(name):
            return "%s is a part of a function (GCC's .cold)" % name
        return None
    if not abi.saves_move_cfa:
        return ("no symbol says %#x starts a function (on %s a save does not move the CFA, so the CFA "
                "cannot tell)" % (fde.start, abi.name))
    return None


def _cold_part(abi: abimod.ABIInfo, index, fde, read_code: CodeReader, symbolize: Optional[Symbolize],
               sym: Optional[Tuple[str, int]]):
    """GCC's `F.cold` part of the function F (`sym`: the FDE's symbol), analysed with F (the
    data flow's FlowFunction.cold_part), where the symbols name both, F once; else None."""
    flow_of = _FLOW.get(abi.sframe_abi)
    if flow_of is None or sym is None or sym[1] or not _COLD.search(sym[0]):
        return None
    candidates = _named(index, symbolize, _COLD.sub("", sym[0]))
    if len(candidates) > 1:
        # Two static functions of one name (and so two F.cold): F is the one whose code jumps
        # into this part, or whose landing pads are in it.
        candidates = [c for c in candidates[:8] if _enters(abi, index, c, fde, read_code, flow_of)]
    if len(candidates) != 1:
        return None
    got = flow_of.cold_part(abi, index, fde, candidates[0], read_code, symbolize)
    return None if got.failed and not getattr(got, "unreadable", False) else got


def _enters(abi: abimod.ABIInfo, index, fde, part, read_code: CodeReader, flow_of) -> bool:
    """Does the function of `fde` branch into `part`, or have a landing pad there?"""
    code = function_code(fde, read_code)
    ops = flow_of.decode(abi, code, fde.start) if code is not None else None
    if not ops:
        return False
    lo, hi = part.start, part.start + part.size
    if any(op.target is not None and lo <= op.target < hi for op in ops):
        return True
    tables = getattr(index, "exceptions", None)
    try:
        return tables is not None and any(lo <= site.landing_pad < hi for site in tables.call_sites(fde.start))
    except CfiError:
        return False


def _named(index, symbolize: Optional[Symbolize], name: str) -> list:
    """The FDEs function symbol `name` starts (two static functions may share a name).  The names
    of the FDEs' starts are looked up once per index."""
    names = getattr(index, "names", None)
    if names is None:
        names = {}
        for fde in index.section.fdes():
            sym = symbol_of(symbolize, fde.start)
            if sym is not None and not sym[1]:
                names.setdefault(sym[0], []).append(fde)
        index.names = names
    return list(names.get(name) or names.get(_BASE_OBJECT.sub(r"\g<1>1", name), ()))


class _OneAnswer:
    """A function with one answer at every PC, known without an analyser's object of its own."""

    unreadable = False
    starts = None

    def __init__(self, answer: Dict[int, Save]):
        self.plans: Dict[int, Plan] = {}
        self._answer = answer

    def at(self, match) -> Dict[int, Save]:
        return self._answer

    def change_points(self) -> List[int]:
        return []


class _Refused(_OneAnswer):
    """A function the analysis does not take: every register UNKNOWN, for one reason."""

    def __init__(self, regs, why):
        super().__init__({r: unknown(why) for r in regs})


class _Constant(_OneAnswer):
    """A function whose analyser proved one answer for every PC before making an object of its
    own (X86Function.constant_at_once: a leaf that saves nothing; most functions a writer asks
    of are such, and the object costs more than the proof)."""

    def constant(self) -> Dict[int, Save]:
        return self._answer


def _function(abi: abimod.ABIInfo, index, fde, read_code: CodeReader, symbolize: Optional[Symbolize], regs,
              ahead: Optional[x86insn.Ahead]):
    """The analysed function of `fde` (memoized on the index), or None when no analyser takes
    the ABI or the function is too large to analyse.  `ahead`: the index's (x86insn.ahead_of)."""
    analyser = _ANALYSERS.get(abi.sframe_abi)
    if analyser is None or fde.size > MAX_FUNCTION_SIZE:
        return None
    cache = index.saves
    func = cache.get(fde.start)
    if func is None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        sym = symbol_of(symbolize, fde.start)
        why = _entry_problem(abi, fde, sym)
        if why is None:
            at_once = getattr(analyser, "constant_at_once", None)
            same = at_once(abi, index, fde, read_code, ahead) if at_once is not None else None
            func = _Constant(same) if same is not None else analyser(abi, index, fde, read_code, symbolize=symbolize)
            if ahead is not None:
                ahead.done(fde.start)       # (what was kept for its turn and not taken)
        else:
            func = _cold_part(abi, index, fde, read_code, symbolize, sym) or _Refused(regs, why)
        if not func.unreadable:
            cache[fde.start] = func     # (code this reader could not read may be readable by another)
    return func


def writing(index, lo: Optional[int] = None, hi: Optional[int] = None) -> None:
    """`table` is about to be asked of each function starting in [lo, hi) in turn (a side file's
    writer, a part of the functions at a time; None: no bound): what is measured ahead of a
    function's turn is kept for those only (x86insn.Ahead), not for the other parts' functions,
    whose turns come in another process, or in another part."""
    index.ahead = x86insn.Ahead(lo, hi)


def table(abi: abimod.ABIInfo, index, fde, read_code: CodeReader, symbolize: Optional[Symbolize] = None
          ) -> List[Tuple[int, Dict[int, Save]]]:
    """`at` over a whole function: [(address, {DWARF regnum: Save})] at its entry and at each
    instruction where the answer changes (MASK FDEs: over the first repetition block).  What a
    writer of DWARF CFI needs: the places are exact at every instruction, not only at FREs."""
    regs = abi.analysed
    ahead = getattr(index, "ahead", None)
    if ahead is None:
        # (Every function's table is asked for, one after another: the instructions the
        # never-returns search measures of a callee are worth keeping for its own turn.)
        ahead = index.ahead = x86insn.Ahead()
    func = _function(abi, index, fde, read_code, symbolize, regs, ahead)
    if func is None:
        return [(fde.start, at(abi, index, index.lookup(fde.start) or _Entry(fde), read_code, symbolize))]
    constant = getattr(func, "constant", None)
    same = constant() if constant is not None else None
    if same is not None:
        return [(fde.start, same)]
    end = fde.start + (fde.block_size if fde.pc_type is F.PCType.MASK and fde.block_size else fde.size)
    rows = index.rows(fde)
    starts = [a for a, _rules in rows]
    out: List[Tuple[int, Dict[int, Save]]] = []
    points = sorted(set(func.change_points()) | set(starts)) or [fde.start]
    for pc in points:
        if pc >= end:
            break
        k = bisect.bisect_right(starts, pc) - 1
        if k < 0:
            continue
        where = func.at(Match(fde, None, rows[k][1], pc))
        if not out or out[-1][1] != where:
            out.append((pc, where))
    return out


def instruction_starts(abi: abimod.ABIInfo, index, fde, read_code: CodeReader) -> Optional[List[int]]:
    """The addresses of the function's instructions (as its analyser measures them: the one the
    analysis used, if it ran), or None where they cannot be told (code unreadable or undecodable,
    no analyser for the ABI)."""
    func = index.saves.get(fde.start)
    starts = getattr(func, "starts", None)
    if starts:
        return list(starts)
    analyser = _ANALYSERS.get(abi.sframe_abi)
    if analyser is None or fde.size > MAX_FUNCTION_SIZE:
        return None
    code = function_code(fde, read_code)
    return None if code is None else analyser.instruction_starts(abi, code, fde.start)


def stores_at(abi: abimod.ABIInfo, fde, read_code: CodeReader, pc: int) -> Tuple[Tuple[int, int, Optional[int]], ...]:
    """What the instruction at `pc` stores of registers, as (DWARF register, base register,
    offset or None): read from the instruction alone, apart from any analysis' state (for a
    grader that checks a save against the CFI's CFA)."""
    flow_of = _FLOW.get(abi.sframe_abi)
    if flow_of is None or fde.size > MAX_FUNCTION_SIZE:
        return ()
    code = function_code(fde, read_code)
    ops = flow_of.decode(abi, code, fde.start) if code is not None else None
    for op in ops or ():
        if op.addr == pc:
            return op.stores
    return ()


class _Entry(NamedTuple):
    """A stand-in match at a function's entry, for a function without rows there."""
    fde: object
    pc: int = 0


def at(abi: abimod.ABIInfo, index, match, read_code: CodeReader, symbolize: Optional[Symbolize] = None
       ) -> Dict[int, Save]:
    """{DWARF regnum: Save} for the callee-saved registers (except the FP) at `match.pc`.

    `index` is the SFrameIndex `match` came from (its per-function cache is used), `read_code`
    reads code bytes (the debugger's memory or the ELF file): None or an exception means
    unreadable, and every register is then UNKNOWN.  `symbolize` (optional) names the function
    symbol at an address: a `.cold` part or an FDE inside a function is refused, and on s390x
    only an FDE a symbol starts at is taken.
    """
    regs = abi.analysed
    if abi.sframe_abi not in _ANALYSERS:
        return {r: unknown("no save-slot analysis for %s" % abi.name) for r in regs}
    if match.fde.size > MAX_FUNCTION_SIZE:
        return {r: unknown("the function is larger than %d bytes: not analysed" % MAX_FUNCTION_SIZE) for r in regs}
    func = _function(abi, index, match.fde, read_code, symbolize, regs, x86insn.ahead_of(index))
    assert func is not None
    return func.at(match)


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
               tuple(r for r, s in where.items() if s.kind is SaveKind.UNCHANGED),
               tuple((r, s.base) for r, s in where.items() if s.kind is SaveKind.IN_REGISTER and s.base is not None))
    func = cache.get(match.fde.start)
    if func is not None:
        if len(func.plans) >= 256:
            func.plans.clear()
        func.plans[match.pc] = got
    return got


class X86Analysis(X86Function):
    """x86-64: the push analysis (core.saves.x86, whose object this is) and, for a function where
    it cannot tell (a register stored or changed where no push saved it: GCC 16's shrink-wrapped
    `mov` saves), also the data flow over every path (X86FlowFunction, `second`); per register,
    the push analysis' answer unless UNKNOWN.  Both prove what they say, so either answer is right.
    (`constant` is the push analysis' own: it answers None wherever there is a `second`, made only
    where the push analysis failed or found a register poisoned or unexplained, and for code that
    cannot be read.)"""

    second: Optional[X86FlowFunction] = None

    def __init__(self, abi, index, fde, read_code, symbolize=None):
        super().__init__(abi, index, fde, read_code)
        self.plans: Dict[int, Plan] = {}
        if not self.unreadable and not self.plt0 and (self.failed or self.poisoned or self.unexplained):
            second = X86FlowFunction(abi, index, fde, read_code, self.insns, symbolize)
            if not second.failed:
                self.second = second

    def change_points(self) -> List[int]:
        points = super().change_points()
        return points if self.second is None else sorted(set(points) | set(self.second.change_points()))

    def at(self, match) -> Dict[int, Save]:
        got = super().at(match)
        if self.second is None or all(s.kind is not SaveKind.UNKNOWN for s in got.values()):
            return got
        other = self.second.at(match)
        return {r: other[r] if s.kind is SaveKind.UNKNOWN and other[r].kind is not SaveKind.UNKNOWN else s
                for r, s in got.items()}


_FLOW: Dict[int, Any] = {abimod.AMD64.sframe_abi: X86FlowFunction, abimod.AARCH64_LE.sframe_abi: A64Function,
                         abimod.AARCH64_BE.sframe_abi: A64Function, abimod.S390X.sframe_abi: S390Function}
_ANALYSERS: Dict[int, Any] = {**_FLOW, abimod.AMD64.sframe_abi: X86Analysis}


def instructions(abi: abimod.ABIInfo, code: bytes, start: int) -> Optional[list]:
    """The flow.Ops of `code` (loaded at `start`) from its first byte, as far as whole instructions
    can be measured: for code with no FDE to bound it (a program's entry code), read a little past
    its end.  None where no decoder serves the ABI."""
    flow_of = _FLOW.get(abi.sframe_abi)
    if flow_of is None:
        return None
    measured = None
    if flow_of is X86FlowFunction:
        measured, pos = x86insn.decode_all(code, start, len(code))
        if pos > len(code):
            pos -= measured.pop().length
    elif flow_of is S390Function:
        pos = 0
        while pos < len(code) and pos + s390insn.length(code[pos]) <= len(code):
            pos += s390insn.length(code[pos])
    else:
        pos = len(code) - len(code) % 4
    return flow_of.decode(abi, code[:pos], start, measured=measured) or []
