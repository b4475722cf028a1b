"""The text of one look-up (`sframe lookup`, GDB's `info sframe ADDR`, LLDB's `sframe lookup`): the
address, section, function, row and rules, where the caller's callee-saved registers are, and
the values the rules give in a frame.  Each front end finds the module and match and reads the
code its own way; what is said, and where a caller's PC is looked up, is decided here only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple, Union

from ..arch import abi as abimod
from ..saves import analysis as saves
from ..unwind.unwinder import Stop, lookup_address
from .describe import describe_match, section_summary

if TYPE_CHECKING:
    from ..sframe.index import Match
    from ..unwind.modules import Module


def lookup_report(addr: int, module: "Module", match: "Match", symbol: Optional[Tuple[str, int]] = None, *,
                  caller: bool = False, read_code: Optional[saves.CodeReader] = None,
                  symbolize: Optional[saves.Symbolize] = None,
                  after: Union[Sequence[str], Callable[[], Sequence[str]]] = ()) -> List[str]:
    """Every line of a look-up of `addr` (`match` is the FRE in effect there, in `module`).

    `caller`: addr is a caller's PC (a return address), whose frame is unwound from the call
    before it: the callee-saved registers are then found at addr - 1, as an unwinder finds them.
    `read_code` reads the function's code (None: no callee-saved lines); `symbolize` names the
    function symbol at an address; `after`: lines that follow (the debugger's own), or a function
    that makes them once the rest is done.
    """
    extra: List[str] = []
    if read_code is not None:
        assert module.index is not None
        at = lookup_address(addr, caller)
        found = module.index.lookup(at) if at != addr else match
        extra = saves_lines(module.index, found or match, read_code, addr, symbolize)
    return lookup_lines(addr, module, match, symbol, extra + list(after() if callable(after) else after))


def lookup_lines(addr: int, module: "Module", match: "Match", symbol: Optional[Tuple[str, int]] = None,
                 values: Optional[List[str]] = None) -> List[str]:
    """The `sframe lookup` text, line for line GDB's `info sframe ADDR`: address, section, the
    describe_match lines and, for the selected frame's PC, values_lines."""
    lines = ["Address: %#x in %s" % (addr, module.path), section_summary(module)]
    assert module.index is not None
    lines.extend(describe_match(match, module.index, symbol))
    lines.extend(values or ())
    return lines


def saves_lines(index, match: "Match", read_code, at: Optional[int] = None, symbolize=None) -> List[str]:
    """Where each callee-saved register of the caller is at match.pc (core.saves.analysis), one per line.

    `at`: the address the user asked about, when the look-up was at another one (a caller's
    return address is looked up at the call, one byte before it)."""
    abi = abimod.info(index.abi)
    where = saves.at(abi, index, match, read_code, symbolize)
    note = "" if at is None or at == match.pc else " (looked up at %#x)" % match.pc
    lines = ["Callee-saved registers%s:" % note]
    width = max((len(abi.regname(r)) for r in abi.callee_saved), default=0)
    for reg in abi.callee_saved:
        text = "by the FP rule above" if reg == abi.fp else where[reg].describe(abi)
        lines.append("  %s  %s" % (abi.regname(reg).ljust(width), text))
    return lines


def values_lines(level: int, values: Union[List[Tuple[str, int]], Stop]) -> List[str]:
    """'Values in frame #N:' and one line per value, or why there are none."""
    if isinstance(values, Stop):
        return ["Values in frame #%d: none (%s)" % (level, values.message)]
    return ["Values in frame #%d:" % level] + ["  %s = %#x" % (what, v) for what, v in values]
