"""GDB commands and settings: info sframe [ADDR], set/show sframe, set/show debug sframe,
sframe verify [-steps N]."""

import re

import gdb

from ..core.format import MASK64
from . import arch as archmod
from . import dwarf

_REGISTERED = []


# -- helpers --------------------------------------------------------------------------------------

def _has_registers():
    """True when there is a thread with registers (live process, core file, remote target)."""
    try:
        return gdb.selected_thread() is not None and gdb.selected_frame() is not None
    except gdb.error:
        return False


def parse_address(arg, cmd):
    """An address from any GDB expression: $pc, main+4, *0x401000, 0x401000, a function name."""
    text = arg.strip()
    if text.startswith("*"):
        text = text[1:].strip()
    if not text:
        raise gdb.GdbError("%s: an address is needed" % cmd)
    try:
        value = gdb.parse_and_eval(text)
        t = value.type.strip_typedefs()
        if t.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        elif t.code not in (gdb.TYPE_CODE_PTR, gdb.TYPE_CODE_INT, gdb.TYPE_CODE_ENUM,
                            gdb.TYPE_CODE_CHAR, gdb.TYPE_CODE_BOOL):
            raise gdb.GdbError("%s: %s is a value of type %s, not an address" % (cmd, arg.strip(), value.type))
        return int(value) & MASK64
    except gdb.GdbError:
        raise
    except gdb.error as exc:
        raise gdb.GdbError("%s: cannot evaluate %s: %s" % (cmd, arg.strip(), exc)) from None


_INFO_SYMBOL_RE = re.compile(r"^(.+?)(?: \+ (\d+))? in section (\S+)(?: of (.+))?$")


def symbol_at(addr):
    """(name, offset) of the symbol GDB knows at addr, or None."""
    try:
        text = gdb.execute("info symbol %#x" % addr, to_string=True).strip().splitlines()
    except gdb.error:
        return None
    m = _INFO_SYMBOL_RE.match(text[0]) if text else None
    if not m:
        return None
    return m.group(1), int(m.group(2) or 0)


def objfile_name_at(addr):
    """Name of the objfile holding addr (whatever its unwind data), or None."""
    ps = gdb.current_progspace()
    if hasattr(ps, "objfile_for_address"):
        try:
            o = ps.objfile_for_address(addr)
            if o is not None:
                return (o.owner or o).filename
        except Exception:
            pass
    try:
        name = ps.solib_name(addr)
        if name:
            return name
    except Exception:
        pass
    try:
        text = gdb.execute("info symbol %#x" % addr, to_string=True).strip()
    except gdb.error:
        return None
    m = _INFO_SYMBOL_RE.match(text.splitlines()[0]) if text else None
    if m:
        return m.group(4) or gdb.current_progspace().filename
    return None


def _is_callers_pc(addr):
    """Is addr the PC of the selected frame, and that frame a caller (GDB looks its unwind data up
    at PC - 1, inside the call)?"""
    if not _has_registers():
        return False
    try:
        frame = gdb.selected_frame()
        if (int(frame.pc()) & MASK64) != addr or frame.level() == 0:
            return False
        newer = frame.newer()
        while newer is not None and newer.type() == gdb.INLINE_FRAME:
            newer = newer.newer()
        return newer is not None and newer.type() == gdb.NORMAL_FRAME
    except gdb.error:
        return False


def frame_arch(frame):
    return archmod.lookup(frame.architecture().name())


def frame_values(frame, ms, module):
    """[(what, value)] of the selected frame from SFrame (CFA, RA, FP), or a Stop."""
    from ..core.unwind import frame_from_registers, rule_values
    a = frame_arch(frame)
    if a is None:
        return None
    abi = a.abi_for(module.index.abi)
    if abi is None:
        return None
    top = frame.level() == 0
    inferior = gdb.selected_inferior()
    f = frame_from_registers(abi, int(frame.pc()), archmod.register_reader(frame, a, abi), full=top)
    return rule_values(f, abi=abi, read=lambda addr, n: inferior.read_memory(addr, n), find=ms.find, topmost=top)


# -- settings ---------------------------------------------------------------------------------------

