"""The `sframe` command container for LLDB: one module per command family (lookup, backtrace,
info, dump, provider), common.py what they share; LLDB itself is read in lldb_plugin.access."""

import importlib
import os

import lldb

from .. import sidefiles
from ..access import TRACKER

# (name, module, class): one module per command family.
_SUBCOMMANDS = (("lookup", "lookup", "LookupCommand"), ("backtrace", "backtrace", "BacktraceCommand"),
                ("bt", "backtrace", "BacktraceCommand"), ("info", "info", "InfoCommand"), ("dump", "dump", "DumpCommand"),
                ("provider", "provider", "ProviderCommand"))


def register(debugger, package):
    """Add the `sframe` container and its commands (again, if the plugin is imported again);
    `package` is this package's full name, by which LLDB finds the command classes."""
    for _name, module, _cls in _SUBCOMMANDS:
        importlib.import_module("%s.%s" % (package, module))
    ci = debugger.GetCommandInterpreter()
    failures = []

    def run(cmd):
        res = lldb.SBCommandReturnObject()
        ci.HandleCommand(cmd, res)
        if not res.Succeeded():
            failures.append("%s: %s" % (cmd, (res.GetError() or "").strip()))

    run('command container add -o -h "SFrame stack-trace information (.sframe): '
        'lookup, backtrace, info, dump, provider." sframe')
    for name, module, cls in _SUBCOMMANDS:
        run("command script add -o -c %s.%s.%s sframe %s" % (package, module, cls, name))
    if failures:
        print("sframe: could not add the commands: " + "; ".join(failures))
    TRACKER.clear()
    if os.environ.get("SFRAME_LLDB_SIDEFILES", "1") != "0":
        try:
            sidefiles.install(debugger, package.rsplit(".", 1)[0])
        except Exception as exc:        # one line, never a traceback
            print("sframe: side files of DWARF CFI not set up: %s: %s" % (type(exc).__name__, exc))
