"""The cache entry of a side file with registers (core.elf.sidecache), written behind a debugger:
a process of its own, so that the debugger's first stop waits for nothing but the functions on its
stacks (sidecache.partial).

`start` forks twice from the debugger: the job is in a session of its own (no terminal, no
signal meant for the debugger), at the idle priority (SCHED_IDLE: it takes only the CPU time
the debugger and its inferior leave), with none of the debugger's files open, and
no child of the debugger (it outlives a debugger that quits).  The debugger waits only until
the first child holds the job's lock (a word through a pipe: the second fork, a copy of the
debugger's whole address space, is not waited for), and a thread collects that child's exit.  It runs the
analysis on the cores the machine gives it (core.parallel) and writes the entry as `side_file`
does: the file renamed into place, then its record, so that a job killed halfway leaves the
cache without the entry, never with half of one.

Beside the entry (sidecache._Place.beside):

    SHAPE.lock       held by the job while it works: two debuggers on one build start two jobs,
                     and the second, once it has the lock, finds the entry written and leaves
    SHAPE.progress   the number of parts, a line, then a byte per part done (any process of the job)
    SHAPE.failed     why the last job wrote no entry (an error, in one line)
    SHAPE.log        a line for each job: it wrote the entry (in how long), found it written, failed
"""

import fcntl
import gc
import os
import select
import signal
import sys
import threading
import time
import warnings
from typing import List, NamedTuple, Optional

from .. import parallel
from . import sidecache


class Job(NamedTuple):
    """How far the job of one copy's side file is."""
    running: bool
    parts: int = 0           # the analysis' parts (0: not begun)
    done: int = 0            # parts done
    failed: str = ""         # why the last job wrote no entry

    def text(self) -> str:
        if self.failed and not self.running:
            return "the analysis failed: %s" % self.failed
        if not self.running:
            return "the analysis is not running"
        if not self.parts:
            return "the analysis is starting"
        return "the analysis is %d%% done" % (100 * self.done // self.parts)


class _ProgressFile:
    """core.dwarf.writer.Progress into SHAPE.progress: appended to by every process of the job (a
    write of a few bytes to a file opened for appending is one)."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)

    def begin(self, parts: int) -> None:
        os.write(self.fd, b"%d\n" % parts)

    def part_done(self) -> None:
        os.write(self.fd, b".")


def _held(lock: str) -> bool:
    """Does a job hold this lock now?"""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def state(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Job:
    """How far the job writing this copy's side file is."""
    at = sidecache.place(program, directory, debug_file)
    if isinstance(at, sidecache.Made):
        return Job(False, failed=at.why)
    running = _held(at.beside(".lock"))
    parts = done = 0
    try:
        with open(at.beside(".progress"), "rb") as fh:
            head, _, dots = fh.read().partition(b"\n")
        parts, done = int(head), len(dots)
    except (OSError, ValueError):
        pass
    failed = ""
    try:
        with open(at.beside(".failed")) as fh:
            failed = fh.read().strip()
    except OSError:
        pass
    return Job(running, parts, min(done, parts), failed)


_HELD, _FAILED = 3, 4         # the first child's exit status: another job has the lock; it could not start one


def start(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Optional[str]:
    """Start the job that writes this copy's side file into the cache, unless one is running.
    None: started (or running); else why not, in one line."""
    at = sidecache.place(program, directory, debug_file)
    if isinstance(at, sidecache.Made):
        return at.why
    if _held(at.beside(".lock")):
        return None
    try:
        r, w = os.pipe()
    except OSError as exc:
        return "cannot start the analysis: %s" % exc.strerror
    pid = -1
    try:
        with warnings.catch_warnings():
            # (Python 3.12+ warns of a fork in a process with threads, the debugger's: the job
            # touches nothing of the debugger's)
            warnings.simplefilter("ignore", DeprecationWarning)
            with parallel.no_import_running() as quiet:
                if not quiet:
                    return "cannot start the analysis yet (another thread is importing modules)"
                pid = os.fork()
    except OSError as exc:
        return "cannot start the analysis: %s" % exc.strerror
    finally:
        if pid < 0:
            os.close(r)
            os.close(w)
    if pid == 0:
        os.close(r)
        _first_child(program, at, debug_file, w)          # (never returns)
    os.close(w)
    answered = started = False
    try:
        # (the lock held: the job is running, or says why not; a child that does not answer in
        # ANSWER seconds is not waited for, it is killed)
        poll = select.poll()          # (not select.select: a debugger may hold more than 1,024 files)
        poll.register(r, select.POLLIN)
        answered = bool(poll.poll(ANSWER * 1000))
        started = answered and os.read(r, 1) == _STARTED
    except OSError:
        answered = False
    except BaseException:             # (interrupted: the child is not waited for)
        _abandon(pid)
        raise
    finally:
        os.close(r)
    if not answered:
        _abandon(pid)
        why = "cannot start the analysis (its process did not answer in %d s)" % ANSWER
        try:
            _failed(at, why)          # (sframe info says why)
        except OSError:
            pass
        return why
    if started:
        _reap_later(pid)          # (it ends once it has forked the job: nothing waits for that here)
        return None
    try:
        _pid, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _FAILED:
        return "cannot start the analysis (a process could not be made)"
    if os.WIFSIGNALED(status):
        return "cannot start the analysis (its process ended by signal %d)" % os.WTERMSIG(status)
    return None


def _abandon(pid: int) -> None:
    """The first child killed, and collected in a thread."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _reap_later(pid)


_STARTED = b"s"       # the first child's word to the debugger: it holds the lock
ANSWER = 10           # seconds the debugger waits for that word at most (it comes in milliseconds)


def _reap_later(pid: int) -> None:
    """Collect the first child's exit in a thread of its own (no zombie is left behind)."""
    def reap():
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
    threading.Thread(target=reap, name="sframe-reap", daemon=True).start()


def _first_child(program: str, at, debug_file: Optional[str], told: int) -> None:
    """Take the lock, then tell the debugger (`told`, a pipe) that it is held (the job keeps it:
    a lock belongs to the open file, which the job shares), and start the job in a session of its
    own; where that fails, `.failed` says why (never returns)."""
    code = _FAILED
    try:
        parallel.in_child()
        debugger = os.getppid()
        fd = os.open(at.beside(".lock"), os.O_WRONLY | os.O_CREAT, 0o600)
        lock = fcntl.fcntl(fd, fcntl.F_DUPFD, 3)       # (above 0-2, which the job points elsewhere)
        os.close(fd)
        for _ in range(20):      # (another process's probe holds it for an instant; a job, for seconds)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.01)
        else:
            code = _HELD
            raise BlockingIOError
        os.setsid()
        os.write(told, _STARTED)
        os.close(told)
        try:
            child = os.fork()
        except OSError as exc:      # (the debugger was told: `state` says why, the lock released)
            _failed(at, "cannot start the analysis: %s" % exc.strerror)
            raise
        if child == 0:
            _job(program, at, debug_file, debugger, lock)
        code = 0
    except BaseException:
        pass
    finally:
        os._exit(code)


def _job(program: str, at, debug_file: Optional[str], debugger: int, lock: int) -> None:
    """The job's whole life, the lock held (never returns)."""
    code = 1
    try:
        _detach(lock)
        os.ftruncate(lock, 0)
        os.write(lock, b"%d\n" % os.getpgid(0))     # (its process group: a user, or a test, may stop it)
        _unlink(at.beside(".failed"))                 # (an earlier job's)
        _until_idle(debugger)
        if sidecache.cached(program, at.directory, debug_file) is None:
            _remove_leftovers(at)
            progress = _ProgressFile(at.beside(".progress"))
            began = time.monotonic()
            made = sidecache.side_file(program, at.directory, debug_file, progress=progress)
            if made.path is None and made.why not in (sidecache.COVERED, sidecache.NO_SFRAME):
                _failed(at, made.why)
                _log(at, "failed: %s" % made.why)
            else:
                _log(at, "wrote it in %.2f s" % (time.monotonic() - began))
            _unlink(at.beside(".progress"))
        else:
            _log(at, "found it written")
        code = 0
    except BaseException as exc:        # (the debugger's next stop reads why)
        try:
            _failed(at, "%s: %s" % (type(exc).__name__, exc))
        except BaseException:
            pass
    finally:
        os._exit(code)


def _log(at, what: str) -> None:
    """A line in SHAPE.log: what each job did (one wrote the entry, the others found it)."""
    fd = os.open(at.beside(".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, ("%s job %d: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), os.getpid(), what)).encode())
    finally:
        os.close(fd)


