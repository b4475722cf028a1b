"""A running process (Linux), read without a debugger: its threads stopped briefly with ptrace,
their registers, its memory and its modules.

`LiveProcess(pid)` seizes the threads it reads (`PTRACE_SEIZE`, then `PTRACE_INTERRUPT`: no
signal is sent, unlike `PTRACE_ATTACH`), waits until each is stopped, and `detach()` lets each go
as it was.  A thread that was in a job-control stop stays stopped; a signal that arrived while it
was held (a signal-delivery stop) is handed back to it at `PTRACE_DETACH`, so nothing is lost or
added.  Ctrl-C and kill wait while threads are being stopped or let go (signals deferred), then
end the command with every thread let go; on SIGKILL the kernel lets them go (a signal a thread
was stopped for at that moment is then lost: nothing can catch SIGKILL).

Registers come from `PTRACE_GETREGSET` with `NT_PRSTATUS` (the `pr_reg` of a core file's note,
decoded by core.target.corenotes), memory from `/proc/PID/mem`, the mapped files from `/proc/PID/maps`
(placed as a core's NT_FILE mappings are, by core.target.mapped), opened through
`/proc/PID/map_files` (the file itself, in whatever mount namespace or chroot the process is),
else by path, checked by device and inode.  Native processes only: the registers' layout is
this machine's.
"""

import contextlib
import ctypes
import os
import signal
import threading
import time
from typing import Dict, List, Optional, Tuple

from ..errors import ProcessError
from .corenotes import Mapping, Thread, arch_of, decode_gregs
from .mapped import CoreFiles, MappedFile, module_holding, modules_from_nt_file

PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
NT_PRSTATUS = 1
WALL = 0x40000000                      # waitpid's __WALL: threads too
_REGSET_MAX = 1024                     # bytes asked for: more than any NT_PRSTATUS register set

# e_machine (ELF header bytes 18-19) -> pyelftools' name, for the machines core.target.corenotes knows.
_MACHINES = {62: "EM_X86_64", 183: "EM_AARCH64", 22: "EM_S390"}


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = None


def _ptrace(request: int, tid: int, addr=None, data=None) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.ptrace.restype = ctypes.c_long
        _libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if _libc.ptrace(request, tid, addr, data) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def process_state(pid: int) -> Optional[str]:
    """The one-letter state of a process or thread (R, S, D, T stopped, t traced, Z zombie ...:
    /proc/PID/stat), or None if it is gone."""
    text = _read_text("/proc/%d/stat" % pid)
    return text.rsplit(")", 1)[1].split()[0] if text and ")" in text else None


def _status_field(pid: int, name: str) -> Optional[str]:
    for line in (_read_text("/proc/%d/status" % pid) or "").splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return None


def _permission_hint(pid: int) -> str:
    """Why ptrace may be refused here, in words (Yama's ptrace_scope, capabilities, tracers)."""
    tracer = _status_field(pid, "TracerPid")
    if tracer and tracer != "0":
        return "it is already traced by process %s (a debugger?)" % tracer
    scope = (_read_text("/proc/sys/kernel/yama/ptrace_scope") or "").strip()
    words = {"0": "any process of the same user may be traced",
             "1": "only a process's ancestors may trace it, unless they have CAP_SYS_PTRACE (root has it)",
             "2": "only a process with CAP_SYS_PTRACE (root) may trace",
             "3": "no process may be traced at all"}
    why = "kernel.yama.ptrace_scope is %s: %s" % (scope, words[scope]) if scope in words else \
        "tracing needs the same user id, or CAP_SYS_PTRACE (root)"
    return why


class _Held:
    """One thread this process holds stopped: the signal to hand back when it is let go."""
    __slots__ = ("tid", "signal")

    def __init__(self, tid: int):
        self.tid = tid
        self.signal = 0


