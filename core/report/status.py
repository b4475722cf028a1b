"""What the plugins say about themselves, worded once for GDB, LLDB and the CLI: the table of loaded
modules with SFrame (`info sframe`, `sframe info`), whether the unwinder is active, and the state
of a module's side file of DWARF CFI."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Iterable, List, Optional

from .describe import abi_text

if TYPE_CHECKING:
    from ..unwind.modules import Module


def _plural(n: int, word: str) -> str:
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def module_table(modules: Iterable["Module"], noun: str = "module") -> List[str]:
    """The loaded modules (GDB: objfiles) with SFrame: path, version, ABI, FDE and FRE counts, the
    functions' range and the load bias; how many others have none; those whose section cannot be
    used, and why."""
    mods = list(modules)
    rows = []
    for m in sorted((m for m in mods if m.index is not None), key=lambda m: m.range[0]):
        assert m.index is not None
        h = m.index.header
        lo, hi = m.range
        rows.append((m.path, str(h.version), abi_text(h.abi), str(h.num_fdes), str(h.num_fres),
                     "%#x-%#x" % (lo, hi) if hi > lo else "-", _bias_text(m)))
    without = sum(1 for m in mods if m.index is None and not m.unusable)
    lines = []
    if rows:
        head = (noun.capitalize(), "Version", "ABI", "FDEs", "FREs", "Text range", "Load bias")
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        right = (False, True, False, True, True, False, True)
        for r in [head] + rows:
            lines.append("  ".join(c.rjust(w) if rj else c.ljust(w) for c, w, rj in zip(r, widths, right)).rstrip())
        if without:
            lines.append("%s without SFrame." % _plural(without, "other " + noun))
    else:
        lines.append("No loaded %s has SFrame information (%s tracked)." % (noun, _plural(len(mods), noun)))
    elsewhere = sorted((m.path, m.source) for m in mods if m.source and (m.index is not None or m.unusable))
    if elsewhere:
        lines.append("Not from a local file of that name:")
        lines += ["  %s: %s" % row for row in elsewhere]
    unusable = [m for m in mods if m.unusable]
    if unusable:
        lines.append("%ss whose SFrame section cannot be used:" % noun.capitalize())
        lines += ["  %s" % m.problem for m in unusable]
    return lines


def _bias_text(m: "Module") -> str:
    try:
        return "%#x" % m.load_bias
    except Exception:       # (an adapter's bias may read the file, gone since it was loaded: one row, not the table)
        return "?"


def activity_line(active: bool, why: Optional[str]) -> str:
    """Whether the SFrame unwinder can take a frame (core.unwind.policy.activity's answer)."""
    return "SFrame unwinder: %s (%s)." % ("active" if active else "idle, costing nothing", why)


class SideFileState(Enum):
    ATTACHED = "attached"
    STACK = "attached for the functions on the stacks"   # CFA, RA and FP; the full file being written
    CFA = "attached, CFA, RA and FP only"   # for the session (the debugger keeps a module's first side file)
    PENDING = "attached, not checked yet"   # no process yet: checked at the first stop
    WRITING = "being written"               # none of its functions on the stacks yet (or no process)
    LATE = "attached late"                  # the debugger planned the module's unwinding before it
    NOT_ATTACHED = "not attached"


@dataclass(frozen=True)
class SideFileStatus:
    """A module's side file of DWARF CFI made from its SFrame, as the debugger has it."""
    state: SideFileState
    path: Optional[str] = None      # the side file
    why: Optional[str] = None       # all but ATTACHED: why, or how far, in words

    def text(self) -> str:
        if self.state is SideFileState.ATTACHED:
            return "attached (%s)" % self.path
        if self.state is SideFileState.STACK:
            return ("attached for the functions on the stacks, CFA, RA and FP only (%s); the callee-saved registers "
                    "follow: %s" % (self.path, self.why))
        if self.state is SideFileState.CFA:
            return "attached, CFA, RA and FP only (%s): %s" % (self.path, self.why)
        if self.state is SideFileState.WRITING:
            return "being written (%s); meanwhile the functions on the stacks are attached at each stop" % self.why
        if self.state is SideFileState.PENDING:
            return "attached, not checked yet: %s (%s)" % (self.why, self.path)
        if self.state is SideFileState.LATE:
            return "attached (%s), but %s" % (self.path, self.why)
        return "not attached: %s" % self.why
