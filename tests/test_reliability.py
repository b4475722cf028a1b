"""Failures named, in the debuggers and the command line: malformed SFrame sections inside real
binaries, and the unwinder fuzzed on real stacks.

Malformed sections (the sid x86-64 `frames` program, .eh_frame removed, its .sframe patched):
  * "many": the header claims 0x7fffffff FDEs, so the whole section is refused;
  * "garbled": FDE 3 (main) points its FREs far past the FRE sub-section, so only main's
    frame cannot be unwound with SFrame; the frames the intact FDEs cover still are.
Every command says "malformed SFrame section at byte offset N: rule" in one line (GDB `info
sframe`, `info sframe ADDR`, `sframe verify`; LLDB `sframe info/lookup/dump/bt`; `sframe
backtrace` of a core), the unwinder declines the frame with that reason under `set debug sframe
on`, GDB's other unwinders still run, no debug line splits a frame line, and nothing prints a
traceback or calls it an internal error.
"""

import random
import re
import shutil
import struct

import pytest
import toolchains as T
import unwind_fuzzing
from test_gdb import PLUGIN, run_gdb
from test_lldb import PROBE, run_lldb

from sframekit.core.decode import Section
from sframekit.core.elf import ElfImage

REPO = T.REPO
MANY = "malformed SFrame section at byte offset 0x8: 2147483647 FDEs of 16 bytes overrun the FRE sub-section"
GARBLED = "malformed SFrame section at byte offset %#x: FDE 3: attribute record at FRE offset 0x7ffff overruns fre_len"


@pytest.fixture(scope="module")
def malformed(corpus, tmp_path_factory):
    """{"many": path, "garbled": path} and the byte offset the garbled one is reported at."""
    work = tmp_path_factory.mktemp("malformed")
    build = corpus.get("sid", "frames", "O2-nofp")
    sf = ElfImage(build.noeh).sframe
    sec = Section(sf.data, sf.address)
    main = [f for f in sec.fdes() if f.index == 3][0]
    assert main.start == ElfImage(build.noeh).resolve("main"), "FDE 3 is main's"
    out = {}
    for name, at, value in (("many", 8, 0x7FFFFFFF), ("garbled", main.offset + 12, 0x7FFFF)):
        data = bytearray(build.noeh.read_bytes())
        struct.pack_into("<I", data, sf.file_offset + at, value)
        path = work / name
        path.write_bytes(bytes(data))
        shutil.copymode(build.noeh, path)
        out[name] = path
    sec.fde(3)     # the intact section decodes: the garbled copy's error is its own
    return out, _garbled_offset(out["garbled"])


def _garbled_offset(path):
    from sframekit.core.errors import SFrameError
    sf = ElfImage(path).sframe
    try:
        Section(sf.data, sf.address).fde(3)
    except SFrameError as exc:
        return exc.offset
    raise AssertionError("the garbled FDE decodes")


def one_line(text, what):
    lines = [l for l in text.splitlines() if what in l]
    assert len(lines) == 1, (what, text)
    return lines[0]


def check_clean(out, debug_lines=False):
    assert "Traceback" not in out and "internal error" not in out, out
    if debug_lines:
        for line in out.splitlines():            # no debug line inside another line
            assert line.find("[sframe] ") in (-1, 0), line


