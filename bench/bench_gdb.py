"""Benchmarks of the GDB plugin.  Prints figures and ratios; it passes or fails nothing.

    /usr/bin/python3 bench/bench_gdb.py [--gdb gdb13|gdb18|both] [--depth N ...] [--rounds R] [--quick]
                                        [--only deep|debug|many|nosframe|cfi]

1. deep: `bt` and a bare frame walk (gdb.Frame.older() to the end) of a recursion built
   -O2 -fomit-frame-pointer without debug info, 5,000 and 20,000 frames, in one GDB run per depth:
   GDB's own DWARF unwinder (Python unwinders off); a "floor" Python unwinder that gives GDB each
   caller's registers from a table filled beforehand (PC, SP and FP; and "floor with callee-saved":
   also the callee-saved registers, what the plugin gives) and does no SFrame work, the least any
   Python unwinder can cost; "floor, values made": the same registers as the floor with
   callee-saved, from integers, their gdb.Values made during the backtrace (each distinct value
   once), which no unwinder that computes registers can avoid; the plugin (DWARF unwinders off),
   with callee-saved recovery on and off.  Each timed run starts from GDB's frames flushed and
   without the gdb.Values made before (as the first backtrace after a stop); the floor's table
   and the plugin's per-PC plans stay.  The configurations take turns for R rounds and the best
   of each is shown, with plugin/DWARF (target <= 1.0 on GDB 18) and plugin/floor (target
   <= 1.25); so are the medians of the ratios within each round (paired: this machine's speed
   drifts between rounds).  The same on a core file of the same stop, and `sframe backtrace
   CORE` against `gdb -batch -ex bt EXE CORE`, as whole processes.
2. debug: the one figure with -g: `bt` prints every argument there, which costs GDB far more
   than unwinding, so it compares the printing more than the unwinders.
3. many: with a 50,000-function binary loaded (bench/common.py many_functions_binary()): the time to
   `source sframe_gdb.py`, and `info sframe ADDR` (the first one builds the index; target < 100 ms).
4. nosframe: the recursion built without .sframe: `bt` with the plugin sourced / without it, same
   run (target <= 1.1).
5. cfi: the recursion with .sframe and its .eh_frame (5,000 frames by default), GDB's DWARF
   unwinders on: the plugin in mode auto must leave every frame to DWARF; `bt` with the plugin
   sourced / without it, same run (target <= 1.1).

GDB 13 is the host's (programs built by the host toolchain, SFrame V1), GDB 18 the sid root's
(programs built there, SFrame V3).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from common import INROOT, REPO, ROOTS, WORK, many_functions_binary

PLUGIN = REPO / "sframe_gdb.py"
RECURSE_C = REPO / "tests" / "fixtures" / "recurse.c"

# GDB-side helper.
# `bench-time LABEL REPS COMMAND` runs COMMAND REPS times (frames flushed before each) and prints
# "TIME LABEL best median lines"; `bench-walk LABEL REPS` times a bare frame walk.  A negative
# REPS runs the command once untimed first (GDB's symbol and line caches warm up).
# `bench-floor-record` fills the floor unwinder's table from the frames GDB has now;
# `bench-compare ROUNDS CONFIG...` times `bt` and the frame walk under each configuration in turn,
# ROUNDS times over (interleaved, so that drift hits every configuration alike), and prints the
# best of each.  Each timing is its own top-level command, so GDB frees the values of one before
# the next.
HELPER = textwrap.dedent('''
    import statistics
    import time
    from collections import deque
    from operator import itemgetter
    import gdb
    import gdb.unwinder

    def _walk():
        f = gdb.newest_frame()
        n = 0
        while f is not None:
            n += 1
            f = f.older()
        return n

    if hasattr(gdb.unwinder, "FrameId"):
        FrameId = gdb.unwinder.FrameId
    else:
        class FrameId:
            def __init__(self, sp, pc):
                self.sp, self.pc = sp, pc

    class Floor(gdb.unwinder.Unwinder):
        """The least a Python unwinder can cost: the caller's registers, as ready gdb.Values saved
        by register descriptor (GDB's cheapest way), and its frame id come from a table filled
        beforehand; no SFrame work at all.  `tables`: PC, SP and FP only; or those and the
        callee-saved registers (what the plugin gives GDB with callee-saved recovery on)."""
        def __init__(self):
            super().__init__("bench-floor")
            self.tables = {}
            self.table = {}
            self.enabled = False

        # __call__ is one of these two, chosen by _configure (not tested at each frame).

        def _from_table(self, pf):
            rec = self.table.get(pf.level())
            if rec is None:
                return None
            fid, regs = rec
            ui = pf.create_unwind_info(fid)
            for name, value in regs:
                ui.add_saved_register(name, value)
            return ui

        def _made(self, pf):
            """"floor, values made": the same registers as "floor with callee-saved", but from
            integers, their gdb.Values made as GDB asks (a value that recurs within the backtrace
            is made once): what no unwinder that computes registers can avoid."""
            level = pf.level()
            rec = self.table.get(level)
            if rec is None:
                return None
            if level == 0:
                MADE.clear()            # a new backtrace: nothing made before it is reused
            fid, descs, nums = rec
            get = MADE.__getitem__
            ui = pf.create_unwind_info(_Id(map(get, fid)))
            deque(map(ui.add_saved_register, descs, map(get, nums)), 0)
            return ui

        __call__ = _from_table

    class _Id(tuple):
        """A frame id made without a Python __init__ (as the plugin's)."""
        __slots__ = ()
        sp = property(itemgetter(0))
        pc = property(itemgetter(1))
        special = None

    class _Made(dict):
        """int -> gdb.Value of a pointer-sized type, made on first use."""
        word = None

        def __missing__(self, n):
            v = self[n] = gdb.Value(n.to_bytes(8, "little"), self.word)
            return v

    MADE = _Made()
    FLOOR = Floor()
    gdb.unwinder.register_unwinder(None, FLOOR, replace=True)

    def _value(frame, name):
        v = frame.read_register(name)
        return gdb.Value(int(v) & 0xffffffffffffffff).cast(v.type)

    class FloorRecord(gdb.Command):
        def __init__(self):
            super().__init__("bench-floor-record", gdb.COMMAND_USER)

        def invoke(self, arg, from_tty):
            # The registers are read from the plugin's frames (each carries its registers): reading a
            # callee-saved register of frame N through DWARF's "same value" rules walks N frames, which
            # makes recording 20,000 frames quadratic.  The plugin's values equal DWARF's (test_gdb).
            _configure("plugin", _dwarf_off(arg.strip()))
            gdb.invalidate_cached_frames()
            f = gdb.newest_frame()
            descs = {d.name: d for d in f.architecture().registers()}
            for kind, names in (("floor", ("rip", "rsp", "rbp")),
                                ("floor-saves", ("rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15"))):
                table = FLOOR.tables[kind] = {}
                f = gdb.newest_frame()
                while f is not None:
                    o = f.older()
                    if o is None:
                        break
                    regs = [(descs[n], _value(o, n)) for n in names]
                    table[f.level()] = (FrameId(gdb.Value(int(o.read_register("rsp"))), gdb.Value(f.pc())), regs)
                    f = o
                gdb.write("%s: %d frames recorded\\n" % (kind, len(table)))
            MADE.word = gdb.newest_frame().read_register("rsp").type
            FLOOR.tables["floor-made"] = {
                level: ((int(fid.sp) & 0xffffffffffffffff, int(fid.pc) & 0xffffffffffffffff), tuple(d for d, _v in regs),
                        tuple(int(v) & 0xffffffffffffffff for _d, v in regs))
                for level, (fid, regs) in FLOOR.tables["floor-saves"].items()}
            _configure("dwarf", _dwarf_off(arg.strip()))

    def _dwarf_off(which):
        if which == "gdb13":
            return ("maint set dwarf unwinders off", "maint set dwarf unwinders on")
        return ("maint frame-unwinder disable -name dwarf2", "maint frame-unwinder enable -name dwarf2")

    def _plugin():
        for u in gdb.frame_unwinders:
            if u.name == "sframe":
                return u
        return None

    def _forget_values():
        """The plugin keeps the gdb.Values it made (values recur from one stop to the next), and
        the "values made" floor keeps them until its next backtrace: each timed run starts
        without them, as the first backtrace after a stop does (the floor's table, like the
        plugin's per-PC plans, stays)."""
        plugin = _plugin()
        for arch in getattr(plugin, "_arches", {}).values():
            if arch is not None:
                arch.values.clear()
        MADE.clear()

    def _configure(config, dwarf_off):
        plugin = _plugin()
        FLOOR.enabled = config.startswith("floor")
        FLOOR.table = FLOOR.tables.get(config, {})
        Floor.__call__ = Floor._made if config == "floor-made" else Floor._from_table
        if plugin is not None:
            plugin.enabled = config.startswith("plugin")
        if config.startswith("plugin"):
            gdb.execute("set sframe callee-saved %s" % ("off" if config == "plugin-nosaves" else "on"))
        try:
            gdb.execute(dwarf_off[1] if config == "dwarf" else dwarf_off[0], to_string=True)
        except gdb.error as exc:      # GDB 16+ refuses to enable (disable) what already is
            if "already" not in str(exc):
                raise

    class BenchCompare(gdb.Command):
        def __init__(self):
            super().__init__("bench-compare", gdb.COMMAND_USER)

        def invoke(self, arg, from_tty):
            # bench-compare ROUNDS GDBVERSION CONFIG...
            words = arg.split()
            rounds, which, configs = int(words[0]), words[1], words[2:]
            dwarf_off = _dwarf_off(which)
            best = {}
            for r in range(rounds + 1):
                for config in configs:
                    _configure(config, dwarf_off)
                    for what in ("walk", "bt"):
                        gdb.invalidate_cached_frames()
                        _forget_values()
                        t = time.perf_counter()
                        if what == "walk":
                            n = _walk()
                        else:
                            n = gdb.execute("bt", to_string=True).count("\\n")
                        t = time.perf_counter() - t
                        if r:         # round 0 warms GDB's caches up
                            key = "%s-%s" % (what, config)
                            best[key] = (min(t, best.get(key, (t,))[0]), n)
                            gdb.write("ROUND %d %s %.6f\\n" % (r, key, t))
            _configure("dwarf", dwarf_off)
            for key, (t, n) in best.items():
                gdb.write("TIME %s %.6f %.6f %d\\n" % (key, t, t, n))

    BenchCompare()
    FloorRecord()

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


def compile_recurse(which, out, sframe=True, debug=False):
    flags = (["-g"] if debug else []) + ["-O2", "-fomit-frame-pointer"] + (["-Wa,--gsframe"] if sframe else [])
    argv = ["gcc"] + flags + ["-o", str(out), str(RECURSE_C)]
    if which == "gdb18":
        subprocess.run([str(ROOTS), "sid"], check=True, stdout=subprocess.DEVNULL)
        argv = [str(INROOT), "sid"] + argv
    subprocess.run(argv, check=True, env=dict(__import__("os").environ, SFRAME_BINDS=str(REPO)))
    return out


def ratio(a, b):
    return a / b if b else float("nan")


CONFIGS = ("dwarf", "floor", "floor-saves", "floor-made", "plugin", "plugin-nosaves")


def _compare_lines(which, rounds):
    """Record the floor's table from GDB's own frames, then time every configuration."""
    return ["source %s" % PLUGIN, "bench-floor-record %s" % which,
            "bench-compare %d %s %s" % (rounds, which, " ".join(CONFIGS))]


def _paired(rounds, a, b):
    """The median over rounds of a's time / b's time in the same round: the configurations of a
    round run back to back, so a change of the machine's speed between rounds cancels out."""
    ratios = [r[a] / r[b] for r in rounds.values() if a in r and b in r and r[b]]
    return statistics.median(ratios) if ratios else float("nan")


def _print_compare(which, what, t, rounds):
    frames = t["walk-dwarf"][1]
    print("%s: %s, %d frames; best of the rounds, same GDB run:" % (which, what, frames))
    for key in CONFIGS:
        if t["walk-%s" % key][1] != frames:
            print("  !! %s walked %d frames, DWARF %d" % (key, t["walk-%s" % key][1], frames))
    for kind, label in (("bt", "bt"), ("walk", "frame walk")):
        d, f, fs, fm, p, n = (t["%s-%s" % (kind, c)][0] for c in CONFIGS)
        us = [x / frames * 1e6 for x in (d, f, fs, fm, p, n)]
        print("  %-10s per frame: DWARF %.1f us; floor %.1f us, with callee-saved %.1f us, values made %.1f us; "
              "plugin %.1f us, callee-saved off %.1f us" % tuple([label] + us))
        print("  %-10s plugin/DWARF %.2f%s   plugin/floor %.2f (target <= 1.25)   floor/DWARF %.2f" % (
            "", ratio(p, d), " (target <= 1.0)" if which == "gdb18" else "", ratio(p, f), ratio(f, d)))
        print("  %-10s same registers given: plugin/floor-with-callee-saved %.2f, plugin/floor-values-made %.2f; "
              "callee-saved off: plugin/floor %.2f, plugin/DWARF %.2f" % (
                  "", ratio(p, fs), ratio(p, fm), ratio(n, f), ratio(n, d)))
        k = kind + "-"
        print("  %-10s paired (median over %d rounds of the ratio within a round): plugin/DWARF %.2f, "
              "plugin/floor %.2f, plugin/floor-with-callee-saved %.2f, plugin/floor-values-made %.2f, "
              "floor-values-made/floor %.2f; callee-saved off: plugin/floor %.2f" % (
                  "", len(rounds), _paired(rounds, k + "plugin", k + "dwarf"), _paired(rounds, k + "plugin", k + "floor"),
                  _paired(rounds, k + "plugin", k + "floor-saves"), _paired(rounds, k + "plugin", k + "floor-made"),
                  _paired(rounds, k + "floor-made", k + "floor"), _paired(rounds, k + "plugin-nosaves", k + "floor")))


def _parse(out):
    return {m.group(1): (float(m.group(2)), int(m.group(4)))
            for m in re.finditer(r"^TIME (\S+) (\S+) (\S+) (\d+)$", out, re.M)}


def _parse_rounds(out):
    rounds = {}
    for m in re.finditer(r"^ROUND (\d+) (\S+) (\S+)$", out, re.M):
        rounds.setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
    return rounds


def bench_deep_bt(which, work, depth, rounds):
    """bt of a deep recursion without debug info: DWARF, floor and plugin, live and from a core."""
    exe = compile_recurse(which, work / ("recurse-nodebug-%s" % which))
    core = work / ("recurse-%s-%d.core" % (which, depth))
    if core.exists():
        core.unlink()
    lines = ["file %s" % exe, "break stop_here", "run %d" % depth] + _compare_lines(which, rounds) + \
        ["gcore %s" % core, "kill"]
    _t, out = run_gdb(which, lines, work)
    t = _parse(out)
    if not all("%s-%s" % (k, c) in t for k in ("bt", "walk") for c in CONFIGS):
        print(out[-3000:])
        raise SystemExit("%s: deep backtrace benchmark did not run" % which)
    _print_compare(which, "live process, recursion built -O2 -fomit-frame-pointer without -g", t, _parse_rounds(out))
    lines = ["file %s" % exe, "core %s" % core] + _compare_lines(which, rounds)
    _t, out = run_gdb(which, lines, work)
    t = _parse(out)
    if not all("%s-%s" % (k, c) in t for k in ("bt", "walk") for c in CONFIGS):
        print(out[-3000:])
        raise SystemExit("%s: core-file backtrace benchmark did not run" % which)
    _print_compare(which, "core file of the same stop", t, _parse_rounds(out))
    bench_cli_core(which, exe, core)


def _best_process(argv, runs=3):
    best = None
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, SFRAME_BINDS=str(REPO)))
        t = time.perf_counter() - t
        best = t if best is None else min(best, t)
    return best, proc.stdout


