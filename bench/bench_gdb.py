"""Benchmarks of the GDB plugin.  Prints figures and ratios; it passes or fails nothing.

    /usr/bin/python3 bench/bench_gdb.py [--gdb gdb13|gdb18|both] [--depth N] [--quick] [--only deep|many|nosframe|cfi]

1. `bt` of a deep recursion (20,000 frames by default), on the same stop of the same run:
   GDB's own DWARF unwinder, then the SFrame unwinder with GDB's DWARF unwinders off.
   Ratio SFrame / DWARF (target <= 2.0).  `bt` prints every frame's arguments, which costs GDB
   far more than unwinding, so `bt -frame-arguments none` and a bare frame walk
   (gdb.Frame.older() to the end) are timed too: they show the unwinders' own cost.  Then the
   same with `set sframe callee-saved off`: the extra cost per frame of recovering the callers'
   callee-saved registers (the save-slot analysis and the slot reads).
2. With a 50,000-function binary loaded (bench/common.py many_functions_binary()): the time to
   `source sframe_gdb.py`, and `info sframe ADDR` (the first one builds the index; target < 100 ms).
3. The same recursion built without .sframe: `bt` with the plugin sourced / without it, same
   run (target <= 1.1).
4. The same recursion with .sframe and its .eh_frame (5,000 frames by default), GDB's DWARF
   unwinders on: the plugin in mode auto must leave every frame to DWARF; `bt` with the plugin
   sourced / without it, same run (target <= 1.1).

GDB 13 is the host's (programs built by the host toolchain, SFrame V1), GDB 18 the sid root's
(programs built there, SFrame V3).
"""

import argparse
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import INROOT, REPO, ROOTS, WORK, many_functions_binary

PLUGIN = REPO / "sframe_gdb.py"
RECURSE_C = REPO / "tests" / "fixtures" / "recurse.c"

# GDB-side helper: `bench-time LABEL REPS COMMAND` runs COMMAND REPS times (frames flushed before
# each) and prints "TIME LABEL best median"; `bench-walk LABEL REPS` times a bare frame walk.
# A negative REPS runs the command once untimed first (GDB's symbol and line caches warm up).
# Each timing is its own top-level command, so GDB frees the values of one before the next.
HELPER = textwrap.dedent('''
    import statistics
    import time
    import gdb

    def _walk():
        f = gdb.newest_frame()
        n = 0
        while f is not None:
            n += 1
            f = f.older()
        return n

    class BenchTime(gdb.Command):
        def __init__(self, name):
            super().__init__(name, gdb.COMMAND_USER)
            self.name = name

        def invoke(self, arg, from_tty):
            label, reps, cmd = (arg.split(None, 2) + [""])[:3]
            times = []
            count = 0
            reps = int(reps)
            if reps < 0:
                reps = -reps
                gdb.invalidate_cached_frames()
                if self.name == "bench-walk":
                    _walk()
                else:
                    gdb.execute(cmd, to_string=True)
            for _ in range(reps):
                gdb.invalidate_cached_frames()
                t = time.perf_counter()
                if self.name == "bench-walk":
                    count = _walk()
                else:
                    count = gdb.execute(cmd, to_string=True).count("\\n")
                times.append(time.perf_counter() - t)
            gdb.write("TIME %s %.6f %.6f %d\\n" % (label, min(times), statistics.median(times), count))

    BenchTime("bench-time")
    BenchTime("bench-walk")
''')


def run_gdb(which, lines, workdir, timeout=3600):
    helper = Path(workdir) / "bench_helper.py"
    helper.write_text(HELPER)
    script = Path(workdir) / "bench.gdb"
    script.write_text("\n".join(["set pagination off", "set confirm off", "set width 0",
                                 "set startup-with-shell off", "source %s" % helper] + lines) + "\n")
    argv = ["gdb", "-nx", "-batch", "-x", str(script)]
    if which == "gdb18":
        subprocess.run([str(ROOTS), "sid"], check=True, stdout=subprocess.DEVNULL)
        argv = [str(INROOT), "sid"] + argv
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=dict(__import__("os").environ, SFRAME_BINDS=str(REPO)))
    times = {}
    for m in re.finditer(r"^TIME (\S+) (\S+) (\S+) (\d+)$", proc.stdout, re.M):
        times[m.group(1)] = (float(m.group(2)), float(m.group(3)), int(m.group(4)))
    return times, proc.stdout