@pytest.mark.parametrize("gdb", ("gdb13", "gdb18"))
def test_gdb_on_malformed_sections(malformed, tmp_path, gdb):
    paths, offset = malformed
    garbled = GARBLED % offset
    for name, path in sorted(paths.items()):
        out = run_gdb(gdb, ["source %s" % PLUGIN, "file %s" % path, "break stop_here", "run",
                            "mark table", "info sframe", "mark here", "try-cmd info sframe $pc",
                            "mark main", "try-cmd info sframe main", "mark verify", "sframe verify",
                            "mark debug", "set debug sframe on", "frames-dump dbg", "bt", "mark end"], tmp_path)
        check_clean(out, debug_lines=True)
        frames = out.frames("dbg")
        if name == "many":
            table = out.between("table", "here")
            assert "No loaded objfile has SFrame information" in table
            assert "Objfiles whose SFrame section cannot be used:\n  %s: %s" % (path, MANY) in table, table
            for part in ("here", "main"):
                line = one_line(out.between(part, {"here": "main", "main": "verify"}[part]), "TRY-ERROR")
                assert line.startswith("TRY-ERROR: No SFrame information covers 0x") and \
                    line.endswith("the SFrame section of %s cannot be used: %s (only 144 bytes between fdeoff "
                                  "and freoff)" % (path, MANY)), line
            assert "sframe verify: not checked: %s: %s" % (path, MANY) in out.between("verify", "debug")
            assert not any(f.sf for f in frames)
        else:
            assert "%s        3  AMD64 little-endian     9" % path in out.between("table", "here")
            assert "TRY-OK" in out.between("here", "main")
            line = one_line(out.between("main", "verify"), "TRY-ERROR")
            assert line.startswith("TRY-ERROR: %s: %s" % (path, garbled)), line
            verify = out.between("verify", "debug")
            assert "frame #4: not checked: pc %#x: %s" % (frames[4].pc, garbled) in verify, verify
            # The intact FDEs unwind stop_here .. level1; main's frame is left to GDB's other
            # unwinders, which still run (the backtrace goes on past it).
            assert [f.sf for f in frames[:5]] == [True] * 4 + [False], frames
            assert [f.name for f in frames[:5]] == ["stop_here", "level3", "level2", "level1", "main"]
            assert frames[4].cfa is not None
            assert "[sframe] frame #4: pc %#x: declined: %s" % (frames[4].pc, garbled) in out


@pytest.mark.parametrize("lldb", (16, 21))
def test_lldb_on_malformed_sections(malformed, tmp_path, lldb):
    paths, offset = malformed
    (tmp_path / "sframe_probe.py").write_text(PROBE)
    lines = []
    for name, path in sorted(paths.items()):
        lines += ["target create %s" % path, "breakpoint set -n stop_here", "process launch",
                  "probe run %s-info sframe info" % name, "probe run %s-lookup sframe lookup main" % name,
                  "probe run %s-dump sframe dump" % name, "probe run %s-bt sframe bt" % name, "process kill",
                  "target delete"]
    s = run_lldb(lldb, lines, tmp_path, "malformed%d" % lldb)
    check_clean(s.stdout + s.stderr)
    many = paths["many"]
    assert s.block("many-info").out[-1] == "  %s: %s (only 144 bytes between fdeoff and freoff)" % (many, MANY)
    for tag, text in (("many-lookup", MANY), ("many-dump", MANY), ("garbled-lookup", GARBLED % offset),
                      ("garbled-dump", GARBLED % offset)):
        blk = s.block(tag)
        assert not blk.out and len(blk.err) == 1 and text in blk.err[0], (tag, blk.err)
    rows, last = s.sframe_bt("many-bt")
    assert len(rows) == 1 and last.startswith("  Backtrace stopped: " + MANY), last
    rows, last = s.sframe_bt("garbled-bt")
    assert len(rows) == 5 and last.startswith("  Backtrace stopped: " + GARBLED % offset), last


def test_core_backtrace_on_malformed_sections(malformed, tmp_path):
    paths, offset = malformed
    for name, path in sorted(paths.items()):
        core = tmp_path / ("%s.core" % name)
        T.run_in("sid", ["gdb", "-nx", "-batch", "-ex", "break stop_here", "-ex", "run", "-ex", "gcore %s" % core,
                         str(path)], cwd=tmp_path, check=True)
        p = T.run_in("host", ["/usr/bin/python3", str(REPO / "scripts" / "sframe"), "backtrace", str(core)],
                     cwd=tmp_path, check=True)
        check_clean(p.stdout + p.stderr)
        last = p.stdout.splitlines()[-1]
        want = MANY if name == "many" else GARBLED % offset
        assert last.startswith("Backtrace stopped: " + want), last
        assert p.stdout.count("\n#") == (1 if name == "many" else 5), p.stdout


