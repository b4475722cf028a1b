"""LLDB's own `bt`, `frame variable`, `finish` (and IDEs on LLDB) through SFrame: each module that
has SFrame where no DWARF CFI covers it gets its side file of DWARF CFI (core.elf.sidecache, one
per copy of a build, checked before each use), attached with `target symbols add`.

When: at every stop, for the modules not seen before (a stop hook: imported before any target, in
the dummy target, so every target gets it; imported later, in each existing target, and in a new
one at its first `sframe` command), and at once for the targets that exist at the import.  The
cache directory is also a debug-file search path, so a module without debug information created
later finds a side file of its build by build ID as LLDB loads it; the plugin replaces it with the
module's own copy's where it is another's.

"Attached" means LLDB unwinds with it: at the first stop with a process, LLDB is asked which unwind
plan it uses at a PC only SFrame covers (`image show-unwind`); LLDB 16 takes a side file added to
a module that had no symbol file only when it is added a second time (by another name).

Not attached, and `sframe info` says why: a module whose CFI covers its SFrame functions, and,
before LLDB 23, one holding debug information, in itself or in a separate debug file (LLDB 16 to
22 lose such a module's load addresses when a side file replaces its symbols; `sframe bt` still
unwinds it).  A module with a separate debug file gets a side file that carries that file's debug
information and symbols too (LLDB 23).
"""

import os
import re
import shlex

import lldb

from ..core.elf import sidecache
from ..core.elf.debugfile import separate_debug_file
from ..core.report.status import SideFileState, SideFileStatus
from ..core.unwind.modules import ModuleSet
from ..core.unwind.tracker import file_identity
from .access import has_state, sync

# (target, module path) -> what happened, for `sframe info`; targets are told apart by their
# executable and the process (or core) they hold.
_STATUS = {}          # (target key, module path) -> SideFileStatus
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
    return {path: st.text() for (t, path), st in _STATUS.items() if t == key}


def _run(debugger, command, target=None):
    """(succeeded, text) of an LLDB command; in the target's process where one is given (a stop
    hook runs with no process selected for commands)."""
    res = lldb.SBCommandReturnObject()
    interp = debugger.GetCommandInterpreter()
    if target is None:
        interp.HandleCommand(command, res)
    else:
        process = target.GetProcess()
        thread = process.GetSelectedThread() if process is not None and process.IsValid() else None
        where = lldb.SBExecutionContext(thread) if thread is not None and thread.IsValid() else \
            lldb.SBExecutionContext(target)
        interp.HandleCommand(command, where, res)
    return res.Succeeded(), (res.GetError() or res.GetOutput() or "").strip()


_COVERAGE = {}        # file identity -> (the first SFrame-only function's link-time start, SFrame?)


def _coverage(path):
    """(the link-time start of the file's first SFrame function no DWARF CFI of it covers, or None;
    whether it has usable SFrame), worked out once per file, apart from the modules the commands
    track (whose set follows the process)."""
    key = file_identity(path)
    got = _COVERAGE.get(key)
    if got is None:
        modules = ModuleSet()
        module = modules.add(path, path, 0)
        first = None
        if modules.with_sframe():
            section = module.index.section
            for k in range(len(section)):
                if modules.cfi_find(module, section.start_of(k)) is None:
                    first = section.start_of(k)
                    break
        got = _COVERAGE[key] = (first, module.index is not None)
    return got


def _module_at(target, path):
    """The target's module whose file is at `path`, or None."""
    return next((target.GetModuleAtIndex(i) for i in range(target.GetNumModules())
                 if target.GetModuleAtIndex(i).GetFileSpec().fullpath == path), None)


_NOT_LOADED = -1


def _has_debug_info(path):
    from ..core.elf.image import ElfImage
    try:
        return ElfImage(path).section_address(".debug_info") is not None
    except Exception:        # (not a file we can read: no debug information to keep)
        return False


def _covered_pc(target, module):
    """A load address of the module that SFrame covers and its own CFI does not (where LLDB can
    only unwind through the side file), None where there is none, _NOT_LOADED while the process
    has not loaded the module."""
    first = _coverage(module.GetFileSpec().fullpath)[0]
    sec = module.FindSection(".text")
    if first is None or not sec.IsValid():
        return None
    loaded = sec.GetLoadAddress(target)
    if loaded == lldb.LLDB_INVALID_ADDRESS:
        return _NOT_LOADED
    return first + loaded - sec.GetFileAddress()


_PLAN = re.compile(r"^(Synchronous|Asynchronous) \([^)]*\) UnwindPlan is '([^']*)'", re.M)


