"""Work shared among forked processes (core.parallel): the results are the serial ones, in order,
whatever a child does, and no child is left behind."""

import os
import signal
import time

import pytest

from sframekit.core import parallel
from sframekit.core.errors import SFrameError


def _no_children_left():
    """No child of this process is left (running or a zombie)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_results_in_order_from_the_children():
    parent = os.getpid()

    def fn(part):
        time.sleep(0.01)          # (every process gets its turn at the queue)
        return part, os.getpid()
    got = parallel.run(fn, list(range(40)), 3)
    assert [p for p, _pid in got] == list(range(40))
    pids = {pid for _p, pid in got}
    assert parent in pids and len(pids) == 3, pids     # parts ran here and in two children
    assert _no_children_left()


def test_a_part_whose_child_fails_is_run_again_here():
    parent = os.getpid()

    def fn(part):
        if os.getpid() != parent:
            if part == 2:
                os._exit(3)                          # dies without a result
            if part == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            if part == 4:
                raise ValueError("only in the child")
        return part * 10
    assert parallel.run(fn, [1, 2, 3, 4, 5] * 4, 4) == [10, 20, 30, 40, 50] * 4
    assert _no_children_left()


def test_an_error_is_the_serial_one():
    def fn(part):
        if part == 2:
            raise SFrameError(0x1C, "FDE 2: bad")
        return part
    with pytest.raises(SFrameError, match="FDE 2: bad"):
        parallel.run(fn, [1, 2, 3], 3)
    assert _no_children_left()


def test_an_error_leaves_no_child():
    def fn(part):
        if part == 1:
            raise KeyError(part)
        return part
    with pytest.raises(KeyError):
        parallel.run(fn, [1, 2, 3], 3)
    assert _no_children_left()


def test_the_first_error_in_order():
    def fn(part):
        if part in (5, 30):
            raise SFrameError(part, "part %d" % part)
        return part
    for _ in range(5):
        with pytest.raises(SFrameError, match="part 5$"):
            parallel.run(fn, list(range(40)), 2)
    assert _no_children_left()


def test_serial():
    parent = os.getpid()
    assert parallel.run(lambda part: os.getpid(), [1, 2, 3], 1) == [parent] * 3


def test_workers():
    cores = len(os.sched_getaffinity(0))
    assert parallel.workers(10, 100) == 1                         # too little work to fork for
    assert parallel.workers(6400, 100) == min(cores, 64)
    assert parallel.workers(6400, 100, limit=1) == 1
