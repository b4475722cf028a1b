"""`sframe backtrace` without a debugger, against elfutils' eu-stack and `gdb -batch -ex bt`:
`python3 bench/bench_backtrace.py [FRAMES]` (default 5,000).

tests/fixtures/live.c, built by the host toolchain (-O2 -fomit-frame-pointer -Wa,--gsframe, no
debug information), stopped at the bottom of a recursion FRAMES deep; then, in one run, taking
turns (the best of ROUNDS each, whole processes, start-up included):

  * live:  sframe backtrace -p PID   |  eu-stack -n 0 -p PID          |  gdb -batch -p PID -ex bt
  * core:  sframe backtrace CORE     |  eu-stack -n 0 --core CORE     |  gdb -batch -ex bt EXE CORE
  * the same live process 20 frames deep: sframe backtrace -p PID against gdb -batch.

The CLI runs with Python's bytecode cache, as an installed copy has it (this machine's
environment sets PYTHONDONTWRITEBYTECODE).  Every tool must print the whole stack: the frame
counts are checked before anything is timed.  The aims (issue "sframe backtrace -p"): within
3 x eu-stack at 5,000 frames, and no slower than gdb -batch at 20 frames.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, WORK  # noqa: E402

from sframekit.core.target.live import process_state  # noqa: E402

ROUNDS = 5
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
CLI = [sys.executable, str(REPO / "scripts" / "sframe")]


def build(work):
    exe = work / "live"
    src = REPO / "tests" / "fixtures"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-pthread", "-o", str(exe),
                    str(src / "live.c"), "-ldl"], check=True)
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-shared", "-fPIC", "-o",
                    str(work / "libfix.so"), str(src / "libfix.c")], check=True)
    return exe


def start(exe, depth):
    proc = subprocess.Popen([str(exe), "deep", str(depth)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    pid = int(proc.stdout.readline().split()[-1])
    while process_state(pid) != "T":
        time.sleep(0.01)
    return proc, pid


def finish(proc, pid):
    os.kill(pid, signal.SIGCONT)
    proc.communicate(timeout=60)


def run(argv):
    t = time.perf_counter()
    p = subprocess.run(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    return time.perf_counter() - t, p.stdout + p.stderr


def frames_of(text):
    """Frames printed (each tool starts a frame's line with #N)."""
    return len(re.findall(r"^#\d+ ", text, re.M))


def compare(title, commands, want):
    """Best of ROUNDS per command, taking turns; prints the times and the ratios to the first."""
    for name, argv in commands:
        _t, out = run(argv)         # warm-up (and the bytecode cache); then the frame count
        n = frames_of(out)
        if n < want:
            raise SystemExit("%s: %s printed %d frames, %d expected:\n%s" % (title, name, n, want, out[-2000:]))
    best = {name: float("inf") for name, _ in commands}
    for _ in range(ROUNDS):
        for name, argv in commands:
            best[name] = min(best[name], run(argv)[0])
    ours = best[commands[0][0]]
    print("%-34s %s" % (title, "   ".join("%s %.3f s" % (n, t) for n, t in best.items())))
    print("%-34s %s" % ("", "   ".join("sframe/%s %.2f" % (n, ours / t) for n, t in best.items() if n != "sframe")))
    return best


def main(argv):
    frames = int(argv[0]) if argv else 5000
    work = WORK / "backtrace"
    work.mkdir(parents=True, exist_ok=True)
    exe = build(work)
    gdb_bt = ["gdb", "-nx", "-batch", "-ex", "set backtrace limit unlimited", "-ex", "bt"]
    print("sframe backtrace, eu-stack and gdb -batch on %s (best of %d, taking turns, whole processes)" % (exe, ROUNDS))
    depth = frames - 8                       # the recursion, plus libc's and main's frames
    proc, pid = start(exe, depth)
    core = work / "live.core"
    try:
        compare("live, %d frames:" % frames, [
            ("sframe", CLI + ["backtrace", "-p", str(pid)]),
            ("eu-stack", ["eu-stack", "-n", "0", "-p", str(pid)]),
            ("gdb", gdb_bt + ["-p", str(pid)])], depth)
        subprocess.run(["gdb", "-nx", "-batch", "-p", str(pid), "-ex", "gcore %s" % core], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        finish(proc, pid)
    compare("core, %d frames:" % frames, [
        ("sframe", CLI + ["backtrace", str(core)]),
        ("eu-stack", ["eu-stack", "-n", "0", "--core", str(core), "-e", str(exe)]),
        ("gdb", gdb_bt + [str(exe), str(core)])], depth)
    proc, pid = start(exe, 12)
    try:
        compare("live, 20 frames:", [
            ("sframe", CLI + ["backtrace", "-p", str(pid)]),
            ("eu-stack", ["eu-stack", "-n", "0", "-p", str(pid)]),
            ("gdb", gdb_bt + ["-p", str(pid)])], 12)
    finally:
        finish(proc, pid)
    t, _ = min(run(CLI + ["--version"]) for _ in range(ROUNDS))
    print("%-34s %.3f s (the interpreter and the CLI's imports)" % ("sframe --version:", t))


if __name__ == "__main__":
    main(sys.argv[1:])
