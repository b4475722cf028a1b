"""What the `.gdbinit` line costs where SFrame is not needed.  Prints figures and ratios; it passes or
fails nothing.

    /usr/bin/python3 bench/bench_zerocost.py [--gdb gdb13,gdb16,gdb18] [--threads 64] [--depth 200] [--rounds 5]

A program (-O2 -fomit-frame-pointer -Wa,--gsframe, its CFI kept: what every SFrame-enabled toolchain
and distribution produces) stops with T threads each D frames deep.  `thread apply all bt` and a
bare frame walk of every thread (gdb.Frame.older() to the end) are timed in GDB without the plugin
and with it sourced, each the best of 7 in its GDB, the two GDBs taking turns for R rounds:

1. all-CFI: the plugin idles: GDB does not call its unwinder at all (the count of calls in one
   more `thread apply all bt` is printed: 0), so what remains of plugin/none is the noise between
   two GDB processes (target plugin/none <= 1.03);
2. mixed: the program has also loaded a library with SFrame and no CFI (not on the stacks), so
   the plugin is active and must decline every frame of the CFI modules (target <= 1.2).

Two GDB processes differ by more than the plugin (heap, layout): on this 2-core VM the best of 7 of
`bt` moves by 10-20 % between two runs of the same GDB.  So the plugin's GDB also times rounds in
itself (`bench-pair`): no Python unwinder, the floor, and the plugin's unwinder, each in GDB's list
alone (the order rotates), the ratio against none per round, the median of 9 rounds per run: what
an unwinder costs per frame with everything else equal.

The floor is the least any Python unwinder costs that must learn a frame's PC to decline it: it
reads the PC the cheapest way the GDB allows (`PendingFrame.pc()`, GDB 14+; before, the PC
register by its descriptor, and the value made an int) and declines.  In the mixed case the
plugin can at best match it; what it adds is plugin/floor.

GDB 13 is the host's, GDB 16 the trixie root's, GDB 18 the sid root's; each runs the program built
by its own toolchain.

    /usr/bin/python3 bench/bench_zerocost.py --count [--cache] [--gdb ...] [--threads 8]

counts instead of timing: each GDB runs under callgrind, and the instructions it executes in one
`thread apply all bt` and one frame walk (after one of each to warm up; a client request zeroes
callgrind's counters before and dumps them after) are compared, GDB without the plugin against GDB
with the floor (mixed case) and with the plugin.  An instruction count does not move with the
machine's load: the same GDB and stop give the same count to a few parts in 100,000, so one run of
each is the figure.  It is not the time (Python runs at fewer instructions per cycle than GDB's C),
so both are reported.  With --cache, callgrind also simulates the caches and branch predictors and
the figure includes the usual cycle estimate, instructions + 10 x (first-level cache misses +
mispredicted branches) + 100 x last-level misses: still independent of the load, closer to time.
"""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from common import INROOT, REPO

