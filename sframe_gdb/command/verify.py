"""The `sframe` prefix command and `sframe verify`: SFrame against GDB's DWARF unwinder."""

import functools
import re

import gdb

from ...core.sframe.format import MASK64
from .. import dwarf_unwinders
from ..arch import register_reader
from ..unwinder import INTERNAL_ERROR
from .common import flush_frames, frame_arch, has_registers


class SFramePrefix(gdb.Command):
    """SFrame unwinder commands.

Also: info sframe [ADDR], set/show sframe, set/show debug sframe."""

    def __init__(self):
        super().__init__("sframe", gdb.COMMAND_STACK, gdb.COMPLETE_COMMAND, True)

    def invoke(self, arg, from_tty):
        gdb.execute("help sframe", from_tty)


_FRAME_AT_RE = re.compile(r"frame at (0x[0-9a-fA-F]+)")
_FRAME_ID_RE = re.compile(r"\{stack=(0x[0-9a-fA-F]+)")


def frame_cfa(frame):
    """The CFA of a frame as GDB has it: the stack address of its frame id, which `info frame`
    prints as "frame at" (str(gdb.Frame) shows the id; `info frame` is the fallback)."""
    m = _FRAME_ID_RE.match(str(frame))
    if m:
        return int(m.group(1), 16)
    try:
        text = gdb.execute("info frame level %d" % frame.level(), to_string=True)
    except gdb.error:
        return None
    m = _FRAME_AT_RE.search(text)
    return int(m.group(1), 16) if m else None


def _suppress_notifications(on):
    """Set `suppress-cli-notifications` (so stepping does not print every stop); returns the old
    value, or None where GDB does not have the setting."""
    try:
        old = gdb.parameter("suppress-cli-notifications")
        gdb.execute("set suppress-cli-notifications %s" % ("on" if on else "off"), to_string=True)
        return old
    except (gdb.error, RuntimeError):
        return None


@functools.lru_cache(maxsize=None)
def _parser():
    """Made at the first `sframe verify`: sourcing the plugin imports no argparse."""
    import argparse

    from ...core.cli import options as O
    p = O.CommandParser("sframe verify")
    p.add_argument("-steps", dest="steps", type=O.not_negative, default=0, metavar="N",
                   help="also step N instructions (stepi), checking at every stop")
    p.add_argument("-count", dest="count", type=O.not_negative, default=256, metavar="N",
                   help="check at most N frames per stop (default 256)")
    p.add_argument("-frames", dest="count", type=O.not_negative, help=argparse.SUPPRESS)   # (the old spelling)
    return p



