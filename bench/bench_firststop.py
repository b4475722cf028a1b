"""LLDB's first stop in a fresh build: the plugin, with an empty side-file cache, against LLDB
alone on the copy that keeps `.eh_frame`; the same stop, the same run.  Prints figures and ratios
(target <= 1.3); it passes or fails nothing.

    /usr/bin/python3 bench/bench_firststop.py [--rounds R] [--lldb 16 23] [--program NAME ...] [--lldbinit]

A session: `lldb -b` on the program, a breakpoint, `run`, `bt`; timed from LLDB's start to the
end of `bt`'s output (wall clock, printed by LLDB's Python after it), with its phases (LLDB's
start and the import, to the stop, bt: where the plugin's time goes).  The plugin is imported
after LLDB made the target of its argument (`lldb -o 'command script import ...' PROGRAM`: its
thread then has only the launch to import in), or with `--lldbinit` before the target is made,
as from ~/.lldbinit.  With the plugin the session
also waits, after `bt`, for the side file with registers (`sframe info --wait`): the time until
it is attached (LLDB 16 takes a side file that replaces another; LLDB 23 a first one's `.eh_frame`,
then the second's `.debug_frame`).  Then the job that wrote it has ended, and the next session starts on a quiet
machine.  The configurations take turns, R rounds each, after one session of each not counted
(the plugin's modules compiled once, as Python keeps them for a user: PYTHONDONTWRITEBYTECODE is
taken out of the environment); the median of each is reported.

Programs: SQLite's shell from the host's toolchain and from sid's (tests/helpers/realprogs.py,
its `--strip-debug` copy; the copy without CFI also without `.eh_frame`/`.eh_frame_hdr`), stopped
in the code generator 25 frames deep; the 50,000-function program (bench/common.py), stopped in a
leaf.  LLDB 16 runs on this machine (host programs only: sid's need a newer C library), LLDB 23
in its root.
"""

import argparse
import fcntl
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import INROOT, REPO, WORK, many_functions_binary

sys.path.insert(0, str(REPO / "tests"))
from helpers import realprogs  # noqa: E402

DEEP_SQL = "select " + "x+(" * 30 + "x" + ")" * 30 + " from (select 1 as x);\n"


