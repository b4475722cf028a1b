"""Printed text shared by the `sframe` command line and both debugger adapters, so that
`sframe lookup`, GDB's `info sframe` and LLDB's `sframe lookup`/`sframe bt` say the same things."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Optional, Tuple, Union

from ..sframe.format import MASK64
from ..unwind.unwinder import Frame, Stop, StopReason
from .describe import describe_match, section_line

if TYPE_CHECKING:
    from ..arch.abi import ABIInfo
    from ..sframe.index import Match
    from ..unwind.modules import Module


def values_lines(level: int, values: Union[List[Tuple[str, int]], Stop]) -> List[str]:
    """'Values in frame #N:' and one line per value, or why there are none."""
    if isinstance(values, Stop):
        return ["Values in frame #%d: none (%s)" % (level, values.message)]
    return ["Values in frame #%d:" % level] + ["  %s = %#x" % (what, v) for what, v in values]


def hexaddr(v: int, width: int = 16) -> str:
    return "0x%0*x" % (width, v & MASK64)


def frame_line(number: int, frame: Frame, cfa: Optional[int], where: str, selected: bool = False,
               own_match: Optional["Match"] = None, initial_how: str = "registers") -> str:
    """LLDB-style 'frame #N: 0x... module`symbol + off', how the frame was found, and its CFA.

    `own_match` is the SFrame match of the frame's own PC that gave its CFA (None if the CFA came
    from elsewhere or is unknown).
    """
    how = initial_how if frame.method is None else frame.method.value
    if frame.ra_stripped:
        how += ", RA signature stripped"
    if cfa is None:
        cfa_text = "CFA unknown"
    else:
        cfa_text = "CFA %s" % hexaddr(cfa, 0)
        if own_match is not None:
            cfa_text += " (FDE %d)" % own_match.fde.index
    return "  %s frame #%d: %s %s  [%s]  %s" % ("*" if selected else " ", number, hexaddr(frame.pc), where, how,
                                              cfa_text)


def registers_line(abi: "ABIInfo", frame: Frame, indent: str = "      ") -> str:
    """The frame's callee-saved registers (`bt -r`, `backtrace --registers`): each value, or
    <not saved> where the unwind could not prove it."""
    parts = []
    for regnum in abi.callee_saved:
        value = frame.reg(abi, regnum)
        parts.append("%s %s" % (abi.regname(regnum), "<not saved>" if value is None else "%#x" % value))
    return indent + "  ".join(parts)


def stop_line(stop: Stop, where: Optional[str] = None) -> str:
    """The final 'Backtrace stopped: ...' line, with the symbol of the frame it stopped at."""
    text = "  " + stop.message
    if where and stop.reason is not StopReason.DEPTH_LIMIT:
        text += " (in %s)" % where
    return text


def where_text(module: Optional[str], symbol: Optional[str], offset: int) -> str:
    """'module`symbol + off' like LLDB, or what of it is known."""
    mod = module or "??"
    if not symbol:
        return "%s`???" % mod
    return "%s`%s%s" % (mod, symbol, " + %d" % offset if offset else "")


def section_summary(module: "Module") -> str:
    """'Section: ...' line of a module with SFrame (addresses as loaded)."""
    assert module.index is not None
    h = module.index.header
    return "Section: %s at %#x, %s, %d FDEs, %d FREs" % (
        module.section_name, module.section_addr or 0, section_line(h), h.num_fdes, h.num_fres)


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
    from ..arch import abi as abimod
    from ..saves import analysis as saves
    abi = abimod.info(index.abi)
    where = saves.at(abi, index, match, read_code, symbolize)
    note = "" if at is None or at == match.pc else " (looked up at %#x)" % match.pc
    lines = ["Callee-saved registers%s:" % note]
    width = max((len(abi.regname(r)) for r in abi.callee_saved), default=0)
    for reg in abi.callee_saved:
        text = "by the FP rule above" if reg == abi.fp else where[reg].describe(abi)
        lines.append("  %s  %s" % (abi.regname(reg).ljust(width), text))
    return lines


def info_lines(modules: Iterable["Module"]) -> List[str]:
    """`sframe info`: one block per module with SFrame, then the modules whose SFrame is unusable."""
    good = [m for m in modules if m.index is not None]
    bad = [m for m in modules if m.unusable]
    lines = ["%d loaded module%s with SFrame%s" % (len(good), "" if len(good) == 1 else "s",
                                                    ":" if good else ".")]
    for m in sorted(good, key=lambda m: m.range[0]):
        lo, hi = m.range
        lines.append("  %s" % m.path)
        lines.append("    %s" % section_summary(m))
        lines.append("    functions %#x-%#x, load bias %#x" % (lo, hi, m.load_bias))
    if bad:
        lines.append("Modules with an SFrame section that cannot be used:")
        for m in bad:
            lines.append("  " + m.problem)
    return lines
