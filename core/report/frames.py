"""The printed lines of frames and backtrace stops, shared by LLDB's `sframe bt` and the GDB commands
(`sframe backtrace` of the CLI prints its own layout: core.report.backtrace)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Optional, Sequence

from ..sframe.format import MASK64
from ..unwind.unwinder import Frame, FrameRow, Stop, StopReason

if TYPE_CHECKING:
    from ..arch.abi import ABIInfo


SIGNAL_TRAMPOLINE = "<signal handler called>"     # the signal trampoline's frame, named as GDB names it


def hexaddr(v: int, width: int = 16) -> str:
    return "0x%0*x" % (width, v & MASK64)


def unwound_by(row: FrameRow, stop: Optional[Stop]) -> str:
    """A frame's [marker]: what unwinds this frame, that is what covers its PC and found its caller
    (sframe, DWARF CFI, frame pointer, signal frame: the trampoline's row), so that `#3 leaf+13
    (spin) [sframe]` reads as "spin's frame is unwound by its SFrame".  The frame where the walk
    stopped says why instead: outermost, no SFrame (nothing covers its PC), or not unwound (a limit,
    an unreadable stack, a failed check: the stop line says which).  ", RA signature stripped" is
    about the frame's own PC: it came from a signed return address, its signature removed."""
    if row.unwound_by is not None:
        how = row.unwound_by.value
    elif stop is not None and stop.reason is StopReason.OUTERMOST:
        how = "outermost"
    elif stop is not None and stop.reason is StopReason.NO_SFRAME:
        how = "no SFrame"
    else:
        how = "not unwound"
    if row.frame.ra_stripped:
        how += ", RA signature stripped"
    return how


def frame_line(number: int, row: FrameRow, stop: Optional[Stop], where: str, selected: bool = False) -> str:
    """LLDB-style 'frame #N: 0x... module`symbol + off', what unwinds the frame (unwound_by), and its
    CFA, with the FDE that gave it where SFrame did."""
    frame, cfa, own_match = row.frame, row.cfa, row.match
    how = unwound_by(row, stop)
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


def frames_doc(rows: Sequence[FrameRow], stop: Optional[Stop], abi: "ABIInfo",
               function_of: Callable[[FrameRow], str], module_of: Callable[[int], str],
               stop_message: str, registers: bool = False) -> dict:
    """One thread's walk as JSON-ready data (`sframe backtrace --json`, LLDB's `sframe bt --json`):
    each frame's level, PC, function, module, CFA and what unwound it (with `registers`, its
    callee-saved registers), then the stop."""
    frames: List[dict] = []
    for row in rows:
        f = row.frame
        d = {"level": f.level, "pc": f.pc, "function": function_of(row), "module": module_of(f.pc), "cfa": row.cfa,
             "how": unwound_by(row, stop)}
        if registers:
            d["registers"] = {abi.regname(r): f.regs.get(r) for r in abi.callee_saved}
        frames.append(d)
    return {"frames": frames,
            "stop": None if stop is None else {"reason": stop.reason.name, "text": stop.text, "pc": stop.pc,
                                               "message": stop_message}}