def _programs(work):
    """{name: (program with .eh_frame, without, [lldb run args], [breakpoint commands], toolchain)}"""
    (work / "deep.sql").write_text(DEEP_SQL)
    out = {}
    for tc in ("host", "sid"):
        built = realprogs.build(tc, "sqlite")
        eh, noeh = work / ("sqlite-%s-eh" % tc), work / ("sqlite-%s" % tc)
        subprocess.run(["objcopy", "--strip-debug", str(built), str(eh)], check=True)
        subprocess.run(["objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(built), str(noeh)],
                       check=True)
        out["sqlite-" + tc] = (eh, noeh, "-init %s :memory: </dev/null" % (work / "deep.sql"),
                               ["breakpoint set -n sqlite3ExprCodeTarget", "breakpoint modify -i 44 1"], tc)
    many = many_functions_binary(50000)
    eh, noeh = work / "many50000-eh", work / "many50000"
    shutil.copy(many, eh)
    subprocess.run(["objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(many), str(noeh)], check=True)
    out["many50000"] = (eh, noeh, "", ["breakpoint set -n f49996"], "sid")
    return out


_MARK = "script import time; print('@@ %s %.6f' % time.time())"
HUNG = 180       # seconds after which a session is taken to hang (the longest, sid's SQLite with its side file: 15)


def _session(lldb, exe, run_args, breaks, plugin, cache, lldbinit=False):
    """(seconds to the end of bt, seconds to the side file with registers or None, frames in bt,
    the phases' seconds: LLDB's start and the import, the breakpoints and the launch to the stop
    (the stop hook's attaching in it), bt).  `lldbinit`: the plugin imported before the target is
    made, as from ~/.lldbinit (the install the README gives), the target made by a command in both
    sessions; else the program is LLDB's argument, its target made before the commands, and the
    plugin imported after it.  (Both sessions start LLDB's Python with their first mark.)"""
    lines = []
    if plugin:
        lines.append("command script import %s" % (REPO / "lldb_plugin"))
    lines.append(_MARK.replace("%s", "ready", 1))
    if lldbinit:
        lines.append("target create %s" % shlex.quote(str(exe)))
    lines += breaks + ["process launch -- %s" % run_args if run_args else "process launch",
                       _MARK.replace("%s", "stop", 1), "bt", _MARK.replace("%s", "bt", 1)]
    if plugin:
        lines += ["sframe info --wait", _MARK.replace("%s", "full", 1)]
    lines += ["process kill"]
    argv = ["lldb-16"] if lldb == 16 else [str(INROOT), "lldb23", "lldb-23"]
    argv += ["-b", "-x", "-o", "settings set use-color false"] + [a for line in lines for a in ("-o", line)] + ([] if lldbinit else [str(exe)])
    env = dict(os.environ, SFRAME_CFI_CACHE=str(cache), TERM="dumb", SFRAME_BINDS="%s:%s" % (REPO, cache.parent))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for attempt in (1, 2):
        t0 = time.time()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HUNG,
                                  stdin=subprocess.DEVNULL)
            break
        except subprocess.TimeoutExpired:
            # (LLDB 16 without the plugin hung once on the 50,000-function program, in a run of 9 rounds)
            print("  (LLDB %d on %s%s hung: killed after %d s%s)" % (
                lldb, exe.name, " with the plugin" if plugin else "", HUNG, ", run again" if attempt == 1 else ""))
            if attempt == 2:
                raise SystemExit("LLDB %d on %s hung twice" % (lldb, exe)) from None
            _quiet(cache)                 # (the run again starts from an empty cache too)
            shutil.rmtree(cache, ignore_errors=True)
    marks = {k: float(v) - t0 for k, v in re.findall(r"^@@ (\w+) ([\d.]+)$", proc.stdout, re.M)}
    frames = len(re.findall(r"^\s+\*? ?frame #\d+", proc.stdout.split("(lldb) bt", 1)[-1].split("@@ bt")[0], re.M))
    if "bt" not in marks or frames < 2:
        raise SystemExit("LLDB %d on %s: no backtrace\n%s\n%s" % (lldb, exe, proc.stdout[-3000:], proc.stderr[-2000:]))
    phases = (marks["ready"], marks["stop"] - marks["ready"], marks["bt"] - marks["stop"])
    return marks["bt"], marks.get("full"), frames, phases


def _quiet(cache):
    """Wait until no job writes into the cache (one started by the plugin outlives its session)."""
    for lock in cache.rglob("*.lock"):
        with open(lock) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--lldb", type=int, nargs="+", default=[16, 23], choices=(16, 23))
    p.add_argument("--program", nargs="+", choices=("sqlite-host", "sqlite-sid", "many50000"))
    p.add_argument("--lldbinit", action="store_true",
                   help="import the plugin before the target is made, as from ~/.lldbinit")
    args = p.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="firststop-", dir=str(WORK)))
    try:
        programs = _programs(work)
        for lldb in args.lldb:
            for name, (eh, noeh, run_args, breaks, tc) in programs.items():
                if args.program and name not in args.program:
                    continue
                if lldb == 16 and tc != "host" and name != "many50000":
                    print("lldb 16, %s: not run (its programs need sid's C library; LLDB 16 runs on the host)" % name)
                    continue
                alone, plugin, full, steps = [], [], [], ([], [])
                for k in range(-1, args.rounds):
                    cache = work / ("cfi-%d-%s-%d" % (lldb, name, k))
                    t, _none, n_eh, p1 = _session(lldb, eh, run_args, breaks, False, cache, args.lldbinit)
                    t2, f, n_side, p2 = _session(lldb, noeh, run_args, breaks, True, cache, args.lldbinit)
                    _quiet(cache)
                    shutil.rmtree(cache, ignore_errors=True)
                    if k >= 0:
                        alone.append(t)
                        plugin.append(t2)
                        full.append(f)
                        steps[0].append(p1)
                        steps[1].append(p2)
                a, b = statistics.median(alone), statistics.median(plugin)
                print("lldb %d, %s%s: first stop's bt (%d frames) with .eh_frame, no plugin %.2f s; without it, the plugin, "
                      "an empty cache %.2f s (%d frames): ratio %.2f (target <= 1.3); the side file with registers "
                      "%s at %.2f s (medians of %d)" % (
                          lldb, name, " (imported as from ~/.lldbinit)" if args.lldbinit else "", n_eh, a, b, n_side, b / a,
                          "attached",
                          statistics.median(f for f in full if f is not None), args.rounds))
                print("  phases, no plugin / the plugin (medians): LLDB's start and the import %s, to the stop %s, bt %s"
                      % tuple("%.3f / %.3f s" % tuple(statistics.median(p[i] for p in runs) for runs in steps)
                              for i in range(3)))
                sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