class SFrameVerify(gdb.Command):
    """Check SFrame unwinding against GDB's DWARF unwinder.

Usage: sframe verify [-steps N] [-count N]

For each frame of the current stack, compare the PC and CFA that SFrame gives with those of GDB's
own DWARF unwinder (SFrame off, DWARF on, then both put back as they were), and in each caller of
a frame unwound with SFrame the callee-saved registers (those DWARF knows: equal, not recovered
or different; a different value is a disagreement).  With -steps N, also step N instructions
(stepi), checking at every stop.  -count N limits the frames checked per stop (default 256;
-frames N, its old name, is taken too).
Frames SFrame covers that the unwinder declined (a stop reason, an unusable section, an internal
error) cannot be checked: each is listed as "not checked" with the reason.  The tail-call frames
GDB makes from DWARF call-site information are left out of both walks (no unwind data, SFrame
or CFI, can tell a tail call happened: the frames around them are compared).  Prints each
disagreement and four summary lines:
  sframe verify: N frames checked at M stops, K disagreements
  sframe verify: callee-saved registers: E equal, U not recovered, D different
  sframe verify: per register: x19 E/C, ... (equal of those compared; AArch64's d8-d15 too)
  sframe verify: F frames not checked, I of them after a plugin error"""

    def __init__(self, plugin):
        super().__init__("sframe verify", gdb.COMMAND_STACK, gdb.COMPLETE_NONE)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        from ...core.checks import against_debugger as verifymod
        steps, max_frames = self._parse(arg)
        if not has_registers():
            raise gdb.GdbError("sframe verify: the program has no stack (run it, attach or load a core file).")
        frames = stops = unchecked = internal = 0
        bad = []
        regs = verifymod.RegisterCounts()
        quiet = _suppress_notifications(True) if steps else None
        try:
            for k in range(steps + 1):
                if k:
                    try:
                        gdb.execute("stepi", to_string=True)
                    except gdb.error as exc:
                        gdb.write("sframe verify: stepi failed: %s\n" % exc)
                        break
                    if not has_registers():
                        gdb.write("sframe verify: the program is gone after %d steps.\n" % (k - 1))
                        break
                try:
                    checked, diss, counts = self._check(k, max_frames)
                except gdb.error as exc:
                    raise gdb.GdbError("sframe verify: %s" % exc) from None
                for level, (pc, why) in sorted(self._problems.items()):
                    unchecked += 1
                    internal += why.startswith(INTERNAL_ERROR)
                    gdb.write("%sframe #%d: not checked: pc %#x: %s\n" % (
                        "stop %d (pc %#x): " % (k, self._pc0) if steps else "", level, pc or 0,
                        why[len("declined: "):] if why.startswith("declined: ") else why))
                frames += checked
                stops += 1
                regs.add(counts)
                diss = diss + counts.different
                for d in diss:
                    gdb.write("%s%s\n" % ("stop %d (pc %#x): " % (k, self._pc0) if steps else "", d))
                bad += diss
        finally:
            if quiet is not None:
                _suppress_notifications(quiet)
        tracker = self.plugin.tracker
        for m in tracker.modules():
            if m.unusable:
                gdb.write("sframe verify: not checked: %s\n" % m.problem)
        gdb.write(verifymod.summary(frames, stops, len(bad)) + "\n")
        gdb.write(regs.line() + "\n")
        gdb.write(regs.register_line() + "\n")
        gdb.write(verifymod.unchecked_line(unchecked, internal) + "\n")

    @staticmethod
    def _parse(arg):
        from ...core.cli import options as O
        try:
            opts = _parser().parse_args(gdb.string_to_argv(arg))
        except O.UsageError as exc:
            raise gdb.GdbError("sframe verify: %s" % exc) from None
        return opts.steps, opts.count

    def _walk(self, max_frames, ours):
        from ...core.checks import against_debugger as verifymod
        frames = []
        f = gdb.newest_frame()
        while f is not None and len(frames) < max_frames:
            if f.type() != gdb.TAILCALL_FRAME:
                frames.append(f)
            try:
                f = f.older()
            except gdb.error:
                break
        last = self.plugin.unwinder.last if ours else {}     # what the unwinder did in this walk
        if ours:
            self._problems = dict(self.plugin.unwinder.problems)
        facts = []
        for f in frames:
            level = f.level()
            pc = int(f.pc()) & MASK64
            rec = last.get(level)
            ours_here = rec is not None and rec[0] == pc
            facts.append(verifymod.FrameFact(level, pc, frame_cfa(f), ours_here and rec[2] is not None, f.name() or "",
                                             self._regs(f), ours_here and rec[2] is None))
        return facts

    @staticmethod
    def _regs(frame):
        """{DWARF regnum: value or None} of the frame's callee-saved registers (the FP included)."""
        arch = frame_arch(frame)
        if arch is None:
            return {}
        abi = arch.abis[0]
        read = register_reader(frame, arch, abi)      # (as the unwinder reads them: AArch64's d8 from z8/v8)
        return {regnum: read(regnum) for regnum in abi.callee_saved}

    def _check(self, stop, max_frames):
        from ...core.checks import against_debugger as verifymod
        from ...core.unwind.policy import Mode
        plugin = self.plugin
        was = plugin.mode
        on = dwarf_unwinders.enabled()
        try:
            plugin.set_mode(Mode.ALWAYS, remember=False)     # SFrame wherever it covers the PC
            self._pc0 = int(gdb.newest_frame().pc()) & MASK64
            ours = self._walk(max_frames, True)
            plugin.set_mode(Mode.OFF, remember=False)
            if on is False:
                dwarf_unwinders.set_enabled(True)
            flush_frames()
            ref = self._walk(max_frames, False)
        finally:
            if on is False:
                dwarf_unwinders.set_enabled(False)
            plugin.set_mode(was, remember=False)
        checked, diss = verifymod.compare(ours, ref, stop)
        arch = frame_arch(gdb.newest_frame())
        regname = arch.abis[0].regname if arch is not None else str
        return checked, diss, verifymod.compare_registers(ours, ref, regname, stop)