PROGRAM = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int depth;
static pthread_barrier_t all_deep;
volatile int sink;
__attribute__((noinline)) void ready(void) { sink++; }
__attribute__((noinline)) int dive(int n)
{
    char pad[24];
    pad[n & 7] = (char)n;
    if (n > 0)
        return dive(n - 1) + pad[3];
    pthread_barrier_wait(&all_deep);
    for (;;)
        pause();
    return 0;
}
static void *worker(void *arg) { (void)arg; dive(depth); return NULL; }
int main(int argc, char **argv)
{
    int threads = atoi(argv[1]);
    depth = atoi(argv[2]);
    if (argc > 3 && !dlopen(argv[3], RTLD_NOW)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    pthread_barrier_init(&all_deep, NULL, threads + 1);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 1 << 20);
        pthread_create(&t, &a, worker, NULL);
    }
    pthread_barrier_wait(&all_deep);
    usleep(200000);             /* every worker back in pause(), not still leaving the barrier */
    ready();
    for (;;)
        pause();
}
"""
LIBRARY = r"""
volatile int lib_sink;
__attribute__((noinline)) int lib_f(int x) { char b[32]; b[x & 7] = x; return b[3] + lib_sink; }
"""

TIMER = r'''
import time
import gdb
import gdb.unwinder

def _flush():
    gdb.execute("maint flush register-cache", to_string=True)

def _bt():
    gdb.execute("thread apply all bt", to_string=True)


_walked = [0]


class Walk(gdb.Command):
    """bench-walk: every thread's frames, gdb.Frame.older() to the end."""

    def __init__(self):
        super().__init__("bench-walk", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        n = 0
        for thread in gdb.selected_inferior().threads():
            thread.switch()
            f = gdb.newest_frame()
            while f is not None:
                n += 1
                f = f.older()
        _walked[0] = n

Walk()


def _walk():
    # A command of its own, as at the prompt: GDB frees the values a command made when it ends
    # (GDB 13 reads a register from Python the slower the more values the running command holds).
    gdb.execute("bench-walk", to_string=True)
    return _walked[0]

class Time(gdb.Command):
    def __init__(self):
        super().__init__("bench-time", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        label, reps = arg.split()
        for what, fn in (("bt", _bt), ("walk", _walk)):
            best = None
            for _ in range(int(reps)):
                _flush()
                t = time.perf_counter()
                fn()
                t = time.perf_counter() - t
                best = t if best is None else min(best, t)
            gdb.write("TIME %s-%s %.6f\n" % (label, what, best))
        gdb.write("FRAMES %s %d\n" % (label, _walk()))
        ours = [u for u in gdb.frame_unwinders if getattr(u, "name", "") == "sframe"]
        if ours:
            # How often GDB called the plugin's unwinder in one more `thread apply all bt`.
            cls, calls = type(ours[0]), [0]
            plain = cls.__call__

            def counted(self, pf):
                calls[0] += 1
                return plain(self, pf)
            cls.__call__ = counted
            try:
                _flush()
                _bt()
            finally:
                cls.__call__ = plain
            gdb.write("CALLS %s %d\n" % (label, calls[0]))

Time()


class Floor(gdb.unwinder.Unwinder):
    """The least a Python unwinder costs that must learn a frame's PC to decline it: the PC read
    the cheapest way this GDB allows, then None."""

    def __init__(self):
        super().__init__("bench-floor")
        self.pc_desc = None

    if hasattr(gdb.PendingFrame, "pc"):
        def __call__(self, pf):
            pf.pc()
            return None
    else:
        def __call__(self, pf):
            d = self.pc_desc
            if d is None:
                d = self.pc_desc = [r for r in pf.architecture().registers() if r.name in ("rip", "pc")][0]
            int(pf.read_register(d))
            return None


FLOOR = Floor()


def _floor_on():
    gdb.frame_unwinders.insert(0, FLOOR)


def _only(ours, unwinder):
    """GDB's list of Python unwinders: `unwinder` alone (None: none) among the plugin's and the floor."""
    for u in ours + [FLOOR]:
        if u in gdb.frame_unwinders:
            gdb.frame_unwinders.remove(u)
    if unwinder is not None:
        gdb.frame_unwinders.insert(0, unwinder)


class Pair(gdb.Command):
    """bench-pair N: N rounds of timings in this one GDB: no Python unwinder, the floor's, the
    plugin's (the order rotates from round to round): the same process, heap and caches for all,
    so that only what an unwinder costs per frame differs.  Prints the median over the rounds of
    the ratio against none, for the plugin and for the floor, and of plugin/floor."""

    def __init__(self):
        super().__init__("bench-pair", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        ours = [u for u in gdb.frame_unwinders if getattr(u, "name", "") == "sframe"]
        sides = [("none", None), ("floor", FLOOR), ("plugin", ours[0] if ours else None)]
        ratios = {}
        for i in range(int(arg)):
            for what, fn in (("bt", _bt), ("walk", _walk)):
                t = {}
                for name, unwinder in sides[i % 3:] + sides[:i % 3]:
                    _only(ours, unwinder)
                    _flush()
                    start = time.perf_counter()
                    fn()
                    t[name] = time.perf_counter() - start
                for a, b in (("plugin", "none"), ("floor", "none"), ("plugin", "floor")):
                    ratios.setdefault((what, a, b), []).append(t[a] / t[b])
        _only(ours, ours[0] if ours else None)
        for (what, a, b), r in ratios.items():
            r.sort()
            gdb.write("PAIR %s %s/%s %.4f %d\n" % (what, a, b, r[len(r) // 2], len(ours)))

Pair()
'''

COUNTER = r"""
#include <valgrind/callgrind.h>
/* Client requests for callgrind, from GDB's Python (ctypes): no-ops outside valgrind. */
void bench_zero(void) { CALLGRIND_ZERO_STATS; }
void bench_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""

COUNT = r'''

class Count(gdb.Command):
    """bench-count LABEL COUNTER: under callgrind, GDB's instructions in one `thread apply all bt`
    and in one frame walk, each dumped as LABEL-bt and LABEL-walk (COUNTER: the library that makes
    callgrind's client requests)."""

    def __init__(self):
        super().__init__("bench-count", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        import ctypes
        label, counter = arg.split()
        cg = ctypes.CDLL(counter)
        for fn in (_bt, _walk):                 # warm: imports, symbols, caches made on first use
            _flush()
            fn()
        for what, fn in (("bt", _bt), ("walk", _walk)):
            _flush()
            cg.bench_zero()
            fn()
            cg.bench_dump(("%s-%s" % (label, what)).encode())
        gdb.write("FRAMES %s %d\n" % (label, _walk()))

Count()
'''

PAIRS = 9      # pairs per GDB run of the paired measurement

GDBS = {"gdb13": None, "gdb16": "trixie", "gdb18": "sid"}


def _run(root, argv, cwd):
    if root is None:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True)
    env = dict(os.environ, SFRAME_BINDS="%s:%s" % (REPO, cwd))
    return subprocess.run([str(INROOT), root] + argv, cwd=cwd, capture_output=True, text=True, check=True, env=env)


def build(root, work, count=False):
    (work / "prog.c").write_text(PROGRAM)
    (work / "lib.c").write_text(LIBRARY)
    flags = "-O2 -fomit-frame-pointer -Wa,--gsframe"
    _run(root, ["sh", "-c", "gcc %s -pthread -o prog prog.c -ldl && gcc %s -shared -fPIC -o libcfi.so lib.c && "
                "objcopy -R .eh_frame -R .eh_frame_hdr libcfi.so libsf.so" % (flags, flags)], work)
    if count:
        (work / "counter.c").write_text(COUNTER)
        _run(root, ["gcc", "-O2", "-shared", "-fPIC", "-o", "counter.so", "counter.c"], work)


def _commands(work, who, threads, depth, lib, last):
    """GDB's command line and script; `who`: "none", "floor" (the floor unwinder alone) or "plugin"."""
    lines = ["set pagination off", "set confirm off", "set print thread-events off", "set startup-with-shell off",
             "source %s" % (work / "timer.py")]
    if who == "plugin":
        lines.append("source %s" % (REPO / "sframe_gdb.py"))
    elif who == "floor":
        lines.append("python _floor_on()")
    args = "%d %d%s" % (threads, depth, " %s" % (work / lib) if lib else "")
    lines += ["file %s" % (work / "prog"), "break ready", "run %s" % args] + last + ["kill"]
    (work / "cmds").write_text("\n".join(lines) + "\n")
    return ["gdb", "-nx", "-batch", "-x", str(work / "cmds")]


def measure(root, work, plugin, threads, depth, lib):
    last = ["bench-time %s 7" % ("plugin" if plugin else "none")] + \
        (["bench-pair %d" % PAIRS, "info sframe"] if plugin else [])
    out = _run(root, _commands(work, "plugin" if plugin else "none", threads, depth, lib, last), work).stdout
    times = {m.group(1).split("-", 1)[1]: float(m.group(2)) for m in re.finditer(r"^TIME (\S+) (\S+)$", out, re.M)}
    frames = re.search(r"^FRAMES \S+ (\d+)$", out, re.M)
    if len(times) != 2 or frames is None:
        raise SystemExit("the benchmark did not run:\n" + out[-3000:])
    state = re.search(r"^SFrame unwinder: (\w+)", out, re.M)
    pairs = {(m.group(1), m.group(2)): float(m.group(3))
             for m in re.finditer(r"^PAIR (\S+) (\S+) (\S+) 1$", out, re.M)}
    if plugin and len(pairs) != 6:
        raise SystemExit("the paired benchmark did not run:\n" + out[-3000:])
    calls = re.search(r"^CALLS \S+ (\d+)$", out, re.M)
    return times, int(frames.group(1)), state.group(1) if state else "-", pairs, calls and int(calls.group(1))


# callgrind's cache and branch events and their weights in the usual cycle estimate
_MISS_WEIGHTS = {"I1mr": 10, "D1mr": 10, "D1mw": 10, "Bcm": 10, "Bim": 10, "ILmr": 100, "DLmr": 100, "DLmw": 100}
CACHE_SIM = ["--cache-sim=yes", "--branch-sim=yes"]


def _figure(text, cycles):
    """A callgrind dump's instructions, or with `cycles` its cycle estimate."""
    events = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    totals = [int(x) for x in re.search(r"^totals: (.+)$", text, re.M).group(1).split()]
    got = dict(zip(events, totals))
    if not cycles:
        return got["Ir"]
    return got["Ir"] + sum(w * got.get(e, 0) for e, w in _MISS_WEIGHTS.items())


def count(root, work, who, threads, depth, lib, cycles=False):
    """{"bt": figure, "walk": figure}, frames, the unwinder's state: what GDB executes, under
    callgrind; the figure is its instructions, or with `cycles` the cycle estimate."""
    out_file = work / ("callgrind.%s" % who)
    for old in work.glob(out_file.name + "*"):
        old.unlink()
    gdb_argv = _commands(work, who, threads, depth, lib,
                         ["bench-count %s %s" % (who, work / "counter.so")] + (["info sframe"] if who == "plugin" else []))
    out = _run(root, ["valgrind", "--tool=callgrind"] + (CACHE_SIM if cycles else []) +
               ["--trace-children=no", "--callgrind-out-file=%s" % out_file] + gdb_argv, work).stdout
    counts = {}
    for dump in work.glob(out_file.name + ".*"):
        text = dump.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: %s-(\w+)$" % who, text, re.M)
        if trigger:
            counts[trigger.group(1)] = _figure(text, cycles)
    frames = re.search(r"^FRAMES \S+ (\d+)$", out, re.M)
    if set(counts) != {"bt", "walk"} or frames is None:
        raise SystemExit("the count did not run:\n" + out[-3000:])
    state = re.search(r"^SFrame unwinder: (\w+)", out, re.M)
    return counts, int(frames.group(1)), state.group(1) if state else "-"


def main_count(args):
    unit = "estimated cycles (callgrind, caches and branches simulated)" if args.cache else "instructions (callgrind)"
    for which in args.gdb.split(","):
        root = GDBS[which]
        work = Path(tempfile.mkdtemp(prefix="zerocost-", dir="/tmp"))
        try:
            (work / "timer.py").write_text(TIMER + COUNT)
            build(root, work, count=True)
            for case, lib in (("all-CFI", None), ("mixed", "libsf.so")):
                none, frames, _ = count(root, work, "none", args.threads, args.depth, lib, args.cache)
                plugin, frames_plugin, state = count(root, work, "plugin", args.threads, args.depth, lib, args.cache)
                floor = count(root, work, "floor", args.threads, args.depth, lib, args.cache)[0] if lib else None
                target = 1.03 if lib is None else 1.2
                print("%s %s: %d threads x %d frames (%d frames), the plugin %s; GDB's %s:"
                      % (which, case, args.threads, args.depth, frames, state, unit))
                for what in ("bt", "walk"):
                    print("  %-4s none %d (%.0f a frame), plugin %d (%.0f a frame): plugin/none %.4f (target <= %.2f)%s%s"
                          % (what, none[what], none[what] / frames, plugin[what], plugin[what] / frames,
                             plugin[what] / none[what], target,
                             "" if floor is None else "; floor/none %.4f, plugin/floor %.4f" % (
                                 floor[what] / none[what], plugin[what] / floor[what]),
                             "" if frames_plugin == frames else "  !! %d frames with the plugin" % frames_plugin))
        finally:
            shutil.rmtree(work)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gdb", default="gdb13,gdb16,gdb18")
    p.add_argument("--threads", type=int, default=None, help="default: 64, with --count 8")
    p.add_argument("--depth", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--count", action="store_true", help="count GDB's instructions under callgrind instead of timing")
    p.add_argument("--cache", action="store_true", help="with --count: the cycle estimate (caches and branches simulated)")
    args = p.parse_args()
    if args.threads is None:
        args.threads = 8 if args.count else 64
    if args.count:
        return main_count(args)
    for which in args.gdb.split(","):
        root = GDBS[which]
        work = Path(tempfile.mkdtemp(prefix="zerocost-", dir="/tmp"))
        try:
            (work / "timer.py").write_text(TIMER)
            build(root, work)
            for case, lib in (("all-CFI", None), ("mixed", "libsf.so")):
                best = {}
                frames = {}
                paired: dict = {}
                state = "-"
                calls = None
                for _ in range(args.rounds):
                    for plugin in (False, True):
                        times, n, st, got, c = measure(root, work, plugin, args.threads, args.depth, lib)
                        key = "plugin" if plugin else "none"
                        frames[key] = n
                        if plugin:
                            state, calls = st, c
                            for what, r in got.items():
                                paired.setdefault(what, []).append(r)
                        for what, t in times.items():
                            best[(key, what)] = min(t, best.get((key, what), t))
                target = 1.03 if lib is None else 1.2
                print("%s %s: %d threads x %d frames (%d frames), the plugin %s, called %s times by GDB in a "
                      "`thread apply all bt`; best of %d x 7:"
                      % (which, case, args.threads, args.depth, frames["none"], state, calls, args.rounds))
                for what in ("bt", "walk"):
                    none, plugin = best[("none", what)], best[("plugin", what)]
                    print("  %-4s none %.3f s, plugin %.3f s: plugin/none %.3f (target <= %.2f)%s"
                          % (what, none, plugin, plugin / none, target,
                             "" if frames["plugin"] == frames["none"] else "  !! %d frames with the plugin"
                             % frames["plugin"]))
                print("  in one GDB (no Python unwinder, the floor, the plugin, in turn; per run the median of %d "
                      "rounds; %d runs):" % (PAIRS, args.rounds))
                for what in ("bt", "walk"):
                    runs = {ratio: " ".join("%.3f" % r for r in paired[(what, ratio)])
                            for ratio in ("plugin/none", "floor/none", "plugin/floor")}
                    print("    %-4s plugin/none %s (target <= %.2f); floor/none %s; plugin/floor %s"
                          % (what, runs["plugin/none"], target, runs["floor/none"], runs["plugin/floor"]))
        finally:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
