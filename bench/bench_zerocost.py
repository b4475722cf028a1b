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
`bt` moves by 10-20 % between two runs of the same GDB.  So the plugin's GDB also times pairs in
itself (`bench-pair`): the plugin's unwinder taken out of GDB's list, then put back (the order
alternates), the ratio per pair, the median of 9 pairs per run: what the unwinder costs per frame
with everything else equal.

GDB 13 is the host's, GDB 16 the trixie root's, GDB 18 the sid root's; each runs the program built
by its own toolchain.

    /usr/bin/python3 bench/bench_zerocost.py --count [--gdb ...] [--threads 8]

counts instead of timing: each GDB runs under callgrind, and the instructions it executes in one
`thread apply all bt` and one frame walk (after one of each to warm up; a client request zeroes
callgrind's counters before and dumps them after) are compared, GDB without the plugin against GDB
with it.  An instruction count does not move with the machine's load: the same GDB and stop give
the same count to a few parts in 100,000, so one run of each is the figure.  It is not the time
(the plugin's Python runs at fewer instructions per cycle than GDB's C), so both are reported.
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


def _set_present(ours, present):
    for u in ours:
        if present and u not in gdb.frame_unwinders:
            gdb.frame_unwinders.insert(0, u)
        elif not present and u in gdb.frame_unwinders:
            gdb.frame_unwinders.remove(u)


class Pair(gdb.Command):
    """bench-pair N: N pairs of timings in this one GDB, the plugin's unwinder taken out of GDB's
    list for one and in it for the other (which first alternates): the same process, heap and
    caches on both sides, so that only what the unwinder costs per frame differs.  Prints the
    median of the N ratios."""

    def __init__(self):
        super().__init__("bench-pair", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        ours = [u for u in gdb.frame_unwinders if getattr(u, "name", "") == "sframe"]
        ratios = {"bt": [], "walk": []}
        for i in range(int(arg)):
            for what, fn in (("bt", _bt), ("walk", _walk)):
                t = {}
                for present in ((False, True) if i % 2 == 0 else (True, False)):
                    _set_present(ours, present)
                    _flush()
                    start = time.perf_counter()
                    fn()
                    t[present] = time.perf_counter() - start
                ratios[what].append(t[True] / t[False])
        _set_present(ours, True)
        for what, r in ratios.items():
            r.sort()
            gdb.write("PAIR %s %.4f %d\n" % (what, r[len(r) // 2], len(ours)))

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


def _commands(work, plugin, threads, depth, lib, last):
    lines = ["set pagination off", "set confirm off", "set print thread-events off", "set startup-with-shell off",
             "source %s" % (work / "timer.py")]
    if plugin:
        lines.append("source %s" % (REPO / "sframe_gdb.py"))
    args = "%d %d%s" % (threads, depth, " %s" % (work / lib) if lib else "")
    lines += ["file %s" % (work / "prog"), "break ready", "run %s" % args] + last + ["kill"]
    (work / "cmds").write_text("\n".join(lines) + "\n")
    return ["gdb", "-nx", "-batch", "-x", str(work / "cmds")]


def measure(root, work, plugin, threads, depth, lib):
    last = ["bench-time %s 7" % ("plugin" if plugin else "none")] + \
        (["bench-pair %d" % PAIRS, "info sframe"] if plugin else [])
    out = _run(root, _commands(work, plugin, threads, depth, lib, last), work).stdout
    times = {m.group(1).split("-", 1)[1]: float(m.group(2)) for m in re.finditer(r"^TIME (\S+) (\S+)$", out, re.M)}
    frames = re.search(r"^FRAMES \S+ (\d+)$", out, re.M)
    if len(times) != 2 or frames is None:
        raise SystemExit("the benchmark did not run:\n" + out[-3000:])
    state = re.search(r"^SFrame unwinder: (\w+)", out, re.M)
    pairs = {m.group(1): float(m.group(2)) for m in re.finditer(r"^PAIR (\S+) (\S+) 1$", out, re.M)}
    if plugin and len(pairs) != 2:
        raise SystemExit("the paired benchmark did not run:\n" + out[-3000:])
    calls = re.search(r"^CALLS \S+ (\d+)$", out, re.M)
    return times, int(frames.group(1)), state.group(1) if state else "-", pairs, calls and int(calls.group(1))


def count(root, work, plugin, threads, depth, lib):
    """{"bt": instructions, "walk": instructions}, frames: what GDB executes, under callgrind."""
    label = "plugin" if plugin else "none"
    out_file = work / ("callgrind.%s" % label)
    for old in work.glob(out_file.name + "*"):
        old.unlink()
    gdb_argv = _commands(work, plugin, threads, depth, lib,
                         ["bench-count %s %s" % (label, work / "counter.so")] + (["info sframe"] if plugin else []))
    out = _run(root, ["valgrind", "--tool=callgrind", "--trace-children=no", "--callgrind-out-file=%s" % out_file]
               + gdb_argv, work).stdout
    counts = {}
    for dump in work.glob(out_file.name + ".*"):
        text = dump.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: Client Request: %s-(\w+)$" % label, text, re.M)
        total = re.search(r"^totals: (\d+)", text, re.M)
        if trigger and total:
            counts[trigger.group(1)] = int(total.group(1))
    frames = re.search(r"^FRAMES \S+ (\d+)$", out, re.M)
    if set(counts) != {"bt", "walk"} or frames is None:
        raise SystemExit("the count did not run:\n" + out[-3000:])
    state = re.search(r"^SFrame unwinder: (\w+)", out, re.M)
    return counts, int(frames.group(1)), state.group(1) if state else "-"


def main_count(args):
    for which in args.gdb.split(","):
        root = GDBS[which]
        work = Path(tempfile.mkdtemp(prefix="zerocost-", dir="/tmp"))
        try:
            (work / "timer.py").write_text(TIMER + COUNT)
            build(root, work, count=True)
            for case, lib in (("all-CFI", None), ("mixed", "libsf.so")):
                none, frames, _ = count(root, work, False, args.threads, args.depth, lib)
                plugin, frames_plugin, state = count(root, work, True, args.threads, args.depth, lib)
                target = 1.03 if lib is None else 1.2
                print("%s %s: %d threads x %d frames (%d frames), the plugin %s; GDB's instructions (callgrind):"
                      % (which, case, args.threads, args.depth, frames, state))
                for what in ("bt", "walk"):
                    print("  %-4s none %d (%.0f a frame), plugin %d (%.0f a frame): plugin/none %.4f (target <= %.2f)%s"
                          % (what, none[what], none[what] / frames, plugin[what], plugin[what] / frames,
                             plugin[what] / none[what], target,
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
                print("  paired in one GDB (the unwinder out of GDB's list, then in; median of %d pairs per run, "
                      "runs: %s): bt %s, walk %s (target <= %.2f)" % (
                          PAIRS, args.rounds, " ".join("%.3f" % r for r in paired["bt"]),
                          " ".join("%.3f" % r for r in paired["walk"]), target))
        finally:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
