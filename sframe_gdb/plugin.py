"""The plugin's state and its installation into GDB (once per GDB session)."""

import gdb
import gdb.unwinder

from ..core.unwind.policy import Mode
from . import dwarf_unwinders, hooks
from .command.common import flush_frames
from .objfiles import Tracker
from .unwinder import SFrameUnwinder


class Plugin:
    def __init__(self):
        self.mode = Mode.AUTO         # set sframe mode: auto (the default), always, off
        self.last_on_mode = Mode.AUTO   # what `set sframe on` goes back to
        self.debug = False
        self._log = []                # debug lines not printed yet (see log)
        self.in_command = 0           # how deep in our own commands (see flush_log)
        self.callee_saved = True      # set sframe callee-saved: recover the caller's callee-saved registers
        self.maybe = True             # may a loaded objfile have SFrame (the tracker says when not)
        self.watched = False          # do hooks tell us when GDB's DWARF unwinders are turned on or off
        self._dwarf_hooked = ()       # the commands those hooks are on
        self._replacers = []          # the commands whose pre-hooks tell the unwinder the registers were replaced
        self.tracker = Tracker(self.log, self._may_have_sframe)
        self.unwinder = SFrameUnwinder(self)

    LOG_LIMIT = 10000     # debug lines held at most before they are printed anyway

    def log(self, msg):
        """A debug line (`set debug sframe on`).  Lines are held and printed whole at the next
        point where GDB is between lines of its own (a stop, a prompt, one of our commands, GDB's
        exit): the unwinder is called while GDB prints a frame line (for the caller's registers,
        to print the frame's arguments), and a line written then would split it."""
        if self.debug:
            self._log.append(msg)
            if len(self._log) >= self.LOG_LIMIT:
                self.flush_log()

    def flush_log(self, *_):
        """Print the held debug lines (not while one of our commands runs: it may be capturing
        GDB's output, `stepi` to a string in `sframe verify`; it prints them when it ends)."""
        if self._log and not self.in_command:
            lines, self._log = self._log, []
            gdb.write("".join("[sframe] %s\n" % m for m in lines), gdb.STDERR if hasattr(gdb, "STDERR") else gdb.STDOUT)

    @property
    def enabled(self):
        return self.mode is not Mode.OFF

    def set_mode(self, mode, remember=True):
        """Switch mode (a core.unwind.policy.Mode) and make GDB unwind the current stack again.
        `remember`: a mode other than off becomes the one `set sframe on` goes back to."""
        self.mode = mode
        if mode is not Mode.OFF and remember:
            self.last_on_mode = mode
        self.unwinder.reset()         # nothing prepared in the old mode is given in the new one
        self.wake()
        flush_frames()

    def set_enabled(self, on):
        """`set sframe on|off`: on goes back to the mode in force before it was turned off."""
        self.set_mode(self.last_on_mode if on else Mode.OFF)

    def _may_have_sframe(self, maybe):
        """While nothing loaded has SFrame, GDB need not call the unwinder at all."""
        self.maybe = maybe
        if maybe:
            self.unwinder.forget_modules()
        self.wake()

    def wake(self):
        """Something the unwinder's idleness depends on changed (the objfiles, the mode, GDB's
        DWARF unwinders): GDB calls it again, and it decides at the next unwind's first frame
        whether it stays (SFrameUnwinder.__call__); an idle unwinder that GDB calls no more
        costs nothing."""
        self.unwinder.switch(self.enabled and self.maybe)
        self.unwinder.undecided()

    def dwarf_switched(self):
        """GDB's DWARF unwinders were turned on or off (run by the hooks of `dwarf_unwinders.watch`)."""
        self.unwinder.forget_dwarf_state()
        self.wake()

    def check_hooks(self, *_):
        """Before a prompt: a hook the user defined since, in place of one of ours, turns on what
        the plugin does where it has none (asking about GDB's DWARF unwinders at each unwind;
        checking each frame against the caller given)."""
        try:
            if self.watched and not hooks.still_ours(self._dwarf_hooked, HOOK):
                self.watched = False
                self.wake()
            if not self.unwinder.verify and not hooks.still_ours(self._replacers, REPLACED_HOOK, post=False):
                self.unwinder.verify = True
        except Exception as exc:
            self.log("checking the hooks: %s" % exc)

    def install(self):
        self.tracker.connect()
        self.tracker.scan()
        gdb.unwinder.register_unwinder(None, self.unwinder, replace=True)
        gdb.events.cont.connect(self.unwinder.resumed)
        for name, handler in (("memory_changed", self.unwinder.memory_changed), ("register_changed", self.unwinder.reset),
                              ("new_thread", self.unwinder.reset), ("exited", self.unwinder.exited)):
            registry = getattr(gdb.events, name, None)
            if registry is not None:
                registry.connect(handler)
        # `maint set dwarf unwinders` and `maint frame-unwinder` fire no event: hooks on them tell
        # us, and where they cannot be set, look again at each prompt and each unwind.
        self._dwarf_hooked = dwarf_unwinders.watch(HOOK) or ()
        self.watched = bool(self._dwarf_hooked)
        # `record goto`, `tfind` and `restart` give the thread other registers and GDB unwinds
        # anew, with no event: pre-hooks drop the unwinder's records (the command prints a frame).
        self._replacers = [c for name in REPLACERS for c in hooks.subcommands(name)]
        hooked = [hooks.hook(c, REPLACED_HOOK, post=False) for c in self._replacers]
        self.unwinder.verify = not (hooked and all(hooked))
        # A hook the user defines later replaces ours (GDB asks "Redefine command?"): checked
        # after each `define` at a script's or the prompt's top level (not one inside `if` or
        # `while`), and before each prompt.  Without the hook on `define`, each frame is checked.
        if not hooks.hook("define", DEFINED_HOOK):
            self.unwinder.verify = True
        if hasattr(gdb.events, "before_prompt"):
            gdb.events.before_prompt.connect(self.unwinder.forget_dwarf_state)
            gdb.events.before_prompt.connect(self.check_hooks)
        if hasattr(gdb.events, "inferior_call"):
            gdb.events.inferior_call.connect(self.unwinder.inferior_call)
        for name in ("stop", "before_prompt", "gdb_exiting"):       # where GDB is between lines
            registry = getattr(gdb.events, name, None)
            if registry is not None:
                registry.connect(self.flush_log)
        from .command import register
        register(self)
        flush_frames()