def bench_cli_core(which, exe, core):
    """`sframe backtrace CORE` (a process) against `gdb -batch -ex bt EXE CORE` (a process)."""
    cli = ["/usr/bin/python3", str(REPO / "scripts" / "sframe"), "backtrace", str(core), "--exe", str(exe)]
    gdb = ["gdb", "-nx", "-batch", "-ex", "bt", str(exe), str(core)]
    if which == "gdb18":
        cli += ["--sysroot", subprocess.run([str(ROOTS), "path", "sid"], check=True, stdout=subprocess.PIPE,
                                            text=True).stdout.strip()]
        gdb = [str(INROOT), "sid"] + gdb
    t_cli, out_cli = _best_process(cli)
    t_gdb, out_gdb = _best_process(gdb)
    n_cli = len(re.findall(r"^#\d+", out_cli, re.M))
    n_gdb = len(re.findall(r"^#\d+", out_gdb, re.M))
    print("%s: core file, whole processes (best of 3): sframe backtrace %.3f s (%d frames), "
          "gdb -batch -ex bt %.3f s (%d frames), ratio %.2f" % (which, t_cli, n_cli, t_gdb, n_gdb, ratio(t_cli, t_gdb)))


def bench_debug_bt(which, work, depth, reps):
    """The one figure with debug info (-g): `bt` then prints every argument, which costs GDB far
    more than unwinding, so it compares mostly the printing, not the unwinders."""
    exe = compile_recurse(which, work / ("recurse-g-%s" % which), debug=True)
    lines = ["file %s" % exe, "break stop_here", "run %d" % depth,
             "bench-time bt-dwarf -%d bt" % reps,
             "source %s" % PLUGIN,
             "maint set dwarf unwinders off" if which == "gdb13" else "maint frame-unwinder disable -name dwarf2",
             "bench-time bt-sframe -%d bt" % reps, "kill"]
    t, out = run_gdb(which, lines, work)
    if "bt-dwarf" not in t or "bt-sframe" not in t:
        print(out[-3000:])
        raise SystemExit("%s: -g backtrace benchmark did not run" % which)
    d, s = t["bt-dwarf"][0], t["bt-sframe"][0]
    print("%s: recursion built with -g, %d frames: bt (prints every argument) DWARF %.3f s, plugin %.3f s, "
          "ratio %.2f" % (which, t["bt-dwarf"][2], d, s, ratio(s, d)))


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
    ap.add_argument("--depth", type=int, action="append",
                    help="recursion depth (frames) for the deep bt benchmark; repeatable (default 5000 and 20000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the deep bt comparison (the best is shown)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the other timings (the best is shown)")
    ap.add_argument("--quick", action="store_true", help="depth 2000, two rounds, one repetition")
    ap.add_argument("--cfi-depth", type=int, default=5000, help="recursion depth for the CFI benchmark")
    ap.add_argument("--only", choices=("deep", "debug", "many", "nosframe", "cfi"), help="run one benchmark")
    args = ap.parse_args()
    depths = args.depth or [5000, 20000]
    if args.quick:
        depths, args.rounds, args.reps = [2000], 2, 1
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gdb-", dir=WORK))
    gdbs = ("gdb13", "gdb18") if args.gdb == "both" else (args.gdb,)
    for which in gdbs:
        if args.only in (None, "deep"):
            for depth in depths:
                bench_deep_bt(which, work, depth, args.rounds)
                sys.stdout.flush()
        if args.only in (None, "debug"):
            bench_debug_bt(which, work, min(depths), args.reps)
        if args.only in (None, "many"):
            bench_many(which, work)
        if args.only in (None, "nosframe"):
            bench_untouched(which, work, max(depths), args.reps, sframe=False)
        if args.only in (None, "cfi"):
            bench_untouched(which, work, args.cfi_depth, args.reps, sframe=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
