"""Checking an SFrame backtrace against a reference one (a debugger's own DWARF unwinder).

Debugger-free: the adapter collects, for one stop, the frames as unwound with SFrame and as
unwound by the reference, each as `FrameFact`s, and `compare` says where they disagree.  A frame
unwound with SFrame is checked twice: its own CFA (its frame id) and the PC of its caller; frames
that another unwinder handled in both walks are compared only for their PC (they align the walks).
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class FrameFact:
    level: int
    pc: int
    cfa: Optional[int]          # the frame's CFA (GDB: "frame at"), None if unknown
    sframe: bool = False        # this frame was unwound with SFrame (its CFA and caller come from it)
    name: str = ""
    regs: Mapping[int, Optional[int]] = field(default_factory=dict)   # callee-saved: DWARF regnum -> value or None
    outermost: bool = False     # SFrame ended the stack at this frame (no caller: RA undefined or zero)


@dataclass(frozen=True)
class Disagreement:
    level: int
    what: str                   # "PC", "CFA", "depth" or a register name
    sframe: Optional[int]
    reference: Optional[int]
    name: str = ""
    stop: int = 0               # index of the stop (0: where the check started)

    def __str__(self):
        where = "frame #%d%s" % (self.level, " (%s)" % self.name if self.name else "")
        if self.what == "depth":
            if self.sframe is None:
                return "%s: SFrame ends the backtrace here, the reference goes on to pc %s" % (where, _hex(self.reference))
            return "%s: SFrame goes on to pc %s, the reference ends the backtrace here" % (where, _hex(self.sframe))
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
        if o.outermost:
            # SFrame says the stack ends here: the reference must end here too.
            checked += 1
            if i + 1 < len(reference):
                out.append(Disagreement(o.level, "depth", None, reference[i + 1].pc, o.name, stop))
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


def unchecked_line(frames: int, internal: int) -> str:
    """The line counting the frames SFrame covers that the unwinder declined (so nothing of them
    was compared), and how many of those it declined after an internal error."""
    return "sframe verify: %d frames not checked, %d of them after a plugin error" % (frames, internal)


@dataclass
class RegisterCounts:
    """Callee-saved registers of frames whose registers came from an SFrame unwind, against the reference."""
    equal: int = 0
    missing: int = 0            # the reference knows the value, SFrame does not
    different: List[Disagreement] = field(default_factory=list)
    by_register: Dict[str, List[int]] = field(default_factory=dict)   # name -> [equal, compared]

    def add(self, other: "RegisterCounts") -> None:
        self.equal += other.equal
        self.missing += other.missing
        self.different += other.different
        for name, (equal, compared) in other.by_register.items():
            mine = self.by_register.setdefault(name, [0, 0])
            mine[0] += equal
            mine[1] += compared

    def line(self) -> str:
        return "sframe verify: callee-saved registers: %d equal, %d not recovered, %d different" % (
            self.equal, self.missing, len(self.different))

    def register_line(self) -> str:
        """Equal of compared (those the reference knows), per register, in the order first met."""
        return "sframe verify: per register: " + (", ".join(
            "%s %d/%d" % (name, equal, compared) for name, (equal, compared) in self.by_register.items()) or "none")


def compare_registers(ours: Sequence[FrameFact], reference: Sequence[FrameFact], regname: Callable[[int], str],
                      stop: int = 0) -> RegisterCounts:
    """Compare the callee-saved registers of each caller of an SFrame-unwound frame, level by
    level while the walks agree on the PC.  A register the reference does not know is not counted."""
    counts = RegisterCounts()
    for i in range(1, min(len(ours), len(reference))):
        o, r = ours[i], reference[i]
        if o.pc != r.pc or ours[i - 1].pc != reference[i - 1].pc:
            break
        if not ours[i - 1].sframe:
            continue
        for reg, want in r.regs.items():
            if want is None:
                continue
            got = o.regs.get(reg)
            tally = counts.by_register.setdefault(regname(reg), [0, 0])
            tally[1] += 1
            if got is None:
                counts.missing += 1
            elif got == want:
                counts.equal += 1
                tally[0] += 1
            else:
                counts.different.append(Disagreement(o.level, regname(reg), got, want, o.name, stop))
    return counts
