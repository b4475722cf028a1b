"""Running GDB as the tests do: a batch script in the GDB of a toolchain's environment (GDBS), with
tests/indebugger/gdb_frames.py sourced first and its lines parsed (Out); programs under qemu-user
waiting for GDB (Qemu); copies of a program with and without .eh_frame at paths of equal length."""

import json
import re
import shutil
import socket
import subprocess
import time
from collections import namedtuple
from pathlib import Path

from . import toolchains as T

REPO = T.REPO
PLUGIN = REPO / "sframe_gdb.py"
HELPER = REPO / "tests" / "indebugger" / "gdb_frames.py"

# Which GDB runs where: (toolchain whose environment runs it, program)
GDBS = {
    "gdb13": ("host", "gdb"),
    "gdb16": ("trixie", "gdb"),        # Debian 13's
    "gdb18": ("sid", "gdb"),
    "multiarch": ("sid", "gdb-multiarch"),
}

# Fixture -> (breakpoint, arguments, functions that must be unwound with SFrame at the stop)
STOPS = {
    "frames": ("stop_here", (), ("stop_here", "level3", "level2", "level1", "main")),
    "recurse": ("stop_here", ("50",), ("stop_here",) + ("descend", "descend_odd") * 25 + ("descend", "main")),
    "signal": ("stop_here", (), ("stop_here", "in_handler")),      # handler tail-calls in_handler
    "threads": ("thread_stop_here", (), ("thread_stop_here", "worker_chain", "worker")),
    "dlopen": ("lib_stop_here", (), ("lib_stop_here", "lib_middle", "main")),     # two tail calls
    "alloca": ("stop_here", (), ("stop_here", "use_vla", "main")),
    "realign": ("stop_here", (), ("stop_here", "realigned_drap", "main")),   # V3: a flex FDE
    "bigframe": ("stop_here", (), ("stop_here", "mid_frame", "main")),
    "bigfunc": ("stop_here", (), ("stop_here", "big_function", "main")),
    "shrinkwrap": ("stop_here", (), ("stop_here", "dispatch", "main")),
}

Fr = namedtuple("Fr", "level pc cfa sf name where")

# (fixture, breakpoint, steps): single-stepping through prologues, bodies, epilogues, calls and
# returns, PLT stubs (write@plt and the lazy-binding PLT0 after level1 returns to main; puts@plt),
# a DRAP-realigned and an alloca frame, a dlopen'ed library, signal and thread stacks.
VERIFY_PLAN = [        # in the order the breakpoints are hit
    ("frames", "*level1", 30),
    ("frames", "*'puts@plt'", 8),
    ("frames", "*level3", 40),
    ("recurse", "stop_here", 6),
    ("signal", "stop_here", 6),
    ("threads", "thread_stop_here", 6),
    ("dlopen", "lib_stop_here", 25),
    ("alloca", "*use_alloca", 25),
    ("realign", "*realigned_drap", 30),
    ("bigframe", "*huge_frame", 15),
    ("bigfunc", "stop_here", 8),
    ("shrinkwrap", "*dispatch", 40),    # through a jump table into a case, and its call
    ("shrinkwrap", "*early_out", 30),   # the early test, the shrink-wrapped saves, the recursion
]


class Out(str):
    """GDB's output, with parsers for the helper's lines."""

    def frames(self, label):
        out = []
        for line in self.splitlines():
            p = line.split()
            if len(p) >= 8 and p[0] == "FRAME" and p[1] == label:
                out.append(Fr(int(p[2]), int(p[3], 16), None if p[4] == "-" else int(p[4], 16),
                              p[5] == "1", p[6], p[7]))
        assert any(line.startswith("ENDFRAMES %s " % label) for line in self.splitlines()), \
            "no frames-dump %s in the output:\n%s" % (label, self[-6000:])
        return out

    def regs(self, label):
        """{level: {register: value}} of a `regs-dump LABEL` (value "-" where GDB has none)."""
        got = {}
        for line in self.splitlines():
            if line.startswith("REGS %s " % label):
                level, *pairs = line.split()[2:]
                got[int(level)] = dict(p.split("=", 1) for p in pairs)
        return got

    def end(self, label):
        for line in self.splitlines():
            if line.startswith("ENDFRAMES %s " % label):
                return line.split(None, 3)[3]
        raise AssertionError("no ENDFRAMES %s" % label)

    def between(self, a, b=None):
        """Text between `mark A` and `mark B` (or the end)."""
        start = self.index("MARK %s\n" % a) + len("MARK %s\n" % a)
        end = self.index("MARK %s\n" % b, start) if b else len(self)
        return self[start:end]


