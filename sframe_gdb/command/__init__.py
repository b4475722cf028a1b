"""The GDB commands, one module per command family (as GDB's own python/lib/gdb/command/):
`info sframe` (info), `set/show sframe` and `set debug sframe` (settings), `sframe verify`
(verify); common holds what they share."""

from .info import InfoSFrame
from .settings import DebugSFrameParameter, SetSFrame, SFrameModeParameter, ShowSFrame, registers_parameters
from .verify import SFramePrefix, SFrameVerify

_REGISTERED = []


def _flushing(command, plugin):
    """The command prints the debug lines held so far before its own output, and those it
    caused after it (Plugin.log)."""
    invoke = command.invoke

    def flushed(arg, from_tty):
        plugin.flush_log()
        plugin.in_command += 1
        try:
            return invoke(arg, from_tty)
        finally:
            plugin.in_command -= 1
            plugin.flush_log()
    command.invoke = flushed
    return command


def register(plugin):
    """Create the commands and settings (once)."""
    if _REGISTERED:
        return
    _REGISTERED.extend([
        SetSFrame(plugin),
        ShowSFrame(plugin),
        SFrameModeParameter(plugin),
        *registers_parameters(plugin),
        DebugSFrameParameter(plugin),
        _flushing(InfoSFrame(plugin), plugin),
        SFramePrefix(),
        _flushing(SFrameVerify(plugin), plugin),
    ])
