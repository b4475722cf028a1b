"""Calls that never return: the code after one is not where the call goes on.

GCC ends a path with a call to a function that does not return (abort, an error reporter that
longjmps) and places another path's code right after it.  Taken as returning, the call's state
would flow into that code, where the registers are saved differently, and make them unknown
there.  A call's continuation is dropped only where the callee is proved never to return:

- a C library function the C standard or glibc declares `noreturn` (reached through the PLT:
  its name), or
- a function of the same program whose every path ends in a trap (`ud2`, `hlt`; AArch64's `brk`,
  `udf`; s390x's illegal instruction) or in a call or jump to such a function: no return (`ret`,
  `br %r14`), no jump through a register, no jump to a function that may return.  Anything not understood counts as returning, so a wrong "never returns" cannot come out.

A C++ `throw` never returns to its caller, but the exception may land in a `catch` of the function
that threw, which then returns: a program function's paths go on from its calls into their
landing pads (its exception table, where the file's are known: `index.exceptions`), and where the
exception tables are not known, a function that throws counts as returning.
"""

# (Annotations not evaluated: a function defined inside another, as for each callee searched,
# then costs no typing look-ups.)
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional

from ..arch import abi as abimod
from .flow import FALLS_THROUGH, INDIRECT, TO_TARGET, Flow
from .save import landing_pads, symbol_of

# glibc's noreturn functions a program calls (by their names, without @plt or a version).
KNOWN = frozenset((
    "abort", "exit", "_exit", "_Exit", "quick_exit", "__stack_chk_fail", "__chk_fail", "__fortify_fail",
    "longjmp", "_longjmp", "siglongjmp", "__longjmp_chk", "__assert_fail", "__assert_perror_fail",
    "err", "errx", "verr", "verrx", "pthread_exit", "__libc_fatal", "__cxa_throw", "__cxa_rethrow",
    "__cxa_bad_cast", "__cxa_bad_typeid", "__cxa_throw_bad_array_new_length", "_Unwind_Resume",
    "__cxa_call_terminate", "_ZSt9terminatev",
))
# Those of them that leave by an exception, which a landing pad of the caller may catch.
THROWS = frozenset(("__cxa_throw", "__cxa_rethrow", "__cxa_bad_cast", "__cxa_bad_typeid",
                    "__cxa_throw_bad_array_new_length", "_Unwind_Resume"))
_DECORATION = re.compile(r"(@plt|@@?[A-Za-z0-9_.]+)+$")
DEPTH = 16             # callees followed at most this deep (deeper: taken as returning)


def never_returns(abi: abimod.ABIInfo, index, target: int, read_code: Callable, symbolize: Optional[Callable],
                  decode: Callable, tables: Optional[Callable] = None) -> bool:
    """Is the function at `target` proved never to return to its caller?  `decode(code, start)`:
    its Ops (core.saves.flow); `tables(code, start)`: the same with their indirect jumps' targets,
    where `decode` leaves them out (None: it does not).  Memoized on the index (`noreturn`)."""
    return Search(abi, index, read_code, symbolize, decode, tables).never_returns(target)


class Search:
    """Questions of one function's calls, followed through the callees.  An answer cut short
    (the depth limit, a function already being looked at: recursion) is "may return"; it is
    remembered for this search only, so that the order in which functions are analysed never
    changes an answer, and answers proved in full on the index for all."""

    def __init__(self, abi, index, read_code, symbolize, decode, tables=None):
        self.abi, self.index, self.read_code, self.symbolize, self.decode = abi, index, read_code, symbolize, decode
        self.tables = tables
        self.busy: set = set()
        self.short: Dict[int, bool] = {}

    def never_returns(self, target: int) -> bool:
        return self.gone(target, 0)[0]

    def gone(self, target: Optional[int], depth: int):
        """(never returns?, cut short?)"""
        if target is None:
            return False, False
        memo: Dict[int, bool] = self.index.noreturn
        got = memo.get(target)
        if got is not None:
            return got, False
        if target in self.short:
            return self.short[target], True
        if target in self.busy or depth >= DEPTH:
            return False, True
        self.busy.add(target)
        try:
            answer, cut = _never_returns(self, target, depth)
        finally:
            self.busy.discard(target)
        if cut:
            self.short[target] = answer
        else:
            if len(memo) >= 4096:
                memo.clear()
            memo[target] = answer
        return answer, cut


def _name(symbolize: Optional[Callable], addr: int) -> Optional[str]:
    sym = symbol_of(symbolize, addr)
    if sym is None or sym[1]:
        return None
    return _DECORATION.sub("", sym[0])


def _never_returns(search: "Search", target: int, depth: int):
    """(never returns?, cut short?) for the function at `target`."""
    if _name(search.symbolize, target) in KNOWN:
        return True, False
    index = search.index
    fde = index.find_fde(target)
    if fde is None or fde.start != target:
        return False, False
    try:
        code = search.read_code(fde.start, fde.size)
    except Exception:
        code = None
    if code is None or len(code) != fde.size:
        return False, False
    ops = search.decode(code, fde.start)
    if not ops:
        return False, False
    pads, problem = landing_pads(index, (fde,), ops)
    if problem:
        return False, False
    where = {op.addr: k for k, op in enumerate(ops)}
    cut = []
    tables_known = getattr(index, "exceptions", None) is not None
    throws: List[int] = []

    def gone(callee: Optional[int]) -> bool:
        if not tables_known and callee is not None and _name(search.symbolize, callee) in THROWS:
            throws.append(callee)           # (its exception may be caught here: see the module)
        answer, short = search.gone(callee, depth + 1)
        if short:
            cut.append(callee)
        return answer
    seen = {0}
    work = [0]
    tables = search.tables
    while work:
        k = work.pop()
        if tables is not None and ops[k].flow in INDIRECT:
            ops, tables = tables(code, fde.start) or ops, None     # (the same instructions, targets found)
        succ = _successors(ops, k, where, code, fde.start, gone)
        if succ is None or throws:
            return False, bool(cut)              # a way back to the caller
        if pads and k in pads:
            succ.append(pads[k])
        for j in succ:
            if j not in seen:
                seen.add(j)
                work.append(j)
    return True, False


def _successors(ops, k, where, code, start, gone):
    """Where control goes after op k inside the function, or None if it may return from it (a
    `ret`, a jump through a register, a tail call to a function that may return, running off
    the end)."""
    op = ops[k]
    succ: List[int] = []
    if op.returns:
        return None                                      # a return (or a conditional one)
    if op.flow is Flow.STOP:
        return []                                        # a trap
    if op.flow in INDIRECT:
        if op.targets is None:
            return None
        succ.extend(where[t] for t in op.targets if t in where)
    if op.flow is Flow.CALL and gone(op.target):
        return succ
    if op.flow in FALLS_THROUGH:
        if k + 1 >= len(ops):
            return None
        succ.append(k + 1)
    if op.flow in TO_TARGET:
        if op.target in where:
            succ.append(where[op.target])
        elif not gone(op.target):
            return None
    return succ
