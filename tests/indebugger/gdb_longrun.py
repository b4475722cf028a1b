"""Sourced into GDB by tests/test_reliability.py and bench/long_session.py: `long-run`, a long
debugging session in one command, with its figures.

The program is tests/fixtures/longrun.c.  At every stop (stop_here, lib_stop_here) the
backtrace is taken as `bt` takes it, and its first frames must be the program's call chain,
unwound by the SFrame plugin; the library is dlopen'ed and dlclose'd again and again, at other
addresses each time.  GDB's resident memory is sampled once the first tenth of each phase (the
warm-up) is done, and then at every stop.  One line of figures at the end:

  LONGRUN phase=P stops=N bad=B addresses=A rss_warm=KiB rss_mid=KiB rss_max=KiB rss_end=KiB rss_low2=KiB rss_low4=KiB ms_per_stop=T
"""

import os
import sys
import time

import gdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from longrun_common import LIB_CHAIN, STOP_CHAIN, Phase  # noqa: E402

CHAINS = {"stop_here": STOP_CHAIN, "lib_stop_here": LIB_CHAIN}


def _sframe_levels():
    try:
        import sframekit.sframe_gdb.plugin as p
    except ImportError:
        return {}
    plugin = p.current()
    return plugin.unwinder.last if plugin is not None else {}


class LongRun(gdb.Command):
    """long-run STOPS LOADS: continue through every stop of the running longrun program."""

    def __init__(self):
        super().__init__("long-run", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        stops, loads = (int(x) for x in gdb.string_to_argv(arg))
        phases = {"stop_here": Phase("stops", stops), "lib_stop_here": Phase("loads", loads)}
        t = time.perf_counter()
        while gdb.selected_inferior().pid:
            frame = gdb.newest_frame()
            phase = phases.get(frame.name())
            if phase is None:
                gdb.write("LONGRUN unexpected stop in %s\n" % frame.name())
                break
            gdb.execute("bt", to_string=True)              # as a user would
            names, f = [], frame
            while f is not None and len(names) < len(CHAINS[frame.name()]):
                names.append(f.name())
                f = f.older()
            levels = _sframe_levels()
            ok = tuple(names) == CHAINS[frame.name()] and all(levels.get(i) is not None for i in range(4))
            phase.record(ok, int(frame.pc()), time.perf_counter() - t, ",".join(map(str, names)))
            gdb.execute("continue", to_string=True)
            t = time.perf_counter()
        for phase in phases.values():
            gdb.write(phase.line() + "\n")


LongRun()
