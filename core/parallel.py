"""Work shared among forked processes: a whole-program job (the side file's analysis of every
function) runs on every core the process may use, on Linux in the debuggers' own Python as in
the `sframe` command.

The job is cut into more parts than processes.  Children forked from this process see its state
as it is (an index, a file's code read once), so nothing of the input is pickled.  Every process,
this one included, takes the next part number from a shared pipe (a one-byte read is atomic)
until none is left, so a process that drew slow parts simply takes fewer.  Each child sends back
its results, pickled, and leaves with `os._exit` (no atexit handler of the debugger runs in it).
A part no child gave back (an exception, a signal, no fork) is run here afterwards, in order: the
result is the serial one, exceptions included (the first part in order that raises), only sooner.
"""

import contextlib
import gc
import os
import signal
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

P = TypeVar("P")
R = TypeVar("R")

MAX_PARTS = 255        # part numbers travel as single bytes

# Held by a thread of this process while it imports modules (the LLDB plugin's preloading), and
# taken by every fork here: a child forked while another thread holds a module's import lock
# waits for it for ever at its first import of that module (the thread is not in the child).
IMPORTING = threading.Lock()


@contextlib.contextmanager
def no_import_running(timeout: float = 10.0) -> Iterator[bool]:
    """Hold IMPORTING (for a fork): at most `timeout` seconds' wait, never a deadlock.  Gives
    whether it holds it: where not, the caller does not fork."""
    got = IMPORTING.acquire(timeout=timeout)
    try:
        yield got
    finally:
        if got:
            IMPORTING.release()


# The signals LLVM's crash handler takes that end a process by default (SIGTRAP: AArch64's
# __builtin_trap).
_FAULTS = tuple(getattr(signal, name) for name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGTRAP",
                                                   "SIGSYS", "SIGQUIT", "SIGXCPU", "SIGXFSZ")
                if hasattr(signal, name))


def in_child() -> None:
    """The first thing a child forked from a debugger does.  The debugger's objects are never
    collected in it (their finalizers are the debugger's, and may touch its state as another of
    its threads left it at the fork).  A fault ends it at once: the debugger's own handler (LLVM's
    prints a stack, and under a lock the fault left held, in malloc say, waits for ever) is not
    run in it, so the debugger that reads the child's pipe gets its end, never a hang."""
    gc.freeze()
    for sig in _FAULTS:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def workers(units: int, per_worker: int, limit: Optional[int] = None) -> int:
    """How many processes a job of `units` units of work should run in: the cores this process
    may run on, at most `limit`, and at least `per_worker` units to each (below that, a fork
    costs more than it saves)."""
    if not hasattr(os, "fork"):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if limit is not None:
        cores = min(cores, limit)
    return max(1, min(cores, units // max(per_worker, 1)))


def run(fn: Callable[[P], R], parts: Sequence[P], processes: int) -> List[R]:
    """[fn(part) for part in parts], shared among `processes` processes (this one and forked
    children; at most MAX_PARTS parts)."""
    if processes <= 1 or len(parts) <= 1 or len(parts) > MAX_PARTS or not hasattr(os, "fork"):
        return [fn(p) for p in parts]
    try:
        queue, fill = os.pipe()
    except OSError:
        return [fn(p) for p in parts]
    try:
        os.write(fill, bytes(range(len(parts))))     # (fits a pipe's buffer: no reader needed yet)
    finally:
        os.close(fill)        # (before any fork: the queue's end is its end of file)
    children: List[Tuple[int, int]] = []
    try:
        for _ in range(min(processes, len(parts)) - 1):
            child = _start(fn, parts, queue, [r for _pid, r in children])
            if child is not None:
                children.append(child)
        done = _take(fn, parts, queue)
        while children:
            done.update(_finish(children.pop(0)))
    finally:
        os.close(queue)
        for child in children:        # this process was interrupted: the others are not wanted
            _finish(child, kill=True)
    return [done[k] if k in done else fn(part) for k, part in enumerate(parts)]


def _take(fn: Callable[[P], R], parts: Sequence[P], queue: int) -> Dict[int, R]:
    """{part number: result} of the parts this process takes from the queue until it is empty or
    a part raises: that part is left out (it is run again at the end, where its error is raised)."""
    done: Dict[int, R] = {}
    while True:
        got = os.read(queue, 1)
        if not got:
            return done
        try:
            done[got[0]] = fn(parts[got[0]])
        except Exception:
            return done


def _start(fn, parts, queue: int, others: List[int]):
    """(pid, read end of its pipe) of a child taking parts from the queue, or None where no child
    could be forked.  `others`: the read ends of the children before it (the child closes its
    copies, so that a child whose results are not read gets EPIPE instead of waiting)."""
    import pickle  # noqa: F401  (for the child: imported before the fork, not when this module is; a debugger's first stop forks none)
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns that a fork of a process with threads (the debugger's) may
            # deadlock in the child: the child here only computes and writes to its pipe.
            warnings.simplefilter("ignore", DeprecationWarning)
            with no_import_running() as quiet:
                if not quiet:
                    raise OSError("another thread is importing modules")      # (this process runs the parts)
                pid = os.fork()
            if pid == 0:
                _child(fn, parts, queue, r, w, others)     # (never returns)
    except OSError:
        os.close(r)
        os.close(w)
        return None
    os.close(w)
    return pid, r


def _child(fn, parts, queue: int, r: int, w: int, others: List[int]) -> None:
    """A forked child's whole life: its parts' results into its pipe, then `os._exit`, whatever
    happens (it never returns into the caller's frames, the debugger's among them)."""
    code = 1
    try:
        in_child()
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)     # Ctrl-C ends it (not the debugger's handler)
        except (ValueError, OSError):
            pass                                              # (not where Python takes signals: left as it is)
        for fd in [r] + others:
            os.close(fd)
        import pickle  # (loaded by the parent before the fork: _start)
        data = pickle.dumps(_take(fn, parts, queue), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(w, "wb") as fh:
            fh.write(data)
        code = 0
    except BaseException:         # (the parent runs its parts again)
        pass
    finally:
        os._exit(code)


def _finish(child, kill: bool = False) -> Dict[int, Any]:
    """The results the child gave back ({} where it gave none)."""
    pid, r = child
    data = b""
    try:
        if not kill:
            with os.fdopen(r, "rb", closefd=False) as fh:
                data = fh.read()
    except BaseException:
        kill = True               # (interrupted: the child is not waited for)
        raise
    finally:
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.close(r)
        try:
            _pid, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = -1
    if kill or status != 0 or not data:
        return {}
    import pickle
    try:
        got = pickle.loads(data)
    except Exception:
        return {}
    return got if isinstance(got, dict) else {}


def file_pool(processes: int, items: int):
    """A pool of `processes` forked processes for a command's files (None where one process does:
    one process asked for, or at most one item); Ctrl-C is for the command, which ends the pool,
    not for its processes."""
    if processes <= 1 or items <= 1:
        return None
    import multiprocessing
    return multiprocessing.get_context("fork").Pool(processes, _ignore_interrupts)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

