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
from helpers import toolchains as T
from helpers import unwind_fuzzing
from helpers.gdb import PLUGIN, STOPS, gcore, run_gdb
from helpers.lldb import run_lldb

from sframekit.core.elf.image import ElfImage
from sframekit.core.sframe.decode import Section

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
        gcore("sid", path, core, cwd=tmp_path)
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
        gcore(gdb, b.path, core, args=("50",), cwd=work)
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
    from helpers.gdb import GDBS, HELPER
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


# -- programs that corrupt their own stack -------------------------------------------------------------

SMASH_MODES = ("wild", "self", "code")


@pytest.fixture(scope="module")
def smashed(roots, tmp_path_factory):
    """tests/fixtures/smash.c built by the host (V1), trixie (V2) and sid (V3) toolchains, with
    and without .eh_frame: {toolchain: (program, copy without .eh_frame)}."""
    work = tmp_path_factory.mktemp("smash")
    out = {}
    for tc in ("host", "trixie", "sid"):
        d = work / tc
        (d / "orig").mkdir(parents=True)
        (d / "noeh").mkdir()
        exe = d / "orig" / "smash"          # paths of equal length: the same stack addresses
        T._run_script(T.toolchain(tc), [T._compile_cmd(T.toolchain(tc), [T.FIXTURES_DIR / "smash.c"], exe,
                                                       T.VARIANTS["O2-nofp"]),
                                        T._strip_eh_cmd(T.toolchain(tc), exe, d / "noeh" / "smash")], d)
        out[tc] = (exe, d / "noeh" / "smash")
    return out




_OUTERMOST_ENDS = ("previous_frame_identical_to_this_frame_(corrupt_stack?)", "frame_did_not_save_the_PC")


@pytest.mark.parametrize("gdb,tc", (("gdb13", "host"), ("gdb13", "trixie"), ("gdb18", "sid"), ("gdb18", "trixie")))
def test_gdb_on_smashed_stacks(smashed, tmp_path, gdb, tc):
    """The plugin (DWARF off; .eh_frame removed) gives the frames GDB's DWARF `bt` gives, PC and
    CFA, however the program wrecked its stack, in bounded time and without a traceback."""
    exe, noeh = smashed[tc]
    lines = ["set startup-with-shell off"]
    for mode in SMASH_MODES:
        lines += ["file %s" % exe, "break stop_here", "run %s" % mode, "frames-dump %s-dwarf 100" % mode,
                  "dwarf-unwinders off", "source %s" % PLUGIN, "frames-dump %s-sframe 100" % mode,
                  "dwarf-unwinders on", "kill", "delete",
                  "file %s" % noeh, "break stop_here", "run %s" % mode, "frames-dump %s-noeh 100" % mode,
                  "kill", "delete"]
    out = run_gdb(gdb, lines, tmp_path, timeout=300)
    check_clean(out)
    for mode in SMASH_MODES:
        ref = out.frames(mode + "-dwarf")
        assert [f.name for f in ref[:2]] == ["stop_here", "smash"] and len(ref) > 2, ref
        for kind in ("sframe", "noeh"):
            got = out.frames("%s-%s" % (mode, kind))
            want = ref
            if kind == "sframe":
                # DWARF off for every file: the frames SFrame unwinds and the first one it leaves
                # to GDB's other unwinders are DWARF's; beyond, GDB's heuristics guess.
                k = next((i for i, f in enumerate(got) if not f.sf), len(got) - 1)
                got, want = got[:k + 1], ref[:k + 1]
            else:
                # A zero return address ends the plugin's walk (the outermost frame: its PC is
                # not saved); GDB's DWARF unwinder shows one more frame, at PC 0, then stops.
                rest = want[len(got):]
                assert not rest or (len(rest) <= 2 and rest[-1].pc == 0), (mode, rest)
                want = want[:len(got)]
            if len(got) == len(out.frames("%s-%s" % (mode, kind))) and not got[-1].sf and \
                    out.end("%s-%s" % (mode, kind)) in _OUTERMOST_ENDS:
                # The plugin's outermost frame (a zero return address) ends the walk: its frame id
                # names its SP, as its CFA is not worked out (GDB 13 shows it now, ending at the
                # stand-in caller the plugin gives it; it used to raise "PC not saved" there).
                got, last = got[:-1], got[-1]
                want, ref_last = want[:-1], want[-1]
                assert last.pc == ref_last.pc, (mode, last, ref_last)
            assert [(f.pc, f.cfa) for f in got] == [(f.pc, f.cfa) for f in want], (mode, kind, got, want)
            assert got[0].sf and got[1].sf, got          # the intact frames: SFrame's


