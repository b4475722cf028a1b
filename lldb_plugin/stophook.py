"""The plugin's setup at import and the stop hook that attaches side files (lldb_plugin.sidefiles).

Light on purpose: LLDB runs `command script import` before the user's first stop, which waits for
it.  What the side files need (the cache, the writer, the unwinder that finds the functions on the
stacks) is imported in a thread of its own meanwhile, until the first stop begins attaching (the
stop imports the rest itself); a target that already has a process or a core at the import gets
its side files at once.
"""

import importlib.util
import os
import shlex
import sys
import threading

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
                ATTACHING.set()
                try:
                    from . import sidefiles
                    sidefiles.attach(target.GetDebugger(), target, lambda line: stream.Print(line + "\n"))
                finally:
                    ATTACHED.set()
        except Exception as exc:           # never a traceback at a stop; why, once
            if not _SAID:
                _SAID.append(exc)
                stream.Print("sframe: side files of DWARF CFI not attached: %s: %s\n" % (type(exc).__name__, exc))
        return True


# The first stop that attaches side files: once it begins, the preloading thread imports no more
# (the stop imports what it still needs itself: two threads importing take turns at Python's lock,
# and each goes slower); once it is over, the thread keeps the compiled modules.
ATTACHING = threading.Event()
ATTACHED = threading.Event()


_SAID: list = []      # the stop hook's failure, said once a session


def _at_entry(process):
    """Is every thread of the process at its module's entry point?  A launched process's first
    stop, where the loader (or a static program) has not run an instruction yet: no frame but the
    first, nothing to unwind, and the side files wait for the next stop."""
    n = process.GetNumThreads() if process.IsValid() else 0
    for i in range(n):
        frame = process.GetThreadAtIndex(i).GetFrameAtIndex(0)
        module = frame.GetModule()
        entry = module.GetObjectFileEntryPointAddress() if module.IsValid() else None
        if entry is None or not entry.IsValid() or frame.GetPC() != entry.GetLoadAddress(process.GetTarget()):
            return False
    return n > 0


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


def _preload(bytecode_root):
    """Import, in a thread of its own, what the first stop will need, in the order it needs it
    (the side files' attaching and cache; the unwinder, which finds the functions on the stacks;
    pyelftools' DWARF CFI reader, with its structures for a 64-bit target of this machine's byte
    order made: the C library's frames are unwound through its CFI; the side file's writer), while
    LLDB goes on with the user's commands (it holds Python's lock only while it runs Python), until
    the first stop begins attaching.  One step at a time under core.parallel.IMPORTING: a fork
    waits for the step, not for them all.  Then, after that stop, the compiled modules kept."""

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
    # OpenSSL (hashlib, which the side files' cache uses) is made ready here, not in the thread:
    # its clean-up at the process's exit frees what a thread still inside it uses, and LLDB then
    # crashed or hung as it quit (measured: 1 to 21 sessions in 250 that quit while the thread imported).
    import hashlib  # noqa: F401

    def preload():
        sys.setswitchinterval(_PRELOAD_INTERVAL)     # (LLDB's thread, back from a call into LLDB, waits less)
        try:
            for step in steps:
                if ATTACHING.is_set():
                    break
                with parallel.IMPORTING:          # (a fork waits: core.parallel)
                    step()
        except Exception:
            pass                  # (imported again where it is needed, and fails there in words)
        finally:
            sys.setswitchinterval(_INTERVAL)
        if bytecode_root is not None:
            ATTACHED.wait()
            try:
                _bytecode_kept(bytecode_root)
            except Exception:
                pass              # (the next session compiles them again)
    threading.Thread(target=preload, name="sframe-preload", daemon=True).start()


_INTERVAL = sys.getswitchinterval()        # Python's, put back when the thread is done
_PRELOAD_INTERVAL = min(_INTERVAL, 0.0005)


def _bytecode_kept(root):
    """The compiled form of the plugin's imported modules (those under `root`, its directory)
    written where it is missing or out of date, for the next session, as `command script import`
    keeps its own (lldb_plugin.__init__: LLDB's Python writes none, and without them each session
    compiled the modules the thread and the first stop import again, a tenth of a second of the
    first stop); with py_compile, which writes whatever sys.dont_write_bytecode says (the import
    puts it back while the thread runs), in the timestamp form the import checks (not the hashed
    one py_compile chooses under SOURCE_DATE_EPOCH).  Where it cannot be written (an installed
    copy has them), nothing is said.  Under core.parallel.IMPORTING a module at a time (a fork
    waits for one, not for them all)."""
    with parallel.IMPORTING:
        import py_compile
    prefix = os.path.join(root, "")
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        source, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
        if not (source and cached and source.startswith(prefix) and source.endswith(".py")) or _fresh(source, cached):
            continue
        with parallel.IMPORTING:
            try:
                py_compile.compile(source, cached, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            except OSError:
                pass


def _fresh(source, cached):
    """Is the compiled module at `cached` the import's for `source` (its magic number, the
    timestamp form, the source's modification time and size)?"""
    try:
        st = os.stat(source)
        with open(cached, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head == importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") \
        + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")


def _has_process(target):
    """Does the target hold a process or a core (its first stop may be past)?"""
    process = target.GetProcess()
    return process is not None and process.IsValid()


def install(debugger, package, bytecode_root=None):
    """At import: the cache as a debug-file search path, the stop hook, and the side files of the
    targets that hold a process or a core now (the others get theirs at their first stop).
    `bytecode_root`: the plugin's directory, where its compiled modules are kept (None: not)."""
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
        try:
            for i in range(debugger.GetNumTargets()):
                target = debugger.GetTargetAtIndex(i)
                debugger.SetSelectedTarget(target)
                ensure_hook(debugger, class_name)
                if _has_process(target):
                    ATTACHING.set()          # (what the thread would import, imported now)
                    try:
                        from . import sidefiles
                        sidefiles.attach(debugger, target, print)
                    finally:
                        ATTACHED.set()
        finally:
            debugger.SetSelectedTarget(selected)
            _preload(bytecode_root)      # (after the jobs these targets start are forked)
        return
    _preload(bytecode_root)