def holder(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Optional[int]:
    """The process group of the job working on this copy's side file (the job and the processes
    it shares the analysis with: `kill -- -GROUP` stops them all), or None."""
    at = sidecache.place(program, directory, debug_file)
    if isinstance(at, sidecache.Made) or not _held(at.beside(".lock")):
        return None
    try:
        with open(at.beside(".lock")) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _failed(at, why: str) -> None:
    from .sidefile import write_private
    write_private(at.beside(".failed"), why.replace("\n", " ").encode())


def _detach(lock: int) -> None:
    """Leave the debugger's world: its priority, its files (a terminal a test waits on, its
    ptrace and pipe descriptors; `lock` is kept), its signal dispositions, and its objects (never
    collected here: their finalizers are the debugger's)."""
    gc.freeze()
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))    # (the CPU time no one else wants)
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for fd in _open_fds():
        if fd > 2 and fd != lock:
            try:
                os.close(fd)
            except OSError:
                pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGCHLD):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
    _KEPT.extend((sys.stdout, sys.stderr))
    sys.stdout = sys.stderr = open(os.devnull, "w")


_KEPT: list = []         # the debugger's sys.stdout and sys.stderr, never finalized here


def _open_fds() -> List[int]:
    """This process's open descriptors (/proc/self/fd: not every number up to the limit, which may
    be a billion)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        return list(range(3, 1024))


def _cpu_time(pid: int) -> Optional[int]:
    """The CPU time (clock ticks, user and system) process `pid` has used, None once it has ended."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def _until_idle(pid: int, poll: float = 0.05, quiet: int = 2, limit: float = 3.0) -> None:
    """Wait until the debugger has used no CPU time for `quiet` polls in a row (it has shown its
    stop and waits for the user), it has ended, or `limit` seconds have passed: at the idle
    priority the job still shares the caches and memory of the machine with the debugger, which
    slowed its first stop by a fourth."""
    last, still, waited = _cpu_time(pid), 0, 0.0
    while last is not None and still < quiet and waited < limit:
        time.sleep(poll)
        waited += poll
        now = _cpu_time(pid)
        still = still + 1 if now == last else 0
        last = now


def _remove_leftovers(at) -> None:
    """The temporary files of a job killed while it wrote (their names end in .tmpPID)."""
    where = os.path.dirname(at.entry)
    stem = os.path.basename(at.entry)[:-len(".debug")]
    for name in os.listdir(where):
        if name.startswith(stem) and ".tmp" in name:
            _unlink(os.path.join(where, name))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