@pytest.mark.parametrize("lldb", (16, 21))
def test_lldb_and_cli_on_smashed_stacks(smashed, tmp_path, lldb):
    """LLDB's `sframe bt` and `sframe backtrace CORE` end with a stated stop reason."""
    tc = "host" if lldb == 16 else "sid"
    exe = smashed[tc][1]
    lines = []
    for mode in SMASH_MODES:
        lines += ["target create %s" % exe, "breakpoint set -n stop_here", "process launch -- %s" % mode,
                  "probe run %s sframe bt" % mode, "process kill", "target delete"]
    s = run_lldb(lldb, lines, tmp_path, "smash%d" % lldb)
    check_clean(s.stdout + s.stderr)
    for mode in SMASH_MODES:
        rows, last = s.sframe_bt(mode)
        assert [r[2].split("`")[-1].split()[0] for r in rows[:2]] == ["stop_here", "smash"], rows
        assert last.startswith("  Backtrace stopped: "), last
    for mode in SMASH_MODES:
        core = tmp_path / ("%s-%s.core" % (tc, mode))
        gcore(tc if tc == "host" else "sid", exe, core, args=(mode,), cwd=tmp_path, timeout=120)
        p = T.run_in("host", ["/usr/bin/python3", str(REPO / "scripts" / "sframe"), "backtrace", str(core)],
                     cwd=tmp_path, check=True, timeout=120)
        check_clean(p.stdout + p.stderr)
        frames = [l for l in p.stdout.splitlines() if l.startswith("#")]
        assert "stop_here" in frames[0] and "smash" in frames[1], p.stdout
        assert p.stdout.splitlines()[-1].startswith("Backtrace stopped: "), p.stdout


# -- long sessions ----------------------------------------------------------------------------------

def build_longrun(tc, work):
    """tests/fixtures/longrun.c and libfix.so by toolchain tc, both without .eh_frame (only the
    plugin can unwind them): (program, library)."""
    t = T.toolchain(tc)
    work.mkdir(parents=True, exist_ok=True)
    exe, lib = work / "longrun.full", work / "libfix.full.so"
    T._run_script(t, [T._compile_cmd(t, [T.FIXTURES_DIR / "longrun.c"], exe, T.VARIANTS["O2-nofp"], ["-ldl"]),
                      T._compile_cmd(t, [T.FIXTURES_DIR / "libfix.c"], lib, [*T.VARIANTS["O2-nofp"], "-fPIC",
                                                                             "-shared"]),
                      T._strip_eh_cmd(t, exe, work / "longrun"), T._strip_eh_cmd(t, lib, work / "libfix.so")], work)
    return work / "longrun", work / "libfix.so"


def long_run(gdb, tc, work, stops, loads, timeout=1800):
    """Run the longrun program through `stops` stops and `loads` library loads in GDB with the
    plugin; returns {phase: {figure: value}} from the LONGRUN lines."""
    exe, lib = build_longrun(tc, work)
    out = run_gdb(gdb, ["source %s" % PLUGIN, "source %s" % (REPO / "tests" / "indebugger" / "gdb_longrun.py"),
                        "file %s" % exe, "break stop_here", "break lib_stop_here",
                        "run %d %d %s" % (stops, loads, lib), "long-run %d %d" % (stops, loads)],
                  work, timeout=timeout)
    check_clean(out)
    return parse_long_run(out)


LONG_STOPS, LONG_LOADS = 10000, 1000


def parse_long_run(out):
    figures = {}
    for line in out.splitlines():
        if line.startswith("LONGRUN phase="):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
            figures[fields.pop("phase")] = fields
    assert set(figures) == {"stops", "loads"}, out[-3000:]
    return figures


