"""`sframe cfi --build-id-dir` over a whole tree: the real programs of every toolchain (Lua, zstd,
SQLite, jsoncpp: host, trixie, sid, sid's AArch64 and s390x builds), each as it ships without
`.eh_frame` and as built (two copies of one build), in one directory.  Prints the files, the
builds, the bytes of code, and the wall and CPU time of a first run (every side file written) and
of a second (nothing to do), on the cores this process may use.

    /usr/bin/python3 bench/bench_cfitree.py [-j N]

The tree is made under $SFRAME_BENCH_DIR/cfitree (the copies without `.eh_frame` by each
toolchain's own objcopy); build the real programs first with `python3 tests/helpers/realprogs.py`.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import REPO, WORK

sys.path.insert(0, str(REPO / "tests"))
from helpers import toolchains as T  # noqa: E402  (the tests' toolchains: their objcopy)


def tree(root: Path) -> Path:
    cache = Path(os.environ.get("SFRAME_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                 / "sframe-gdb") / "realprogs"
    if root.exists():
        return root
    made = root.with_name(root.name + ".tmp")
    shutil.rmtree(made, ignore_errors=True)
    for toolchain in sorted(p.name for p in cache.iterdir() if p.is_dir()):
        for build in sorted((cache / toolchain).glob("*-*")):
            name = build.name.split("-")[0]
            program = build / name
            if not program.is_file():
                continue
            where = made / toolchain / name
            (where / "bin").mkdir(parents=True)
            shutil.copy(program, where / "bin" / (name + ".built"))
            T.strip_eh(toolchain, program, where / "bin" / name)
    made.rename(root)
    return root


def run(root: Path, out: Path, jobs: int):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    got = subprocess.run([sys.executable, str(REPO / "scripts" / "sframe"), "cfi", str(root), "--build-id-dir",
                          str(out), "-j", str(jobs), "--json"], stdout=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc = json.loads(got.stdout)
    return doc, wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-j", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()
    root = tree(WORK / "cfitree")
    out = WORK / "cfitree-out"
    shutil.rmtree(out, ignore_errors=True)
    for label in ("first run", "second run"):
        doc, wall, cpu = run(root, out, args.j)
        files = doc["files"]
        code = sum(f["code_bytes"] for f in files if f["outcome"] in ("written", "up to date"))
        c = doc["counts"]
        print("%-10s %d files, %d builds (%s KB of code): %d written, %d up to date, %d same build, %d failed; "
              "%.1f s wall, %.1f s CPU, %d processes" % (
                  label, len(files), c["written"] + c["up to date"], format(code // 1024, ","), c["written"],
                  c["up to date"], c["same build"], c["failed"], wall, cpu, doc["processes"]))


if __name__ == "__main__":
    main()
