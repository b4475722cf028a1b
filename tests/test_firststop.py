"""LLDB's first stop in a fresh build (lldb_plugin.sidefiles, core.elf.sidework): a side file of
CFA, RA and FP rows at once, the one with registers written behind by a process of its own.

On SQLite's shell built from Debian's source package (tests/helpers/realprogs.py), `--strip-debug`
and without `.eh_frame`, at its deep stop (the code generator, 54 frames), against LLDB on the copy
that keeps `.eh_frame`:
- the first stop: LLDB's frames are the reference's, and every callee-saved register of every outer
  frame is the reference's value or unavailable (never another value);
- the registers with the whole side file: LLDB 16 at the next stop of the same session (it reads a
  side file that replaces another), LLDB 23 too (the stacks' functions went as `.eh_frame`, the
  whole file's `.debug_frame` is its first), LLDB 21 in the next session (it reads a module's first
  side file through the session): every register the reference's;
- a session killed while its job writes, and a job killed while it writes: the cache holds the
  whole entry or none, no temporary file is left, and the entry is the one `sframe cfi` writes;
- two sessions at once on one build: one job writes the entry, the other finds it written;
- what keeps the first stop short: the side file of the stacks' functions without the program's
  bytes before its last note (a hole), the job waited for only until it holds its lock (and its
  first process collected), the compiled modules kept after the first stop.
"""

import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import realprogs
from helpers.lldb import PLUGIN, run_lldb

from sframekit.core.elf import sidecache, sidefile, sidework

REGS = ("rbx", "rbp", "r12", "r13", "r14", "r15")
DEEP_SQL = "select " + "x+(" * 30 + "x" + ")" * 30 + " from (select 1 as x);\n"
_ROW = re.compile(r"^@R (\d+) (0x[0-9a-f]+) (.*)$", re.M)

# Each outer frame's PC and callee-saved registers (None: unavailable), as LLDB has them.
FRAMES = ("script for k in range(1, lldb.thread.GetNumFrames()): f = lldb.thread.GetFrameAtIndex(k); "
          "print('@R', k, hex(f.GetPC()), ' '.join('%%s=%%s' %% (r, f.FindRegister(r).GetValue()) for r in %r))"
          % (REGS,))