def check_long_run(figures):
    for phase, want in (("stops", LONG_STOPS), ("loads", LONG_LOADS)):
        f = figures[phase]
        assert int(f["stops"]) == want and int(f["bad"]) == 0, (phase, f)
        # A leak grows with the stops: it lifts the lowest resident memory of the last quarter above
        # that of the second by half the stops' worth (a leak of 1 KiB per stop: 5 MB, over the 5 %
        # of the warm-up allowed).  The debugger's memory also moves by itself (GDB 18 peaks 4-10 %
        # above the warm-up for a while and falls back: the lows do not see it), so the peak is
        # held loosely.
        warm, low2, low4, top = (int(f[k]) for k in ("rss_warm", "rss_low2", "rss_low4", "rss_max"))
        assert warm and low2 and low4 - low2 <= warm * 0.05 and top <= warm * 1.15, (phase, f)
    assert int(figures["loads"]["addresses"]) >= 4, figures       # the library moved


@pytest.mark.parametrize("gdb,tc", (("gdb13", "host"), ("gdb18", "sid")))
def test_long_session_gdb(roots, tmp_path, gdb, tc):
    """10,000 stops with `bt`, then the library dlopen'ed and dlclose'd 1,000 times at changing
    addresses: every backtrace right (no stale index by address), GDB's resident memory not
    growing with the stops after the warm-up.  The figures are printed (pytest -s)."""
    figures = long_run(gdb, tc, tmp_path, LONG_STOPS, LONG_LOADS)
    print("long session %s: %s" % (gdb, figures))
    check_long_run(figures)


def long_run_lldb(lldb, work, stops, loads, timeout=1800):
    """The longrun program in LLDB 16 (host build) or 21 (sid build) with the plugin, through
    `stops` stops and `loads` library loads; returns the figures as long_run does."""
    exe, lib = build_longrun("host" if lldb == 16 else "sid", work)
    s = run_lldb(lldb, ["command script import %s" % (REPO / "tests" / "indebugger" / "lldb_longrun.py"),
                        "target create %s" % exe, "breakpoint set -n stop_here", "breakpoint set -n exe_callback",
                        "process launch -- %d %d %s" % (stops, loads, lib),
                        "long-run %d %d" % (stops, loads)], work, "long%d" % lldb, timeout=timeout)
    check_clean(s.stdout + s.stderr)
    return parse_long_run(s.stdout)


@pytest.mark.parametrize("lldb", (16, 21))
def test_long_session_lldb(roots, tmp_path, lldb):
    """The same long session in LLDB, `sframe bt` at every stop (the loads phase stops in the
    executable's callback, called from the library: see tests/indebugger/lldb_longrun.py)."""
    figures = long_run_lldb(lldb, tmp_path, LONG_STOPS, LONG_LOADS)
    print("long session lldb %d: %s" % (lldb, figures))
    check_long_run(figures)


