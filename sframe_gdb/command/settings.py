"""`set sframe`, `show sframe`, `set sframe mode` and `set debug sframe`."""

import gdb


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
        from ...core.unwind.policy import Mode
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
        from ...core.unwind.policy import Mode
        super().__init__("sframe mode", gdb.COMMAND_STACK, gdb.PARAM_ENUM, Mode.names())
        self.plugin = plugin
        self.value = plugin.mode.value
        _MODE_PARAMETERS.append(self)

    def get_set_string(self):
        from ...core.unwind.policy import Mode
        self.plugin.set_mode(Mode(self.value))
        return ""

    def get_show_string(self, svalue):
        from ...core.unwind.policy import Mode
        return _mode_text(Mode(svalue))


_MODE_PARAMETERS = []      # the `sframe mode` parameter, once created


def _sync_mode_parameter(plugin):
    for obj in _MODE_PARAMETERS:
        obj.value = plugin.mode.value


class RegistersParameter(gdb.Parameter):
    """Whether the SFrame unwinder recovers the caller's callee-saved registers.

SFrame describes only the CFA, the return address and the frame pointer.  With this on (the
default), the unwinder also finds, in each function's own code, where it saved the callee-saved
registers (x86-64 rbx, r12-r15) and gives GDB their values in the caller, or passes on a value the
function has not changed; what it cannot prove stays <not saved>.  `info sframe ADDR` shows
where each register is."""

    set_doc = "Set whether SFrame frames recover the caller's callee-saved registers."
    show_doc = "Show whether SFrame frames recover the caller's callee-saved registers."

    name = "sframe registers"

    def __init__(self, plugin):
        super().__init__(self.name, gdb.COMMAND_STACK, gdb.PARAM_BOOLEAN)
        self.plugin = plugin
        self.value = plugin.callee_saved

    def get_set_string(self):
        from .common import flush_frames
        self.plugin.callee_saved = bool(self.value)
        for other in _REGISTERS_PARAMETERS:
            other.value = self.plugin.callee_saved     # (both names show the one setting)
        self.plugin.unwinder.reset()      # nothing prepared with the old setting is given
        flush_frames()
        return ""

    def get_show_string(self, svalue):
        return "Recovery of callee-saved registers in SFrame frames is %s." % svalue


class CalleeSavedParameter(RegistersParameter):
    """The old name of `set sframe registers`: whether the SFrame unwinder recovers the caller's
callee-saved registers (see `help set sframe registers`)."""

    name = "sframe callee-saved"
    set_doc = "Set whether SFrame frames recover the caller's callee-saved registers (old name of sframe registers)."
    show_doc = "Show whether SFrame frames recover the caller's callee-saved registers."


_REGISTERS_PARAMETERS = []      # both names' parameters (Plugin registers them once)


def registers_parameters(plugin):
    """`set sframe registers` and its old name `set sframe callee-saved`, kept in step."""
    _REGISTERS_PARAMETERS[:] = [RegistersParameter(plugin), CalleeSavedParameter(plugin)]
    return list(_REGISTERS_PARAMETERS)


class DebugSFrameParameter(gdb.Parameter):
    """Print what the SFrame unwinder does and why it declines a frame."""

    set_doc = "Set SFrame unwinder debugging."
    show_doc = "Show SFrame unwinder debugging."

    def __init__(self, plugin):
        super().__init__("debug sframe", gdb.COMMAND_MAINTENANCE, gdb.PARAM_BOOLEAN)
        self.plugin = plugin
        self.value = plugin.debug

    def get_set_string(self):
        self.plugin.flush_log()
        self.plugin.debug = bool(self.value)
        self.plugin.unwinder.reset()      # answers prepared without logging are not given
        return ""

    def get_show_string(self, svalue):
        return "SFrame unwinder debugging is %s." % svalue