# -- the unwinder fuzzed on real stacks -------------------------------------------------------------

@pytest.fixture(scope="module")
def real_cores(corpus, tmp_path_factory):
    """gcore'd stops of the recursion fixture (50 levels) from three toolchains (V1, V2, V3)."""
    work = tmp_path_factory.mktemp("fuzzcores")
    out = []
    for tc, gdb in (("host", "host"), ("trixie", "sid"), ("sid", "sid")):
        b = corpus.get(tc, "recurse", "O2-nofp")
        core = work / ("%s.core" % tc)
        T.run_in(gdb, ["gdb", "-nx", "-batch", "-ex", "break stop_here", "-ex", "run 50", "-ex",
                       "gcore %s" % core, str(b.path)], cwd=work, check=True)
        out.append(unwind_fuzzing.Target(str(core)))
    return out


def test_unwinder_fuzzed_on_real_stacks(real_cores):
    """Thousands of mutated stops: the walkers only ever yield frames and one stop, within the
    depth limit (bench/fuzz_unwind.py runs a million)."""
    for t in real_cores:      # the unmutated stops unwind deep: the cases start from real stacks
        _, most, _ = unwind_fuzzing.run_case(t, t.frame, t.session.core.read, {})
        assert most >= 50, most
    report = unwind_fuzzing.fuzz(real_cores, 3000, seed=13)
    assert report.escapes == [], "\n".join(e for _, e in report.escapes[:5])
    assert len(report.reasons) >= 5, report.reasons        # the mutations reach many stop reasons
    print("unwinder fuzz: %d cases, slowest %.1f ms, stop reasons %s" % (
        report.cases, report.slowest * 1e3, dict(sorted(report.reasons.items()))))


def test_fuzz_cases_are_reproducible(real_cores):
    a = unwind_fuzzing.make_case(real_cores[0], random.Random(5))
    b = unwind_fuzzing.make_case(real_cores[0], random.Random(5))
    assert a[0] == b[0] and a[2] == b[2]


@pytest.mark.parametrize("gdb", ("gdb13", "gdb18"))
def test_debug_lines_never_split_a_frame_line(corpus, tmp_path, gdb):
    """GDB asks the unwinder for a frame's caller while it prints the frame's arguments, in the
    middle of the frame's line (and while it prints "Breakpoint 1, "): the debug lines are held
    until GDB is between lines.  GDB's stdout and stderr go to one pipe here, as to a terminal."""
    from test_gdb import GDBS, HELPER
    b = corpus.get("sid" if gdb == "gdb18" else "host", "recurse", "O2-nofp")
    script = tmp_path / "debug.gdb"
    script.write_text("\n".join(["set pagination off", "set width 0", "source %s" % HELPER, "source %s" % PLUGIN,
                                  "set debug sframe on", "file %s" % b.noeh, "break stop_here", "run 8", "bt",
                                  "maint flush register-cache", "bt", "info sframe", "bt 3"]) + "\n")
    tc, prog = GDBS[gdb]
    out = T.run_in(tc, ["sh", "-c", "%s -nx -batch -x %s 2>&1" % (prog, script)], cwd=tmp_path, check=True).stdout
    check_clean(out, debug_lines=True)
    frame_lines = [l for l in out.splitlines() if l.startswith("#")]
    assert len([l for l in frame_lines if "descend" in l]) == 9 * 2 + 2, out
    assert all(re.search(r"\) at \S+recurse\.c:\d+$", l) for l in frame_lines if "descend" in l), out
    assert any("Breakpoint 1, stop_here (" in l for l in out.splitlines()), out
    assert out.count("[sframe] frame #") >= 9, out