def _plan_at(debugger, target, addr):
    """The name of the unwind plan LLDB uses for a caller frame at `addr`: the one it names for
    call sites, else the one for every instruction (None: it names none)."""
    ok, text = _run(debugger, "image show-unwind -a %#x" % addr, target)
    plans = dict(m.groups() for m in _PLAN.finditer(text)) if ok else {}
    return plans.get("Synchronous") or plans.get("Asynchronous")


_CHECKED = {}          # (executable, module path, side file) -> the verdict of _check, for later processes


def _check(debugger, target, path, symfile):
    """The SideFileStatus: attached where LLDB unwinds the module through its side file, else why not; None
    while there is no process to ask (the next stop asks again).  Asked once per module and side
    file: a process launched again keeps its modules, and their unwind plans."""
    process = target.GetProcess()
    if process is None or not process.IsValid() or not process.GetNumThreads():
        return None
    key = (target.GetExecutable().fullpath or "", path, symfile)
    if key in _CHECKED:
        return _CHECKED[key]
    module = _module_at(target, path)
    addr = _covered_pc(target, module) if module is not None else None
    if addr == _NOT_LOADED:
        return None               # (asked again at the next stop)
    verdict = _CHECKED[key] = _verdict(debugger, target, path, symfile, addr)
    return verdict


def _verdict(debugger, target, path, symfile, addr):
    if addr is None:
        return SideFileStatus(SideFileState.ATTACHED, symfile)
    plan = _plan_at(debugger, target, addr)
    if plan is not None and "DWARF CFI" not in plan:
        return _not_attached("LLDB does not unwind with it (its unwind plan at %#x is '%s'); sframe bt unwinds "
                             "the module" % (addr, plan))
    wrong = _wrong_frame(target, path)
    if wrong is not None:
        return SideFileStatus(SideFileState.LATE, symfile, (
            "LLDB %d worked out how to unwind %s before it was there and keeps that for the session: its own bt goes "
            "wrong at frame #%d of thread #%d; right in the next session, which finds the side file as it loads the "
            "module (sframe bt unwinds it now)" % (lldb_major(), os.path.basename(path), wrong[1], wrong[0])))
    return SideFileStatus(SideFileState.ATTACHED, symfile)


def _not_attached(why):
    return SideFileStatus(SideFileState.NOT_ATTACHED, why=why)


def _wrong_frame(target, path, depth=64):
    """(thread, frame) where LLDB's own unwinding leaves SFrame's in a frame of the module at
    `path` (a frame whose caller it gets wrong or not at all), or None.  LLDB's frames were
    worked out at the stop, maybe before the side file was attached: they are what its bt shows."""
    from ..core.unwind.unwinder import Stop
    from .command.backtrace import unwind
    sync(target)
    module = _module_at(target, path)
    process = target.GetProcess()
    for thread in process:
        theirs, inlined = [], False
        for k in range(depth):       # (not GetNumFrames(): it unwinds the whole stack)
            frame = thread.GetFrameAtIndex(k)
            if not frame.IsValid():
                break
            if not inlined and not frame.IsArtificial():
                theirs.append(frame)
            inlined = frame.IsInlined()
        if not theirs:
            continue
        ours = [item.pc for item in unwind(target, theirs[0], len(theirs) + 1, cfi=True) if not isinstance(item, Stop)]
        for k, frame in enumerate(theirs):
            if k >= len(ours) or frame.GetPC() != ours[k]:
                break
        else:
            if len(ours) <= len(theirs) or len(theirs) >= depth - 1:
                continue
            k = len(theirs)
        if k > 0 and theirs[k - 1].GetModule() == module:
            return thread.GetIndexID(), theirs[k - 1].GetFrameID()
    return None


def _drop_unloaded_twins(target, module):
    """Take out of the target the modules of the same build as `module` that the process has not
    loaded: another copy of a library that LLDB, as it made the target, took for a dependency by
    its build ID (from another target).  `target symbols add` matches a side file to a module by
    build ID, and refuses one that two modules match."""
    uuid = module.GetUUIDString()
    for i in reversed(range(target.GetNumModules())):
        other = target.GetModuleAtIndex(i)
        if other == module or other.GetUUIDString() != uuid:
            continue
        loaded = any(other.GetSectionAtIndex(k).GetLoadAddress(target) != lldb.LLDB_INVALID_ADDRESS
                     for k in range(other.GetNumSections()))
        if not loaded:
            target.RemoveModule(other)


def _add(debugger, target, path):
    """`target symbols add` of a side file, twice: LLDB keeps the unwind plans it made for a module
    (at its creation, at a stop) when a first symbol file is added, and makes them again when a
    symbol file replaces another: the same file added again, by another name (a hard link beside
    it), replaces it.  (None: done; else LLDB's error.)"""
    ok, text = _run(debugger, "target symbols add %s" % shlex.quote(path), target)
    if not ok:
        return text
    again = path + ".again"
    try:
        if not (os.path.exists(again) and os.path.samefile(again, path)):
            # (by a private name renamed into place: another LLDB may be making the same link)
            tmp = "%s.tmp%d" % (again, os.getpid())
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.link(path, tmp)
            os.replace(tmp, again)
    except OSError:
        return None
    _run(debugger, "target symbols add %s" % shlex.quote(again), target)
    return None


