"""`sframe info`: the loaded modules that have SFrame."""

from ...core.report.describe import info_lines
from .. import sidefiles
from ..access import TRACKER, UserError, has_state, sync
from .common import Command


class InfoCommand(Command):
    short = "List the loaded modules that have SFrame sections."
    long = """Syntax: sframe info

For each loaded module with an SFrame section: its path, the section's load address, SFrame
version, flags and ABI, the numbers of FDEs and FREs, the range of functions covered and the
load bias.  Modules whose section cannot be read are listed with the reason.  Then, for LLDB's
own bt: each module's side file of DWARF CFI made from its SFrame, attached or why not (modules
not seen before are handled now, as at a stop).
"""

    def run(self, debugger, command, exe_ctx):
        if command and command.strip():
            raise UserError("sframe info takes no arguments")
        target = self._target(exe_ctx, debugger)
        sync(target)
        live = has_state(target.GetProcess())
        n = target.GetNumModules()
        lines = ["Target %s (%s), %d module%s%s" % (
            target.GetExecutable().fullpath or "?", target.GetTriple() or "?", n, "" if n == 1 else "s",
            "" if live else "; no process: file addresses")]
        sidefiles.ensure_hook(debugger, "%s.sidefiles.%s" % (__name__.rsplit(".", 2)[0], sidefiles.HOOK_CLASS))
        sidefiles.attach(debugger, target, lines.append)
        lines += info_lines(list(TRACKER.modules))
        attached = sorted(sidefiles.status(target).items())
        if attached:
            lines.append("Side files of DWARF CFI from SFrame (LLDB's own bt):")
            lines += ["  %s: %s" % (path, text) for path, text in attached]
        return lines
