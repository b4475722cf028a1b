"""Debugger-neutral logic for an adapter that walks and prints stacks itself (the LLDB commands).

LLDB has no Python hook for unwinders, so its side of the project reads the registers and memory
through LLDB and does everything else here, where it can be tested without a debugger:

- `ModuleTracker` keeps one `ModuleSet` in step with the debugger's module list.  Each loaded
  module is identified by (identity, bias): identity is the path with the build ID/UUID (or with
  the file's size and time when there is none); the bias is where it is loaded.  Indexes of
  modules that stay loaded are kept; a module that appears (dlopen, relaunch at another address)
  gets a new one, built on first use.
- `frame_values` evaluates the rules that cover a frame's PC with that frame's registers.
- `lookup`, `frame_rows`, `frame_line`, `stop_line`, `lookup_lines`, `values_lines`,
  `info_lines`: finding what covers an address, and the printed text.
"""

import os
from dataclasses import dataclass

from .describe import describe_match, section_line
from .errors import SFrameError
from .modules import ModuleSet
from .unwind import Method, Stop, StopReason, step, with_callers

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# Modules


def file_identity(path, uuid=None):
    """What identifies a loaded file: its path with its build ID/UUID if known, else with its size
    and mtime.  (The path too: a copy of a binary made by objcopy keeps its build ID.)"""
    if uuid:
        return "uuid:%s:%s" % (uuid, path)
    try:
        st = os.stat(path)
        return "file:%s:%d:%d" % (path, st.st_size, st.st_mtime_ns)
    except OSError:
        return "file:%s" % path


@dataclass(frozen=True)
class LoadedModule:
    """One module as the debugger reports it."""
    identity: str      # see file_identity
    path: str          # local file to read the SFrame section from
    bias: int          # load address minus link-time address
    name: str = ""     # short name for messages (the debugger's)

    @property
    def key(self):
        return (self.identity, self.bias)


class ModuleTracker:
    """A ModuleSet kept equal to the debugger's current list of loaded modules."""

    def __init__(self, log=None):
        self.modules = ModuleSet(log=log)
        self.loaded = {}          # key -> LoadedModule
        self.builds = 0           # modules (re)added, i.e. indexes built (lazily) so far or to come

    def sync(self, loaded):
        """Make the set equal to `loaded` (LoadedModule records); True if anything changed."""
        new = {}
        for m in loaded:
            new.setdefault(m.key, m)
        if new.keys() == self.loaded.keys():
            return False
        for key in self.loaded.keys() - new.keys():
            self.modules.remove(key)
        for key in new.keys() - self.loaded.keys():
            m = new[key]
            self.modules.add(key, m.path, m.bias, name=m.name)
            self.builds += 1
        self.loaded = new
        return True

    def clear(self):
        self.modules.clear()
        self.loaded = {}

    def find(self, pc):
        return self.modules.find(pc)


# ---------------------------------------------------------------------------------------------
# Walking


def frame_rows(items):
    """[(frame, its own CFA or None, its own Match or None)] and the final Stop, from core.unwind.walk.

    A frame's own CFA, and the SFrame match that gave it, come with its caller.
    """
    pairs, stop = with_callers(items)
    return [(f, c and c.cfa, c.match if c is not None and c.method is Method.SFRAME else None)
            for f, c in pairs], stop


# ---------------------------------------------------------------------------------------------
# Values of the rules at a frame


def frame_values(frame, *, abi, read, find, topmost):
    """[(what, value)] that the SFrame rules give in `frame` (CFA, RA, FP), or the Stop saying why not.

    The same pairs as GDB's `info sframe ADDR` shows for the selected frame: the unwinder's step
    from the frame, so an outer frame's rules are those at its PC - 1 (the call).
    """
    res = step(frame, abi=abi, read=read, find=find, topmost=topmost)
    if isinstance(res, Stop):
        return res
    out = [("CFA", res.cfa), ("RA", res.ra if res.ra is not None else res.pc)]
    if res.ra_stripped:
        out.append(("RA without its signature (caller's PC)", res.pc))
    if res.fp is not None:
        out.append(("FP", res.fp))
    return out


def values_lines(level, values):
    """'Values in frame #N:' and one line per value, or why there are none."""
    if isinstance(values, Stop):
        return ["Values in frame #%d: none (%s)" % (level, values.message)]
    return ["Values in frame #%d:" % level] + ["  %s = %#x" % (what, v) for what, v in values]


# ---------------------------------------------------------------------------------------------
# Text


def hexaddr(v, width=16):
    return "0x%0*x" % (width, v & MASK64)


def frame_line(number, frame, cfa, where, selected=False, own_match=None, initial_how="registers"):
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


def stop_line(stop, where=None):
    """The final 'Backtrace stopped: ...' line, with the symbol of the frame it stopped at."""
    text = "  " + stop.message
    if where and stop.reason is not StopReason.DEPTH_LIMIT:
        text += " (in %s)" % where
    return text


def where_text(module, symbol, offset):
    """'module`symbol + off' like LLDB, or what of it is known."""
    mod = module or "??"
    if not symbol:
        return "%s`???" % mod
    return "%s`%s%s" % (mod, symbol, " + %d" % offset if offset else "")


def section_summary(module):
    """'Section: ...' line of a module with SFrame (addresses as loaded)."""
    h = module.index.header
    return "Section: %s at %#x, %s, %d FDEs, %d FREs" % (
        module.section_name, module.section_addr, section_line(h), h.num_fdes, h.num_fres)


def lookup_lines(addr, module, match, symbol=None, values=None):
    """The `sframe lookup` text, line for line GDB's `info sframe ADDR`: address, section, the
    describe_match lines and, for the selected frame's PC, values_lines."""
    lines = ["Address: %#x in %s" % (addr, module.path), section_summary(module)]
    lines.extend(describe_match(match, module.index, symbol))
    lines.extend(values or ())
    return lines


def info_lines(modules):
    """`sframe info`: one block per module with SFrame, then the modules whose SFrame is unusable."""
    good = [m for m in modules if m.index is not None]
    bad = [m for m in modules if m.index is None and m.error]
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
            lines.append("  %s: %s" % (m.path, m.error))
    return lines


def lookup(tracker, addr):
    """(module, match) for a load address, or raises LookupError with the reason."""
    found = tracker.find(addr)
    if found is None:
        for m in tracker.modules.with_sframe():
            a = addr - m.load_bias
            if any(v <= a < v + memsz for v, memsz, _off, _filesz in m.image.loads):
                raise LookupError("address %#x is not covered by SFrame data (no FDE of %s covers it)"
                                  % (addr, m.path))
        raise LookupError("address %#x is not covered by SFrame data (no loaded module with SFrame covers it)"
                          % addr)
    index, module = found
    try:
        match = index.lookup(addr)
    except SFrameError as exc:
        raise LookupError("%s: %s" % (module.path, exc)) from None
    if match is None:
        raise LookupError("address %#x is not covered by SFrame data (no FDE of %s covers it)"
                          % (addr, module.path))
    return module, match
