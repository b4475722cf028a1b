"""`sframe backtrace CORE` and `sframe backtrace -p PID`: unwind the threads of an ELF core file or
of a running process with SFrame (and DWARF CFI where there is none), no debugger."""

import io
import os
import sys
from typing import Optional, TextIO

from ..report.backtrace import print_backtraces
from ..target.session import CoreSession, Session
from ..target.signals import interruptible
from ..unwind.unwinder import DEFAULT_DEPTH_LIMIT
from .options import UsageError


def backtrace_core(core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None,
                   all_threads: bool = False, out: Optional[TextIO] = None, limit: int = DEFAULT_DEPTH_LIMIT,
                   fp_fallback: bool = False, registers: bool = False, cfi: bool = True, as_json: bool = False,
                   thread: Optional[int] = None) -> int:
    session = CoreSession(core_path, exe=exe, sysroot=sysroot, cfi=cfi)
    try:
        _check_thread(session, thread, "the core")
        print_backtraces(session, "Core %s" % core_path, out or sys.stdout, all_threads, limit, fp_fallback,
                         registers, as_json, thread=thread)
    finally:
        session.target.close()
    return 0


def backtrace_process(pid: int, all_threads: bool = False, out: Optional[TextIO] = None,
                      limit: int = DEFAULT_DEPTH_LIMIT, fp_fallback: bool = False, registers: bool = False,
                      cfi: bool = True, as_json: bool = False, thread: Optional[int] = None) -> int:
    """The running process's threads are held stopped from before the first register is read
    until the last frame is unwound (then let go, also on an error or an interrupt), and the
    text is printed after that: the process waits for the unwinding, not for the output."""
    from ..target.live import LiveProcess
    out = out or sys.stdout
    text = io.StringIO()
    with interruptible(), LiveProcess(pid, all_threads=all_threads or thread is not None) as proc:
        session = Session(proc, proc.sysroot, cfi)
        _check_thread(session, thread, "process %d" % pid)
        name = os.path.basename(proc.exe_path() or "?")
        print_backtraces(session, "Process %d (%s)" % (pid, name), text, all_threads, limit, fp_fallback,
                         registers, as_json, thread=thread)
        proc.check_still_there()
    out.write(text.getvalue())
    return 0


def _check_thread(session: Session, thread: Optional[int], what: str) -> None:
    n = len(session.target.threads)
    if thread is not None and thread > n:
        raise UsageError("no thread %d: %s has %d thread%s" % (thread, what, n, "" if n == 1 else "s"))
