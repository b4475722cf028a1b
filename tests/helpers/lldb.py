"""Running LLDB in batch mode as the tests do: LLDB 16 on the host, 19 (trixie root), 21 (sid root)
and 23 (its own root), with the plugin and the probe (tests/indebugger/lldb_probe.py) imported, and
the probe's tagged blocks parsed (Session)."""

import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

from . import toolchains as tcs

REPO = tcs.REPO
PLUGIN = REPO / "lldb_plugin"
PROBE = REPO / "tests" / "indebugger" / "lldb_probe.py"
LLDB16 = "lldb-16"
# Fixture -> where its sessions stop
STOPS = {"frames": "stop_here", "alloca": "stop_here", "realign": "stop_here", "bigframe": "stop_here",
         "bigfunc": "stop_here", "signal": "stop_here", "dlopen": "lib_stop_here", "recurse": "stop_here",
         "threads": "thread_stop_here"}

MARK_RE = re.compile(r"^@(BEGIN|END) (\S+)$")
SFRAME_FRAME_RE = re.compile(r"^  [* ] frame #(\d+): (0x[0-9a-f]+) (\S+)(?: \+ (\d+))?  \[([^\]]+)\]  "
                             r"CFA (unknown|0x[0-9a-f]+)(?: \(FDE (\d+)\))?$")


class Block:
    def __init__(self, out, err):
        self.out = out
        self.err = err

    @property
    def text(self):
        return "\n".join(self.out)


class Session:
    """One LLDB batch run: its whole output, and the tagged blocks the probe printed."""

    def __init__(self, name, stdout, stderr, returncode):
        self.name = name
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = returncode
        self.blocks = {}
        cur, out, err = None, [], []
        for line in stdout.splitlines():
            m = MARK_RE.match(line)
            if m and m.group(1) == "BEGIN":
                cur, out, err = m.group(2), [], []
            elif m and m.group(1) == "END" and cur == m.group(2):
                self.blocks[cur] = Block(out, err)
                cur = None
            elif cur is not None:
                (err if line.startswith("@ERR ") else out).append(line[5:] if line.startswith("@ERR ") else line)

    def block(self, tag):
        assert tag in self.blocks, "%s: no output for %s; LLDB said:\n%s\n%s" % (
            self.name, tag, self.stdout[-3000:], self.stderr[-2000:])
        return self.blocks[tag]

    def lldb_frames(self, tag):
        """LLDB's own frames: [(index, pc, cfa, module path, module base)]."""
        rows = []
        for line in self.block(tag).out:
            if line.startswith("F "):
                _, i, pc, cfa, path, base = line.split(" ")
                rows.append((int(i), int(pc, 16), int(cfa, 16), path, int(base, 16)))
        return rows

    def sframe_bt(self, tag):
        """`sframe bt`: ([(index, pc, where, how, cfa or None, fde or None)], last line)."""
        b = self.block(tag)
        assert not b.err, "%s %s: %s" % (self.name, tag, b.err)
        rows = []
        for line in b.out[1:-1]:
            m = SFRAME_FRAME_RE.match(line)
            assert m, "%s %s: unexpected line %r" % (self.name, tag, line)
            cfa = None if m.group(6) == "unknown" else int(m.group(6), 16)
            rows.append((int(m.group(1)), int(m.group(2), 16), m.group(3), m.group(5), cfa,
                         None if m.group(7) is None else int(m.group(7))))
        return rows, b.out[-1]


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_lldb(which, lines, workdir, name, timeout=900, preamble=True, again=True):
    """Run LLDB 16 (host), 19 (trixie root: Debian 13's), 21 (sid root) or 23 (its own root) in
    batch mode over `lines`; errors do not stop it.  LLDB is killed (with what it runs) after `timeout`
    seconds: its exit status is then HUNG.  Where LLDB crashed (LLVM's stack dump), the session
    is run once more (unless not `again`), and a warning (in pytest's summary) keeps its words."""
    # LLDB crashes now and then (SIGSEGV or abort) in the `target create` or `process launch` that
    # follows a `target delete`, with or without the plugin (LLDB 23.1: 6 runs of 30 of the
    # side-file test's commands without it, none of 30 without the deletions; LLDB 19.1 the same
    # way once in a full run): the targets stay.
    lines = [line for line in lines if line.strip() != "target delete"]
    cmdfile = Path(workdir) / ("%s.cmds" % name)
    head = ["command script import %s" % PLUGIN, "command script import %s" % PROBE]
    cmdfile.write_text("\n".join((head if preamble else []) + list(lines)) + "\n")
    argv = [{19: "lldb-19", 21: "lldb", 23: "lldb-23"}.get(which, LLDB16), "-b", "-x", "-o",
            "command source -e false %s" % cmdfile]
    if which in (19, 21, 23):
        argv, env = tcs.wrap_argv({19: "trixie", 21: "sid", 23: "sid"}[which], argv, cwd=workdir,
                                  root="lldb23" if which == 23 else None)
    else:
        env = None
    session = _watched(argv, workdir, env, timeout, name)
    if again and CRASHED in session.stderr:
        # (what the crashed session left, a side file's job and the cache it writes, stays: a test
        # that counts on a fresh cache may then fail, saying so)
        warnings.warn(LLDBCrashed("%s: LLDB %s crashed (run again); it printed:\n%s" % (
            name, which, session.stderr[-3000:])), stacklevel=2)
        session = _watched(argv, workdir, env, timeout, name)
    return session


class LLDBCrashed(UserWarning):
    """LLDB crashed in a session, which was run again."""


CRASHED = "Stack dump:"   # LLVM's words in a crash (its handler may then wait for ever on a lock the crash left held)
CRASH_GRACE = 20          # seconds a crashed LLDB is given to end before it is killed


def _watched(argv, workdir, env, timeout, name):
    """Run argv in a session of its own; kill every process of that session after `timeout`
    seconds, or CRASH_GRACE seconds after it printed CRASHED."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        began, crashed, hung = time.monotonic(), None, False
        try:
            while proc.poll() is None:
                now = time.monotonic()
                # (pread: LLDB shares the file's offset, which a seek would move under its writes)
                if crashed is None and CRASHED.encode() in os.pread(err.fileno(), 1 << 20, 0):
                    crashed = now
                hung = now - began > timeout
                if hung or (crashed is not None and now - crashed > CRASH_GRACE):
                    _kill_session(proc.pid)
                    proc.wait()
                    break
                time.sleep(0.2)
        except BaseException:         # (the test interrupted: nothing of the session left running)
            _kill_session(proc.pid)
            proc.wait()
            raise
        code = HUNG if hung else proc.returncode
        out.seek(0)
        err.seek(0)
        return Session(name, out.read().decode(errors="backslashreplace"),
                       err.read().decode(errors="backslashreplace"), code)


def _kill_session(sid):
    """SIGKILL to every process of session `sid`, its leader still running (LLDB, the wrapper that
    runs it in a root; what left the session, as the side file's job or an inferior LLDB started
    in a session of its own, stays), until none is left (one may fork meanwhile)."""
    for _ in range(5):
        found = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    os.kill(int(stat.parent.name), signal.SIGKILL)
                    found = True
            except (OSError, ValueError, IndexError):
                pass
        if not found:
            return
        time.sleep(0.05)


HUNG = 124        # a session killed at its timeout (coreutils timeout's exit status)