def run_gdb(gdb, lines, workdir, args=(), timeout=600, cwd=None, env=None, wrap=()):
    """Run a GDB batch script (the helper sourced first) and return its output (`env`: variables
    set for it; `wrap`: a command GDB's own is given to, as its arguments)."""
    tc, prog = GDBS[gdb]
    script = Path(workdir) / ("script-%d.gdb" % time.monotonic_ns())
    head = ["set pagination off", "set confirm off", "set width 0", "set breakpoint pending on", "handle SIGUSR1 nostop noprint pass",
            "source %s" % HELPER]
    script.write_text("\n".join(head + list(lines)) + "\n")
    proc = T.run_in(tc, [*wrap, prog, "-nx", "-batch", "-x", str(script), *args], cwd=cwd or workdir,
                    binds=[workdir], timeout=timeout, env=env)
    out = Out(proc.stdout + proc.stderr)
    out.stderr = proc.stderr          # what GDB wrote to its standard error (also in the text, at the end)
    return out


def twin_copies(build, workdir):
    """Copies of the program (and its library) with and without .eh_frame, at paths of equal
    length: WORK/orig/X and WORK/noeh/X.  Returns (orig, noeh)."""
    work = Path(workdir)
    for kind, exe, lib in (("orig", build.path, build.lib), ("noeh", build.noeh, build.noeh_lib)):
        d = work / kind
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exe, d / exe.name)
        if lib is not None:
            shutil.copy2(lib, d / lib.name)
    return work / "orig" / build.path.name, work / "noeh" / build.path.name


def twin_paths(workdir, name, sources):
    """Write `sources` (file name -> C text) into workdir; the paths of program `name` built
    there with its CFI and without, at paths of equal length: (WORK/orig/NAME, WORK/noeh/NAME)."""
    work = Path(workdir)
    for file, text in sources.items():
        (work / file).write_text(text)
    for kind in ("orig", "noeh"):
        (work / kind).mkdir()
    return work / "orig" / name, work / "noeh" / name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port):
    """Is something listening on TCP port (checked in /proc/net/tcp*, without connecting)?"""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                for line in fh.readlines()[1:]:
                    p = line.split()
                    if p[1].endswith(":%04X" % port) and p[3] == "0A":
                        return True
        except OSError:
            pass
    return False


class Qemu:
    """A cross program under qemu-user in the sid root, waiting for GDB on a port (qemu-user's
    gdbstub takes one connection: the readiness check must not connect)."""

    def __init__(self, toolchain, exe, args=(), cpu=None):
        self.port = free_port()
        # setarch -R: no address randomisation, so two runs of copies at paths of equal length
        # have the same addresses (qemu-user's guest mappings come from the host's mmap); -seed:
        # the same stack and pointer guards.
        argv, env = T.wrap_argv(toolchain, ["setarch", "-R"] + T.qemu_argv(toolchain, exe, args, gdb_port=self.port,
                                                                             seed=1, cpu=cpu),
                                binds=[Path(exe).parent])
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("qemu did not start listening on port %d" % self.port)
            time.sleep(0.05)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def live_frames(tc, pid):
    """GDB's frames of a running process, by its own system's GDB ({LWP: thread}).  In a root, GDB
    runs in the program's own mount namespace and root (nsenter): the file paths /proc/PID/maps
    names are the ones the program sees only there."""
    script = REPO / "tests" / "indebugger" / "gdb_live_frames.py"
    argv = [T.toolchain(tc).gdb, "-nx", "-batch", "-p", str(pid), "-x", str(script)]
    if T.toolchain(tc).root is not None:
        argv = ["nsenter", "--target", str(pid), "--mount", "--root", "--wd"] + argv
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    m = re.search(r"^GDBJSON (.*)$", p.stdout, re.M)
    assert m, p.stdout[-3000:] + p.stderr[-3000:]
    return {t["lwp"]: t for t in json.loads(m.group(1))}


def gcore(toolchain, exe, core, args=(), stop="stop_here", cwd=None, **kw):
    """Run `exe` (with `args`) under the GDB of `toolchain`'s system to `stop`, and write its
    core file to `core` with GDB's gcore."""
    run = " ".join(["run", *map(str, args)])
    return T.run_in(toolchain, ["gdb", "-nx", "-batch", "-ex", "break %s" % stop, "-ex", run, "-ex", "gcore %s" % core,
                                str(exe)], cwd=cwd, check=True, **kw)
