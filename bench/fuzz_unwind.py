"""Fuzz the unwinder on real stacks: `python3 bench/fuzz_unwind.py [COUNT]`.

Default: 1,000,000 cases over gcore'd stops of the recursion fixture (50 levels) built by the
host (SFrame V1), trixie (V2) and sid (V3) toolchains, each with its registers and stack words
mutated (tests/helpers/unwind_fuzzing.py: wild return addresses, self-pointers, return addresses into
its own code, unreadable stack).  Both walkers run on every case.  Prints cases/s, the slowest
case, the stop reasons and the escapes (anything but frames and one stop within the depth
limit); exits 1 on any escape.
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import common  # noqa: E402,F401  (the checkout as the package sframekit)
from helpers import (
    toolchains,  # noqa: E402
    unwind_fuzzing,  # noqa: E402
)


def cores(work):
    out = []
    for tc, gdb in (("host", "host"), ("trixie", "sid"), ("sid", "sid")):
        exe = toolchains.build(tc, "recurse", work / tc)
        core = work / ("%s.core" % tc)
        toolchains.run_in(gdb, ["gdb", "-nx", "-batch", "-ex", "break stop_here", "-ex", "run 50", "-ex",
                                "gcore %s" % core, str(exe)], cwd=work, check=True)
        out.append(unwind_fuzzing.Target(str(core)))
    return out


def main(argv):
    count = int(argv[0]) if argv else 1000000
    targets = cores(Path(tempfile.mkdtemp(prefix="sframe-unwind-fuzz-")))
    print("unwind fuzz: %d cases over %d real stops, both walkers each" % (count, len(targets)))
    report = unwind_fuzzing.Report()
    t = time.perf_counter()
    step = max(count // 10, 1)
    done = 0
    while done < count:
        n = min(step, count - done)
        unwind_fuzzing.fuzz(targets, n, seed=done + 1, report=report)
        done += n
        print("  %8d cases, %d escapes, %.0f s" % (done, len(report.escapes), time.perf_counter() - t))
    elapsed = time.perf_counter() - t
    print("unwind fuzz: %d cases in %.1f s (%.0f cases/s); slowest case %.1f ms; escapes: %d"
          % (report.cases, elapsed, report.cases / elapsed, report.slowest * 1e3, len(report.escapes)))
    total = sum(report.reasons.values())
    for reason, k in sorted(report.reasons.items(), key=lambda kv: -kv[1]):
        print("  walks ending on %-18s %8d  (%.1f%%)" % (reason, k, 100.0 * k / total))
    for case, text in report.escapes[:10]:
        print("ESCAPE in case %d: %s" % (case, text))
    return 1 if report.escapes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
