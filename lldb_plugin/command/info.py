"""`sframe info`: the loaded modules that have SFrame."""

from ...core.report.describe import info_lines
from ..access import TRACKER, UserError, has_state, sync
from .common import Command


class InfoCommand(Command):
    short = "List the loaded modules that have SFrame sections."
    long = """Syntax: sframe info

For each loaded module with an SFrame section: its path, the section's load address, SFrame
version, flags and ABI, the numbers of FDEs and FREs, the range of functions covered and the
load bias.  Modules whose section cannot be read are listed with the reason.
"""

    def run(self, debugger, command, exe_ctx):
        if command and command.strip():
            raise UserError("sframe info takes no arguments")
        target = self._target(exe_ctx, debugger)
        sync(target)
        live = has_state(target.GetProcess())
        lines = ["Target %s (%s), %d modules%s" % (
            target.GetExecutable().fullpath or "?", target.GetTriple() or "?", target.GetNumModules(),
            "" if live else "; no process: file addresses")]
        return lines + info_lines(list(TRACKER.modules))
