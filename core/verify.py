"""Checking an SFrame backtrace against a reference one (a debugger's own DWARF unwinder).

Debugger-free: the adapter collects, for one stop, the frames as unwound with SFrame and as
unwound by the reference, each as `FrameFact`s, and `compare` says where they disagree.  A frame
unwound with SFrame is checked twice: its own CFA (its frame id) and the PC of its caller; frames
that another unwinder handled in both walks are compared only for their PC (they align the walks).
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class FrameFact:
    level: int
    pc: int
    cfa: Optional[int]          # the frame's CFA (GDB: "frame at"), None if unknown
    sframe: bool = False        # this frame was unwound with SFrame (its CFA and caller come from it)
    name: str = ""


@dataclass(frozen=True)
class Disagreement:
    level: int
    what: str                   # "PC", "CFA" or "depth"
    sframe: Optional[int]
    reference: Optional[int]
    name: str = ""
    stop: int = 0               # index of the stop (0: where the check started)

    def __str__(self):
        where = "frame #%d%s" % (self.level, " (%s)" % self.name if self.name else "")
        if self.what == "depth":
            if self.sframe is None:
                return "%s: SFrame ends the backtrace here, the reference goes on to pc %#x" % (where, self.reference)
            return "%s: SFrame goes on to pc %#x, the reference ends the backtrace here" % (where, self.sframe)
        return "%s: %s %s with SFrame, %s with the reference" % (
            where, self.what, _hex(self.sframe), _hex(self.reference))


def _hex(v):
    return "?" if v is None else "%#x" % v


def compare(ours: Sequence[FrameFact], reference: Sequence[FrameFact], stop: int = 0
            ) -> Tuple[int, List[Disagreement]]:
    """(number of SFrame-unwound frames checked, disagreements) for one stop.

    The walks are compared level by level from the innermost frame; at the first PC mismatch they
    have diverged, so the comparison ends there.
    """
    checked = 0
    out = []
    for i, o in enumerate(ours):
        if i >= len(reference):
            prev = ours[i - 1] if i else None
            if prev is not None and prev.sframe:
                out.append(Disagreement(prev.level, "depth", o.pc, None, prev.name, stop))
            break
        r = reference[i]
        if o.pc != r.pc:
            out.append(Disagreement(o.level, "PC", o.pc, r.pc, r.name or o.name, stop))
            break
        if not o.sframe:
            continue
        checked += 1
        if o.cfa != r.cfa:
            out.append(Disagreement(o.level, "CFA", o.cfa, r.cfa, o.name, stop))
        if i + 1 == len(ours) and i + 1 < len(reference):
            out.append(Disagreement(o.level, "depth", None, reference[i + 1].pc, o.name, stop))
    return checked, out


def summary(frames: int, stops: int, disagreements: int) -> str:
    """The closing line, in one fixed form so scripts can match it."""
    return "sframe verify: %d frames checked at %d stops, %d disagreements" % (frames, stops, disagreements)
