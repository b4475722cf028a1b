"""Helpers shared by the benchmarks: timing, the sid root, a generated 50,000-function program."""

import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SFRAMEKIT = types.ModuleType("sframekit")      # the checkout, under its installed package name
_SFRAMEKIT.__path__ = [str(REPO)]
sys.modules.setdefault("sframekit", _SFRAMEKIT)
INROOT = REPO / "scripts" / "inroot"
ROOTS = REPO / "scripts" / "roots.sh"
WORK = Path(os.environ.get("SFRAME_BENCH_DIR", "/tmp/sframe-bench"))


def median_time(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def in_sid(*argv, **kw):
    subprocess.run([str(ROOTS), "sid"], check=True, stdout=subprocess.DEVNULL)
    return subprocess.run([str(INROOT), "sid", *argv], check=True, **kw)


def generate_many_functions(n, path):
    """C source with n functions of a few shapes (leaf, calls, big frames, alloca)."""
    out = ["#include <alloca.h>\n#include <string.h>\nvolatile int sink;\n"]
    for i in range(n):
        k = i % 4
        if k == 0:
            out.append("__attribute__((noinline)) int f%d(int x) { return x * %d + 1; }\n" % (i, i))
        elif k == 1:
            out.append("__attribute__((noinline)) int f%d(int x) { return f%d(x + 1) + sink; }\n" % (i, i - 1))
        elif k == 2:
            out.append("__attribute__((noinline)) int f%d(int x) { char b[%d]; memset(b, x, sizeof b); "
                       "sink = b[x & 7]; return f%d(b[3]) + 2; }\n" % (i, 64 + i % 2000, i - 1))
        else:
            out.append("__attribute__((noinline)) int f%d(int x) { char *p = alloca(x + 16); p[0] = x; "
                       "sink = p[0]; return f%d(p[0]) * 3; }\n" % (i, i - 2))
    out.append("int main(int c, char **v) { return f%d(c) & 1; }\n" % (n - 1))
    path.write_text("".join(out))


def many_functions_binary(n=50000):
    """Build (once, cached in WORK) a sid-compiled x86-64 binary with n functions and SFrame V3."""
    WORK.mkdir(parents=True, exist_ok=True)
    exe = WORK / ("many%d" % n)
    if not exe.exists():
        src = WORK / ("many%d.c" % n)
        generate_many_functions(n, src)
        in_sid("gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(exe), str(src))
    return exe
