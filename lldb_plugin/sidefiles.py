"""LLDB's own `bt`, `frame variable`, `finish` (and IDEs on LLDB) through SFrame: each module that
has SFrame where no DWARF CFI covers it gets its side file of DWARF CFI (core.elf.sidecache, one
per copy of a build, checked before each use), attached with `target symbols add`.

When: at every stop, for the modules not seen before (a stop hook, lldb_plugin.stophook: imported
before any target, in the dummy target, so every target gets it; imported later, in each existing
target, and in a new one at its first `sframe` command), but a launch's first stop at its entry
point, and at once for the targets that hold a process or a core at the import.  The
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

from ..core.elf import sidecache, sidework
from ..core.elf.cachedir import cache_dir
from ..core.elf.debugfile import separate_debug_file
from ..core.report.status import SideFileState, SideFileStatus
from ..core.unwind.modules import ModuleSet
from ..core.unwind.tracker import file_identity
from .access import has_state, sync
from .interp import run

# (target, module path) -> what happened, for `sframe info`; targets are told apart by their
# executable and the process (or core) they hold.
_STATUS = {}          # (target key, module path) -> SideFileStatus


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


_COVERAGE = {}        # file identity -> what _coverage says of it


def _coverage(path):
    """(the link-time start of the file's first SFrame function no DWARF CFI of it covers, or None;
    its SFrame index at link-time addresses, None where it has no usable SFrame; covered(start):
    does the file's own CFI cover the function at a link-time start?), worked out once per file,
    apart from the modules the commands track (whose set follows the process)."""
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
        got = _COVERAGE[key] = (first, module.index, lambda start: modules.cfi_find(module, start) is not None)
    return got


def _module_at(target, path):
    """The target's module whose file is at `path`, or None."""
    return next((target.GetModuleAtIndex(i) for i in range(target.GetNumModules())
                 if target.GetModuleAtIndex(i).GetFileSpec().fullpath == path), None)


_NOT_LOADED = -1


def _has_section(path, name):
    """Has the ELF file at `path` a section called `name` (False where it cannot be read)?"""
    from ..core.elf.image import ElfImage
    try:
        return ElfImage(path).section_address(name) is not None
    except Exception:        # (not a file we can read: no debug information to keep, no symbols)
        return False


def _covered_pc(target, module, first=None):
    """A load address of the module that SFrame covers and its own CFI does not (where LLDB can
    only unwind through the side file: `first`, a link-time address, or else the first such
    function), None where there is none, _NOT_LOADED while the process has not loaded the module."""
    if first is None:
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
    ok, text = run(debugger, "image show-unwind -a %#x" % addr, target)
    plans = dict(m.groups() for m in _PLAN.finditer(text)) if ok else {}
    return plans.get("Synchronous") or plans.get("Asynchronous")


_CHECKED = {}          # (executable, module path, side file) -> the verdict of _check, for later processes


def _check(debugger, target, path, symfile, quick=None):
    """The SideFileStatus: attached where LLDB unwinds the module through its side file, else why not; None
    while there is no process to ask (the next stop asks again).  Asked once per module and side
    file: a process launched again keeps its modules, and their unwind plans.  `quick`: the side
    file holds only these functions (link-time starts), CFA, RA and FP rows (sidecache.partial)."""
    process = target.GetProcess()
    if process is None or not process.IsValid() or not process.GetNumThreads():
        return None
    key = (target.GetExecutable().fullpath or "", path, symfile)
    if key in _CHECKED:
        return _CHECKED[key]
    module = _module_at(target, path)
    addr = _covered_pc(target, module, min(quick) if quick else None) if module is not None else None
    if addr == _NOT_LOADED:
        return None               # (asked again at the next stop)
    verdict = _CHECKED[key] = _verdict(debugger, target, path, symfile, addr, quick is not None)
    return verdict


def _verdict(debugger, target, path, symfile, addr, quick):
    state = SideFileState.STACK if quick else SideFileState.ATTACHED
    if addr is None:
        return SideFileStatus(state, symfile)
    plan = _plan_at(debugger, target, addr)
    # (a file of the stacks' functions may be .eh_frame: LLDB 23, EH_FRAME_FIRST)
    if plan is not None and not any(name in plan for name in (("DWARF CFI", "eh_frame CFI") if quick else ("DWARF CFI",))):
        return _not_attached("LLDB does not unwind with it (its unwind plan at %#x is '%s'); sframe bt unwinds "
                             "the module" % (addr, plan))
    # (a file of the functions on the stacks is made again when they change: not checked so)
    wrong = None if quick else _wrong_frame(target, path)
    if wrong is not None:
        return SideFileStatus(SideFileState.LATE, symfile, (
            "LLDB %d worked out how to unwind %s before it was there and keeps that for the session: its own bt goes "
            "wrong at frame #%d of thread #%d; right in the next session, which finds the side file as it loads the "
            "module (sframe bt unwinds it now)" % (lldb_major(), os.path.basename(path), wrong[1], wrong[0])))
    return SideFileStatus(state, symfile)


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


def _add(debugger, target, path, twice=True, program=None):
    """`target symbols add` of a side file, twice: LLDB keeps the unwind plans it made for a module
    (at its creation, at a stop) when a first symbol file is added, and makes them again when a
    symbol file replaces another.  The first: the program itself, where given (`program`, the
    module's symbol file already, with a `.symtab` the side file carries too: LLDB reads nothing
    new, 0.004 s with 50,000 functions; the side file then takes its place, and LLDB 16 unwinds
    with it, measured at a first stop and after a `bt` without it), else the same file, added again
    by another name (a hard link beside it).  Once where not `twice`: LLDB 23 reads a first file's
    `.eh_frame` at once (measured), and each add reads the file's symbols again.  (None: done; else
    LLDB's error.)"""
    if twice and program is not None:
        ok, text = run(debugger, "target symbols add %s" % shlex.quote(program), target)
        if ok:
            # (where LLDB refused the side file, the module keeps the program as its symbol file, as before)
            ok, text = run(debugger, "target symbols add %s" % shlex.quote(path), target)
            return None if ok else text
    ok, text = run(debugger, "target symbols add %s" % shlex.quote(path), target)
    if not ok or not twice:
        return None if ok else text
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
    run(debugger, "target symbols add %s" % shlex.quote(again), target)
    return None


def _program_symbols(path):
    """Do the module's side files made at a stop carry the program's `.symtab`?  On LLDB 16 to 21
    where it has one: they come after the program itself where it is the module's symbol file
    (`_first_add`), and LLDB 16 refused a side file without a `.symtab` after a symbol file with
    one (measured, after a file of one symbol): a later stop's file, replacing the first, too."""
    return lldb_major() < EH_FRAME_FIRST and _has_section(path, ".symtab")


def _first_add(module, path, symbols):
    """The program itself (`path`) as the first of a side file's two adds (`_add`), or None: where
    the side file carries the program's `.symtab` (`symbols`: `_program_symbols`' answer; a
    program without one needs the side file's symbols, made for it, first: LLDB 16 keeps the first
    symbol file's, measured) and the module's symbol file is its own file (no side file or debug
    file to replace, and none lost where LLDB then refuses the side file)."""
    symfile = module.GetSymbolFileSpec().fullpath
    if not symbols or symfile and os.path.realpath(symfile) != os.path.realpath(path):
        return None
    return path


def _attach_file(debugger, target, module, path, twice=True, program=None):
    """Attach the side file at `path` to the module (`_add`): None, or the status saying why it could not."""
    if has_state(target.GetProcess()):
        _drop_unloaded_twins(target, module)
    error = _add(debugger, target, path, twice, program)
    return None if error is None else _not_attached("target symbols add: %s" % error)


def _attach_partial(debugger, target, module, path, starts, own, eh_frame=False):
    """Write a side file of CFA, RA and FP rows (sidecache.partial: of the functions at `starts`,
    or of all; as `.eh_frame` where `eh_frame`) and attach it: (its path, None), or (None, the
    status saying why not; None where the module has no usable SFrame).  The `.eh_frame` file
    (LLDB 23, added once, then replaced by the one with registers) carries a compile unit that
    describes nothing: LLDB reads it with its DWARF reader alone, not also parsing the program's
    symbols once more (core.dwarf.emptyunit).  Not the others: LLDB 16 replaces the file it
    takes by another, and before LLDB 23 a module loses its load addresses where a side file
    replaces one that holds debug information.  The others carry the program's `.symtab` where
    `_program_symbols` says so, and come after the program itself where `_first_add` does."""
    symbols = not eh_frame and _program_symbols(path)
    first = _first_add(module, path, symbols)
    made = sidecache.partial(path, starts, debug_file=own, eh_frame=eh_frame, empty_unit=eh_frame,
                             symbols=symbols)
    if made.path is None:
        return None, (_not_attached(made.why) if made.sframe else None)
    failed = _attach_file(debugger, target, module, made.path, not eh_frame, first)
    if failed is not None:
        sidecache.discard(made.path)
        return None, failed
    return made.path, None


def _attach_one(debugger, target, module, major, report):
    path = module.GetFileSpec().fullpath
    if not path or not os.path.isfile(path):
        return None
    if not module.FindSection(".sframe").IsValid() and module.FindSection(".text").IsValid():
        return None                        # no SFrame: nothing to say
    first, usable, _covered = _coverage(path)
    if not usable:
        return None                        # (no usable SFrame: `sframe info` lists those modules already)
    if first is None:
        return _not_attached(sidecache.COVERED)
    symfile = module.GetSymbolFileSpec().fullpath
    cache = os.path.realpath(cache_dir())
    ours = bool(symfile) and os.path.realpath(symfile).startswith(cache + os.sep)
    # A module with a separate debug file of its own: the side file carries its debug information
    # and symbols too, as it takes its place.  (Where LLDB took a side file from the cache by build
    # ID, the module's own debug file is the one GDB would find: by build ID or .gnu_debuglink.)
    if ours:
        own = separate_debug_file(path, skip=cache)
    else:
        own = symfile if symfile and os.path.realpath(symfile) != os.path.realpath(path) else None
    if major < 23 and (own is not None and _has_section(own, ".debug_info") if ours else module.FindSection(".debug_info").IsValid()):
        if ours:
            # (a side file without the debug information LLDB would otherwise have: its own back)
            run(debugger, "target symbols add %s" % shlex.quote(own), target)
        return _not_attached("LLDB %d drops a module's load addresses when a side file replaces symbols "
                "that hold debug information (LLDB 23 does not); sframe bt unwinds it" % major)
    if ours and sidecache.is_eh(symfile):
        # (a side file of the stacks' functions as .eh_frame, attached before this process: the
        # module's .debug_frame is still to come)
        return _quick(debugger, target, module, path, own, report, True, symfile)
    if ours and major not in REREADS_SIDE_FILES and sidecache.is_partial(symfile):
        # (attached before this process: LLDB reads it through the session)
        _SESSION_FILES[(_target_key(target), path)] = own
        return _session_status(path, symfile, own)
    made = sidecache.cached(path, debug_file=own)
    if made is None and major in REREADS_SIDE_FILES:
        # Not in the cache: the functions on the stacks at once, the rest with registers behind.
        return _quick(debugger, target, module, path, own, report)
    if made is None and major >= EH_FRAME_FIRST and not _small(path) and not (
            ours or module.FindSection(".debug_frame").IsValid() or module.FindSection(".eh_frame").IsValid()):
        # The same, the functions on the stacks as .eh_frame: the module's .debug_frame is the
        # side file's with registers, when it is written.  (Not where the module has CFI of its
        # own, which would be LLDB's first .eh_frame or .debug_frame.)
        return _quick(debugger, target, module, path, own, report, True)
    if made is None and not _small(path):
        # LLDB 19 and later read only the first side file of a module: every function's CFA, RA
        # and FP now, the registers behind, for the next session.
        return _session_file(debugger, target, module, path, own, report)
    if made is None:
        made = sidecache.side_file(path, debug_file=own)
    return _attach_entry(debugger, target, module, path, symfile, made, report)


# LLDB 16 reads a module's unwind information again when a side file replaces another; LLDB 19, 21
# and 23 keep the first one's `.debug_frame` for the session (measured: CFA, RA and FP only, then
# the whole file, and the outer frames' callee-saved registers stay unavailable at the next stops;
# their UnwindTable makes its reader of `.debug_frame` once).  Versions not measured are taken to
# keep it: what they get then is right either way.
REREADS_SIDE_FILES = (16,)
# LLDB 23 makes its reader of a module's `.eh_frame` and of its `.debug_frame` each when the first
# symbol file that has one is added, and prefers `.debug_frame` (measured): a side file of the
# stacks' functions as `.eh_frame`, then the one with registers (its `.debug_frame`), in one session.
# Where LLDB does not take the first (a later version may not), it gets the file of every function.
EH_FRAME_FIRST = 23
_EH_FILES = {}       # a side file of the stacks' functions as .eh_frame -> its functions (link-time starts)


def _small(path):
    """Is the module's code small enough that its analysis costs the first stop little (about a
    tenth of a second: core.dwarf.writer.CODE_PER_WORKER; `SFRAME_LLDB_AT_ONCE` bytes of code,
    where set: 0, every module's side file with registers written behind)?"""
    from ..core.dwarf.writer import CODE_PER_WORKER
    try:
        limit = int(os.environ.get("SFRAME_LLDB_AT_ONCE", CODE_PER_WORKER))
    except ValueError:
        limit = CODE_PER_WORKER
    index = _coverage(path)[1]
    lo, hi = index.text_range()
    return hi - lo <= limit


_SESSION_FILES = {}        # (target key, module path) -> its own debug file: the side file with registers for next time


def _session_file(debugger, target, module, path, own, report):
    """LLDB 19 and later: a side file of every function's CFA, RA and FP rows, attached now; the
    one with registers written behind (core.elf.sidework) for the next session."""
    sidework.start(path, debug_file=own)        # (where it cannot start, sframe info says it is not running)
    side, failed = _attach_partial(debugger, target, module, path, None, own)
    if side is None:
        return failed
    _SESSION_FILES[(_target_key(target), path)] = own
    st = _check(debugger, target, path, side)
    if st is None or st.state is SideFileState.ATTACHED:
        return _session_status(path, side, own)
    return st


def _session_status(path, side, own, key=None):
    """The status of a module with a side file of CFA, RA and FP rows for the session; final (no
    longer looked at) once the side file with registers is written or cannot be."""
    job = sidework.state(path, debug_file=own)
    later = sidecache.cached(path, debug_file=own) if not job.running else None
    if key is not None and not job.running:
        _SESSION_FILES.pop(key, None)
    return SideFileStatus(SideFileState.CFA, side, "LLDB %d reads a module's first side file through the session; "
                          "its callee-saved registers from the next session on (%s)" % (
                              lldb_major(), "written" if later is not None and later.path else job.text()))


def _attach_entry(debugger, target, module, path, symfile, made, report):
    """Attach the cache's entry for the module (made: sidecache's answer)."""
    if made.path is None:
        # (no SFrame, or an unusable section: `sframe info` lists those modules already)
        return _not_attached(made.why) if made.sframe else None
    if made.redone:
        report("sframe: wrote %s again: the cached one was bad (%s)" % (made.path, made.redone))
    elif made.written:
        report("sframe: wrote %s, the DWARF CFI of %s's SFrame" % (made.path, os.path.basename(path)))
    if not (symfile and sidecache.is_entry_of(symfile, made)):
        # (LLDB may have taken another copy's side file by build ID: this one replaces it; an
        # entry carries the program's symbols)
        failed = _attach_file(debugger, target, module, made.path, program=_first_add(module, path, _program_symbols(path)))
        if failed is not None:
            return failed
    return _check(debugger, target, path, made.path) or SideFileStatus(SideFileState.PENDING, made.path, "no process")


class _Quick:
    """A module whose side file is being written behind: what is attached meanwhile."""

    def __init__(self, own, eh_frame=False, path=None):
        self.own = own                  # the module's own separate debug file, or None
        self.eh_frame = eh_frame        # the partial file is .eh_frame, LLDB's only one (EH_FRAME_FIRST)
        self.path = path                # the attached partial file
        self.starts = _EH_FILES.get(path, frozenset())     # its functions (link-time starts)
        self.restarted = False          # the job was started again once (it had ended without an entry)


_QUICK = {}          # (target key, module path) -> _Quick


def _quick(debugger, target, module, path, own, report, eh_frame=False, attached=None):
    """Start the job that writes the module's side file with registers (core.elf.sidework) and
    attach, meanwhile, one of the functions on the stacks (sidecache.partial; as `.eh_frame` where
    `eh_frame`; `attached`: such a file the module has already)."""
    sidework.start(path, debug_file=own)        # (where it cannot start, sframe info says it is not running)
    _QUICK[(_target_key(target), path)] = _Quick(own, eh_frame, attached)
    return _follow(debugger, target, module, path, report)


def _follow(debugger, target, module, path, report):
    """At a stop, for a module whose side file is being written: the entry attached where it is
    there; else a partial file for the functions on the stacks now, where the attached one lacks
    any of them."""
    key = (_target_key(target), path)
    quick = _QUICK[key]
    made = sidecache.cached(path, debug_file=quick.own)
    if made is not None:
        del _QUICK[key]
        st = _attach_entry(debugger, target, module, path, module.GetSymbolFileSpec().fullpath, made, report)
        if quick.path is not None and made.path is not None and st is not None and \
                st.state is not SideFileState.NOT_ATTACHED:
            sidecache.discard(quick.path)
        return st
    job = sidework.state(path, debug_file=quick.own)
    if not job.running and not job.failed and not quick.restarted:
        quick.restarted = True          # (it was killed: once more)
        sidework.start(path, debug_file=quick.own)
        job = sidework.state(path, debug_file=quick.own)
    if quick.eh_frame and not job.running and (job.failed or quick.restarted):
        return _every_function(debugger, target, module, path, report)     # (no side file with registers)
    if not has_state(target.GetProcess()):
        return SideFileStatus(SideFileState.WRITING, None, job.text())
    wanted = _stack_functions(target, path)
    if quick.path is None and not wanted:
        # (none of its functions on the stacks: nothing to attach yet; and LLDB 23, asked for the
        # unwind plan of a function a side file lacks, keeps that answer through the next one)
        return SideFileStatus(SideFileState.WRITING, None, job.text())
    if quick.eh_frame and quick.path is not None and not wanted <= quick.starts:
        # (LLDB reads a module's first .eh_frame through the session: other functions on the stacks
        # now, and no side file with registers yet)
        return _every_function(debugger, target, module, path, report)
    if quick.path is None or not wanted <= quick.starts:
        side, failed = _attach_partial(debugger, target, module, path, quick.starts | wanted, quick.own,
                                       quick.eh_frame)
        if side is None:
            if quick.eh_frame and failed is not None:
                return _every_function(debugger, target, module, path, report)
            del _QUICK[key]                       # (final: not tried again at every stop)
            return failed
        if quick.path is not None:
            sidecache.discard(quick.path)
        quick.path, quick.starts = side, quick.starts | wanted
        if quick.eh_frame:
            _EH_FILES[side] = quick.starts
    st = _check(debugger, target, path, quick.path, quick.starts)
    if st is None:
        return SideFileStatus(SideFileState.WRITING, None, job.text())
    if st.state is SideFileState.STACK:
        return SideFileStatus(SideFileState.STACK, quick.path, job.text())
    if quick.eh_frame and st.state is SideFileState.NOT_ATTACHED:
        return _every_function(debugger, target, module, path, report)     # (a version that does not read it)
    return st


def _every_function(debugger, target, module, path, report):
    """Where a module's `.eh_frame` file of the stacks' functions cannot serve the session (and no
    side file with registers is there yet): every function's CFA, RA and FP now, as `.debug_frame`
    (`_session_file`), the registers from the next session on."""
    quick = _QUICK.pop((_target_key(target), path))
    return _session_file(debugger, target, module, path, quick.own, report)


def _stack_functions(target, path):
    """The link-time starts of the module's SFrame functions that are on the stacks of the
    process's threads now, as SFrame and the files' CFI unwind them."""
    from ..core.unwind.unwinder import DEFAULT_DEPTH_LIMIT, Stop
    from .command.backtrace import unwind
    sync(target)
    _first, index, covered = _coverage(path)
    starts = set()
    for thread in target.GetProcess():
        frame = thread.GetFrameAtIndex(0)
        if not frame.IsValid():
            continue
        for item in unwind(target, frame, DEFAULT_DEPTH_LIMIT, cfi=True):
            if isinstance(item, Stop):
                break
            pc = item.pc if item.level == 0 or item.interrupted else item.pc - 1
            addr = target.ResolveLoadAddress(pc)
            if addr.GetModule().GetFileSpec().fullpath != path:
                continue
            fde = index.find_fde(addr.GetFileAddress())
            if fde is not None and fde.start not in starts and not covered(fde.start):
                starts.add(fde.start)             # (its own CFI covers the others: no side file needed)
    return frozenset(starts)


def wait(debugger, target, report=None, interrupted=lambda: False, poll=0.1, limit=900.0):
    """Wait until every module whose side file is being written has it, then attach it.  (The
    frames LLDB has worked out at this stop already keep what they had: LLDB offers no way to make
    it work them out again; the frames it has not worked out yet, and the next stop's, use it.)
    At most `limit` seconds (LLDB 16 has no way to ask whether the user pressed Ctrl-C)."""
    import time
    key = _target_key(target)
    attach(debugger, target, report)       # (modules not seen before)
    owns = {path: quick.own for (t, path), quick in _QUICK.items() if t == key}
    owns.update({path: own for (t, path), own in _SESSION_FILES.items() if t == key})
    pending = list(owns)
    deadline = time.monotonic() + limit
    while pending and not interrupted() and time.monotonic() < deadline:
        jobs = [sidework.state(path, debug_file=owns[path]) for path in pending]
        if not any(job.running for job in jobs):
            break
        time.sleep(poll)
    attach(debugger, target, report)


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
            if (key, path) in _QUICK:
                st = _follow(debugger, target, module, path, report or (lambda line: None))
            elif (key, path) in _SESSION_FILES and old is not None and old.state is SideFileState.CFA:
                st = _session_status(path, old.path, _SESSION_FILES[(key, path)], (key, path))
            elif old is None:
                st = _attach_one(debugger, target, module, major, report or (lambda line: None))
            elif old.state is SideFileState.PENDING:
                st = _check(debugger, target, path, old.path) or old
            else:
                continue
        except Exception as exc:           # never a traceback at a stop
            st = _not_attached("internal error: %s: %s" % (type(exc).__name__, exc))
        if st is not None:
            _STATUS[(key, path)] = st
