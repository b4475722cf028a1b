"""`sframe provider on|off|status`: LLDB's scripted frame providers, and why none is registered."""

import re

import lldb

from ...core.cli import options as O
from ..access import UserError
from .common import Command, built_once, parse


def _parser():
    p = O.CommandParser("sframe provider")
    p.add_argument("what", choices=("on", "off", "status"), metavar="on|off|status",
                   help="register the provider, remove it, or say why not")
    return p


class ProviderCommand(Command):
    short = "Control the SFrame frame provider for LLDB's own bt (LLDB 22 and later): on, off, status."
    parser = built_once(_parser)
    long = """LLDB 22 added scripted frame providers: a Python class that gives the frames of LLDB's own `bt`,
`frame select`, `up`/`down`, `frame variable` and `finish`.  Where this LLDB has them and they
work, `sframe provider on` would register one that unwinds with SFrame.  `status` says whether
this LLDB has them, whether they can be used here and why not, and whether one is registered.

On LLDB 16 to 21 there are no frame providers; on LLDB 22 and 23 a provider that gives a scripted
frame (one with its own registers, which every frame unwound with SFrame needs) anywhere but at
the top of the stack makes LLDB crash or hang, so the provider is not registered there (docs/lldb.md
has a reproduction).  `sframe bt` unwinds with SFrame in every version.
"""

    def run(self, debugger, command, exe_ctx):
        what = parse(self.parser, command).what
        usable, why = provider_support()
        if what == "status":
            return ["%s: %s" % (lldb.SBDebugger.GetVersionString().splitlines()[0],
                                "frame providers usable" if usable else why),
                    "SFrame frame provider: not registered (use 'sframe bt')"]
        if what == "on" and not usable:
            raise UserError("the frame provider is not registered: %s" % why)
        return ["SFrame frame provider: not registered (use 'sframe bt')"]


# LLDB versions whose frame providers cannot give a scripted frame below the top of the stack:
# a provider that does (LLDB asks for the next frame after it) crashes LLDB 22.1.8 and 23.1.4
# with a segmentation fault, or hangs 23.1.4 (docs/lldb.md, "LLDB's own bt").
_PROVIDERS_BROKEN = (22, 23)


def _lldb_version():
    m = re.search(r"lldb version (\d+)\.(\d+)\.(\d+)", lldb.SBDebugger.GetVersionString() or "")
    return tuple(int(x) for x in m.groups()) if m else None


def provider_support():
    """(usable, why not): can a scripted frame provider give LLDB's own bt SFrame's frames here?"""
    version = _lldb_version()
    name = "LLDB %s" % ".".join(map(str, version)) if version else "this LLDB"
    if not hasattr(lldb.SBTarget, "RegisterScriptedFrameProvider"):
        return False, "%s has no scripted frame providers (LLDB 22 and later have them)" % name
    if version is None or version[0] in _PROVIDERS_BROKEN:
        return False, ("%s crashes or hangs when a frame provider gives a scripted frame below the top of "
                       "the stack, which every frame SFrame unwinds needs" % name)
    return False, "%s is newer than the versions tried (22, 23): the provider is not built for it yet" % name
