"""Side files of DWARF CFI made from SFrame (core.elf.sidefile, core.elf.sidecache).  Prints figures
and ratios; it passes or fails nothing.

    /usr/bin/python3 bench/bench_sidefile.py [--rounds R]

1. write: the side file of the 50,000-function binary (bench/common.py many_functions_binary(),
   its .eh_frame removed so that every function needs SFrame's CFI), with and without the
   callee-saved registers, its functions shared among the cores (core.parallel) and in one
   process, the best of R rounds each (target <= 2 s); then the same through the cache (the
   second time: a stamp read).
2. lldb: LLDB 23's own `bt` of a 5,000-frame recursion (-O2 -fomit-frame-pointer, no -g), timed in
   LLDB as the frames' count read after the thread's frames are cleared: the program with its
   .eh_frame, against the program without it and the side file attached by the plugin
   (target ratio <= 1.2); the configurations take turns, a process each, the best of R rounds each.
"""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from common import INROOT, REPO, WORK, in_sid, many_functions_binary

from sframekit.core.elf import sidecache, sidefile

RECURSE_C = REPO / "tests" / "fixtures" / "recurse.c"


def bench_write(rounds):
    exe = many_functions_binary(50000)
    noeh = WORK / "many50000-noeh"
    if not noeh.exists():
        subprocess.run(["objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(exe), str(noeh)], check=True)
    out = Path(tempfile.mkdtemp(prefix="side-", dir=str(WORK)))
    try:
        for registers in (True, False):
            for jobs in (None, 1):
                times = []
                for _round in range(rounds):
                    t = time.perf_counter()
                    made = sidefile.write(str(noeh), str(out / "x.debug"), callee_saved=registers, workers=jobs)
                    times.append(time.perf_counter() - t)
                t = min(times)
                print("write: %d functions, %d FDEs, %s, %s: best %.2f s of %d (%.0f us a function; worst %.2f s); "
                      "%d bytes" % (made.functions, made.fdes, "callee-saved registers" if registers else
                                    "CFA/RA/FP only", "one process" if jobs == 1 else "%d processes (one a core)"
                                    % len(os.sched_getaffinity(0)), t, rounds, 1e6 * t / max(made.functions, 1),
                                    max(times), os.path.getsize(out / "x.debug")))
        times = []
        for _ in range(3):
            t = time.perf_counter()
            got = sidecache.side_file(str(noeh), str(out / "cache"))
            times.append((time.perf_counter() - t, got.written))
        print("cache: first %.2f s (written: %s), then %.4f s and %.4f s (from the cache)"
              % (times[0][0], times[0][1], times[1][0], times[2][0]))
    finally:
        shutil.rmtree(out)


LLDB_TIMER = r'''
import time
import lldb

def frames(debugger, command, exe_ctx, result, internal_dict):
    """bench-frames LABEL: unwind the whole stack of the selected thread, the first time at this
    stop (LLDB keeps the frames of a stop: each round is a process of its own)."""
    thread = exe_ctx.GetThread()
    t = time.perf_counter()
    n = thread.GetNumFrames()
    t = time.perf_counter() - t
    result.Print("TIME %s %.6f %d\n" % (command.strip(), t, n))

def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand("command script add -o -f %s.frames bench-frames" % __name__)
'''


def bench_lldb(rounds):
    work = Path(tempfile.mkdtemp(prefix="lldb-", dir="/tmp"))
    try:
        (work / "timer.py").write_text(LLDB_TIMER)
        (work / "eh").mkdir()
        (work / "side").mkdir()
        orig, strp = work / "eh" / "recurse", work / "side" / "recurse"
        in_sid("gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), str(RECURSE_C),
               env=dict(os.environ, SFRAME_BINDS="%s:%s" % (REPO, work)))
        subprocess.run(["objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(orig), str(strp)], check=True)
        lines = ["command script import %s" % (REPO / "lldb_plugin"), "command script import %s" % (work / "timer.py")]
        for _round in range(rounds):
            for kind, exe in (("eh", orig), ("side", strp)):
                lines += ["target create %s" % exe, "breakpoint set -n stop_here", "process launch -- 5000",
                          "bench-frames %s" % kind, "process kill", "target delete"]
        (work / "cmds").write_text("\n".join(lines) + "\n")
        env = dict(os.environ, SFRAME_BINDS="%s:%s" % (REPO, work), SFRAME_CFI_CACHE=str(work / "cfi"), TERM="dumb")
        proc = subprocess.run([str(INROOT), "lldb23", "lldb-23", "-b", "-x", "-o", "command source -e false %s"
                               % (work / "cmds")], env=env, capture_output=True, text=True, timeout=3600)
        got = {}
        for label, t, n in re.findall(r"^TIME (\S+) (\S+) (\d+)$", proc.stdout, re.M):
            best, frames = got.get(label, (None, 0))
            got[label] = (float(t) if best is None else min(best, float(t)), int(n))
        if set(got) != {"eh", "side"}:
            raise SystemExit("LLDB 23 did not time both configurations:\n" + proc.stdout[-3000:] + proc.stderr[-2000:])
        (te, ne), (ts, ns) = got["eh"], got["side"]
        print("lldb 23: %d frames with .eh_frame: %.3f s (%.1f us a frame); %d frames through the side file: "
              "%.3f s (%.1f us a frame); ratio %.2f (target <= 1.2)" % (ne, te, 1e6 * te / ne, ns, ts, 1e6 * ts / ns,
                                                                       ts / te))
    finally:
        shutil.rmtree(work)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=("write", "lldb"))
    args = p.parse_args()
    if args.only in (None, "write"):
        bench_write(args.rounds)
    if args.only in (None, "lldb"):
        bench_lldb(args.rounds)


if __name__ == "__main__":
    main()
