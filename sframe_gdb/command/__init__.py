"""The GDB commands, one module per command family (as GDB's own python/lib/gdb/command/):
`info sframe` (info), `set/show sframe` and `set debug sframe` (settings), `sframe verify`
(verify); common holds what they share."""

from .info import InfoSFrame
from .settings import CalleeSavedParameter, DebugSFrameParameter, SetSFrame, SFrameModeParameter, ShowSFrame
from .verify import SFramePrefix, SFrameVerify

_REGISTERED = []


def register(plugin):
    """Create the commands and settings (once)."""
    if _REGISTERED:
        return
    _REGISTERED.extend([
        SetSFrame(plugin),
        ShowSFrame(plugin),
        SFrameModeParameter(plugin),
        CalleeSavedParameter(plugin),
        DebugSFrameParameter(plugin),
        InfoSFrame(plugin),
        SFramePrefix(),
        SFrameVerify(plugin),
    ])