def compile_recurse(which, out, sframe=True):
    flags = ["-g", "-O2", "-fomit-frame-pointer"] + (["-Wa,--gsframe"] if sframe else [])
    argv = ["gcc"] + flags + ["-o", str(out), str(RECURSE_C)]
    if which == "gdb18":
        subprocess.run([str(ROOTS), "sid"], check=True, stdout=subprocess.DEVNULL)
        argv = [str(INROOT), "sid"] + argv
    subprocess.run(argv, check=True, env=dict(__import__("os").environ, SFRAME_BINDS=str(REPO)))
    return out


def ratio(a, b):
    return a / b if b else float("nan")


def bench_deep_bt(which, work, depth, reps):
    exe = compile_recurse(which, work / ("recurse-%s" % which))
    lines = ["file %s" % exe, "break stop_here", "run %d" % depth,
             "bench-walk walk-dwarf -%d" % reps,
             "bench-time bt0-dwarf -%d bt -frame-arguments none" % reps,
             "bench-time bt-dwarf 1 bt",
             "source %s" % PLUGIN,
             "maint set dwarf unwinders off" if which == "gdb13" else "maint frame-unwinder disable -name dwarf2",
             "bench-walk walk-sframe -%d" % reps,
             "bench-time bt0-sframe -%d bt -frame-arguments none" % reps,
             "bench-time bt-sframe 1 bt",
             "set sframe callee-saved off",
             "bench-walk walk-nosaves -%d" % reps,
             "bench-time bt0-nosaves -%d bt -frame-arguments none" % reps,
             "kill"]
    t, out = run_gdb(which, lines, work)
    need = ("walk-dwarf", "walk-sframe", "bt0-dwarf", "bt0-sframe", "bt-dwarf", "bt-sframe", "walk-nosaves",
            "bt0-nosaves")
    if not all(k in t for k in need):
        print(out[-3000:])
        raise SystemExit("%s: deep backtrace benchmark did not run" % which)
    frames = t["walk-dwarf"][2]
    assert t["walk-sframe"][2] == frames, (t["walk-sframe"], frames)
    print("%s: deep recursion, %d frames (same stop; SFrame with GDB's DWARF unwinders off):" % (which, frames))
    for key, what in (("bt", "bt"), ("bt0", "bt -frame-arguments none"), ("walk", "frame walk")):
        d, s = t[key + "-dwarf"][0], t[key + "-sframe"][0]
        print("  %-26s DWARF %8.3f s  SFrame %8.3f s  ratio %.2f%s" % (
            what, d, s, ratio(s, d), "  (target <= 2.0)" if key == "bt" else ""))
        print("  %-26s DWARF %8.1f us/frame  SFrame %8.1f us/frame" % ("", d / frames * 1e6, s / frames * 1e6))
    print("  the callee-saved registers' recovery (set sframe callee-saved on / off), same run:")
    for key, what in (("bt0", "bt -frame-arguments none"), ("walk", "frame walk")):
        on, off = t[key + "-sframe"][0], t[key + "-nosaves"][0]
        print("  %-26s on %8.3f s  off %8.3f s  ratio %.2f  (%+.1f us/frame)" % (
            what, on, off, ratio(on, off), (on - off) / frames * 1e6))


