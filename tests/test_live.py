"""`sframe backtrace -p PID`: running programs read without a debugger, checked against GDB's own
DWARF backtrace of the same process attached afterwards, and left to run to their normal end.

tests/fixtures/live.c is built by the host (SFrame V1), trixie (V2) and sid (V3) toolchains and
run on its own system (trixie's and sid's programs chrooted in their roots, which the CLI on
the host reads through /proc/PID/root).  Each mode stops the whole program with raise(SIGSTOP)
in a known state: a deep recursion, threads blocked in the C library, a signal handler, a
dlopen'ed library, a qsort callback.  The C library has no SFrame: its frames are unwound by its
DWARF CFI (`[DWARF CFI]`), and every stack must be complete, to _start (or the thread's clone),
with GDB's PCs (past main, without its inline and tail-call frames, which have no stack frame).
GDB is the program's own system's (13 on the host, 16 in trixie, 18 in sid).

Then: no signal lost or added while threads are held (real-time signals, which queue, sent while
backtraces are taken again and again), the program let go when the command is interrupted
(SIGINT, SIGTERM, SIGKILL) half way through a deep stack, and the one-line errors (no such
process, a zombie, permission, our own process, a process killed while being read).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import toolchains as T
from helpers.cli import CLI, REPO, sframe
from helpers.gdb import live_frames

from sframekit.core.target.live import process_state

LIVE = T.Fixture("live", ("main", "hold", "deep_a", "deep_b", "thread_wait", "thread_chain", "main_hold",
                          "in_handler", "poke", "lib_callback", "spin_a", "spin_b", "busy"), ("hold",),
                 cflags=("-pthread",), ldflags=("-pthread", "-ldl", "-Wl,-rpath,$ORIGIN"), library="libfix")
TOOLCHAINS = ("host", "trixie", "sid")
MODES = [("deep", "50"), ("threads", "3"), ("signal",), ("dlopen",), ("qsort",)]

@pytest.fixture(scope="module")
def programs(roots, tmp_path_factory):
    """{toolchain: executable} of live.c (with libfix.so beside it)."""
    work = tmp_path_factory.mktemp("live")
    out = {}
    for tc in TOOLCHAINS:
        cmds, exe, _lib = T.build_cmds(T.toolchain(tc), LIVE, work / tc, T.VARIANTS["O2-nofp"], False)
        (work / tc).mkdir(parents=True, exist_ok=True)
        T._run_script(T.toolchain(tc), cmds, work / tc)
        out[tc] = exe
    return out


class Program:
    """A live.c program started on its own system; `pid` is the program's own process id."""

    def __init__(self, tc, exe, *args):
        self.tc = tc
        full, env = T.wrap_argv(tc, [str(exe), *args], [exe.parent], exe.parent)
        self.proc = subprocess.Popen(full, cwd=exe.parent, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"live: pid (\d+)$", line.strip())
        assert m, (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.pid = int(m.group(1))

    def state(self):
        return process_state(self.pid)

    def wait_state(self, states, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.state() in states:
                return
            time.sleep(0.02)
        raise AssertionError("process %d: state %s, not %s" % (self.pid, self.state(), states))

    def readline(self):
        return self.proc.stdout.readline().strip()

    def finish(self, timeout=60):
        """Let it run to its end: (exit status, the rest of its output)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return self.proc.returncode, out + err

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=60)


def ours(pid, *extra):
    code, out, err = sframe("backtrace", "-p", pid, "--all-threads", "--json", *extra)
    assert code == 0 and err == "", (code, err)
    return json.loads(out)


def compare(doc, ref):
    """Problems between our threads and GDB's (PC by PC over the whole stack)."""
    problems = []
    assert {t["lwp"] for t in doc["threads"]} == set(ref), (doc["threads"], ref.keys())
    for t in doc["threads"]:
        want = [f for f in ref[t["lwp"]]["frames"] if f["type"] not in ("inline", "tailcall")]
        got = t["frames"]
        if [f["pc"] for f in got] != [f["pc"] for f in want]:
            problems.append("thread %d:\n  ours %s\n  GDB  %s" % (
                t["lwp"], [(hex(f["pc"]), f["function"]) for f in got], [(hex(f["pc"]), f["name"]) for f in want]))
        if t["stop"]["reason"] != "OUTERMOST":
            problems.append("thread %d: %s" % (t["lwp"], t["stop"]["message"]))
        trampolines = [f["pc"] for f in got if f["function"] == "<signal handler called>"]
        if trampolines != [f["pc"] for f in want if f["type"] == "sigtramp"]:
            problems.append("thread %d: signal trampolines %s" % (t["lwp"], trampolines))
    return problems


@pytest.mark.parametrize("tc", TOOLCHAINS)
def test_live_stacks_equal_gdbs(programs, tmp_path, tc):
    seen = []
    for args in MODES:
        prog = Program(tc, programs[tc], *args)
        try:
            prog.wait_state("T")
            doc = ours(prog.pid)
            text = sframe("backtrace", "-p", prog.pid, "--all-threads")
            assert prog.state() == "T"          # still in its own job-control stop
            ref = live_frames(tc, prog.pid)
            os.kill(prog.pid, signal.SIGCONT)
            code, out = prog.finish()
        finally:
            prog.kill()
        assert code == 0 and out.rstrip().endswith("live: %s done" % args[0]), (args, code, out)
        problems = compare(doc, ref)
        assert not problems, "%s %s:\n%s\n%s" % (tc, args, "\n".join(problems), text.stdout)
        hows = {f["how"] for t in doc["threads"] for f in t["frames"]}
        assert {"sframe", "DWARF CFI"} <= hows, hows
        assert text.returncode == 0 and "[DWARF CFI]" in text.stdout and "[sframe]" in text.stdout
        seen.append((args[0], sum(len(t["frames"]) for t in doc["threads"]), len(doc["threads"])))
        if args[0] == "signal":
            assert any(f["function"] == "<signal handler called>" for f in doc["threads"][0]["frames"])
        if args[0] == "dlopen":
            assert any(f["module"] == "libfix.so" and f["how"] == "sframe" for f in doc["threads"][0]["frames"])
        if args[0] == "qsort":
            names = [f["function"].split("+")[0] for f in doc["threads"][0]["frames"]]
            assert names.index("compare") < names.index("main") and any("qsort" in n for n in names), names
    print("%s: %s" % (tc, ", ".join("%s %d frames in %d threads" % s for s in seen)))


def test_sframe_only_stops_at_the_c_library(programs):
    """--no-eh-frame: SFrame alone, which the C library does not have: the walk stops there."""
    prog = Program("host", programs["host"], "deep", "5")
    try:
        prog.wait_state("T")
        doc = ours(prog.pid, "--no-eh-frame")
        os.kill(prog.pid, signal.SIGCONT)
        code, _ = prog.finish()
    finally:
        prog.kill()
    frames, stop = doc["threads"][0]["frames"], doc["threads"][0]["stop"]
    assert code == 0 and len(frames) == 1 and stop["reason"] == "NO_SFRAME", doc
    assert doc["cfi"] is False


@pytest.mark.parametrize("tc", ("host", "sid"))
def test_no_signal_lost_or_added(programs, tc):
    """A running program is sent queued real-time signals while its stack is taken 20 times:
    it counts each exactly once, and still exits normally."""
    prog = Program(tc, programs[tc], "spin", "200")
    sent = 0
    try:
        assert prog.readline() == "live: ready"
        for i in range(20):
            for _ in range(3):
                os.kill(prog.pid, signal.SIGRTMIN)
                sent += 1
            doc = ours(prog.pid, "--max", "50" if i % 2 else "100000")
            frames = doc["threads"][0]["frames"]
            assert any(f["function"].startswith("spin_a") for f in frames), frames[:5]
            assert prog.state() in ("R", "S"), prog.state()      # running again, not left stopped
        os.kill(prog.pid, signal.SIGUSR2)
        code, out = prog.finish()
    finally:
        prog.kill()
    assert code == 0 and "live: %d signals" % sent in out, (sent, out)


def command_holding(prog):
    """`sframe backtrace -p` of a spinning program, started and given time to hold it (its state
    "t": stopped by a tracer) and to be half way through its stack."""
    assert prog.readline() == "live: ready"
    # SIGINT as from a terminal: a test run started in the background by a shell without job
    # control ignores SIGINT, its children inherit that, and an ignored SIGINT rightly stays so.
    cmd = subprocess.Popen([sys.executable, str(CLI), "backtrace", "-p", str(prog.pid)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    end = time.monotonic() + 30
    while prog.state() != "t" and time.monotonic() < end and cmd.poll() is None:
        time.sleep(0.005)
    assert prog.state() == "t", prog.state()
    time.sleep(0.2)
    return cmd


@pytest.mark.parametrize("how", (signal.SIGINT, signal.SIGTERM, signal.SIGKILL), ids=("SIGINT", "SIGTERM", "SIGKILL"))
def test_interrupted_half_way_lets_the_program_go(programs, how):
    """The command is interrupted while it walks 200,000 frames: the program runs on, answers
    its signal and exits normally."""
    prog = Program("host", programs["host"], "spin", "100000")
    try:
        cmd = command_holding(prog)
        cmd.send_signal(how)
        out, err = cmd.communicate(timeout=60)
        assert cmd.returncode != 0 and "Traceback" not in err, (cmd.returncode, err)
        prog.wait_state(("R", "S"), timeout=30)
        os.kill(prog.pid, signal.SIGRTMIN)
        os.kill(prog.pid, signal.SIGUSR2)
        code, text = prog.finish()
    finally:
        prog.kill()
    assert code == 0 and "live: 1 signals" in text, text


def test_one_line_errors(programs, tmp_path):
    def err(*args, code=1):
        p = sframe("backtrace", *args)
        assert p.returncode == code and p.stdout == "" and p.stderr.count("\n") == 1, (args, p.returncode, p.stderr)
        return p.stderr
    # No such process: a child that has exited and been reaped.
    child = subprocess.Popen(["true"])
    child.wait()
    assert "no such process: %d" % child.pid in err("-p", child.pid)
    # A zombie: exited, not reaped.
    child = subprocess.Popen(["true"])
    end = time.monotonic() + 30
    while time.monotonic() < end and process_state(child.pid) != "Z":
        time.sleep(0.01)
    assert "zombie" in err("-p", child.pid)
    child.wait()
    # Ourselves, through a shell that execs us with its own pid.
    p = subprocess.run(["sh", "-c", 'exec "$0" "$1" backtrace -p $$', sys.executable, str(CLI)], text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 1 and "this sframe command itself" in p.stderr, p.stderr
    # Usage.
    assert "give a core file, or -p PID" in err(code=2)
    assert "-p PID reads a running process" in err("core", "-p", "1", code=2)
    # Permission: the command as user nobody, on a program of root's.
    # A copy of the command where user nobody can read it (the test's own directories are root's).
    copy = Path(tempfile.mkdtemp(prefix="sframe-nobody-"))
    os.chmod(copy, 0o755)
    for name in ("core", "scripts"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    prog = Program("host", programs["host"], "deep", "3")
    try:
        prog.wait_state("T")
        p = subprocess.run([sys.executable, str(copy / "scripts" / "sframe"), "backtrace", "-p", str(prog.pid)],
                           text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, user=65534, group=65534,
                           cwd="/")
        assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
        assert "cannot" in p.stderr and ("ptrace_scope" in p.stderr or "CAP_SYS_PTRACE" in p.stderr), p.stderr
        os.kill(prog.pid, signal.SIGCONT)
        code, _ = prog.finish()
        assert code == 0
    finally:
        prog.kill()
        shutil.rmtree(copy, ignore_errors=True)


def test_killed_while_being_read(programs):
    """The program is killed while the command walks its 200,000 frames: one line says so."""
    prog = Program("host", programs["host"], "spin", "100000")
    try:
        cmd = command_holding(prog)
        os.kill(prog.pid, signal.SIGKILL)
        out, err = cmd.communicate(timeout=60)
    finally:
        prog.kill()
    assert cmd.returncode == 1 and out == "" and err == "sframe: process %d exited while being read\n" % prog.pid, err


LOCALE_C = r"""
#include <locale.h>
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) void waiting(void) { for (;;) { pause(); sink++; } }
int main(void) { setlocale(LC_ALL, ""); waiting(); return 0; }
"""


def test_mapped_data_files_are_no_warning(tmp_path):
    """A process that maps locale files (LANG=C.UTF-8): they are data, not ELF files, and deserve no
    warning; whatever warnings there are go to standard error, never among the frames."""
    (tmp_path / "l.c").write_text(LOCALE_C)
    exe = tmp_path / "loc"
    subprocess.run(["gcc", "-O2", "-Wa,--gsframe", "-o", str(exe), str(tmp_path / "l.c")], check=True)
    proc = subprocess.Popen([str(exe)], env=dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8"))
    try:
        time.sleep(0.3)
        maps = Path("/proc/%d/maps" % proc.pid).read_text()
        assert "/usr/lib/locale/" in maps, maps          # the case: data files are mapped
        p = sframe("backtrace", "-p", proc.pid, timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert p.returncode == 0 and "waiting" in p.stdout, (p.stdout, p.stderr)
    assert "warning" not in p.stdout and "not an ELF file" not in p.stderr, (p.stdout, p.stderr)
