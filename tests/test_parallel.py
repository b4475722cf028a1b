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


def test_side_file_entries_the_same_however_the_functions_are_cut(monkeypatch):
    """The writer's parts (core.dwarf.writer) put together give the serial section, byte for
    byte, for every cut of a section of odd functions: of size 0, a PLT FDE (one entry a block)
    and one of size 0 (no entry, its CIE all the same), signal FDEs between default ones (a CIE
    of their own, first met inside a part or at its end)."""
    from sframekit.core.arch import abi as abimod
    from sframekit.core.dwarf import writer
    from sframekit.core.sframe import format as F
    from sframekit.core.sframe.encode import Func, Row, build
    from sframekit.core.sframe.index import SFrameIndex

    leaf = [Row(0, (8,))]
    funcs = [Func(0x1000, 0x10, leaf), Func(0x1010, 0, leaf), Func(0x1020, 0x10, leaf, signal=True),
             Func(0x1030, 0x40, [Row(0, (16,)), Row(6, (24,))], pc_type=F.PCType.MASK, rep_size=0x10),
             Func(0x1070, 0x10, leaf), Func(0x1080, 0, leaf, pc_type=F.PCType.MASK, rep_size=0x10, signal=True),
             Func(0x1080, 0x10, leaf, signal=True), Func(0x1090, 0x20, leaf),
             Func(0x10B0, 0, leaf, pc_type=F.PCType.MASK, rep_size=0x10, signal=True)]
    index = SFrameIndex(build(3, abimod.AMD64.sframe_abi, funcs))
    serial = writer.debug_frame(index, None, workers=1)
    assert serial.fdes == 1 + 1 + 1 + 4 + 1 + 1 + 1 and serial.functions == len(funcs)
    n = len(funcs)
    for cuts in ([[k] for k in range(n)], [[0, 1, 2], [3, 4, 5, 6], [7, 8]], [[0, 1, 2, 3, 4, 5], [6, 7, 8]]):
        spans = [(c[0], c[-1] + 1) for c in cuts]
        monkeypatch.setattr(writer, "_spans", lambda index, count, spans=spans: spans)
        monkeypatch.setattr(writer.parallel, "workers", lambda units, per_worker, limit=None: 3)
        got = writer.debug_frame(SFrameIndex(index.section.data), None)
        assert (got.data, got.fdes, got.functions) == (serial.data, serial.fdes, serial.functions), spans


def test_interrupted_here_the_children_are_ended():
    """Ctrl-C in this process while children hold large results nobody will read: it is raised
    at once, and no child is left waiting on its pipe."""
    parent = os.getpid()

    def fn(part):
        if os.getpid() == parent:
            time.sleep(0.2)           # (the children take parts meanwhile)
            raise KeyboardInterrupt
        time.sleep(0.05)              # (so that this process gets a part too)
        return bytes(1 << 20)         # more than a pipe holds
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        parallel.run(fn, list(range(12)), 3)
    assert time.monotonic() - t < 10
    assert _no_children_left()


def test_a_child_that_faults_ends_at_once_whatever_the_debuggers_handler():
    """LLDB's handler of a fault (LLVM's) prints a stack, and under the heap's lock the fault left
    held waits for ever: a child of the debugger that faults must not run it, or the debugger
    reading its pipe would wait for ever too.  Here the debugger's handler of SIGABRT hangs; a
    child aborts at its first part; the parts are run here, at once."""
    parent = os.getpid()

    def hang(_sig, _frame):
        time.sleep(3600)

    def late(_sig, _frame):
        raise TimeoutError("the parent still waits for a child that aborted")

    def fn(part):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGABRT)
            time.sleep(3600)          # (what the debugger's handler does)
        time.sleep(0.05)              # (the child takes a part meanwhile)
        return part * 2
    old_abort, old_alarm = signal.signal(signal.SIGABRT, hang), signal.signal(signal.SIGALRM, late)
    signal.alarm(30)
    try:
        assert parallel.run(fn, list(range(8)), 2) == [k * 2 for k in range(8)]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGABRT, old_abort)
        signal.signal(signal.SIGALRM, old_alarm)
    assert _no_children_left()


def test_the_debuggers_objects_are_not_collected_in_a_child():
    """A cycle of the debugger's objects left for the collector when the child is forked is not
    collected there (its finalizer is the debugger's, and would run on the debugger's state as
    its other threads left it)."""
    import gc
    parent = os.getpid()
    r, w = os.pipe()

    class Finalized:
        def __del__(self):
            if os.getpid() != parent:
                os.write(w, b"x")

    def fn(part):
        if os.getpid() != parent:
            gc.collect()
        time.sleep(0.01)
        return part
    gc.disable()
    try:
        garbage = Finalized()
        garbage.me = garbage
        del garbage
        assert parallel.run(fn, list(range(8)), 2) == list(range(8))
    finally:
        gc.enable()
        gc.collect()
        os.close(w)
    with os.fdopen(r, "rb") as fh:
        assert fh.read() == b""
    assert _no_children_left()
