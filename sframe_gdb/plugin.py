"""The plugin's state and its installation into GDB (once per GDB session)."""

import gdb
import gdb.unwinder

from .objfiles import Tracker
from .unwinder import SFrameUnwinder


class Plugin:
    def __init__(self):
        self.enabled = True
        self.debug = False
        self.tracker = Tracker(self.log, self._may_have_sframe)
        self.unwinder = SFrameUnwinder(self)
        self._events = []

    def log(self, msg):
        if self.debug:
            gdb.write("[sframe] %s\n" % msg, gdb.STDERR if hasattr(gdb, "STDERR") else gdb.STDOUT)

    def set_enabled(self, on):
        self.enabled = bool(on)
        self.unwinder.enabled = self.enabled
        flush_frames()

    def _may_have_sframe(self, maybe):
        """While nothing loaded has SFrame, GDB need not call the unwinder at all."""
        self.unwinder.enabled = self.enabled and maybe

    def install(self):
        self.tracker.connect()
        self.tracker.scan()
        gdb.unwinder.register_unwinder(None, self.unwinder, replace=True)
        for name in ("cont", "memory_changed", "register_changed", "new_thread", "exited"):
            registry = getattr(gdb.events, name, None)
            if registry is not None:
                registry.connect(self.unwinder.reset)
                self._events.append((registry, self.unwinder.reset))
        from . import commands
        commands.register(self)
        flush_frames()


def flush_frames():
    """Make GDB forget the frames it has unwound (so they are unwound again with the new setting)."""
    try:
        gdb.invalidate_cached_frames()
    except Exception:
        try:
            gdb.execute("maint flush register-cache", to_string=True)
        except gdb.error:
            pass


_PLUGIN = None


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
