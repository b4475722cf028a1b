"""`sframe stats` and a multi-file `sframe dump` over the real-program corpus, against binutils 2.47's
`readelf --sframe` on the same files, in the same run (wall time, best of R rounds).

    /usr/bin/python3 bench/bench_stats.py [--rounds R]

The corpus: the real programs of every toolchain the cache holds (build them with
`python3 tests/helpers/realprogs.py`).  readelf 2.47 runs in the sid root, over the V2 and V3
programs (it refuses V1); `sframe dump` over the same files, and `sframe stats` over all of them.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from common import INROOT, REPO


def corpus():
    base = Path(os.environ.get("SFRAME_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "sframe-gdb") / "realprogs"
    return base, sorted(p / p.name.split("-")[0] for root in base.glob("*") for p in root.glob("*-*")
                        if (p / p.name.split("-")[0]).is_file())


def best(fn, rounds):
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    base, programs = corpus()
    newer = [str(p) for p in programs if "/host/" not in str(p)]
    cli = [sys.executable, str(REPO / "scripts" / "sframe")]
    ours = best(lambda: subprocess.run(cli + ["dump", *newer], stdout=subprocess.DEVNULL, check=True), args.rounds)
    script = "TIMEFORMAT=%R; time readelf --sframe " + " ".join(newer) + " >/dev/null"
    env = dict(os.environ, SFRAME_BINDS=str(base))
    theirs = []
    for _ in range(args.rounds):
        got = subprocess.run([str(INROOT), "sid", "bash", "-c", script], capture_output=True, text=True, env=env,
                             check=True)
        theirs.append(float(re.findall(r"^(\d+\.\d+)$", got.stderr, re.M)[-1]))
    files = [str(p) for p in programs]
    stats1 = best(lambda: subprocess.run(cli + ["stats", *files, "-j", "1"], stdout=subprocess.DEVNULL, check=True),
                  args.rounds)
    stats2 = best(lambda: subprocess.run(cli + ["stats", *files], stdout=subprocess.DEVNULL, check=True), args.rounds)
    # The cache's whole tree: the programs and each build's objects as an archive (objects.a).
    archives = sorted(base.glob("*/*/objects.a"))
    tree = best(lambda: subprocess.run(cli + ["stats", str(base)], stdout=subprocess.DEVNULL, check=True), args.rounds)
    size = sum(p.stat().st_size for p in programs)
    print("corpus: %d programs (%d MB); dump and readelf: the %d V2/V3 ones" % (
        len(programs), size >> 20, len(newer)))
    print("sframe dump (several files)  %6.2f s   readelf --sframe 2.47 %6.2f s   ratio %.2f" % (
        ours, min(theirs), ours / min(theirs)))
    print("sframe stats of the programs, 1 process      %6.2f s" % stats1)
    print("sframe stats of the programs, every core     %6.2f s" % stats2)
    print("sframe stats of the tree (%d programs, %d archives of their objects), every core  %6.2f s" % (
        len(programs), len(archives), tree))


if __name__ == "__main__":
    main()
