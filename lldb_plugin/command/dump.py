"""`sframe dump [MODULE]`: a loaded module's SFrame section as readelf --sframe prints it."""

import os

from ...core.cli import options as O
from ...core.report.dump import dump_file
from ..access import UserError
from .common import Command, built_once, parse


def _parser():
    p = O.CommandParser("sframe dump", description="Print a loaded module's SFrame section exactly as `sframe dump FILE` "
                        "(binutils 2.47's readelf --sframe format), at the file's own addresses.")
    p.add_argument("module", nargs="?", help="a loaded module's file name or path (default: the executable)")
    return p


class DumpCommand(Command):
    short = "Print a loaded module's SFrame section like readelf --sframe."
    parser = built_once(_parser)

    def run(self, debugger, command, exe_ctx):
        opts = parse(self.parser, command)
        target = self._target(exe_ctx, debugger)
        path = self._module_path(target, opts.module)
        text = dump_file(path)
        return [text[:-1] if text.endswith("\n") else text]

    @staticmethod
    def _module_path(target, name):
        mods = [target.GetModuleAtIndex(i) for i in range(target.GetNumModules())]
        if name is None:
            exe = target.GetExecutable().fullpath
            if not exe:
                raise UserError("the target has no executable: name a module")
            return exe
        exact = [m for m in mods if m.GetFileSpec().fullpath == name]
        base = [m for m in mods if m.GetFileSpec().GetFilename() == os.path.basename(name)]
        pick = exact or base
        if not pick:
            known = ", ".join(sorted({m.GetFileSpec().GetFilename() for m in mods if m.GetFileSpec().GetFilename()}))
            raise UserError("no loaded module %r (loaded: %s)" % (name, known or "none"))
        if len(pick) > 1 and not exact:
            raise UserError("%r names %d modules: give the full path" % (name, len(pick)))
        path = pick[0].GetFileSpec().fullpath
        if not path or not os.path.isfile(path):
            raise UserError("module %s has no local file to read" % name)
        return path
