"""Sourced into GDB by tests/test_reliability.py and bench/long_session.py: `long-run`, a long
debugging session in one command, with its figures.

The program is tests/fixtures/longrun.c.  At every stop (stop_here, lib_stop_here) the
backtrace is taken as `bt` takes it, and its first frames must be the program's call chain,
unwound by the SFrame plugin; the library is dlopen'ed and dlclose'd again and again, at other
addresses each time.  GDB's resident memory is sampled once the first tenth of each phase (the
warm-up) is done, and then at every stop.  One line of figures at the end:

  LONGRUN phase=P stops=N bad=B addresses=A rss_warm=KiB rss_max=KiB rss_end=KiB ms_per_stop=T
"""

import time

import gdb

CHAINS = {"stop_here": ("stop_here", "chain_b", "chain_a", "one_round", "main"),
          "lib_stop_here": ("lib_stop_here", "lib_middle", "load_round", "main")}    # fix_entry tail-calls


def rss_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _sframe_levels():
    try:
        import sframekit.sframe_gdb.plugin as p
    except ImportError:
        return {}
    plugin = p.current()
    return plugin.unwinder.last if plugin is not None else {}


class Phase:
    def __init__(self, name, expected):
        self.name = name
        self.expected = expected
        self.stops = self.bad = 0
        self.addresses = set()
        self.warm = self.max = self.end = 0
        self.seconds = 0.0
        self.first_bad = None


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
            if not ok:
                phase.bad += 1
                phase.first_bad = phase.first_bad or names
            phase.addresses.add(int(frame.pc()))
            phase.stops += 1
            rss = rss_kib()
            if phase.stops == max(phase.expected // 10, 1):
                phase.warm = rss
            if phase.warm:
                phase.max = max(phase.max, rss)
            phase.end = rss
            now = time.perf_counter()
            phase.seconds += now - t
            gdb.execute("continue", to_string=True)
            t = time.perf_counter()
        for phase in phases.values():
            gdb.write("LONGRUN phase=%s stops=%d bad=%d addresses=%d rss_warm=%d rss_max=%d rss_end=%d "
                      "ms_per_stop=%.2f%s\n" % (
                          phase.name, phase.stops, phase.bad, len(phase.addresses), phase.warm, phase.max,
                          phase.end, 1e3 * phase.seconds / max(phase.stops, 1),
                          " first_bad=%s" % ",".join(map(str, phase.first_bad)) if phase.first_bad else ""))


LongRun()
