"""The side file's analysis, against another revision of this checkout: the same bytes out, and
the CPU time each takes.  Prints figures; exits 1 where a side file differs.

    /usr/bin/python3 bench/bench_analysis.py --against REV [--rounds R] [PROGRAM ...]

Programs: the real programs built for the tests (tests/helpers/realprogs.py: Lua, zstd, SQLite,
jsoncpp from every toolchain the cache holds; build them with `python3 tests/helpers/realprogs.py`)
and the 50,000-function program, unless given.  Each is written with `sframe cfi --all -j 1` (every
function, one process: the CPU time is the time) by this checkout and by a worktree of REV, the
two in turn, R rounds each; the user+system time of the best round of each is reported, and the
ratio.  Both are timed in the same run, one after the other: this machine's speed drifts by a
tenth and more within minutes, so a time kept from another run is no measure to divide by.
REV's side files are kept under $SFRAME_BENCH_DIR/analysis/REV (keyed by the program's SHA-256)
for the comparison of the bytes.
"""

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, WORK, many_functions_binary


def programs():
    base = Path(os.environ.get("SFRAME_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "sframe-gdb") / "realprogs"
    found = sorted(p / p.name.split("-")[0] for root in base.glob("*") for p in root.glob("*-*")
                   if (p / p.name.split("-")[0]).is_file())
    return [str(p) for p in found] + [str(many_functions_binary(50000))]


def _cfi(checkout, program, out):
    """CPU seconds (user + system) of `sframe cfi --all -j 1` of `program` into `out`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(["/usr/bin/python3", str(Path(checkout) / "scripts" / "sframe"), "cfi", "--all", "-j", "1",
                    "--no-debug-file", program, "-o", out], check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _compiled(checkout):
    """The checkout's modules compiled (as an install has them): a module whose bytecode is stale
    (PYTHONDONTWRITEBYTECODE keeps it so) is compiled anew by every run, a cost that is no
    analysis and that only the side just edited pays."""
    subprocess.run(["/usr/bin/python3", "-m", "compileall", "-q", str(Path(checkout) / "core")], check=True,
                   stdout=subprocess.DEVNULL)


def _worktree(rev):
    path = WORK / "analysis" / ("wt-" + rev)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-f", "--detach", str(path), rev], check=True,
                       capture_output=True)
    return path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--against", required=True, metavar="REV", help="the revision to compare with")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("programs", nargs="*")
    args = p.parse_args()
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.against], check=True,
                         capture_output=True, text=True).stdout.strip()
    theirs = _worktree(rev)
    for checkout in (theirs, REPO):
        _compiled(checkout)
    keep = WORK / "analysis" / rev
    keep.mkdir(parents=True, exist_ok=True)
    differ = 0
    total = [0.0, 0.0]
    for program in args.programs or programs():
        digest = hashlib.sha256(Path(program).read_bytes()).hexdigest()[:24]
        ref = keep / (digest + ".debug")
        olds, news = [], []
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "x.debug")
            for _ in range(args.rounds):
                olds.append(_cfi(theirs, program, str(ref)))
                news.append(_cfi(REPO, program, out))
            same = Path(out).read_bytes() == ref.read_bytes()
        old, new = min(olds), min(news)
        differ += not same
        total[0] += old
        total[1] += new
        print("%-70s %s: %7.2f s -> %7.2f s CPU (%.2f x)" % (program, "same bytes" if same else "DIFFERENT",
                                                                old, new, new / old if old else 0))
    print("all: %.1f s -> %.1f s CPU (%.2f x); %d side file%s differ" % (
        total[0], total[1], total[1] / total[0] if total[0] else 0, differ, "" if differ == 1 else "s"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