def _attach_one(debugger, target, module, major, report):
    path = module.GetFileSpec().fullpath
    if not path or not os.path.isfile(path):
        return None
    if not module.FindSection(".sframe").IsValid() and module.FindSection(".text").IsValid():
        return None                        # no SFrame: nothing to say
    first, usable = _coverage(path)
    if not usable:
        return None                        # (no usable SFrame: `sframe info` lists those modules already)
    if first is None:
        return _not_attached(sidecache.COVERED)
    symfile = module.GetSymbolFileSpec().fullpath
    cache = os.path.realpath(sidecache.cache_dir())
    ours = bool(symfile) and os.path.realpath(symfile).startswith(cache + os.sep)
    # A module with a separate debug file of its own: the side file carries its debug information
    # and symbols too, as it takes its place.  (Where LLDB took a side file from the cache by build
    # ID, the module's own debug file is the one GDB would find: by build ID or .gnu_debuglink.)
    if ours:
        own = separate_debug_file(path, skip=cache)
    else:
        own = symfile if symfile and os.path.realpath(symfile) != os.path.realpath(path) else None
    if major < 23 and (own is not None and _has_debug_info(own) if ours else module.FindSection(".debug_info").IsValid()):
        if ours:
            # (a side file without the debug information LLDB would otherwise have: its own back)
            _run(debugger, "target symbols add %s" % shlex.quote(own), target)
        return _not_attached("LLDB %d drops a module's load addresses when a side file replaces symbols "
                "that hold debug information (LLDB 23 does not); sframe bt unwinds it" % major)
    made = sidecache.side_file(path, debug_file=own)
    if made.path is None:
        # (no SFrame, or an unusable section: `sframe info` lists those modules already)
        return _not_attached(made.why) if made.sframe else None
    if made.redone:
        report("sframe: wrote %s again: the cached one was bad (%s)" % (made.path, made.redone))
    elif made.written:
        report("sframe: wrote %s, the DWARF CFI of %s's SFrame" % (made.path, os.path.basename(path)))
    if not (symfile and sidecache.is_entry_of(symfile, made)):
        # (LLDB may have taken another copy's side file by build ID: this one replaces it)
        if has_state(target.GetProcess()):
            _drop_unloaded_twins(target, module)
        error = _add(debugger, target, made.path)
        if error is not None:
            return _not_attached("target symbols add: %s" % error)
    return _check(debugger, target, path, made.path) or SideFileStatus(SideFileState.PENDING, made.path, "no process")


def attach(debugger, target, report=None):
    """Attach the side files of the target's modules not seen before, and check at a stop those
    attached before there was a process (the target is selected)."""
    key = _target_key(target)
    major = lldb_major()
    # (a snapshot: attaching may take an unloaded copy of a module out of the target)
    for module in [target.GetModuleAtIndex(i) for i in range(target.GetNumModules())]:
        if not module.IsValid():
            continue
        path = module.GetFileSpec().fullpath or ""
        old = _STATUS.get((key, path))
        try:
            if old is None:
                st = _attach_one(debugger, target, module, major, report or (lambda line: None))
            elif old.state is SideFileState.PENDING:
                st = _check(debugger, target, path, old.path) or old
            else:
                continue
        except Exception as exc:           # never a traceback at a stop
            st = _not_attached("internal error: %s: %s" % (type(exc).__name__, exc))
        if st is not None:
            _STATUS[(key, path)] = st


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


_IN_DUMMY = []         # the debuggers whose dummy target has the stop hook: every new target copies it


def ensure_hook(debugger, class_name):
    """The stop hook in the selected target (or, with none, the dummy target every new one copies;
    LLDB 23 lists such a copy's class as `<unknown>`: a target made after that needs nothing)."""
    if debugger.GetID() in _IN_DUMMY and debugger.GetNumTargets():
        return
    if not _has_hook(debugger, class_name):
        ok, _text = _run(debugger, "target stop-hook add -P %s" % class_name)
        if ok and not debugger.GetNumTargets():
            _IN_DUMMY.append(debugger.GetID())


def install(debugger, package):
    """At import: the cache as a debug-file search path, the stop hook, and the side files of the
    targets that exist now."""
    try:
        sidecache.private_dir(sidecache.cache_dir())
    except sidecache.CacheError as exc:
        print("sframe: %s; LLDB's own bt will not use SFrame" % exc)
        return
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
