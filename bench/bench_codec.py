"""Codec and index speed: index build vs FDE count, lookup latency, `sframe dump` vs sid's readelf.

Run:  python3 bench/bench_codec.py        (prints figures and ratios; no pass/fail)
"""

import os
import random
import statistics
import subprocess
import sys
import time

from common import REPO, in_sid, many_functions_binary, median_time

from sframekit.core.elf.image import ElfImage
from sframekit.core.report.dump import dump
from sframekit.core.sframe import format as F
from sframekit.core.sframe.encode import Func, Row, build
from sframekit.core.sframe.index import SFrameIndex


def synthetic(n):
    funcs = [Func(0x400000 + 0x40 * i, 0x30, [Row(0, (8,)), Row(1, (16, -16)), Row(0x2a, (8,))]) for i in range(n)]
    return build(3, F.ABI.AMD64_ENDIAN_LITTLE, funcs)


def lookup_times(idx, pcs):
    times = []
    for pc in pcs:
        t = time.perf_counter_ns()
        idx.lookup(pc)
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1000.0


def warm_times(idx, pcs):
    """Median lookup time over PCs looked up before, in a working set that the index's caches
    hold (SFrameIndex.CACHE_LIMIT functions): 20,000 random PCs would evict each other."""
    pcs = pcs[:SFrameIndex.CACHE_LIMIT // 2]
    for pc in pcs:
        idx.lookup(pc)
    return lookup_times(idx, pcs * 4)


def main():
    print("== index build time vs FDE count (synthetic V3 AMD64 sections) ==")
    builds = {}
    for n in (1000, 1000000):
        t = time.perf_counter()
        data = synthetic(n)
        print("  encoded %d FDEs: %d bytes in %.1f s" % (n, len(data), time.perf_counter() - t))
        builds[n] = median_time(lambda data=data: SFrameIndex(data, 0), repeat=101)
        rng = random.Random(1)
        pcs = [0x400000 + rng.randrange(0x40 * n) for _ in range(20000)]
        cold = lookup_times(SFrameIndex(data, 0), pcs)
        print("  %8d FDEs: index build %.2f us; lookup(pc) median %.2f us cold (first touch), %.2f us warm"
              % (n, builds[n] * 1e6, cold, warm_times(SFrameIndex(data, 0), pcs)))
    print("  build-time ratio 1,000,000 / 1,000 FDEs: %.2f (must be <= 2)" % (builds[1000000] / builds[1000]))

    print("== 50,000-function binary compiled by sid (gcc 16, binutils 2.47) ==")
    exe = many_functions_binary(50000)
    img = ElfImage(exe)
    sf = img.sframe
    idx = SFrameIndex(sf.data, sf.address)
    print("  %s: %d FDEs, %d FREs, .sframe %d bytes" % (exe.name, idx.header.num_fdes, idx.header.num_fres, len(sf.data)))
    rng = random.Random(2)
    lo, hi = idx.text_range()
    pcs = [rng.randrange(lo, hi) for _ in range(20000)]
    print("  lookup(pc) median: %.2f us cold, " % lookup_times(SFrameIndex(sf.data, sf.address), pcs), end="")
    print("%.2f us warm" % warm_times(idx, pcs))
    t_dump = median_time(lambda: dump(sf.data, sf.address, sf.name), repeat=3)
    # The CLI as a user runs it: with Python's bytecode cache (an installed copy has its .pyc files;
    # this machine's environment sets PYTHONDONTWRITEBYTECODE, which would recompile every module on
    # each run).  The CLI and readelf take turns, and the best of each is compared.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cli = [sys.executable, str(REPO / "scripts" / "sframe")]
    subprocess.run(cli + ["dump", str(exe)], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    t_cli = t_start = t_readelf = float("inf")
    for _ in range(5):
        t_cli = min(t_cli, median_time(lambda: subprocess.run(cli + ["dump", str(exe)], cwd=REPO, env=env, check=True,
                                                              stdout=subprocess.DEVNULL), repeat=1))
        t_start = min(t_start, median_time(lambda: subprocess.run(cli + ["--version"], cwd=REPO, env=env, check=True,
                                                                  stdout=subprocess.DEVNULL), repeat=1))
        r = in_sid("bash", "-c", "TIMEFORMAT=%R; time readelf --sframe " + str(exe) + " >/dev/null",
                   stderr=subprocess.PIPE, text=True)
        t_readelf = min(t_readelf, float(r.stderr.split()[-1]))
    print("  sid readelf --sframe: %.3f s; sframe dump (CLI process): %.3f s, ratio %.2f (aim <= 5), of which "
          "start-up (sframe --version) %.3f s; dump() in process: %.3f s, ratio %.2f  (best of 5, taking turns)"
          % (t_readelf, t_cli, t_cli / t_readelf, t_start, t_dump, t_dump / t_readelf))
    from sframekit.core.checks.against_cfi import check_file
    t = time.perf_counter()
    report = check_file(str(exe))
    t_check = time.perf_counter() - t
    print("  sframe check (in process): %.1f s for %d functions, %.0f us per function; %d address ranges x rules "
          "compared" % (t_check, report.functions, 1e6 * t_check / max(report.functions, 1), sum(report.ranges.values())))


if __name__ == "__main__":
    main()