def bench_many(which, work):
    exe = many_functions_binary()
    lines = ["file %s" % exe,
             "python import time; _t = time.perf_counter(); gdb.execute('source %s'); "
             "gdb.write('TIME source %%.6f %%.6f 0\\n' %% ((time.perf_counter() - _t,) * 2))" % PLUGIN,
             "bench-time info-first 1 info sframe f25000",
             "bench-time info-next 5 info sframe f31001",
             "bench-time info-table 3 info sframe",
             "starti",
             "bench-time info-running-first 1 info sframe f40002",
             "bench-time info-running-next 5 info sframe f40003",
             "kill"]
    t, out = run_gdb(which, lines, work)
    if "source" not in t or "info-first" not in t:
        print(out[-3000:])
        raise SystemExit("%s: 50,000-function benchmark did not run" % which)
    print("%s: %s (50,000 functions) loaded:" % (which, exe.name))
    print("  source sframe_gdb.py            %7.1f ms  (target < 100 ms)" % (t["source"][0] * 1e3))
    print("  info sframe ADDR, first         %7.1f ms  (builds the index; target < 100 ms)" % (t["info-first"][0] * 1e3))
    print("  info sframe ADDR, next          %7.1f ms" % (t["info-next"][1] * 1e3))
    print("  info sframe (table)             %7.1f ms" % (t["info-table"][1] * 1e3))
    if "info-running-first" in t:
        print("  after starti (PIE relocated): info sframe ADDR first %.1f ms, next %.1f ms" % (
            t["info-running-first"][0] * 1e3, t["info-running-next"][1] * 1e3))


def bench_untouched(which, work, depth, reps, sframe):
    """bt with the plugin sourced / not sourced, where it must leave every frame to GDB: a
    program without .sframe, or (sframe=True) one with .sframe and its DWARF CFI (mode auto)."""
    exe = compile_recurse(which, work / ("recurse-%s-%s" % ("cfi" if sframe else "nosframe", which)), sframe=sframe)
    small = depth if sframe else min(depth, 2000)      # (the CFI target is on `bt` of the whole stack)
    lines = ["file %s" % exe, "break stop_here", "run %d" % depth,
             "bench-time bt0-without -%d bt -frame-arguments none" % reps,
             "bench-walk walk-without -%d" % reps,
             "source %s" % PLUGIN,
             "bench-time bt0-with -%d bt -frame-arguments none" % reps,
             "bench-walk walk-with -%d" % reps,
             "kill", "delete", "break stop_here", "run %d" % small,
             "bench-time bt-without -1 bt",
             "set sframe off", "set sframe on",
             "bench-time bt-with -1 bt",
             "kill"]
    t, out = run_gdb(which, lines, work)
    if not all(k in t for k in ("bt0-without", "bt0-with", "bt-without", "bt-with")):
        print(out[-3000:])
        raise SystemExit("%s: %s benchmark did not run" % (which, "CFI" if sframe else "no-SFrame"))
    print("%s: recursion built %s, plugin sourced / not sourced (target <= 1.1):" % (
        which, "with .sframe and .eh_frame (mode auto leaves it to DWARF)" if sframe else "without .sframe"))
    for key, what, _n in (("bt0", "bt -frame-arguments none", t["bt0-with"][2]),
                         ("walk", "frame walk", t["walk-with"][2]),
                         ("bt", "bt (%d frames)" % (small + 3), t["bt-with"][2])):
        a, b = t[key + "-without"][0], t[key + "-with"][0]
        print("  %-26s without %8.3f s  with %8.3f s  ratio %.2f" % (what, a, b, ratio(b, a)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gdb", choices=("gdb13", "gdb18", "both"), default="both")
    ap.add_argument("--depth", type=int, default=20000, help="recursion depth (frames) for the bt benchmarks")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the cheaper timings (best is shown)")
    ap.add_argument("--quick", action="store_true", help="depth 2000, one repetition")
    ap.add_argument("--cfi-depth", type=int, default=5000, help="recursion depth for the CFI benchmark")
    ap.add_argument("--only", choices=("deep", "many", "nosframe", "cfi"), help="run one of the four benchmarks")
    args = ap.parse_args()
    if args.quick:
        args.depth, args.reps = 2000, 1
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gdb-", dir=WORK))
    gdbs = ("gdb13", "gdb18") if args.gdb == "both" else (args.gdb,)
    for which in gdbs:
        if args.only in (None, "deep"):
            bench_deep_bt(which, work, args.depth, args.reps)
        if args.only in (None, "many"):
            bench_many(which, work)
        if args.only in (None, "nosframe"):
            bench_untouched(which, work, args.depth, args.reps, sframe=False)
        if args.only in (None, "cfi"):
            bench_untouched(which, work, args.cfi_depth, args.reps, sframe=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
