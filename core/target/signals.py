"""Signals while a running process's threads are held: their names, and SIGTERM/SIGHUP turned into
an exception so that held threads are let go before this process ends."""

import contextlib
import os
import signal as _signal
import threading
from typing import List

from ..errors import ProcessError


def signame(num: int) -> str:
    try:
        return _signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


class _Terminated(BaseException):
    """Raised by a terminating signal (SIGTERM, SIGHUP) so that held threads are let go first."""


@contextlib.contextmanager
def interruptible():
    """SIGTERM and SIGHUP raise _Terminated (SIGINT already raises KeyboardInterrupt) while threads
    are held, so the `with` that holds them lets them go; the signal's usual end follows.  A
    signal that was ignored (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: List[int] = []
    active = [True]

    def handler(signum, _frame):
        got.append(signum)
        if active[0] and len(got) == 1:
            raise _Terminated()
    old = {}
    try:
        for sig in (_signal.SIGTERM, _signal.SIGHUP):
            prev = _signal.getsignal(sig)
            if prev is not _signal.SIG_IGN and prev is not None:     # (None: a handler set from C)
                old[sig] = prev
                _signal.signal(sig, handler)
        yield
    except _Terminated:
        pass
    finally:
        active[0] = False
        for sig, h in old.items():
            _signal.signal(sig, h)
    if got:
        os.kill(os.getpid(), got[0])       # die of it as if it had not been caught
        raise ProcessError("interrupted by %s" % signame(got[0]))   # (its handler let this process live)
