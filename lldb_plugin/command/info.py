"""`sframe info`: the loaded modules that have SFrame."""

from ...core.cli import options as O
from ...core.report.status import module_table
from .. import sidefiles, stophook
from ..access import TRACKER, has_state, sync
from .common import Command, built_once, parse


def _parser():
    p = O.CommandParser("sframe info", description=(
        "A table of the loaded modules with an SFrame section (as GDB's `info sframe`): path, SFrame version, ABI, "
        "the numbers of FDEs and FREs, the range of functions covered and the load bias; how many modules have "
        "none; those whose section cannot be used, with the reason.  Then, for LLDB's own bt: each module's side "
        "file of DWARF CFI made from its SFrame, attached or why not (modules not seen before are handled now, as "
        "at a stop).  A side file not in the cache yet is written behind, in a process of its own: meanwhile one "
        "with CFA, RA and FP rows is attached (the callee-saved registers of outer frames unavailable): on LLDB 16 "
        "of the functions on the stacks, and the whole one at the first stop after it is written; on later LLDBs, "
        "which read a module's first side file through the session, of every function, and the whole one in the "
        "next session."))
    p.add_argument("-w", "--wait", action="store_true",
                   help="wait until the side files being written are (at most 15 minutes; Ctrl-C stops waiting on LLDB 17 "
                   "and later), and attach them now; "
                   "frames LLDB has shown at this stop keep what they had, the others and the next stop's use them")
    return p


class InfoCommand(Command):
    short = "List the loaded modules that have SFrame sections."
    parser = built_once(_parser)

    def run(self, debugger, command, exe_ctx):
        args = parse(self.parser, command)
        target = self._target(exe_ctx, debugger)
        sync(target)
        live = has_state(target.GetProcess())
        n = target.GetNumModules()
        lines = ["Target %s (%s), %d module%s%s" % (
            target.GetExecutable().fullpath or "?", target.GetTriple() or "?", n, "" if n == 1 else "s",
            "" if live else "; no process: file addresses")]
        stophook.ensure_hook(debugger, stophook.hook_class(__name__.rsplit(".", 2)[0]))
        if args.wait:
            sidefiles.wait(debugger, target, lines.append, interrupted=debugger.InterruptRequested
                           if hasattr(debugger, "InterruptRequested") else lambda: False)
        else:
            sidefiles.attach(debugger, target, lines.append)
        lines += module_table(TRACKER.modules, "module")
        attached = sorted(sidefiles.status(target).items())
        if attached:
            lines.append("Side files of DWARF CFI from SFrame (LLDB's own bt):")
            lines += ["  %s: %s" % (path, text) for path, text in attached]
        return lines