class SetSFrame(gdb.Command):
    """Set whether GDB unwinds frames with SFrame.

Usage: set sframe on|off|auto|always
       set sframe mode auto|always|off

With SFrame on, the SFrame unwinder runs before GDB's DWARF unwinders for frames whose PC lies in
an objfile with an .sframe section; other frames are left to GDB's own unwinders.  `on` goes back
to the mode in force before `off` (auto at first); `auto` and `always` set the mode (see
`help set sframe mode`).  Changing it makes GDB unwind the current stack again."""

    def __init__(self, plugin):
        super().__init__("set sframe", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, True)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        from ..core.policy import Mode
        word = arg.strip().lower()
        if word in ("on", "1", "yes", "enable"):
            self.plugin.set_enabled(True)
        elif word in ("off", "0", "no", "disable"):
            self.plugin.set_enabled(False)
        elif word in ("auto", "always"):
            self.plugin.set_mode(Mode(word))
        elif word:
            raise gdb.GdbError('"set sframe" needs on, off, auto or always (or "set sframe mode MODE"), not %r'
                               % arg.strip())
        else:
            raise gdb.GdbError('"set sframe" needs on, off, auto or always.')
        _sync_mode_parameter(self.plugin)


class ShowSFrame(gdb.Command):
    """Show whether GDB unwinds frames with SFrame, and in which mode.

Usage: show sframe
       show sframe mode"""

    def __init__(self, plugin):
        super().__init__("show sframe", gdb.COMMAND_STACK, gdb.COMPLETE_NONE, True)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        if arg.strip():
            raise gdb.GdbError('Undefined show sframe command: "%s".  Try "help show sframe".' % arg.strip())
        gdb.write("SFrame unwinding is %s.\n" % ("on" if self.plugin.enabled else "off"))
        gdb.write(_mode_text(self.plugin.mode) + "\n")


_MODE_TEXT = {
    "auto": "frames whose PC has DWARF CFI are left to GDB's DWARF unwinder while it is enabled",
    "always": "SFrame first wherever it covers the PC, DWARF CFI or not",
    "off": "GDB's own unwinders only",
}


def _mode_text(mode):
    return 'SFrame unwinder mode is "%s": %s.' % (mode.value, _MODE_TEXT[mode.value])


class SFrameModeParameter(gdb.Parameter):
    """Which frames the SFrame unwinder takes.

auto (the default): only frames GDB's own DWARF unwinder cannot take: their PC has no DWARF CFI
  (.eh_frame, .debug_frame), or GDB's DWARF unwinders are disabled (maint set dwarf unwinders off,
  maint frame-unwinder disable -name dwarf2).  Loading the plugin changes nothing where DWARF CFI
  is present: SFrame describes only CFA, return address and frame pointer, DWARF every register.
always: every frame whose PC SFrame covers, before GDB's DWARF unwinder (to test SFrame itself).
off: none (the same as "set sframe off")."""

    set_doc = "Set which frames the SFrame unwinder takes."
    show_doc = "Show which frames the SFrame unwinder takes."

    def __init__(self, plugin):
        from ..core.policy import Mode
        super().__init__("sframe mode", gdb.COMMAND_STACK, gdb.PARAM_ENUM, Mode.names())
        self.plugin = plugin
        self.value = plugin.mode.value

    def get_set_string(self):
        from ..core.policy import Mode
        self.plugin.set_mode(Mode(self.value))
        return ""

    def get_show_string(self, svalue):
        from ..core.policy import Mode
        return _mode_text(Mode(svalue))


def _sync_mode_parameter(plugin):
    for obj in _REGISTERED:
        if isinstance(obj, SFrameModeParameter):
            obj.value = plugin.mode.value


class DebugSFrameParameter(gdb.Parameter):
    """Print what the SFrame unwinder does and why it declines a frame."""

    set_doc = "Set SFrame unwinder debugging."
    show_doc = "Show SFrame unwinder debugging."

    def __init__(self, plugin):
        super().__init__("debug sframe", gdb.COMMAND_MAINTENANCE, gdb.PARAM_BOOLEAN)
        self.plugin = plugin
        self.value = plugin.debug

    def get_set_string(self):
        self.plugin.debug = bool(self.value)
        return ""

    def get_show_string(self, svalue):
        return "SFrame unwinder debugging is %s." % svalue


# -- info sframe ------------------------------------------------------------------------------------