_PLUGIN = None

# What the hooks on the commands that switch GDB's DWARF unwinders run (see dwarf_unwinders.watch).
HOOK = 'python __import__("sframekit.sframe_gdb.plugin", fromlist=["_"]).dwarf_switched()'


# The commands that replace the registers of the thread without an event (see install), and what
# their pre-hooks run.
REPLACERS = ("record goto", "tfind", "restart")
REPLACED_HOOK = 'python __import__("sframekit.sframe_gdb.plugin", fromlist=["_"]).registers_replaced()'


DEFINED_HOOK = 'python __import__("sframekit.sframe_gdb.plugin", fromlist=["_"]).defined()'


def defined():
    """The post-hook on `define`: are our hooks still ours?"""
    if _PLUGIN is not None:
        _PLUGIN.check_hooks()      # (never raises)


def registers_replaced():
    """The pre-hooks' entry point (a GDB command, so it must never raise)."""
    try:
        if _PLUGIN is not None:
            _PLUGIN.unwinder.reset()
    except Exception as exc:
        gdb.write("sframe: %s\n" % exc, gdb.STDERR)


def dwarf_switched():
    """The hooks' entry point (a GDB command, so it must never raise)."""
    try:
        if _PLUGIN is not None:
            _PLUGIN.dwarf_switched()
    except Exception as exc:
        gdb.write("sframe: %s\n" % exc, gdb.STDERR)


def install():
    """Install the plugin into this GDB; a second call only says it is already there."""
    global _PLUGIN
    if _PLUGIN is not None:
        return _PLUGIN, False
    plugin = Plugin()
    plugin.install()
    _PLUGIN = plugin
    return plugin, True


def current():
    return _PLUGIN