@pytest.mark.parametrize("gdb,tc", (("gdb13", "host"), ("gdb18", "sid")))
def test_session_rebuild_inferiors_fork_exec(corpus, tmp_path, gdb, tc):
    """`run` again after the program was rebuilt with other code (the new section is used), two
    inferiors with different programs, and `set follow-fork-mode child` through a fork and an exec:
    every stop's frames are the program's own, unwound by the plugin (.eh_frame removed)."""
    t = T.toolchain(tc)
    prog = tmp_path / "prog"
    frames_noeh = corpus.get(tc, "frames", "O2-nofp").noeh
    recurse_noeh = corpus.get(tc, "recurse", "O2-nofp").noeh
    other = tmp_path / "other"
    shutil.copy2(frames_noeh, prog)
    shutil.copy2(frames_noeh, other)
    fe = tmp_path / "forkexec"
    T._run_script(t, [T._compile_cmd(t, [T.FIXTURES_DIR / "forkexec.c"], tmp_path / "forkexec.full",
                                     T.VARIANTS["O2-nofp"]),
                      T._strip_eh_cmd(t, tmp_path / "forkexec.full", fe)], tmp_path)
    rebuild = "python import shutil, os; shutil.copy2(%r, %r); os.utime(%r, (2e9, 2e9))" % (
        str(recurse_noeh), str(prog), str(prog))
    out = run_gdb(gdb, [
        "source %s" % PLUGIN, "set startup-with-shell off", "file %s" % prog, "break stop_here", "run",
        "frames-dump first", "mark info1", "info sframe", "mark rebuilt", "kill", rebuild, "run 6",
        "frames-dump second", "mark info2", "info sframe", "mark inferiors",
        "add-inferior -exec %s" % other, "inferior 2", "run", "frames-dump inf2", "inferior 1",
        "frames-dump inf1", "kill inferiors 1 2", "inferior 1", "delete",
        "set follow-fork-mode child", "set detach-on-fork on", "file %s" % fe, "break child_stop_here",
        "run %s" % frames_noeh, "frames-dump child", "break stop_here", "continue", "frames-dump exec", "kill"],
        tmp_path, timeout=600)
    check_clean(out)
    chain = list(STOPS["frames"][2])

    def sframe_chain(label, names):
        got = out.frames(label)
        assert [f.name for f in got[:len(names)]] == names, (label, got)
        assert all(f.sf for f in got[:len(names) - 1]), (label, got)
        return got
    sframe_chain("first", chain)
    sframe_chain("second", ["stop_here"] + ["descend", "descend_odd"] * 3 + ["descend", "main"])
    def fdes(mark, end):
        m = re.search(r"^%s\s+\d\s+AMD64 little-endian\s+(\d+)" % re.escape(str(prog)), out.between(mark, end), re.M)
        assert m, out[-3000:]
        return int(m.group(1))
    from sframekit.core.elf.image import ElfImage as _Img
    count = {p: Section(_Img(p).sframe.data).header.num_fdes for p in (frames_noeh, recurse_noeh)}
    assert count[frames_noeh] != count[recurse_noeh]
    assert (fdes("info1", "rebuilt"), fdes("info2", "inferiors")) == (count[frames_noeh], count[recurse_noeh])
    sframe_chain("inf2", chain)
    sframe_chain("inf1", ["stop_here"] + ["descend", "descend_odd"] * 3 + ["descend", "main"])
    sframe_chain("child", ["child_stop_here", "fork_chain", "main"])
    sframe_chain("exec", chain)


@pytest.mark.parametrize("lldb", (16, 21))
def test_session_rebuild_and_two_targets_lldb(corpus, tmp_path, lldb):
    """LLDB: `process launch` again after the program was rebuilt with other code (the new
    section is used), and two targets with different programs, each unwound with its own."""
    tc = "host" if lldb == 16 else "sid"
    prog, other = tmp_path / "prog", tmp_path / "other"
    shutil.copy2(corpus.get(tc, "frames", "O2-nofp").noeh, prog)
    shutil.copy2(corpus.get(tc, "frames", "O2-nofp").noeh, other)
    recurse = corpus.get(tc, "recurse", "O2-nofp").noeh
    rebuild = "script import shutil, os; shutil.copy2(%r, %r); os.utime(%r, (2e9, 2e9))" % (
        str(recurse), str(prog), str(prog))
    s = run_lldb(lldb, ["target create %s" % prog, "breakpoint set -n stop_here", "process launch",
                        "probe run first sframe bt", "process kill", rebuild, "process launch -- 6",
                        "probe run second sframe bt", "target create %s" % other, "breakpoint set -n stop_here",
                        "process launch", "probe run other sframe bt", "target select 0", "probe run back sframe bt",
                        "process kill", "target select 1", "process kill"], tmp_path, "session%d" % lldb)
    check_clean(s.stdout + s.stderr)
    chain = list(STOPS["frames"][2])
    recursion = ["stop_here"] + ["descend", "descend_odd"] * 3 + ["descend", "main"]
    for tag, names in (("first", chain), ("second", recursion), ("other", chain), ("back", recursion)):
        rows, _last = s.sframe_bt(tag)
        assert [r[2].split("`")[-1].split()[0] for r in rows[:len(names)]] == names, (tag, rows)
        assert all(r[3] == "sframe" for r in rows[1:len(names)]), (tag, rows)