class InfoSFrame(gdb.Command):
    """Show SFrame information.

Usage: info sframe [ADDR]

Without an argument: the loaded objfiles that have an .sframe section, with the SFrame version,
ABI, FDE and FRE counts and the text range they cover.
With ADDR (any expression: $pc, main+4, *0x401000): the objfile and section covering ADDR, its
function's FDE, the FRE in effect at ADDR and its rules in words; when ADDR is the PC of the
selected frame of a running program, also the values the rules give there."""

    def __init__(self, plugin):
        super().__init__("info sframe", gdb.COMMAND_STATUS, gdb.COMPLETE_EXPRESSION)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        try:
            if arg.strip():
                self._address(arg)
            else:
                self._table()
        except gdb.GdbError:
            raise
        except gdb.error as exc:
            raise gdb.GdbError("info sframe: %s" % exc) from None
        except Exception as exc:
            raise gdb.GdbError("info sframe: internal error: %s: %s" % (type(exc).__name__, exc)) from None

    def _table(self):
        from ..core import describe
        tracker = self.plugin.tracker
        tracker.current()
        mods = list(tracker.modules())
        rows = []
        without = 0
        for m in mods:
            if m.index is None:
                without += 1
                continue
            h = m.index.header
            lo, hi = m.range
            rows.append((m.path, str(h.version), describe.abi_text(h.abi), str(h.num_fdes), str(h.num_fres),
                         "%#x-%#x" % (lo, hi) if hi > lo else "-"))
        if not rows:
            gdb.write("No loaded objfile has SFrame information (%d objfile%s tracked).\n"
                      % (without, "" if without == 1 else "s"))
            return
        head = ("Objfile", "Version", "ABI", "FDEs", "FREs", "Text range")
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        right = (False, True, False, True, True, False)
        for r in [head] + rows:
            cells = [c.rjust(w) if rj else c.ljust(w) for c, w, rj in zip(r, widths, right)]
            gdb.write("  ".join(cells).rstrip() + "\n")
        if without:
            gdb.write("%d other objfile%s without SFrame.\n" % (without, "" if without == 1 else "s"))

    def _address(self, arg):
        from ..core import text
        from ..core.modules import NotCovered, locate
        addr = parse_address(arg, "info sframe")
        tracker = self.plugin.tracker
        ms = tracker.current()
        try:
            module, match = locate(ms if ms is not None else tracker.modules(), addr, objfile_name_at, "objfile")
        except NotCovered as exc:
            raise gdb.GdbError(str(exc)) from None
        lines = text.lookup_lines(addr, module, match, symbol_at(match.fde.start),
                                  self._unwinder_lines(addr, ms, module) + self._values(addr, ms, module))
        gdb.write("\n".join(lines) + "\n")

    def _unwinder_lines(self, addr, ms, module):
        """What DWARF CFI GDB has at ADDR, and which unwinder takes a frame there in the current mode."""
        from ..core.policy import Mode, choose
        from ..core.unwind import lookup_address
        at = lookup_address(addr, _is_callers_pc(addr))
        note = "" if at == addr else " (at %#x - 1: a caller's frame is looked up at its return address - 1)" % addr
        cfi = ms.cfi_find(module, at)
        mode = self.plugin.mode
        choice = choose(mode, dwarf.enabled(), lambda: cfi)
        if choice.sframe:
            who = "SFrame"
        elif mode is Mode.OFF:
            who = "GDB's own unwinders"
        else:
            who = "GDB's DWARF unwinder"
        return ["DWARF CFI: %s%s" % (cfi if cfi is not None else "none covers %#x" % at, note),
                "Unwinder: %s (%s)" % (who, choice.reason)]

    def _values(self, addr, ms, module):
        from ..core import text
        if not _has_registers():
            return []
        frame = gdb.selected_frame()
        try:
            if (int(frame.pc()) & MASK64) != addr:
                return []
        except gdb.error:
            return []
        vals = frame_values(frame, ms, module)
        if vals is None:
            return []
        return text.values_lines(frame.level(), vals)


# -- sframe prefix and sframe verify -----------------------------------------------------------------

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


