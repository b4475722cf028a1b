"""The `sframe` command container for LLDB: one module per command family (lookup, backtrace,
info, dump, provider), common.py what they share; LLDB itself is read in lldb_plugin.access.

LLDB makes each command's object when the command is added, at the plugin's import, which the
first stop waits for: what it is given here is a stand-in (`_OnFirstUse`) that imports the
command's module when the command is first run or its help read."""

import importlib
import os
import sys

import lldb

from .. import stophook

# (name, module, class): one module per command family.
_SUBCOMMANDS = (("lookup", "lookup", "LookupCommand"), ("backtrace", "backtrace", "BacktraceCommand"),
                ("bt", "backtrace", "BacktraceCommand"), ("info", "info", "InfoCommand"), ("dump", "dump", "DumpCommand"),
                ("provider", "provider", "ProviderCommand"))


class _OnFirstUse:
    """A command whose class (`cls` in this package's `module`) is imported at its first use."""

    module = cls = ""

    def __init__(self, debugger, internal_dict):
        self._args = (debugger, internal_dict)
        self._command = None

    def _real(self):
        if self._command is None:
            module = importlib.import_module("%s.%s" % (__name__, self.module))
            self._command = getattr(module, self.cls)(*self._args)
        return self._command

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            real = self._real()
        except Exception as exc:       # never a traceback in the user's session
            result.SetError(_cannot_load(exc))
            return
        return real(debugger, command, exe_ctx, result)

    def get_short_help(self):
        try:
            return self._real().get_short_help()
        except Exception as exc:       # (one line, never a traceback)
            return _cannot_load(exc)

    def get_long_help(self):
        try:
            return self._real().get_long_help()
        except Exception as exc:
            return _cannot_load(exc)


def _cannot_load(exc):
    return "sframe: cannot load the command: %s: %s" % (type(exc).__name__, exc)


for _name, _module, _cls in _SUBCOMMANDS:
    globals()[_cls] = type(_cls, (_OnFirstUse,), {"module": _module, "cls": _cls, "__module__": __name__})


def register(debugger, package, bytecode_root=None):
    """Add the `sframe` container and its commands (again, if the plugin is imported again);
    `package` is this package's full name, by which LLDB finds the command classes;
    `bytecode_root`: the plugin's directory, where its compiled modules are kept (None: not)."""
    ci = debugger.GetCommandInterpreter()
    failures = []

    def run(cmd):
        res = lldb.SBCommandReturnObject()
        ci.HandleCommand(cmd, res)
        if not res.Succeeded():
            failures.append("%s: %s" % (cmd, (res.GetError() or "").strip()))

    run('command container add -o -h "SFrame stack-trace information (.sframe): '
        'lookup, backtrace, info, dump, provider." sframe')
    for name, _module, cls in _SUBCOMMANDS:
        run("command script add -o -c %s.%s sframe %s" % (package, cls, name))
    if failures:
        print("sframe: could not add the commands: " + "; ".join(failures))
    access = sys.modules.get(package.rsplit(".", 1)[0] + ".access")
    if access is not None:
        access.TRACKER.clear()          # (imported again: the modules are tracked anew)
    if os.environ.get("SFRAME_LLDB_SIDEFILES", "1") != "0":
        try:
            stophook.install(debugger, package.rsplit(".", 1)[0], bytecode_root)
        except Exception as exc:        # one line, never a traceback
            print("sframe: side files of DWARF CFI not set up: %s: %s" % (type(exc).__name__, exc))
