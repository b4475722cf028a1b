"""The printed lines of frames and backtrace stops, shared by LLDB's `sframe bt` and the GDB commands
(`sframe backtrace` of the CLI prints its own layout: core.report.backtrace)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..sframe.format import MASK64
from ..unwind.unwinder import Frame, Stop, StopReason

if TYPE_CHECKING:
    from ..arch.abi import ABIInfo
    from ..sframe.index import Match


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