class SFrameVerify(gdb.Command):
    """Check SFrame unwinding against GDB's DWARF unwinder.

Usage: sframe verify [-steps N] [-frames N]

For each frame of the current stack, compare the PC and CFA that SFrame gives with those of GDB's
own DWARF unwinder (SFrame off, DWARF on, then both put back as they were).  With -steps N, also
step N instructions (stepi), checking at every stop.  -frames N limits the frames checked per
stop (default 256).  Prints each disagreement and a summary line:
  sframe verify: N frames checked at M stops, K disagreements"""

    def __init__(self, plugin):
        super().__init__("sframe verify", gdb.COMMAND_STACK, gdb.COMPLETE_NONE)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        from ..core import verify as verifymod
        steps, max_frames = self._parse(arg)
        if not _has_registers():
            raise gdb.GdbError("sframe verify: the program has no stack (run it, attach or load a core file).")
        frames = stops = 0
        bad = []
        quiet = _suppress_notifications(True) if steps else None
        try:
            for k in range(steps + 1):
                if k:
                    try:
                        gdb.execute("stepi", to_string=True)
                    except gdb.error as exc:
                        gdb.write("sframe verify: stepi failed: %s\n" % exc)
                        break
                    if not _has_registers():
                        gdb.write("sframe verify: the program is gone after %d steps.\n" % (k - 1))
                        break
                try:
                    checked, diss = self._check(k, max_frames)
                except gdb.error as exc:
                    raise gdb.GdbError("sframe verify: %s" % exc) from None
                frames += checked
                stops += 1
                for d in diss:
                    gdb.write("%s%s\n" % ("stop %d (pc %#x): " % (k, self._pc0) if steps else "", d))
                bad += diss
        finally:
            if quiet is not None:
                _suppress_notifications(quiet)
        gdb.write(verifymod.summary(frames, stops, len(bad)) + "\n")

    @staticmethod
    def _parse(arg):
        argv = gdb.string_to_argv(arg)
        steps, max_frames = 0, 256
        i = 0
        while i < len(argv):
            opt = argv[i]
            if opt in ("-steps", "-frames") and i + 1 < len(argv):
                try:
                    n = int(argv[i + 1], 0)
                except ValueError:
                    n = -1
                if n < 0:
                    raise gdb.GdbError("sframe verify: %s needs a non-negative number, not %r" % (opt, argv[i + 1]))
                if opt == "-steps":
                    steps = n
                else:
                    max_frames = n
                i += 2
            else:
                raise gdb.GdbError("sframe verify: unknown argument %r (usage: sframe verify [-steps N] [-frames N])"
                                   % opt)
        return steps, max_frames

    def _walk(self, max_frames, ours):
        from ..core import verify as verifymod
        facts = []
        f = gdb.newest_frame()
        last = self.plugin.unwinder.last
        while f is not None and len(facts) < max_frames:
            level = f.level()
            pc = int(f.pc()) & MASK64
            rec = last.get(level) if ours else None
            sframe = rec is not None and rec[0] == pc and rec[2] is not None
            facts.append(verifymod.FrameFact(level, pc, frame_cfa(f), sframe, f.name() or ""))
            try:
                f = f.older()
            except gdb.error:
                break
        return facts

    def _check(self, stop, max_frames):
        from ..core import verify as verifymod
        from ..core.policy import Mode
        plugin = self.plugin
        was = plugin.mode
        on = dwarf.enabled()
        try:
            plugin.set_mode(Mode.ALWAYS, remember=False)     # SFrame wherever it covers the PC
            self._pc0 = int(gdb.newest_frame().pc()) & MASK64
            ours = self._walk(max_frames, True)
            plugin.set_mode(Mode.OFF, remember=False)
            if on is False:
                dwarf.set_enabled(True)
            from .plugin import flush_frames
            flush_frames()
            ref = self._walk(max_frames, False)
        finally:
            if on is False:
                dwarf.set_enabled(False)
            plugin.set_mode(was, remember=False)
        return verifymod.compare(ours, ref, stop)


def register(plugin):
    """Create the commands and settings (once)."""
    if _REGISTERED:
        return
    _REGISTERED.extend([
        SetSFrame(plugin),
        ShowSFrame(plugin),
        SFrameModeParameter(plugin),
        DebugSFrameParameter(plugin),
        InfoSFrame(plugin),
        SFramePrefix(),
        SFrameVerify(plugin),
    ])
