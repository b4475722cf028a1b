"""The plugin's setup at import and the stop hook that attaches side files (lldb_plugin.sidefiles).

Light on purpose: LLDB runs `command script import` before the user's first stop, which waits for
it.  What the side files need (the cache, the writer, the unwinder that finds the functions on the
stacks) is imported in a thread of its own meanwhile, and by the hook at the first stop where that
thread has not finished; a target that already has a process or a core at the import gets its side
files at once.
"""

import os
import shlex

from ..core import parallel
from ..core.elf.cachedir import CacheError, cache_dir, private_dir
from .interp import run

HOOK_CLASS = "StopHook"


def hook_class(package):
    """The stop hook's class as LLDB names it (`package`: this plugin's, sframekit.lldb_plugin)."""
    return "%s.stophook.%s" % (package, HOOK_CLASS)


class StopHook:
    """`target stop-hook add -P ...StopHook`: attach side files for new modules at every stop."""

    def __init__(self, target, extra_args, internal_dict):
        self.target = target

    def handle_stop(self, exe_ctx, stream):
        try:
            target = exe_ctx.GetTarget()
            if target is not None and target.IsValid() and not _at_entry(target.GetProcess()):
                from . import sidefiles
                sidefiles.attach(target.GetDebugger(), target, lambda line: stream.Print(line + "\n"))
        except Exception:
            pass
        return True


def _at_entry(process):
    """Is every thread of the process at its module's entry point?  A launched process's first
    stop, where the loader (or a static program) has not run an instruction yet: no frame but the
    first, nothing to unwind, and the side files wait for the next stop."""
    threads = [process.GetThreadAtIndex(i) for i in range(process.GetNumThreads())] if process.IsValid() else []
    for thread in threads:
        frame = thread.GetFrameAtIndex(0)
        module = frame.GetModule()
        entry = module.GetObjectFileEntryPointAddress() if module.IsValid() else None
        if entry is None or not entry.IsValid() or frame.GetPC() != entry.GetLoadAddress(process.GetTarget()):
            return False
    return bool(threads)


def _has_hook(debugger, class_name):
    ok, text = run(debugger, "target stop-hook list")
    return ok and class_name in text


_IN_DUMMY = []         # the debuggers whose dummy target has the stop hook: every new target copies it


def ensure_hook(debugger, class_name):
    """The stop hook in the selected target (or, with none, the dummy target every new one copies;
    LLDB 23 lists such a copy's class as `<unknown>`: a target made after that needs nothing)."""
    if debugger.GetID() in _IN_DUMMY and debugger.GetNumTargets():
        return
    if not _has_hook(debugger, class_name):
        ok, _text = run(debugger, "target stop-hook add -P %s" % class_name)
        if ok and not debugger.GetNumTargets():
            _IN_DUMMY.append(debugger.GetID())


def _preload():
    """Import, in a thread of its own, what the first stop will need, in the order it needs it
    (the side files' attaching and cache; the unwinder, which finds the functions on the stacks;
    pyelftools' DWARF CFI reader, with its structures for a 64-bit target of this machine's byte
    order made: the C library's frames are unwound through its CFI; the side file's writer), while
    LLDB goes on with the user's commands (it holds Python's lock only while it runs Python).  One
    step at a time under core.parallel.IMPORTING: a fork waits for the step, not for them all."""
    import sys
    import threading

    def structs():
        from ..core.dwarf import rows
        rows.dwarf_structs(sys.byteorder == "little", 32, 8)

    def pyelftools():
        from ..core import pyelftools
        pyelftools.load()
        import elftools.dwarf.callframe  # noqa: F401
        import elftools.dwarf.dwarf_expr  # noqa: F401

    def attaching():
        from . import sidefiles  # noqa: F401

    def unwinder():
        from .command import backtrace  # noqa: F401

    def writer():
        from ..core.elf import sidefile  # noqa: F401
    steps = (attaching, unwinder, pyelftools, structs, writer)

    def preload():
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, 0.0005))    # (LLDB's thread, back from a call into LLDB, waits less)
        try:
            for step in steps:
                with parallel.IMPORTING:          # (a fork waits: core.parallel)
                    step()
            _bytecode_kept()
        except Exception:
            pass                  # (imported again where it is needed, and fails there in words)
        finally:
            sys.setswitchinterval(interval)
    threading.Thread(target=preload, name="sframe-preload", daemon=True).start()


def _bytecode_kept():
    """The plugin's compiled modules written where they are out of date, for the next session, as
    `command script import` keeps its own (lldb_plugin.__init__: LLDB's Python writes none, and
    without them each session compiled the modules this thread imports again, a tenth of a second
    of the first stop), but with py_compile, which writes whatever sys.dont_write_bytecode says
    (the import puts it back while this thread runs).  After the thread's imports: checking every
    module takes a hundredth of a second.  Not where the user asked for none
    (PYTHONDONTWRITEBYTECODE), nor where the package's directory is not writable (an installed
    copy has them)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    import compileall
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for part in ("core", "lldb_plugin"):
        compileall.compile_dir(os.path.join(root, part), quiet=2)


def _has_process(target):
    """Does the target hold a process or a core (its first stop may be past)?"""
    process = target.GetProcess()
    return process is not None and process.IsValid()


def install(debugger, package):
    """At import: the cache as a debug-file search path, the stop hook, and the side files of the
    targets that hold a process or a core now (the others get theirs at their first stop)."""
    try:
        private_dir(cache_dir())
    except CacheError as exc:
        print("sframe: %s; LLDB's own bt will not use SFrame" % exc)
        return
    ok, paths = run(debugger, "settings show target.debug-file-search-paths")
    if cache_dir() not in paths:
        run(debugger, "settings append target.debug-file-search-paths %s" % shlex.quote(cache_dir()))
    class_name = hook_class(package)
    if debugger.GetNumTargets() == 0:
        ensure_hook(debugger, class_name)
    else:
        selected = debugger.GetSelectedTarget()
        for i in range(debugger.GetNumTargets()):
            target = debugger.GetTargetAtIndex(i)
            debugger.SetSelectedTarget(target)
            ensure_hook(debugger, class_name)
            if _has_process(target):
                from . import sidefiles
                sidefiles.attach(debugger, target, print)
        debugger.SetSelectedTarget(selected)
    _preload()            # (after the jobs these targets start are forked)