def _copies(toolchain, work):
    """(the program with .eh_frame, without it), both --strip-debug, and the SQL to run.  (Paths of
    one length: the stack's addresses, in registers, are then the same in both runs.)"""
    built = realprogs.build(toolchain, "sqlite")
    eh, noeh = work / "eh" / "sqlite", work / "ne" / "sqlite"
    for path in (eh, noeh):
        path.parent.mkdir(exist_ok=True)
    subprocess.run(["objcopy", "--strip-debug", str(built), str(eh)], check=True)
    subprocess.run(["objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(built), str(noeh)],
                   check=True)
    (work / "deep.sql").write_text(DEEP_SQL)
    return eh, noeh


def _stop(exe, work, tag, then=()):
    return (["target create %s" % exe, "breakpoint set -n sqlite3ExprCodeTarget", "breakpoint modify -i 44 1",
             "process launch -i /dev/null -- -init %s :memory:" % (work / "deep.sql"),
             "script print('@@ %s')" % tag, "bt", FRAMES, "script print('@@ end-%s')" % tag] + list(then))


# A second stop: the statement's execution, after its code was generated; not on the first stop's stacks.
LATER = ["breakpoint delete 1", "breakpoint set -n sqlite3VdbeExec", "process continue",
         "script print('@@ second')", "bt", FRAMES, "script print('@@ end-second')"]
# The path of the program's symbol file, as LLDB has it.
SYMFILE = "script print('@@ symfile', lldb.target.GetModuleAtIndex(0).GetSymbolFileSpec().fullpath)"


def _symtab(path):
    """readelf's listing of the file's `.symtab` (None: it has none)."""
    out = subprocess.run(["readelf", "-sW", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split("Symbol table '.symtab'", 1)[1] if "Symbol table '.symtab'" in out else None


def _frames(stdout, tag):
    """[(PC, {register: value or None})] of the outer frames between a tag's markers."""
    block = stdout.split("@@ %s\n" % tag, 1)[1].split("@@ end-%s" % tag, 1)[0]
    out = []
    for _k, pc, regs in _ROW.findall(block):
        values = dict(item.split("=", 1) for item in regs.split())
        out.append((int(pc, 16), {r: None if v == "None" else int(v, 16) for r, v in values.items()}))
    return out


def _names(stdout, tag):
    """The function names of the frames `bt` printed between a tag's markers (program's symbols)."""
    block = stdout.split("@@ %s\n" % tag, 1)[1].split("@@ end-%s" % tag, 1)[0]
    return re.findall(r"frame #\d+: 0x[0-9a-f]+ [^`\s]+`(\S+)", block)


def _compare(got, want, what, least=40):
    """(registers equal, unavailable) over every outer frame (more than `least`); AssertionError on
    a PC or a value that differs."""
    assert [pc for pc, _ in got] == [pc for pc, _ in want] and len(want) > least, (what, got[:5], want[:5])
    same = missing = 0
    for k, ((_pc, regs), (_pc2, ref)) in enumerate(zip(got, want)):
        for r in REGS:
            if regs[r] is None:
                missing += ref[r] is not None
            else:
                assert regs[r] == ref[r], "%s: frame #%d %s = %#x, with .eh_frame %s" % (
                    what, k + 1, r, regs[r], ref[r] if ref[r] is None else "%#x" % ref[r])
                same += 1
    return same, missing


def _settled(cache, timeout=300):
    """Wait until no job holds a lock in the cache (a job outlives the session that started it)."""
    deadline = time.monotonic() + timeout
    for lock in Path(cache).rglob("*.lock"):
        fd = os.open(lock, os.O_RDONLY)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError:
                    assert time.monotonic() < deadline, "a job still holds %s" % lock
                    time.sleep(0.1)
        finally:
            os.close(fd)


def _one_entry(cache, noeh, tmp_path):
    """The cache holds one whole entry for the program, the file `sframe cfi` writes, and nothing
    half-written."""
    entries = list((Path(cache) / "copies").glob("*/*.debug"))
    assert len(entries) == 1, entries
    assert sidecache.cached(str(noeh), str(cache)).why == "cached"
    sidefile.write(str(noeh), str(tmp_path / "one.debug"), workers=1)
    assert entries[0].read_bytes() == (tmp_path / "one.debug").read_bytes()
    assert not [p for p in Path(cache).rglob("*") if ".tmp" in p.name], list(Path(cache).rglob("*"))


@pytest.mark.parametrize("lldb", [16, 21, 23])
def test_first_stop_never_wrong_then_registers(tmp_path, monkeypatch, lldb):
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    toolchain = "host" if lldb == 16 else "sid"
    eh, noeh = _copies(toolchain, tmp_path)
    again = ["process continue", "script print('@@ next')", FRAMES, "script print('@@ end-next')"]
    ref = run_lldb(lldb, _stop(eh, tmp_path, "ref") + again + ["process kill"], tmp_path, "ref%d" % lldb,
                   preamble=False)
    # (the file attached at the first stop: a compile unit that describes nothing on LLDB 23 only)
    unit = ("script symfile = lldb.target.GetModuleAtIndex(0).GetSymbolFileSpec().fullpath; "
            "data = open(symfile, 'rb').read(); print('@@ symfile', symfile); "
            "print('@@ unit', all(b'.debug_%s' % n + bytes(1) in data for n in (b'info', b'abbrev', b'line')))")
    lines = _stop(noeh, tmp_path, "first", [unit, "script print('@@ info')", "sframe info", "script print('@@ end-info')",
                                            "sframe info --wait"]) + again + ["process kill"]
    s = run_lldb(lldb, lines, tmp_path, "first%d" % lldb)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "internal error" not in out, out[-3000:]
    info = s.stdout.split("@@ info", 1)[1]
    kind = ", CFA, RA and FP only" if lldb == 21 else " for the functions on the stacks"
    assert "sqlite: attached%s" % kind in info, info
    assert re.search(r"^@@ unit %s$" % (lldb == 23), s.stdout, re.M), out[-3000:]
    # (the side file of the stacks' functions is the module's symbol file: on LLDB 16 and 21 it
    # replaced the program itself, added first)
    symfile = re.search(r"^@@ symfile (.*)$", s.stdout, re.M).group(1)
    assert symfile.startswith(str(cache)) and symfile.endswith(".debug"), symfile
    # The first stop: right frames, no wrong register (those of outer frames are unavailable, but
    # where a frame's own rows say the FP is unchanged or saved).
    same, missing = _compare(_frames(s.stdout, "first"), _frames(ref.stdout, "ref"), "LLDB %d, first stop" % lldb)
    assert missing > same, (same, missing)
    # (and named as the program's own symbols name them)
    names = _names(s.stdout, "first")
    assert names == _names(ref.stdout, "ref") and names.count("sqlite3ExprCodeTarget") > 10, names[:12]
    _settled(cache)
    if lldb != 21:
        # The whole side file attached at the next stop of the same session.
        same, missing = _compare(_frames(s.stdout, "next"), _frames(ref.stdout, "next"), "LLDB %d, next stop" % lldb)
        assert same > 0 and missing <= same // 10, (same, missing)
    if lldb != 16:
        # LLDB 21 reads a module's first side file through the session: the next one; LLDB 23
        # finds the entry as it loads the module.
        s2 = run_lldb(lldb, _stop(noeh, tmp_path, "later") + ["process kill"], tmp_path, "later%d" % lldb)
        assert s2.returncode == 0, s2.stdout[-3000:]
        same, missing = _compare(_frames(s2.stdout, "later"), _frames(ref.stdout, "ref"),
                                 "LLDB %d, next session" % lldb)
    assert same > 0 and missing <= same // 10, (same, missing)
    _one_entry(cache, noeh, tmp_path)


def test_killed_session_and_killed_job_leave_the_cache_whole(tmp_path, monkeypatch):
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("host", tmp_path)
    # LLDB killed (SIGKILL) at its first stop, its job just begun: the job goes on alone.
    lines = _stop(noeh, tmp_path, "killed", ["script import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    s = run_lldb(16, lines, tmp_path, "killed")
    assert s.returncode == -signal.SIGKILL and "@@ end-killed" in s.stdout, (s.returncode, s.stdout[-2000:])
    assert sidework.holder(str(noeh), str(cache)) is not None, "no job after the session"
    _settled(cache)
    _one_entry(cache, noeh, tmp_path)
    # A job killed while it writes: no entry, and the next job writes it whole.
    other = tmp_path / "cfi2"
    assert sidework.start(str(noeh), str(other)) is None
    deadline = time.monotonic() + 60
    while sidework.state(str(noeh), str(other)).done < 2:
        assert time.monotonic() < deadline, sidework.state(str(noeh), str(other))
        time.sleep(0.05)
    os.killpg(sidework.holder(str(noeh), str(other)), signal.SIGKILL)     # (the job and its workers)
    deadline = time.monotonic() + 30
    while sidework.holder(str(noeh), str(other)) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sidecache.cached(str(noeh), str(other)) is None
    assert not sidework.state(str(noeh), str(other)).running
    assert sidework.start(str(noeh), str(other)) is None
    _settled(other)
    _one_entry(other, noeh, tmp_path)
    log = next(other.rglob("*.log")).read_text()
    assert log.count("wrote it in") == 1, log


def test_two_sessions_at_once_do_the_work_once(tmp_path, monkeypatch):
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("host", tmp_path)
    ref = run_lldb(16, _stop(eh, tmp_path, "ref") + ["process kill"], tmp_path, "ref", preamble=False)
    lines = _stop(noeh, tmp_path, "both", ["sframe info --wait", "process kill"])
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda k: run_lldb(16, lines, tmp_path, "both%d" % k), range(2)))
    for s in runs:
        assert s.returncode == 0 and "Traceback" not in s.stdout + s.stderr, s.stdout[-3000:]
        _compare(_frames(s.stdout, "both"), _frames(ref.stdout, "ref"), "one of two sessions")
    _settled(cache)
    _one_entry(cache, noeh, tmp_path)
    log = next(cache.rglob("*.log")).read_text()
    assert log.count("wrote it in") == 1, log


def test_lldb23_other_functions_before_the_registers(tmp_path, monkeypatch):
    """LLDB 23 reads a module's first `.eh_frame` through the session: at a later stop whose
    stacks hold functions the first stop's file lacks, before the side file with registers is
    written, every function's CFA, RA and FP rows go as its `.debug_frame`: right frames there, no
    wrong register, and the registers from the next session on."""
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("sid", tmp_path)
    ref = run_lldb(23, _stop(eh, tmp_path, "ref") + LATER + ["process kill"], tmp_path, "ref", preamble=False)
    lines = _stop(noeh, tmp_path, "first") + LATER + [
        "script print('@@ info')", "sframe info", "script print('@@ end-info')", "process kill"]
    s = run_lldb(23, lines, tmp_path, "first")
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "internal error" not in out, out[-3000:]
    _compare(_frames(s.stdout, "first"), _frames(ref.stdout, "ref"), "LLDB 23, first stop")
    same, missing = _compare(_frames(s.stdout, "second"), _frames(ref.stdout, "second"), "LLDB 23, second stop", 3)
    info = s.stdout.split("@@ info", 1)[1].split("@@ end-info", 1)[0]
    print("second stop: %d registers equal, %d unavailable; %s" % (same, missing, re.findall(r"sqlite: .*", info)))
    if "sqlite: attached (" not in info:
        # (the job had not written it at the second stop: the file of every function's rows)
        assert "sqlite: attached, CFA, RA and FP only" in info, info
        assert missing > 0, (same, missing)
    _settled(cache)
    s2 = run_lldb(23, _stop(noeh, tmp_path, "later") + LATER + ["process kill"], tmp_path, "later")
    assert s2.returncode == 0, s2.stdout[-3000:]
    same, missing = _compare(_frames(s2.stdout, "second"), _frames(ref.stdout, "second"), "LLDB 23, next session", 3)
    assert same > 0 and missing <= same // 10, (same, missing)


def test_lldb16_other_functions_before_the_registers(tmp_path, monkeypatch):
    """LLDB 16 at a later stop whose stacks hold functions the first stop's side file lacks, the
    side file with registers not written yet (the test holds its job's lock: no job runs): a side
    file of those functions replaces the first, added twice (after a side file, not after the
    program), with the program's `.symtab` as the first (lldb_plugin.sidefiles._program_symbols);
    the frames and their names there are the reference's."""
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("host", tmp_path)
    ref = run_lldb(16, _stop(eh, tmp_path, "ref") + LATER + ["process kill"], tmp_path, "ref", preamble=False)
    at = sidecache.place(str(noeh), str(cache))
    fd = os.open(at.beside(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        lines = _stop(noeh, tmp_path, "first") + [SYMFILE] + LATER + [
            SYMFILE, "script print('@@ info')", "sframe info", "script print('@@ end-info')", "process kill"]
        s = run_lldb(16, lines, tmp_path, "first")
    finally:
        os.close(fd)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "internal error" not in out, out[-3000:]
    first, second = re.findall(r"^@@ symfile (.*)$", s.stdout, re.M)
    stack = str(cache / "stack")
    assert first.startswith(stack) and first.endswith(".debug"), first
    assert second.startswith(stack) and second.endswith(".debug.again") and second[:-6] != first, second
    assert "sqlite: attached for the functions on the stacks" in s.stdout.split("@@ info", 1)[1], out[-2000:]
    _compare(_frames(s.stdout, "first"), _frames(ref.stdout, "ref"), "LLDB 16, first stop")
    _compare(_frames(s.stdout, "second"), _frames(ref.stdout, "second"), "LLDB 16, second stop", 3)
    names = _names(s.stdout, "second")
    assert names == _names(ref.stdout, "second") and "sqlite3VdbeExec" in names, names[:8]


@pytest.mark.parametrize("lldb", [16, 23])
def test_imported_after_the_target_stopped_at_entry(tmp_path, monkeypatch, lldb):
    """The plugin imported into a target without a process (the program named on LLDB's command
    line): its side files wait for a stop; none is attached at a launch stopped at its entry point
    (the stop hook leaves that one alone: nothing has run), the next stop attaches them, and the
    frames there are the reference's."""
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("host" if lldb == 16 else "sid", tmp_path)
    ref = run_lldb(lldb, _stop(eh, tmp_path, "ref") + ["process kill"], tmp_path, "ref%d" % lldb, preamble=False)
    lines = ["target create %s" % noeh, "command script import %s" % PLUGIN, SYMFILE,
             "breakpoint set -n sqlite3ExprCodeTarget", "breakpoint modify -i 44 1",
             "process launch -s -i /dev/null -- -init %s :memory:" % (tmp_path / "deep.sql"), SYMFILE,
             "process continue", SYMFILE, "script print('@@ first')", "bt", FRAMES, "script print('@@ end-first')",
             "process kill"]
    s = run_lldb(lldb, lines, tmp_path, "entry%d" % lldb, preamble=False)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "sframe:" not in out.replace("sframe: wrote", ""), \
        out[-3000:]
    before, at_entry, at_stop = re.findall(r"^@@ symfile (.*)$", s.stdout, re.M)
    assert str(cache) not in before and str(cache) not in at_entry, (before, at_entry)
    assert at_stop.startswith(str(cache)), at_stop
    _compare(_frames(s.stdout, "first"), _frames(ref.stdout, "ref"), "LLDB %d, after the entry stop" % lldb)
    _settled(cache)


@pytest.mark.parametrize("lldb", [16, 21])
def test_imported_after_a_bt(tmp_path, monkeypatch, lldb):
    """The plugin imported at a stop where LLDB has already worked out its own `bt` without a
    side file (wrong after a few frames): the side file, added after the program itself (the
    module's symbol file, with a `.symtab`: lldb_plugin.sidefiles._add), replaces it, and LLDB's
    `bt` is then the reference's, PCs and names."""
    cache = tmp_path / "cfi"
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(cache))
    eh, noeh = _copies("host" if lldb == 16 else "sid", tmp_path)
    ref = run_lldb(lldb, _stop(eh, tmp_path, "ref") + ["process kill"], tmp_path, "ref%d" % lldb, preamble=False)
    lines = _stop(noeh, tmp_path, "own") + [SYMFILE, "command script import %s" % PLUGIN, SYMFILE,
                                             "script print('@@ late')", "bt", FRAMES, "script print('@@ end-late')",
                                             "process kill"]
    s = run_lldb(lldb, lines, tmp_path, "late%d" % lldb, preamble=False)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "sframe:" not in out.replace("sframe: wrote", ""), \
        out[-3000:]
    before, after = re.findall(r"^@@ symfile (.*)$", s.stdout, re.M)
    # (the side file added once, after the program: not twice, by another name the second time)
    assert str(cache) not in before and after.startswith(str(cache)) and after.endswith(".debug"), (before, after)
    want = _frames(ref.stdout, "ref")
    own = [pc for pc, _ in _frames(s.stdout, "own")]
    assert own and own != [pc for pc, _ in want], ("LLDB alone was right", own)
    _compare(_frames(s.stdout, "late"), want, "LLDB %d, imported after a bt" % lldb)
    assert _names(s.stdout, "late") == _names(ref.stdout, "ref")
    _settled(cache)


def test_stack_file_leaves_the_code_out(tmp_path):
    """A side file made at a stop (sidecache.partial) holds the program's headers and notes but not
    the code and SFrame a linker placed before its last notes (sid's: the head was most of the
    program): the same file, those bytes a hole reading as zeros, which no reader takes; and
    without the program's symbols (LLDB reads them from the program)."""
    built = realprogs.build("sid", "sqlite")
    noeh = tmp_path / "sqlite"
    subprocess.run(["objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(built), str(noeh)],
                   check=True)
    made = sidecache.partial(str(noeh), None, str(tmp_path / "cfi"), eh_frame=True)
    assert made.path is not None, made
    whole = tmp_path / "whole.debug"
    sidefile.write(str(noeh), str(whole), callee_saved=False, eh_frame=True, symbols=False)
    sparse, full = Path(made.path).read_bytes(), whole.read_bytes()
    sections = subprocess.run(["readelf", "-SW", made.path], capture_output=True, text=True, check=True).stdout
    assert ".symtab" not in sections and ".strtab" not in sections and ".eh_frame" in sections, sections
    assert ".symtab" in subprocess.run(["readelf", "-SW", str(noeh)], capture_output=True, text=True, check=True).stdout
    assert len(sparse) == len(full)
    differ = [k for k in range(len(full)) if sparse[k] != full[k]] if sparse != full else []
    assert differ and all(sparse[k] == 0 for k in differ), differ[:8]
    assert os.stat(made.path).st_blocks * 512 < len(full) - len(differ) // 2, "no hole"
    notes = subprocess.run(["readelf", "-nW", made.path], capture_output=True, text=True, check=True).stdout
    ref = subprocess.run(["readelf", "-nW", str(noeh)], capture_output=True, text=True, check=True).stdout
    assert "Build ID" in notes and notes == ref.replace(str(noeh), made.path), (notes, ref)


def test_stack_file_symbols_with_a_debug_file(tmp_path):
    """A side file made at a stop for a program with a separate debug file: without symbols where
    the program has its own `.symtab` (LLDB reads the program's), with the debug file's where the
    program has none (`strip -s`: the side file takes the debug file's place)."""
    built = realprogs.build("host", "lua")
    debug = tmp_path / "lua.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(built), str(debug)], check=True)
    kept, stripped = tmp_path / "kept", tmp_path / "stripped"
    subprocess.run(["objcopy", "--strip-debug", str(built), str(kept)], check=True)
    subprocess.run(["strip", "-s", "-o", str(stripped), str(built)], check=True)

    want = _symtab(debug)
    assert want and " main\n" in want and _symtab(kept) and _symtab(stripped) is None
    for program, wanted in ((kept, None), (stripped, want)):
        made = sidecache.partial(str(program), None, str(tmp_path / ("cfi-" + program.name)), debug_file=str(debug))
        assert made.path is not None, made
        assert _symtab(made.path) == wanted, (program, (_symtab(made.path) or "")[:300])


def test_stack_file_with_the_program_symbols(tmp_path):
    """A side file made at a stop for LLDB 16 to 21 (sidecache.partial(symbols=True)): it carries
    the program's symbols, as they are (LLDB takes it after the program itself:
    lldb_plugin.sidefiles._program_symbols)."""
    built = realprogs.build("host", "lua")
    noeh = tmp_path / "lua"
    subprocess.run(["objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(built), str(noeh)],
                   check=True)

    made = sidecache.partial(str(noeh), None, str(tmp_path / "cfi"), symbols=True)
    assert made.path is not None, made
    want = _symtab(noeh)
    assert want and " main\n" in want and _symtab(made.path) == want


def test_job_started_leaves_no_child_behind(tmp_path):
    """sidework.start returns once the job holds its lock (not after the second fork): the job is
    running then, and the first child, gone soon after, is collected (no zombie of the debugger)."""
    eh, noeh = _copies("host", tmp_path)
    cache = tmp_path / "cfi"
    before = set(_children())
    assert sidework.start(str(noeh), str(cache)) is None
    assert sidework.state(str(noeh), str(cache)).running
    deadline = time.monotonic() + 10
    while set(_children()) - before:
        assert time.monotonic() < deadline, "children left: %s" % (set(_children()) - before)
        time.sleep(0.05)
    _settled(cache)
    _one_entry(cache, noeh, tmp_path)


def test_job_not_answering_is_not_waited_for(tmp_path, monkeypatch):
    """A first child that never says it holds the lock (hung, as a child whose fault handler
    waits for ever): the debugger waits ANSWER seconds, not for ever; the child is killed and
    collected, and start (and then the job's state, which sframe info shows) says why no job runs."""
    eh, noeh = _copies("host", tmp_path)
    monkeypatch.setattr(sidework, "ANSWER", 1)

    def hung(*_args):
        try:
            time.sleep(3600)
        finally:
            os._exit(0)
    monkeypatch.setattr(sidework, "_first_child", hung)
    before = set(_children())
    t = time.monotonic()
    assert "did not answer in 1 s" in sidework.start(str(noeh), str(tmp_path / "cfi"))
    assert time.monotonic() - t < 5
    assert "did not answer in 1 s" in sidework.state(str(noeh), str(tmp_path / "cfi")).text()     # (sframe info's words)
    deadline = time.monotonic() + 10
    while set(_children()) - before:
        assert time.monotonic() < deadline, "children left: %s" % (set(_children()) - before)
        time.sleep(0.05)


def _children():
    """This process's children (zombies too), from /proc."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            found += (task / "children").read_text().split()
        except FileNotFoundError:
            pass              # (a thread that ended meanwhile: sidework's collecting thread)
    return found


@pytest.mark.parametrize("lldb", [16, 23])
def test_the_first_stop_keeps_the_compiled_modules(tmp_path, monkeypatch, lldb):
    """LLDB's Python writes no compiled modules: the plugin keeps those of the modules its import,
    its thread and the first stop imported (lldb_plugin.stophook._bytecode_kept), after that stop,
    in the timestamp form the next session's import takes; and writes them again where the
    sources changed since (a second session)."""
    copy = tmp_path / "kit"
    for name in ("core", "lldb_plugin"):
        shutil.copytree(PLUGIN.parent / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    eh, noeh = _copies("host" if lldb == 16 else "sid", tmp_path)
    wait = ("script import threading, time; [time.sleep(0.05) for _ in range(200) "
            "if any(t.name == 'sframe-preload' for t in threading.enumerate())]")
    lines = ["command script import %s" % (copy / "lldb_plugin")] + _stop(noeh, tmp_path, "kept") + [wait, "process kill"]
    modules = ("lldb_plugin/sidefiles.py", "lldb_plugin/command/backtrace.py", "core/elf/sidecache.py",
               "core/elf/sidefile.py", "core/unwind/unwinder.py", "core/dwarf/writer.py")
    for session in (1, 2):
        s = run_lldb(lldb, lines, tmp_path, "kept%d-%d" % (lldb, session), preamble=False)
        assert s.returncode == 0 and "Traceback" not in s.stdout + s.stderr, s.stdout[-3000:]
        for module in modules:
            source = copy / module
            compiled = list((source.parent / "__pycache__").glob(source.stem + ".cpython-*.pyc"))
            assert len(compiled) == 1, (module, compiled)
            head, st = compiled[0].read_bytes()[4:16], source.stat()
            assert head == bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + \
                (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"), (session, module)
        _settled(tmp_path / "cfi")
        shutil.rmtree(tmp_path / "cfi")
        for module in modules:            # (changed since: their compiled forms out of date)
            os.utime(copy / module, (time.time() + 60, time.time() + 60))


def test_quitting_while_the_thread_imports(tmp_path, monkeypatch):
    """A session that quits while the plugin's thread still imports ends as LLDB alone does.
    OpenSSL (hashlib, the cache's digests) is made ready before the thread starts, never in it:
    its clean-up at the process's exit freed what the thread still used, and LLDB 16 then
    aborted, crashed or hung as it quit (21 sessions of 250 that ended right after the import,
    measured).  The thread finds OpenSSL ready as it starts, and quick sessions all end cleanly."""
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    _eh, noeh = _copies("host", tmp_path)
    watch = ("script import sys, threading; _start = threading.Thread.start; started = []; "
             "threading.Thread.start = lambda self: (started.append((self.name, '_hashlib' in sys.modules)), "
             "_start(self))[1]")
    s = run_lldb(16, ["target create %s" % noeh, watch, "command script import %s" % PLUGIN,
                      "script print('@@ started', started)"], tmp_path, "watched", preamble=False, again=False)
    assert "@@ started [('sframe-preload', True)]" in s.stdout, s.stdout[-2000:]
    for k in range(20):
        s = run_lldb(16, ["target create %s" % noeh, "command script import %s" % PLUGIN, "script pass"],
                     tmp_path, "quick%d" % k, timeout=60, preamble=False, again=False)
        assert s.returncode == 0 and "Stack dump:" not in s.stderr, (k, s.returncode, s.stderr[-2000:])


def test_head_holes_keep_every_note(tmp_path):
    """The pieces of a head (sidefile._head_pieces) hold every byte of the ELF header, the program
    headers, the notes, the interpreter's name and the kept segments (a note without a section),
    whatever their order and nesting, overlapping ones joined, and nothing else (the rest is the
    holes of a sparse file); a note of no bytes far past the end of the file is refused, never
    allocated."""
    from sframekit.core.elf.image import SHF_ALLOC, SectionHeader
    from sframekit.core.errors import ElfError
    data = bytes(range(1, 256)) * 480          # 120 KiB, no zero byte
    path = tmp_path / "prog"
    path.write_bytes(data)

    def sec(k, name, kind, offset, size):
        return SectionHeader(k, name, kind, SHF_ALLOC, offset, offset, size, 0, 0, 4, 0)
    sections = [sec(4, ".note.b", 7, 0x12345, 0x30), sec(3, ".text", 1, 0x9000, 0x6000),
                sec(5, ".note.c", 7, 0x18000, 0x10), sec(2, ".interp", 1, 0x200, 0x20),   # (nested in .note.a)
                sec(1, ".note.a", 7, 0x30, 0x8000),                                       # (across the headers' end)
                sec(6, ".note.z", 7, 0x1d000, 0x20)]
    segments = [(4, 0x1b000, 0x40), (1, 0, 0x1d020)]       # (a PT_NOTE without a section; the PT_LOAD not kept)
    with open(path, "rb") as fh:
        pieces = sidefile._head_pieces(fh, sections, segments, 0x40, 0x1d020)
    assert [(hex(at), hex(at + len(got))) for at, got in pieces] == [
        ("0x0", "0x8030"), ("0x12345", "0x12375"), ("0x18000", "0x18010"), ("0x1b000", "0x1b040"),
        ("0x1d000", "0x1d020")]
    for at, got in pieces:
        assert got == data[at:at + len(got)]
    with open(path, "rb") as fh, pytest.raises(ElfError, match="beyond the end of the file"):
        sidefile._head_pieces(fh, [sec(7, ".note.far", 7, 1 << 40, 0)], [], 0x40, 1 << 40)
