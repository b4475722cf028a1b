"""LLDB's own `bt`, `frame variable`, `finish` (and IDEs on LLDB) through SFrame: each module that
has SFrame where no DWARF CFI covers it gets its side file of DWARF CFI (core.elf.sidecache),
attached with `target symbols add`.

When: at every stop, for the modules not seen before (a stop hook: imported before any target, in
the dummy target, so every target gets it; imported later, in each existing target, and in a new
one at its first `sframe` command), and at once for the targets that exist at the import.  The
cache directory is also a debug-file search path, so a module without debug information created
later finds its side file by build ID as LLDB loads it (LLDB 16 and 21 let a module without
`.symtab` take a side file only then).

Not attached, and `sframe info` says why: a module whose CFI covers its SFrame functions, one with
a separate debug file of its own, and, before LLDB 23, one holding debug information (LLDB 16 to
22 lose such a module's load addresses when a side file replaces its symbols; `sframe bt` still
unwinds it).
"""

import os
import re
import shlex

import lldb

from ..core.elf import sidecache

# (target, module path) -> what happened, for `sframe info`; targets are told apart by their
# executable and the process (or core) they hold.
_STATUS = {}
HOOK_CLASS = "StopHook"


def lldb_major():
    m = re.search(r"lldb version (\d+)\.", lldb.SBDebugger.GetVersionString() or "")
    return int(m.group(1)) if m else 0


def _target_key(target):
    process = target.GetProcess()
    pid = process.GetProcessID() if process is not None and process.IsValid() else 0
    return (target.GetExecutable().fullpath or "", pid)


def status(target):
    """{module path: what happened to its side file} for a target."""
    key = _target_key(target)
    return {path: text for (t, path), text in _STATUS.items() if t == key}


def _run(debugger, command):
    res = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, res)
    return res.Succeeded(), (res.GetError() or res.GetOutput() or "").strip()


def _attach_one(debugger, module, major, report):
    path = module.GetFileSpec().fullpath
    if not path or not os.path.isfile(path):
        return None
    if not module.FindSection(".sframe").IsValid() and module.FindSection(".text").IsValid():
        return None                        # no SFrame: nothing to say
    symfile = module.GetSymbolFileSpec().fullpath
    cache = sidecache.cache_dir()
    if symfile and symfile != path:
        if symfile.startswith(cache + os.sep):
            return "attached (%s)" % symfile
        return "not attached: it has a separate debug file already (%s)" % symfile
    made = sidecache.side_file(path)
    if made.path is None:
        # (no SFrame, or an unusable section: `sframe info` lists those modules already)
        return "not attached: %s" % made.why if made.sframe else None
    if major < 23 and module.FindSection(".debug_info").IsValid():
        return ("not attached: LLDB %d drops a module's load addresses when a side file replaces symbols "
                "that hold debug information (LLDB 23 does not); sframe bt unwinds it" % major)
    if made.written:
        report("sframe: wrote %s, the DWARF CFI of %s's SFrame" % (made.path, os.path.basename(path)))
    ok, text = _run(debugger, "target symbols add %s" % shlex.quote(made.path))
    if not ok:
        return "not attached: target symbols add: %s" % text
    return "attached (%s)" % made.path


def attach(debugger, target, report=None):
    """Attach the side files of the target's modules not seen before (the target is selected)."""
    key = _target_key(target)
    major = lldb_major()
    for i in range(target.GetNumModules()):
        module = target.GetModuleAtIndex(i)
        path = module.GetFileSpec().fullpath or ""
        if (key, path) in _STATUS:
            continue
        try:
            text = _attach_one(debugger, module, major, report or (lambda line: None))
        except Exception as exc:           # never a traceback at a stop
            text = "not attached: internal error: %s: %s" % (type(exc).__name__, exc)
        if text is not None:
            _STATUS[(key, path)] = text


class StopHook:
    """`target stop-hook add -P ...StopHook`: attach side files for new modules at every stop."""

    def __init__(self, target, extra_args, internal_dict):
        self.target = target

    def handle_stop(self, exe_ctx, stream):
        try:
            target = exe_ctx.GetTarget()
            if target is not None and target.IsValid():
                attach(target.GetDebugger(), target, lambda line: stream.Print(line + "\n"))
        except Exception:
            pass
        return True


def _has_hook(debugger, class_name):
    ok, text = _run(debugger, "target stop-hook list")
    return ok and class_name in text


def ensure_hook(debugger, class_name):
    """The stop hook in the selected target (or, with none, the dummy target every new one copies)."""
    if not _has_hook(debugger, class_name):
        _run(debugger, "target stop-hook add -P %s" % class_name)


def install(debugger, package):
    """At import: the cache as a debug-file search path, the stop hook, and the side files of the
    targets that exist now."""
    os.makedirs(sidecache.cache_dir(), exist_ok=True)
    ok, paths = _run(debugger, "settings show target.debug-file-search-paths")
    if sidecache.cache_dir() not in paths:
        _run(debugger, "settings append target.debug-file-search-paths %s" % shlex.quote(sidecache.cache_dir()))
    class_name = "%s.sidefiles.%s" % (package, HOOK_CLASS)
    if debugger.GetNumTargets() == 0:
        ensure_hook(debugger, class_name)
        return
    selected = debugger.GetSelectedTarget()
    for i in range(debugger.GetNumTargets()):
        target = debugger.GetTargetAtIndex(i)
        debugger.SetSelectedTarget(target)
        ensure_hook(debugger, class_name)
        attach(debugger, target, print)
    debugger.SetSelectedTarget(selected)