# Signals that end this command (or raise KeyboardInterrupt in it): deferred while threads are
# being stopped or let go, so that none is interrupted half way (a stop waited for and not yet
# recorded would lose the signal it reports).
_DEFERRED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def _signals_deferred():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class LiveProcess:
    """A stopped view of a running process: `threads` (core.target.corenotes Threads, the main thread
    first), `read(addr, size)`, `modules()` and `module_at(addr)`, as core.target.corefile.CoreFile has
    them.  `all_threads=False` stops and reads only the main thread.  Use it as a context
    manager (or call `detach()`): the threads run again when it ends."""

    STOP_WAIT = 2.0          # seconds a thread may take to stop

    def __init__(self, pid: int, all_threads: bool = True):
        self.pid = pid
        self.path = "process %d" % pid
        self.warnings: List[str] = []
        self._held: Dict[int, _Held] = {}
        self._stuck: List[_Held] = []     # seized, did not stop in time (left out of the threads)
        self._mem: Optional[int] = None
        self._modules: Optional[List[MappedFile]] = None
        self._mappings: Optional[List[Mapping]] = None
        self._inodes: Dict[str, Tuple[int, int, int]] = {}    # path -> (device major, minor, inode) in maps
        if pid == os.getpid():
            raise ProcessError("process %d is this sframe command itself" % pid)
        if not os.path.isdir("/proc/%d" % pid):
            raise ProcessError("no such process: %d" % pid)
        if process_state(pid) == "Z":
            raise ProcessError("process %d has exited (a zombie not yet reaped by its parent)" % pid)
        self._identify()
        try:
            self._stop(all_threads)
            self.threads = self._registers()
        except BaseException:
            self.detach()
            raise

    # -- which process ---------------------------------------------------------------------------

    def _identify(self) -> None:
        try:
            with open("/proc/%d/exe" % self.pid, "rb") as fh:
                head = fh.read(20)
        except OSError as exc:
            raise ProcessError("cannot read process %d's executable: %s; %s" % (
                self.pid, exc.strerror, _permission_hint(self.pid))) from None
        if len(head) < 20 or head[:4] != b"\x7fELF":
            raise ProcessError("process %d's executable is not an ELF file" % self.pid)
        if head[4] != 2:
            raise ProcessError("process %d is a 32-bit program: only 64-bit processes are supported" % self.pid)
        big = head[5] == 2
        self.byte_order = "big" if big else "little"
        machine = _MACHINES.get(int.from_bytes(head[18:20], "big" if big else "little"))
        arch = arch_of(machine) if machine else None
        if machine is None or arch is None or arch.name != os.uname().machine:
            raise ProcessError("process %d is not a native %s program (ptrace reads this machine's registers)"
                               % (self.pid, os.uname().machine))
        self.machine: str = machine
        self._arch = arch
        from ..arch.abi import for_elf
        self.abi = for_elf(machine, big)
        self.arch = arch.name
        root = "/proc/%d/root" % self.pid
        try:
            self.sysroot = None if os.readlink(root) == "/" else root
        except OSError:
            self.sysroot = root

    # -- stopping and letting go -----------------------------------------------------------------

    def _tids(self) -> List[int]:
        try:
            tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % self.pid))
        except OSError:
            return []
        return sorted(tids, key=lambda t: t != self.pid)

    def _stop(self, all_threads: bool) -> None:
        """Seize and interrupt the threads (again for threads started meanwhile), then wait until
        each is stopped.  Threads that exit meanwhile are left out."""
        seen: set = set()
        with _signals_deferred():
            self._stop_all(all_threads, seen)

    def _stop_all(self, all_threads: bool, seen: set) -> None:
        while True:
            new = [t for t in (self._tids() if all_threads else [self.pid]) if t not in seen]
            if not new:
                break
            interrupted = []
            for tid in new:
                seen.add(tid)
                try:
                    _ptrace(PTRACE_SEIZE, tid)
                except OSError as exc:
                    if exc.errno == 3:            # ESRCH: it has just exited
                        continue
                    if tid == self.pid or not self._held:
                        raise ProcessError("cannot attach to process %d: %s; %s" % (
                            self.pid, exc.strerror, _permission_hint(self.pid))) from None
                    self.warnings.append("thread %d cannot be traced (%s): left out" % (tid, exc.strerror))
                    continue
                held = self._held[tid] = _Held(tid)
                try:
                    _ptrace(PTRACE_INTERRUPT, tid)
                except OSError:
                    pass                          # gone: the wait says so
                interrupted.append(held)
            for held in interrupted:              # (they stop at once, together; then each is waited for)
                self._wait_stopped(held)
            if not all_threads:
                break
        if self.pid not in self._held:
            raise ProcessError("process %d exited while being read" % self.pid)

    def _wait_stopped(self, held: _Held) -> None:
        """Until the thread is stopped (or gone).  A thread in an uninterruptible sleep stops only
        when it leaves it: after STOP_WAIT seconds it is left out (the main thread: an error),
        the others being held meanwhile."""
        deadline = time.monotonic() + self.STOP_WAIT
        pause = 0.0001
        while True:
            try:
                pid, status = os.waitpid(held.tid, WALL | os.WNOHANG)
            except ChildProcessError:
                del self._held[held.tid]
                return
            if pid == 0:
                if time.monotonic() > deadline:
                    # Still running, so it cannot be detached yet: detach() tries again, and this
                    # process's exit lets it go in any case.
                    self._stuck.append(self._held.pop(held.tid))
                    if held.tid == self.pid:
                        raise ProcessError("process %d did not stop within %g s (in an uninterruptible sleep?)"
                                           % (self.pid, self.STOP_WAIT))
                    self.warnings.append("thread %d did not stop within %g s (in an uninterruptible sleep?): "
                                         "left out" % (held.tid, self.STOP_WAIT))
                    return
                time.sleep(pause)
                pause = min(2 * pause, 0.01)
                continue
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                del self._held[held.tid]
                return
            if os.WIFSTOPPED(status):
                if status >> 16 == 0:
                    # A signal-delivery stop: the signal arrived first; it is handed back at detach.
                    held.signal = os.WSTOPSIG(status)
                return

    def check_still_there(self) -> None:
        """Raise ProcessError if the process was killed while it was held (its memory went with it,
        so what was read of it may be cut short)."""
        for tid in list(self._held):
            try:
                pid, status = os.waitpid(tid, WALL | os.WNOHANG)
            except ChildProcessError:
                pid, status = tid, 0
            if pid == tid and not os.WIFSTOPPED(status):
                del self._held[tid]
                if tid == self.pid:
                    raise ProcessError("process %d exited while being read" % self.pid)

    def detach(self) -> None:
        """Let every held thread go, each with the signal it was about to take (if any); Ctrl-C
        and the like wait until they are all let go."""
        with _signals_deferred():
            held, self._held = list(self._held.values()) + self._stuck, {}
            self._stuck = []
            for h in held:
                try:
                    _ptrace(PTRACE_DETACH, h.tid, None, h.signal)
                except OSError:
                    pass                          # it has exited meanwhile
        if self._mem is not None:
            os.close(self._mem)
            self._mem = None

    def close(self) -> None:
        self.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    # -- registers and memory --------------------------------------------------------------------

    def _registers(self) -> List[Thread]:
        threads: List[Thread] = []
        buf = ctypes.create_string_buffer(_REGSET_MAX)
        size = sum(n for _name, n in self._arch.gregs)
        for tid, held in list(self._held.items()):
            iov = _Iovec(ctypes.cast(buf, ctypes.c_void_p), _REGSET_MAX)
            try:
                _ptrace(PTRACE_GETREGSET, tid, NT_PRSTATUS, ctypes.addressof(iov))
            except OSError:
                self.warnings.append("thread %d: its registers cannot be read (it exited?)" % tid)
                continue
            if iov.len < size:
                raise ProcessError("thread %d: %d bytes of registers, %s has %d" % (tid, iov.len, self.arch, size))
            regs = decode_gregs(self._arch, buf.raw[:size], self.byte_order)
            threads.append(Thread(tid, held.signal, regs, len(threads)))
        if not threads:
            raise ProcessError("process %d exited while being read" % self.pid)
        return threads

    def read(self, addr: int, size: int) -> bytes:
        """`size` bytes at `addr`; raises OSError where they cannot be read."""
        if self._mem is None:
            try:
                self._mem = os.open("/proc/%d/mem" % self.pid, os.O_RDONLY)
            except OSError as exc:
                raise ProcessError("cannot read process %d's memory: %s" % (self.pid, exc.strerror)) from None
        if addr < 0 or addr + size > 1 << 63:
            raise OSError(14, "address %#x is out of reach" % addr)
        data = os.pread(self._mem, size, addr)
        if len(data) < size:
            raise OSError(14, "cannot read %d bytes at %#x" % (size, addr))
        return data

    def _read_or_none(self, addr: int, size: int) -> Optional[bytes]:
        try:
            return self.read(addr, size)
        except OSError:
            return None

    # -- modules ---------------------------------------------------------------------------------

    @property
    def mappings(self) -> List[Mapping]:
        """The process's file mappings, from /proc/PID/maps."""
        if self._mappings is None:
            maps = []
            for line in (_read_text("/proc/%d/maps" % self.pid) or "").splitlines():
                parts = line.split(None, 5)
                if len(parts) < 6 or not parts[5].startswith("/"):
                    continue                      # anonymous, [stack], [vdso], ...
                lo, _, hi = parts[0].partition("-")
                maps.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), parts[5]))
                major, _, minor = parts[3].partition(":")
                self._inodes.setdefault(parts[5], (int(major, 16), int(minor, 16), int(parts[4])))
            self._mappings = maps
        return list(self._mappings)

    def exe_path(self) -> Optional[str]:
        try:
            return os.readlink("/proc/%d/exe" % self.pid)
        except OSError:
            return None

    def _map_file(self, path: str) -> Optional[str]:
        """/proc/PID/map_files/START-END of a mapping of `path`: the mapped file itself.  The paths
        /proc/PID/maps prints are as seen from this process's root, which for a program in a
        chroot or another mount namespace may lead nowhere (or elsewhere) here."""
        for m in self.mappings:
            if m.path == path:
                link = "/proc/%d/map_files/%x-%x" % (self.pid, m.start, m.end)
                if os.path.isfile(link):
                    return link
                break
        # map_files needs privileges: a file of the same device and inode under the path, as
        # this process or as the traced one sees it, is the mapped file too.
        want = self._inodes.get(path)
        for cand in (path, os.path.join("/proc/%d/root" % self.pid, path.lstrip("/"))):
            try:
                st = os.stat(cand)
            except OSError:
                continue
            if want == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
                return cand
        return None

    def modules(self) -> List[MappedFile]:
        """Mapped ELF files as MappedFile(path, bias, image), the executable first."""
        if self._modules is None:
            exe = self.exe_path()
            files = CoreFiles(self.path, self.sysroot, None, self.machine, self._read_or_none, self.warnings,
                              where=self._map_file)
            self._modules = modules_from_nt_file(self.mappings, os.sysconf("SC_PAGE_SIZE"), files,
                                                 lambda path: path == exe, self._read_or_none)
        return list(self._modules)

    def module_at(self, addr: int) -> Optional[MappedFile]:
        self.modules()
        return module_holding(self._modules or [], addr)

