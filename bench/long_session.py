"""Long debugging sessions: `python3 bench/long_session.py [STOPS [LOADS]]` (default 10,000 and 1,000).

The longrun program (tests/fixtures/longrun.c, .eh_frame removed) in GDB 13, GDB 18, LLDB 16 and
LLDB 21 with the plugin: STOPS breakpoint stops with `bt` (LLDB: `sframe bt`) at each, then its
library dlopen'ed and dlclose'd LOADS times at changing addresses.  Prints, per debugger and
phase: stops, wrong backtraces (must be 0), distinct library addresses, the debugger's resident
memory after the warm-up (the first tenth), at its largest and at the end, and the time per stop.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import common  # noqa: E402,F401  (the checkout as the package sframekit)
import test_reliability as R  # noqa: E402


def main(argv):
    stops = int(argv[0]) if argv else 10000
    loads = int(argv[1]) if len(argv) > 1 else 1000
    work = Path(tempfile.mkdtemp(prefix="sframe-long-"))
    bad = 0
    runs = [("GDB 13", lambda d: R.long_run("gdb13", "host", d, stops, loads)),
            ("GDB 18", lambda d: R.long_run("gdb18", "sid", d, stops, loads)),
            ("LLDB 16", lambda d: R.long_run_lldb(16, d, stops, loads)),
            ("LLDB 21", lambda d: R.long_run_lldb(21, d, stops, loads))]
    for name, run in runs:
        d = work / name.replace(" ", "")
        d.mkdir()
        figures = run(d)
        for phase in ("stops", "loads"):
            f = figures[phase]
            warm, top, end = int(f["rss_warm"]), int(f["rss_max"]), int(f["rss_end"])
            bad += int(f["bad"])
            print("%-8s %-5s %6s stops, %s wrong, %2s library addresses; RSS %.1f MiB after warm-up, max %.1f "
                  "(%+.1f%%), end %.1f; %s ms per stop (bt and checks)" % (
                      name, phase, f["stops"], f["bad"], f["addresses"], warm / 1024, top / 1024,
                      100.0 * (top - warm) / warm if warm else 0, end / 1024, f["ms_per_stop"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
