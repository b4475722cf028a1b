"""The GDB plugin against real GDBs: GDB 13 (host), GDB 18 (sid root) and gdb-multiarch with
qemu-user (AArch64, s390x), on the fixtures built by every toolchain (SFrame V1, V2, V3).

The reference is GDB's own DWARF unwinder on the same stop.  Each frame the SFrame unwinder
unwinds must give the same CFA ("frame at") and the same caller PC:

  * DWARF off (GDB's DWARF unwinders disabled), plugin on: same frames as DWARF's `bt` up to the
    first frame outside SFrame code; with neither, GDB's backtrace is wrong.
  * .eh_frame removed from the program and its library (DWARF still on for libc): the whole
    backtrace equals DWARF's on the unstripped program stopped at the same place (same stack:
    the two copies sit at paths of equal length, started the same way); without the plugin it
    does not.
  * `sframe verify -steps N` through prologues, bodies, epilogues and PLT stubs: no disagreement.

Each GDB session batches many checks; helpers in tests/indebugger/gdb_frames.py print parseable lines.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import toolchains as T
from helpers.cli import lookup_lines
from helpers.gdb import (  # noqa: F401
    GDBS,
    HELPER,
    PLUGIN,
    REPO,
    STOPS,
    VERIFY_PLAN,
    Fr,
    Out,
    Qemu,
    free_port,
    run_gdb,
    twin_copies,
    twin_paths,
)

# Where the SFrame data does not cover the whole stack: gas before 2.46 writes no FDE for a
# function that realigns its stack through a DRAP register (realigned_drap), so GDB's heuristics
# unwind that frame; the frames SFrame covers must still agree.
PARTIAL = {("realign", 1): ("stop_here",), ("realign", 2): ("stop_here",)}

# Fixtures whose stops GDB's own heuristic unwinders get wrong with no DWARF (GDB 13 gets all of
# them wrong; GDB 18's prologue analysis is right on the short signal, dlopen and bigfunc stacks).
HEURISTICS_FAIL = {"frames", "recurse", "threads", "alloca", "bigframe", "realign"}


def expected(fixture, version):
    """(functions SFrame must unwind, does SFrame cover the whole stack up to main)."""
    part = PARTIAL.get((fixture, version))
    return (part, False) if part else (STOPS[fixture][2], True)


# -- comparisons --------------------------------------------------------------------------------

def check_sframe_frames(ref, got, expect):
    """Frames unwound by SFrame agree with the reference (their CFA, and their caller's PC), up to
    the first frame left to another unwinder; the `expect`ed functions were unwound by SFrame."""
    assert ref, "no reference frames"
    assert got and got[0].pc == ref[0].pc, "frame #0 differs: %s vs %s" % (got[:1], ref[:1])
    n = 0
    for i, g in enumerate(got):
        assert i < len(ref), "SFrame backtrace longer than the reference: %s" % (got[i:],)
        r = ref[i]
        assert g.pc == r.pc, "frame #%d: pc %#x with SFrame, %#x reference\n%s\n%s" % (i, g.pc, r.pc, got, ref)
        if not g.sf:
            break
        assert g.cfa == r.cfa, "frame #%d (%s): CFA %s with SFrame, %s reference" % (
            i, g.name, g.cfa and hex(g.cfa), r.cfa and hex(r.cfa))
        n += 1
    else:
        assert len(got) == len(ref), "SFrame ends at frame #%d, the reference goes on: %s" % (len(got), ref[len(got):])
    names = [g.name for g in got[:n]]
    assert is_subsequence(expect, names), "unwound with SFrame: %s; expected %s" % (names, expect)
    return n


def is_subsequence(small, big):
    """`small` appears in `big` in order (unoptimised builds have frames that -O2 tail-calls away)."""
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def relative(frames):
    """Frames as (symbol+offset, CFA - frame #0's CFA): comparable across two processes whose
    code and stack sit at different addresses (qemu-user does not place them the same each run)."""
    base = frames[0].cfa if frames and frames[0].cfa is not None else 0
    return [(f.where, f.cfa if not f.cfa else f.cfa - base, f.name) for f in frames]   # 0: outermost


def check_same(ref, got, expect, relocated=False):
    """The whole backtrace is the same (PC, CFA, function), and `expect` came from SFrame.
    `relocated`: the two come from different processes, compare them with relative()."""
    if relocated:
        a, b = relative(ref), relative(got)
    else:
        a, b = [(r.pc, r.cfa, r.name) for r in ref], [(g.pc, g.cfa, g.name) for g in got]
    assert a == b, "backtraces differ:\nreference %s\nSFrame    %s" % (ref, got)
    names = [g.name for g in got if g.sf]
    for fn in set(expect):
        assert fn in names, "%s not unwound with SFrame (%s)" % (fn, names)


def check_untouched(ref, got):
    """The backtrace is the reference's, and the SFrame unwinder unwound none of its frames."""
    check_same(ref, got, ())
    assert not any(g.sf for g in got), "the SFrame unwinder took frames DWARF CFI covers: %s" % got


def check_differs(ref, got, upto, relocated=False):
    """Without the plugin, GDB gets the first `upto` frames wrong (or stops early)."""
    if relocated:
        a, b = relative(ref[:upto]), relative(got[:upto])
    else:
        a, b = [(r.pc, r.cfa) for r in ref[:upto]], [(g.pc, g.cfa) for g in got[:upto]]
    assert a != b, "GDB's backtrace is right without the plugin: %s" % got


# -- sessions ---------------------------------------------------------------------------------------

def session_lines(fixture, orig, noeh, args, remote=None, extra_orig=(), extra_noeh=()):
    """GDB commands: stop in the unstripped program, dump frames with DWARF, with DWARF off
    (plugin off, then on) and with both on; then the same stop in the stripped copy."""
    stop = STOPS[fixture][0]
    if remote:
        start_orig = ["file %s" % orig, "set solib-search-path %s" % Path(orig).parent,
                      "target remote :%d" % remote[0], "break %s" % stop, "continue"]
        start_noeh = ["file %s" % noeh, "set solib-search-path %s" % Path(noeh).parent,
                      "target remote :%d" % remote[1], "break %s" % stop, "continue"]
    else:
        a = " ".join(args)
        start_orig = ["set startup-with-shell off", "file %s" % orig, "break %s" % stop, "run %s" % a]
        start_noeh = ["file %s" % noeh, "break %s" % stop, "run %s" % a]
    return (start_orig + [
        "frames-dump dwarf",
        "dwarf-unwinders off",
        "frames-dump nodwarf",
        "source %s" % PLUGIN,
        "frames-dump sframe",
        "mark bt-sframe", "bt", "mark bt-end",
        "dwarf-unwinders on",
        "frames-dump both",
        "set sframe mode always",
        "frames-dump always",
        "set sframe mode auto",
        *extra_orig,
        "kill",
        "delete",
    ] + start_noeh + [
        "frames-dump noeh",
        "set sframe off",
        "frames-dump noeh-off",
        "set sframe on",
        *extra_noeh,
        "kill",
    ])


def check_session(out, fixture, version, gdb, heuristics_fail=None, relocated=False):
    """All the checks of one session_lines() output.  `heuristics_fail`: whether GDB's own
    heuristic unwinders are known to get this stop wrong without DWARF (default: by fixture);
    `relocated`: the stripped copy ran at other addresses (qemu)."""
    expect, complete = expected(fixture, version)
    if heuristics_fail is None:
        heuristics_fail = fixture in HEURISTICS_FAIL or gdb == "gdb13"
    ref = out.frames("dwarf")
    assert ref and ref[0].name == expect[0], ref
    assert "Traceback" not in out and "Python Exception" not in out, out
    # DWARF off: the plugin recovers what DWARF gives; GDB alone does not.
    got = out.frames("sframe")
    n = check_sframe_frames(ref, got, expect)
    if heuristics_fail:
        check_differs(ref, out.frames("nodwarf"), n + 1)
    # The plugin with DWARF on (the normal setting, mode auto) takes no frame: DWARF CFI covers them all.
    check_untouched(ref, out.frames("both"))
    # Mode always: SFrame first wherever it covers the PC, the same frames.
    check_same(ref, out.frames("always"), expect)
    # `bt` itself prints the frames the plugin gave.
    bt = out.between("bt-sframe", "bt-end")
    levels = dict((int(lv), int(pc, 16)) for lv, pc in re.findall(r"^#(\d+)\s+(0x[0-9a-f]+) in ", bt, re.M))
    names = dict((int(lv), nm) for lv, nm in re.findall(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(\S+)", bt, re.M))
    for g in got[:n + 1]:
        assert levels.get(g.level, g.pc) == g.pc, "bt prints frame #%d at %s:\n%s" % (g.level, levels.get(g.level), bt)
        assert g.level in names, "bt does not print frame #%d:\n%s" % (g.level, bt)
    # No .eh_frame: the same backtrace, through the plugin; without it GDB goes wrong.
    noeh = out.frames("noeh")
    if not relocated:
        assert noeh[0].cfa == ref[0].cfa, "the two copies stopped with different stacks"
    if complete:
        check_same(ref, noeh, expect, relocated)
    else:
        check_sframe_frames(ref, noeh, expect)
    if heuristics_fail and not relocated:
        # (under qemu, whether GDB's heuristics go wrong in the stripped copy varies with the run)
        check_differs(ref, out.frames("noeh-off"), n + 1)
    assert "Traceback" not in out and "Python Exception" not in out, out
    return n


# -- the backtrace tests ------------------------------------------------------------------------------

NATIVE_CASES = (
    [("gdb13", "host", fx) for fx in STOPS]
    + [("gdb13", "trixie", fx) for fx in ("frames", "recurse", "signal", "threads", "dlopen", "realign")]
    + [("gdb16", "trixie", fx) for fx in ("frames", "recurse", "signal", "threads", "dlopen", "realign")]
    + [("gdb18", "sid", fx) for fx in STOPS]
    + [("gdb18", "trixie", fx) for fx in ("frames", "dlopen")]
    + [("gdb18", "host", fx) for fx in ("frames", "signal")]
)


@pytest.mark.parametrize("gdb,toolchain,fixture", NATIVE_CASES,
                         ids=["%s-%s-%s" % c for c in NATIVE_CASES])
def test_backtrace_native(corpus, tmp_path, gdb, toolchain, fixture):
    build = corpus.get(toolchain, fixture, "O2-nofp")
    orig, noeh = twin_copies(build, tmp_path)
    extra = []
    if fixture == "threads":
        # The main thread, in libc (pthread_create or pthread_join): DWARF there, SFrame above.
        extra = ["thread 1", "set sframe off", "frames-dump t1-dwarf", "set sframe on", "frames-dump t1-both",
                 "set sframe mode always", "frames-dump t1-always", "set sframe mode auto"]
    out = run_gdb(gdb, session_lines(fixture, orig, noeh, STOPS[fixture][1], extra_orig=extra), tmp_path)
    check_session(out, fixture, build.version, gdb)
    if fixture == "threads":
        check_untouched(out.frames("t1-dwarf"), out.frames("t1-both"))
        t1 = out.frames("t1-always")
        check_same(out.frames("t1-dwarf"), t1, ("main",))
        assert t1[0].name != "thread_stop_here" and not t1[0].sf, t1
    if fixture == "dlopen":
        # The library was dlopen'ed after the plugin was loaded: found through new_objfile.
        assert any(f.sf and f.name == "lib_middle" for f in out.frames("noeh"))


# (toolchain, fixture, variant, GDB's heuristics get it wrong without DWARF).  gdb-multiarch's
# AArch64 and s390x prologue analysers unwind many of these simple stops right by themselves.
CROSS_CASES = [
    ("sid-aarch64", "frames", "O2-nofp", False),
    ("sid-aarch64", "recurse", "O2-nofp", True),
    ("sid-aarch64", "alloca", "O2-nofp", True),
    ("sid-aarch64", "bigframe", "O2-nofp", True),
    ("sid-aarch64", "dlopen", "O2-nofp", True),
    ("sid-aarch64", "threads", "O2-nofp", True),
    ("sid-aarch64", "signal", "O2-nofp", False),
    ("sid-aarch64", "realign", "O2-nofp", False),
    ("sid-aarch64", "frames", "O0-fp", False),
    ("sid-aarch64", "frames", "O2-pac", False),
    ("sid-aarch64", "recurse", "O2-pac", True),
    ("sid-aarch64", "frames", "O2-pacb", False),
    ("sid-s390x", "frames", "O2-nofp", False),
    ("sid-s390x", "recurse", "O2-nofp", False),
    ("sid-s390x", "alloca", "O2-nofp", True),
    ("sid-s390x", "realign", "O2-nofp", True),
    ("sid-s390x", "threads", "O2-nofp", True),
    ("sid-s390x", "bigframe", "O2-nofp", False),
    ("sid-s390x", "signal", "O2-nofp", False),
    ("sid-s390x", "dlopen", "O2-nofp", False),
    ("sid-s390x", "frames", "O0-fp", False),       # leaf functions keep saved registers in FPRs
    ("sid-s390x", "recurse", "O0-fp", True),
]


@pytest.mark.parametrize("toolchain,fixture,variant,heuristics_fail", CROSS_CASES,
                         ids=["-".join(c[:3]) for c in CROSS_CASES])
def test_backtrace_qemu(corpus, tmp_path, toolchain, fixture, variant, heuristics_fail):
    build = corpus.get(toolchain, fixture, variant)
    orig, noeh = twin_copies(build, tmp_path)
    tc = T.toolchain(toolchain)
    q1 = Qemu(toolchain, orig, STOPS[fixture][1])
    q2 = Qemu(toolchain, noeh, STOPS[fixture][1])
    try:
        lines = ["set sysroot %s" % tc.sysroot] + session_lines(fixture, orig, noeh, (), remote=(q1.port, q2.port))
        out = run_gdb("multiarch", lines, tmp_path)
    finally:
        q1.close()
        q2.close()
    check_session(out, fixture, build.version, "multiarch", heuristics_fail, relocated=True)


# -- sframe verify ------------------------------------------------------------------------------------


_SUMMARY = re.compile(r"^sframe verify: (\d+) frames checked at (\d+) stops, (\d+) disagreements$", re.M)
_REGISTERS = re.compile(r"^sframe verify: callee-saved registers: (\d+) equal, (\d+) not recovered, (\d+) different$",
                        re.M)
_UNCHECKED = re.compile(r"^sframe verify: (\d+) frames not checked, (\d+) of them after a plugin error$", re.M)


def verify_lines(build, steps_scale=1, remote_port=None, sysroot=None):
    fixture = build.fixture
    lines = ["mark verify %s" % fixture, "file %s" % build.path]
    if sysroot:
        lines += ["set sysroot %s" % sysroot, "set solib-search-path %s" % build.path.parent]
    for fx, where, _steps in VERIFY_PLAN:
        if fx != fixture:
            continue
        lines.append("break %s" % where)
    if remote_port:
        lines += ["target remote :%d" % remote_port, "continue"]
    else:
        lines.append("run %s" % " ".join(STOPS[fixture][1]))
    first = True
    for fx, where, steps in VERIFY_PLAN:
        if fx != fixture:
            continue
        if not first:
            lines.append("continue")
        first = False
        lines += ["mark at %s %s" % (fixture, where), "sframe verify -steps %d" % max(1, steps * steps_scale)]
    if fixture == "threads":
        lines += ["thread 1", "mark at threads thread-1", "sframe verify"]
    lines += ["kill", "delete"]
    return lines


def check_verify(out, fixtures, steps_scale=1):
    """Every `sframe verify` ran, stepped as many times as asked (no `stepi` failed, the program
    did not end), checked frames unwound with SFrame at every stop, left none of the frames SFrame
    covers unchecked (a frame the unwinder declines, for an internal error or any other reason,
    would otherwise fall back to DWARF and be compared with itself), and found no disagreement (a
    callee-saved register of a different value is one).  Returns {fixture: (equal, not
    recovered)} counts of the callee-saved registers DWARF knows in the callers of SFrame frames."""
    assert "Traceback" not in out and "Python Exception" not in out, out
    for bad in ("stepi failed", "the program is gone", "not checked:", "declined after an internal error"):
        assert bad not in out, "%r in the verify output:\n%s" % (bad, out[-4000:])
    counts = {}
    for fx in fixtures:
        text = out.between("verify %s" % fx, None)
        nxt = text.find("MARK verify ")
        text = text[:nxt] if nxt >= 0 else text
        wanted = [w for f, w, _ in VERIFY_PLAN if f == fx] + (["thread-1"] if fx == "threads" else [])
        steps = [max(1, n * steps_scale) for f, _w, n in VERIFY_PLAN if f == fx] + ([0] if fx == "threads" else [])
        for w in wanted:
            assert "MARK at %s %s\n" % (fx, w) in text, "verify at %s %s did not run:\n%s" % (fx, w, text[-3000:])
        sums = _SUMMARY.findall(text)
        assert len(sums) == len(wanted), "%s: %d verify summaries, %d expected:\n%s" % (fx, len(sums), len(wanted), text[-3000:])
        for (frames, stops, bad), w, n in zip(sums, wanted, steps):
            assert int(bad) == 0, "%s %s: disagreements:\n%s" % (fx, w, text[-4000:])
            assert int(stops) == n + 1, "%s %s: %s stops, %d asked:\n%s" % (fx, w, stops, n + 1, text[-3000:])
            assert int(frames) > 0, "%s %s: nothing checked" % (fx, w)
        unchecked = _UNCHECKED.findall(text)
        assert unchecked == [("0", "0")] * len(wanted), "%s: frames not checked: %s" % (fx, unchecked)
        regs = _REGISTERS.findall(text)
        assert len(regs) == len(wanted), "%s: %d register summaries, %d expected" % (fx, len(regs), len(wanted))
        assert all(int(d) == 0 for _e, _m, d in regs), text[-4000:]
        counts[fx] = (sum(int(e) for e, _m, _d in regs), sum(int(m) for _e, m, _d in regs))
    return counts


VERIFY_CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb16", "trixie"), ("gdb18", "sid")]


@pytest.mark.parametrize("gdb,toolchain", VERIFY_CASES, ids=["%s-%s" % c for c in VERIFY_CASES])
def test_verify_native(corpus, tmp_path, gdb, toolchain):
    fixtures = sorted({fx for fx, _, _ in VERIFY_PLAN})
    lines = ["set startup-with-shell off", "source %s" % PLUGIN]
    for fx in fixtures:
        lines += verify_lines(corpus.get(toolchain, fx, "O2-nofp"))
    out = run_gdb(gdb, lines, tmp_path)
    equal, missing = print_register_counts(check_verify(out, fixtures))
    check_register_baseline((gdb, toolchain, "O2-nofp"), equal, missing)


# The callee-saved registers DWARF knows in the callers of SFrame frames, over a verify run:
# (equal, not recovered), as measured (the fixtures build the same with a given root).  Not
# recovered may not grow; equal may not move by more than 2% (if it grows, the baseline is stale).
REGISTER_BASELINE = {
    ("gdb13", "host", "O2-nofp"): (4848, 0), ("gdb13", "trixie", "O2-nofp"): (4848, 0),
    ("gdb18", "sid", "O2-nofp"): (4950, 0),
    ("gdb13", "host", "O0-fp"): (5184, 0), ("gdb13", "host", "O2-fp"): (4872, 0),
    ("gdb13", "trixie", "O0-fp"): (5184, 0), ("gdb13", "trixie", "O2-fp"): (4872, 0),
    ("gdb18", "sid", "O0-fp"): (5370, 0), ("gdb18", "sid", "O2-fp"): (4872, 0),
    ("gdb18", "host", "O2-nofp"): (4848, 0), ("gdb18", "trixie", "O2-nofp"): (4848, 0),
    ("gdb16", "trixie", "O2-nofp"): (4848, 0), ("gdb16", "trixie", "O0-fp"): (5184, 0), ("gdb16", "trixie", "O2-fp"): (4872, 0),
    # (AArch64 with d8-d15 since issue 48: 8390 before)
    ("multiarch", "sid-aarch64", "O2-nofp"): (15102, 0), ("multiarch", "sid-s390x", "O2-nofp"): (13280, 0),
    ("multiarch", "sid-s390x", "O0-fp"): (14288, 0), ("multiarch", "sid-s390x", "O2-fp"): (13488, 0),
}


def check_register_baseline(key, equal, missing):
    base_equal, base_missing = REGISTER_BASELINE[key]
    assert missing <= base_missing, "%s: %d callee-saved registers not recovered, baseline %d" % (key, missing, base_missing)
    assert abs(equal - base_equal) <= 0.02 * base_equal, "%s: %d equal, baseline %d (update it if better)" % (
        key, equal, base_equal)


def print_register_counts(counts):
    """Print the callee-saved register counts of check_verify; returns (equal, not recovered)."""
    equal = sum(e for e, _m in counts.values())
    missing = sum(m for _e, m in counts.values())
    for fx, (e, m) in sorted(counts.items()):
        print("callee-saved registers in %s: %d equal, %d not recovered" % (fx, e, m))
    print("callee-saved registers: %d equal, %d not recovered (%.3f%% recovered), 0 different"
          % (equal, missing, 100.0 * equal / max(1, equal + missing)))
    return equal, missing


# Callee-saved registers (issue 9): every variant, on GDB 13 and GDB 18.
CALLEE_SAVED_CASES = [(g, t, v) for g, t in VERIFY_CASES for v in ("O0-fp", "O2-fp")] + [
    ("gdb18", "host", "O2-nofp"), ("gdb18", "trixie", "O2-nofp")]


@pytest.mark.parametrize("gdb,toolchain,variant", CALLEE_SAVED_CASES, ids=["-".join(c) for c in CALLEE_SAVED_CASES])
def test_callee_saved_native(corpus, tmp_path, gdb, toolchain, variant):
    """`sframe verify` through the whole plan: every callee-saved register DWARF knows in a caller of
    an SFrame frame equals the plugin's (no different value), and as many are recovered as the
    baseline says (REGISTER_BASELINE).
    (The O2-nofp builds on their own GDB are test_verify_native, which checks the same.)"""
    fixtures = sorted({fx for fx, _, _ in VERIFY_PLAN})
    lines = ["set startup-with-shell off", "source %s" % PLUGIN]
    for fx in fixtures:
        lines += verify_lines(corpus.get(toolchain, fx, variant))
    out = run_gdb(gdb, lines, tmp_path)
    equal, missing = print_register_counts(check_verify(out, fixtures))
    check_register_baseline((gdb, toolchain, variant), equal, missing)


DEMO_CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb16", "trixie"), ("gdb18", "sid")]


@pytest.mark.parametrize("gdb,toolchain", DEMO_CASES, ids=["%s-%s" % c for c in DEMO_CASES])
def test_readme_demo_bt(corpus, tmp_path, gdb, toolchain):
    """The README demo (scripts/demo): `bt` with the plugin on the program without DWARF CFI prints
    the same lines as GDB's own `bt` with DWARF CFI, arguments and entry values included (they
    need the callers' callee-saved registers), and `frame 3` / `info locals` / `p n` / `finish`
    in an outer frame too."""
    build = corpus.get(toolchain, "recurse", "O2-nofp")
    out = {}
    for kind, exe, plugin in (("dwarf", build.path, []), ("sframe", build.noeh, ["source %s" % PLUGIN])):
        lines = ["set startup-with-shell off", "file %s" % exe] + plugin + [
            "break stop_here", "run 3", "mark bt", "bt", "mark frame3", "frame 3", "info locals", "p n", "p depth",
            "mark finish", "finish-outer", "mark end"]
        out[kind] = run_gdb(gdb, lines, tmp_path)
        assert "Traceback" not in out[kind] and "Python Exception" not in out[kind], out[kind]
    bt = {k: [ln for ln in o.between("bt", "frame3").splitlines() if ln.startswith("#")] for k, o in out.items()}
    assert len(bt["dwarf"]) == 6 and bt["sframe"] == bt["dwarf"], bt
    assert "optimized out" not in "\n".join(bt["sframe"][1:5]) and "@entry=" in bt["sframe"][1], bt
    for section in (("frame3", "finish"), ("finish", "end")):
        assert out["sframe"].between(*section) == out["dwarf"].between(*section), section


# AArch64 with frame pointers is left out: stepping from *level1 enters the lazy-binding PLT0, where
# GDB's own AArch64 prologue analyser (the reference: PLT0 has no CFI) unwinds to a duplicate
# level1 frame and a zero PC, so there is nothing right to compare with.  test_saves checks those
# builds' registers against their DWARF CFI at every instruction.
QEMU_VERIFY_CASES = [("sid-aarch64", "O2-nofp")] + [("sid-s390x", v) for v in ("O2-nofp", "O0-fp", "O2-fp")]


@pytest.mark.parametrize("toolchain,variant", QEMU_VERIFY_CASES, ids=["-".join(c) for c in QEMU_VERIFY_CASES])
def test_verify_qemu(corpus, tmp_path, toolchain, variant):
    """`sframe verify` under qemu-user, every variant: frames and callee-saved registers (as many of
    those DWARF knows recovered as the baseline says, none different)."""
    fixtures = sorted({fx for fx, _, _ in VERIFY_PLAN})
    tc = T.toolchain(toolchain)
    lines = ["source %s" % PLUGIN]
    qemus = []
    try:
        for fx in fixtures:
            build = corpus.get(toolchain, fx, variant)
            q = Qemu(toolchain, build.path, STOPS[fx][1])
            qemus.append(q)
            lines += verify_lines(build, remote_port=q.port, sysroot=tc.sysroot)
        out = run_gdb("multiarch", lines, tmp_path)
    finally:
        for q in qemus:
            q.close()
    equal, missing = print_register_counts(check_verify(out, fixtures))
    check_register_baseline(("multiarch", toolchain, variant), equal, missing)


# -- core files -----------------------------------------------------------------------------------------

CORE_CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb16", "trixie"), ("gdb18", "sid")]


@pytest.mark.parametrize("gdb,toolchain", CORE_CASES, ids=["%s-%s" % c for c in CORE_CASES])
def test_core_files(corpus, tmp_path, gdb, toolchain):
    """gcore of the unstripped and the stripped program at the same stop; then `gdb EXE CORE`
    with the plugin loaded first: the same frames as DWARF on the unstripped core, in every thread."""
    cases = []
    lines = ["set startup-with-shell off"]
    for fx in ("recurse", "threads"):
        orig, noeh = twin_copies(corpus.get(toolchain, fx, "O2-nofp"), tmp_path / fx)
        cases.append((fx, orig, noeh))
        for exe in (orig, noeh):
            lines += ["file %s" % exe, "break %s" % STOPS[fx][0], "run %s" % " ".join(STOPS[fx][1]),
                      "gcore %s.core" % exe, "kill", "delete"]
    lines += ["source %s" % PLUGIN]
    for fx, orig, noeh in cases:
        for kind, exe in (("orig", orig), ("noeh", noeh)):
            lines += ["file %s" % exe, "core-file %s.core" % exe]
            for thread in ((1, 2) if fx == "threads" else (1,)):
                tag = "%s-%s-t%d" % (fx, kind, thread)
                lines += ["thread %d" % thread, "set sframe off", "frames-dump %s-off" % tag,
                          "set sframe on", "frames-dump %s-on" % tag]
                if kind == "orig":
                    lines += ["dwarf-unwinders off", "frames-dump %s-nodwarf" % tag, "dwarf-unwinders on",
                              "set sframe mode always", "frames-dump %s-always" % tag, "set sframe mode auto"]
            lines += ["core-file"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    for fx, _, _ in cases:
        threads = (1, 2) if fx == "threads" else (1,)
        # Thread numbers follow the order of the core's notes: pair the threads by their frame #0.
        stopped = {}
        for kind in ("orig", "noeh"):
            for t in threads:
                frames = out.frames("%s-%s-t%d-on" % (fx, kind, t))
                key = "stopped" if frames[0].name == STOPS[fx][0] else "other"
                stopped[kind, key] = t
        assert stopped.get(("orig", "stopped")) and stopped.get(("noeh", "stopped")), stopped
        for t in threads:
            ref = out.frames("%s-orig-t%d-off" % (fx, t))
            mine = ref[0].name == STOPS[fx][0]
            expect = STOPS[fx][2] if mine else ("main",)
            # Both unwinders on: unchanged, DWARF's own (mode auto); SFrame first in mode always.
            # DWARF off: SFrame alone up to libc.
            check_untouched(ref, out.frames("%s-orig-t%d-on" % (fx, t)))
            check_same(ref, out.frames("%s-orig-t%d-always" % (fx, t)), expect)
            if mine:
                check_sframe_frames(ref, out.frames("%s-orig-t%d-nodwarf" % (fx, t)), expect)
                # No .eh_frame: SFrame alone, the same frames.
                check_same(ref, out.frames("%s-noeh-t%d-on" % (fx, stopped["noeh", "stopped"])), expect)
            else:
                # The main thread waits somewhere in libc: DWARF there, then SFrame for main.
                other = out.frames("%s-noeh-t%d-on" % (fx, stopped["noeh", "other"]))
                assert [f.name for f in other if f.sf][-1:] == ["main"], other


# -- commands ---------------------------------------------------------------------------------------------

def section_counts(path):
    from sframekit.core.elf.image import ElfImage
    from sframekit.core.sframe.index import SFrameIndex
    img = ElfImage(path)
    idx = SFrameIndex(img.sframe.data, img.sframe.address)
    return idx.header.version, idx.header.num_fdes, idx.header.num_fres, idx


COMMAND_CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb16", "trixie"), ("gdb18", "sid")]


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_commands(corpus, tmp_path, gdb, toolchain):
    build = corpus.get(toolchain, "frames", "O2-nofp")
    exe = build.path
    version, nfdes, nfres, _ = section_counts(exe)
    rel = os.path.relpath(PLUGIN, tmp_path)
    lines = [
        # A missing pyelftools: one line, no traceback, nothing installed.
        "python import sys; sys.modules['elftools'] = None",
        "mark missing", "source %s" % rel, "try-cmd info sframe",
        "python del sys.modules['elftools']",
        # Relative path from another directory; a second source does nothing more.
        "mark load", "source %s" % rel, "source %s" % PLUGIN, "mark loaded",
        "file %s" % exe,
        "mark static", "info sframe stop_here", "mark static-end",
        "mark help", "help info sframe", "help sframe verify", "help set sframe", "help show debug sframe",
        "mark complete", "complete info sframe stop_h", "complete sframe ver",
        "mark noproc", "try-cmd sframe verify",
        "set startup-with-shell off", "break stop_here", "run",
        "mark table", "info sframe", "mark addr-pc", "info sframe $pc",
        "mark addr-expr", "info sframe level2+4",
        "python gdb.execute('mark addr-star'); gdb.execute('info sframe *%#x' % int(gdb.parse_and_eval('&level1')))",
        "frames-dump here",
        "mark up", "up", "info sframe $pc", "down",
        "mark errors",
        "try-cmd info sframe nosuchsym + 1",
        "try-cmd info sframe 0",
        "try-cmd info sframe puts",
        "try-cmd info sframe _init",
        "try-cmd info sframe _start",
        "try-cmd info sframe",
        "try-cmd sframe verify -steps many",
        "try-cmd sframe verify -bogus",
        "mark names", "sframe verify -count 2", "sframe verify -frames 1",
        "set sframe callee-saved off", "show sframe registers", "set sframe registers on", "show sframe callee-saved",
        "mark settings", "show sframe", "show debug sframe",
        "dwarf-unwinders off",
        "set sframe off", "show sframe", "frames-dump off",
        "set sframe on", "show sframe", "frames-dump on",
        "set debug sframe on", "show debug sframe", "mark debug", "frames-dump dbg", "set debug sframe off",
        "mark debug-end",
        "dwarf-unwinders on",
        "kill",
    ]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out

    missing = out.between("missing", "load")
    assert "TRY-ERROR: Undefined info command" in missing, missing      # nothing was installed
    # The one line goes to stderr (at the end of the captured output).
    assert len(re.findall(r"^sframe-gdb: not loaded: GDB's Python 3\.\d+ cannot import pyelftools; install it "
                          r"with 'apt-get install python3-pyelftools' \(or 'python3\.\d+ -m pip install "
                          r"pyelftools'\)\.$", out, re.M)) == 1, out
    loaded = out.between("load", "loaded")
    assert loaded.count("sframe-gdb: SFrame unwinder installed") == 1, loaded
    assert "sframe-gdb: already loaded." in loaded, loaded

    # Before the program runs (no load bias): exactly the command-line tool's text (with where the
    # callee-saved registers are), then GDB's CFI and which of GDB's unwinders takes such a frame
    # (mode auto, DWARF CFI present: GDB's own).
    static = out.between("static", "static-end").strip().splitlines()
    rc, cli, err = lookup_lines(exe, "stop_here")
    assert rc == 0 and not err, err
    assert static[:len(cli)] == cli, static
    lo_hi = r"0x%x-0x[0-9a-f]+" % int(re.search(r"^Function: stop_here at (0x[0-9a-f]+)", "\n".join(cli), re.M).group(1), 16)
    assert re.fullmatch(r"DWARF CFI: \.eh_frame FDE at offset 0x[0-9a-f]+ covers " + lo_hi, static[len(cli)]), static
    assert static[len(cli) + 1:] == ["Unwinder: GDB's DWARF unwinder (mode auto: DWARF CFI covers it)"], static

    helptext = out.between("help", "complete")
    assert "Usage: info sframe [ADDR]" in helptext and "Usage: sframe verify [-steps N]" in helptext
    assert "Set whether GDB unwinds frames with SFrame." in helptext
    assert "Show SFrame unwinder debugging." in helptext
    comp = out.between("complete", "noproc")
    assert "info sframe stop_here" in comp and "sframe verify" in comp, comp
    assert "TRY-ERROR: sframe verify: the program has no stack" in out.between("noproc", "table")

    table = out.between("table", "addr-pc").strip().splitlines()
    assert table[0].split() == ["Objfile", "Version", "ABI", "FDEs", "FREs", "Text", "range", "Load", "bias"], table
    row = [r for r in table if r.startswith(str(exe))]
    assert len(row) == 1, table
    cols = row[0][len(str(exe)):].split()
    assert cols[0] == str(version) and cols[1:4] == ["AMD64", "little-endian", str(nfdes)] and cols[4] == str(nfres)
    lo, hi = (int(x, 16) for x in cols[5].split("-"))
    bias = int(cols[6], 16)            # the PIE's: where GDB's section is, less the file's address
    first, last = section_counts(exe)[3].text_range()      # (the file's addresses)
    assert bias % 4096 == 0 and lo - bias <= first < last <= hi - bias, (cols, hex(first), hex(last))
    assert re.search(r"^\d+ other objfiles? without SFrame\.$", table[-2]), table
    assert re.search(r"^SFrame unwinder: (active|idle)", table[-1]), table

    here = out.frames("here")
    pc_text = out.between("addr-pc", "addr-expr")
    assert lo <= here[0].pc < hi
    assert "Address: %#x in %s" % (here[0].pc, exe) in pc_text
    assert "Section: .sframe at 0x" in pc_text and "SFrame version %d" % version in pc_text
    assert "Function: stop_here at %#x" % here[0].pc in pc_text and "Rules:\n  CFA = rsp + 8\n" in pc_text
    # The values in the selected frame: the CFA GDB has for it, the return address it shows.
    assert "Values in frame #0:\n  CFA = %#x\n  RA = %#x\n" % (here[0].cfa, here[1].pc) in pc_text, pc_text
    expr = out.between("addr-expr", "addr-star")
    assert "Function: level2 at " in expr and "Values in" not in expr, expr
    star = out.between("addr-star", "up")
    assert "Function: level1 at " in star, star
    up = out.between("up", "errors")
    assert "Function: level3 at " in up and "Values in frame #1:\n  CFA = %#x\n  RA = %#x\n" % (here[1].cfa, here[2].pc) in up, up

    errors = [line for line in out.between("errors", "settings").splitlines() if line.startswith("TRY-")]
    assert errors[0].startswith("TRY-ERROR: info sframe: cannot evaluate nosuchsym + 1: No symbol \"nosuchsym\""), errors
    assert errors[1] == "TRY-ERROR: No SFrame information covers 0x0: it is not in any loaded objfile.", errors
    assert re.match(r"TRY-ERROR: No SFrame information covers 0x[0-9a-f]+: \S*libc\.so\.6 has no \.sframe section\.$",
                    errors[2]), errors
    assert re.match(r"TRY-ERROR: No SFrame information covers 0x[0-9a-f]+: it lies outside the SFrame range of %s\.$"
                    % re.escape(str(exe)), errors[3]), errors
    assert re.match(r"TRY-ERROR: No SFrame information covers 0x[0-9a-f]+: no FDE of %s's \.sframe contains it\.$"
                    % re.escape(str(exe)), errors[4]), errors
    assert errors[5] == "TRY-OK", errors
    assert errors[6].startswith("TRY-ERROR: sframe verify: argument -steps: 'many' is not a whole number of at least 0"), errors
    assert errors[7].startswith("TRY-ERROR: sframe verify: unrecognized arguments: -bogus"), errors

    names = out.between("names", "settings")      # the one vocabulary, and the old names still taken
    assert re.findall(r"^sframe verify: (\d+) frames checked at 1 stops", names, re.M) == ["2", "1"], names
    assert names.count("Recovery of callee-saved registers in SFrame frames is off.") == 1, names
    assert names.count("Recovery of callee-saved registers in SFrame frames is on.") == 1, names

    settings = out.between("settings", "debug")
    assert settings.count("SFrame unwinding is on.") == 2 and "SFrame unwinding is off." in settings
    assert "SFrame unwinder debugging is off." in settings
    ref = out.frames("on")
    assert [f.name for f in ref] == ["stop_here", "level3", "level2", "level1", "main"] and all(f.sf for f in ref)
    off = out.frames("off")
    assert not any(f.sf for f in off) and [(f.pc, f.cfa) for f in off] != [(f.pc, f.cfa) for f in ref]
    assert "SFrame unwinder debugging is on." in out
    # Debug lines go to GDB's stderr (at the end of the captured output).
    assert re.search(r"^\[sframe\] frame #1: pc %#x: sframe: CFA %#x, caller pc %#x" % (here[1].pc, here[1].cfa, here[2].pc),
                     out, re.M), out
    assert re.search(r"^\[sframe\] \S*libc\.so\.6: .*no SFrame section", out, re.M) is None   # only while debugging


# -- a signal interrupting SFrame code -----------------------------------------------------------------

# faulting() faults on its first instruction after a push: the interrupted frame's PC is not a
# return address, so its rules must be looked up at the PC itself (at PC - 1, as for a caller,
# the push's row would give the wrong CFA).  The handler calls stop_here.
INTERRUPT_C = r"""
#include <signal.h>
#include <string.h>
#include <unistd.h>
volatile int sink;
int faulting(volatile int *p);
__asm__(".text\n.globl faulting\n.type faulting, @function\nfaulting:\n.cfi_startproc\n"
        "  pushq %rbx\n.cfi_def_cfa_offset 16\n.cfi_offset rbx, -16\n"
        "  movl (%rdi), %eax\n"
        "  popq %rbx\n.cfi_def_cfa_offset 8\n  ret\n.cfi_endproc\n.size faulting, .-faulting\n");
__attribute__((noinline)) void stop_here(int s) { sink += s; }
__attribute__((noinline)) void on_segv(int sig) { stop_here(sig); _exit(0); }
__attribute__((noinline)) int middle(volatile int *p) { int r = faulting(p); return r + sink + 1; }
int main(int argc, char **argv)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sigaction(SIGSEGV, &sa, 0);
    return middle((volatile int *)(long)(argc - 1)) + 2;
}
"""


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_signal_interrupts_sframe_code(roots, tmp_path, gdb, toolchain):
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "interrupt", {"interrupt.c": INTERRUPT_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), "interrupt.c"],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    lines = ["set startup-with-shell off", "handle SIGSEGV nostop noprint pass", "file %s" % orig,
             "break stop_here", "run", "frames-dump dwarf", "source %s" % PLUGIN,
             "dwarf-unwinders off", "frames-dump sframe", "dwarf-unwinders on", "frames-dump both",
             "set sframe mode always", "frames-dump always", "set sframe mode auto", "sframe verify", "kill", "file %s" % noeh, "run", "frames-dump noeh",
             "set sframe off", "frames-dump noeh-off", "kill"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    ref = out.frames("dwarf")
    names = [f.name for f in ref]
    assert names[:2] == ["stop_here", "on_segv"] and names[3:] == ["faulting", "middle", "main"], ref
    assert ref[3].where == "faulting+1", ref[3]
    # DWARF off: SFrame for every frame but the trampoline's (GDB's signal-frame unwinder); the
    # interrupted frame's CFA and its caller's PC right.
    got = out.frames("sframe")
    assert [f.sf for f in got] == [True, True, False, True, True, True], got
    assert [f.pc for f in got] == [f.pc for f in ref]
    assert [f.cfa for f in got if f.sf] == [f.cfa for f in ref if f.level != 2], (got, ref)
    check_untouched(ref, out.frames("both"))
    check_same(ref, out.frames("always"), ("faulting", "middle"))
    assert "sframe verify: 5 frames checked at 1 stops, 0 disagreements" in out
    check_same(ref, out.frames("noeh"), ("faulting", "middle", "main"))
    assert [(f.pc, f.cfa) for f in out.frames("noeh-off")][3:] != [(f.pc, f.cfa) for f in ref][3:]


# The same, with the handler in a library that keeps its CFI: a mixed program.  GDB's DWARF
# unwinder takes the handler's frames and the trampoline's; the plugin declines them on its hot
# path (one read of the PC) and must still know, at `faulting`, that the frame below it is a
# signal trampoline, or it looks the rules up at PC - 1 and gives the wrong CFA.
HANDLER_C = r"""
#include <unistd.h>
volatile int hsink;
__attribute__((noinline)) void stop_here(int s) { hsink += s; }
__attribute__((noinline)) void on_segv(int sig) { stop_here(sig); stop_here(sig + 1); _exit(0); }
"""
INTERRUPT_MIXED_C = INTERRUPT_C.replace(
    "__attribute__((noinline)) void stop_here(int s) { sink += s; }\n"
    "__attribute__((noinline)) void on_segv(int sig) { stop_here(sig); _exit(0); }\n",
    "void on_segv(int sig);\n")


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_signal_interrupts_sframe_code_below_cfi(roots, tmp_path, gdb, toolchain):
    assert INTERRUPT_MIXED_C != INTERRUPT_C
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "interrupt", {"handler.c": HANDLER_C, "interrupt.c": INTERRUPT_MIXED_C})
    flags = ["-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    T.run_in(tc, [tc.cc, *flags, "-shared", "-fPIC", "-o", "libhandler.so", "handler.c"], cwd=tmp_path, check=True)
    T.run_in(tc, [tc.cc, *flags, "-o", str(orig), "interrupt.c", "-L.", "-lhandler", "-Wl,-rpath,%s" % tmp_path],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    lines = ["set startup-with-shell off", "handle SIGSEGV nostop noprint pass", "file %s" % orig,
             "break stop_here", "run", "frames-dump dwarf", "kill", "source %s" % PLUGIN, "file %s" % noeh,
             "run", "frames-dump noeh", "info sframe", "continue", "frames-dump again", "kill"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    ref = out.frames("dwarf")
    assert [f.name for f in ref] == ["stop_here", "on_segv", ref[2].name, "faulting", "middle", "main"], ref
    assert ref[3].where == "faulting+1", ref[3]
    assert "SFrame unwinder: active (mode auto: SFrame alone describes" in out, out
    got = out.frames("noeh")
    check_same(ref, got, ("faulting", "middle", "main"))
    assert [f.sf for f in got] == [False, False, False, True, True, True], got
    # A second stop (on_segv's second call), its frames built anew.
    again = out.frames("again")
    assert [f.name for f in again[:2]] == ["stop_here", "on_segv"] and again[1].pc != ref[1].pc, again
    check_same(ref[2:], again[2:], ("faulting", "middle", "main"))
    assert [f.sf for f in again] == [False, False, False, True, True, True], again


# Two threads in SFrame-only code: the main one stopped in stop_here, the other spinning in an
# inlined function, so that GDB's inline-frame unwinder takes its frame #0 and GDB begins that
# thread's unwind by asking the SFrame unwinder about frame #1.
INLINE_TOP_C = r"""
#include <pthread.h>
volatile int go, ready;
volatile long sink;
__attribute__((noinline)) void stop_here(long v) { sink += v; }
static inline __attribute__((always_inline)) void wait_inline(long v) { while (!go) sink += v; }
__attribute__((noinline)) void spinner(long v) { ready = 1; wait_inline(v); sink -= v; }
__attribute__((noinline)) void spin_chain(long v) { spinner(v + 1); sink++; }
static void *spin_thread(void *a) { spin_chain((long)a); return 0; }
__attribute__((noinline)) void a2(long v) { stop_here(v); sink++; }
__attribute__((noinline)) void a1(long v) { a2(v + 1); sink++; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, spin_thread, (void *)1);
    while (!ready) ;
    a1(5);
    go = 1;
    pthread_join(t, 0);
    return 0;
}
"""


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_unwind_begun_below_an_inline_frame_is_a_new_one(roots, tmp_path, gdb, toolchain):
    """An unwind GDB begins at frame #1 (its inline-frame unwinder took #0) is a new unwind, even
    right after one that stopped at frame #0: what the SFrame unwinder recorded and prepared for
    the thread unwound before is not used for this one (it gave thread 2 thread 1's callers)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "inline", {"inline.c": INLINE_TOP_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-pthread", "-o", str(orig),
                  "inline.c"], cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    # The stop shows thread 1's frame #0 alone (no arguments: GDB unwinds no further), then
    # `thread 2` shows its frame #0, inline in #1: GDB asks first about #1, the level after the
    # one it last asked about, of another thread.  `bt` goes on from the frames built then.
    stop = ["break stop_here", "run", "thread 2", "mark bt-%s", "bt", "mark end-%s", "thread 1", "frames-dump %s-1",
            "thread 2", "frames-dump %s-2", "thread 1", "frames-dump %s-1b", "thread 2", "frames-dump %s-2b", "kill"]
    lines = ["set startup-with-shell off", "set print entry-values no", "set print frame-arguments none",
             "file %s" % orig,
             *[c % "dwarf" if "%" in c else c for c in stop],
             "source %s" % PLUGIN, "file %s" % noeh,
             *[c % "sf" if "%" in c else c for c in stop]]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    main_ref, spin_ref = out.frames("dwarf-1"), out.frames("dwarf-2")
    assert [f.name for f in main_ref] == ["stop_here", "a2", "a1", "main"], main_ref
    names = [f.name for f in spin_ref]
    assert names[:4] == ["wait_inline", "spinner", "spin_chain", "spin_thread"], spin_ref
    assert spin_ref[0].pc == spin_ref[1].pc, spin_ref             # frame #0 inline in #1
    for label in ("sf-1", "sf-1b"):
        check_same(main_ref, out.frames(label), ("stop_here", "a2", "a1"))
    for kind in ("dwarf", "sf"):
        bt = re.findall(r"^#\d+ +(?:0x[0-9a-f]+ in )?(\w+) \(", out.between("bt-%s" % kind, "end-%s" % kind), re.M)
        assert bt == names, (kind, bt, names)
    for label in ("sf-2", "sf-2b"):
        got = out.frames(label)
        # (where the spinning thread stopped in its loop differs between the two runs)
        assert [(f.cfa, f.name) for f in got] == [(f.cfa, f.name) for f in spin_ref], (got, spin_ref)
        assert [f.pc for f in got[2:]] == [f.pc for f in spin_ref[2:]], (got, spin_ref)
        assert [f.sf for f in got] == [False, True, True, True] + [False] * (len(got) - 4), got



# Recursion whose callers return into inlined code: r(n) calls r(n - 1), and the return address X
# is the first instruction of inl's body (n is not needed after the call).
RECORD_C = r"""
volatile long sink;
__attribute__((noinline)) void start_rec(void) { sink++; }
__attribute__((noinline)) void stop_here(long v) { sink += v; }
static inline __attribute__((always_inline)) void inl(void)
{
    sink += 7;
    sink ^= 3;
    sink *= 5;
}
__attribute__((noinline)) void r(long n) { if (n > 0) r(n - 1); inl(); }
int main(void) { start_rec(); r(3); stop_here(1); return 0; }
"""

# Sets $ret to the return address of r's call to itself (X above).
RETURN_ADDRESS = """python
lines = gdb.execute("disassemble r", to_string=True).splitlines()
at = next(i for i, l in enumerate(lines) if "call" in l and l.rstrip().endswith("<r>"))
gdb.set_convenience_variable("ret", int(lines[at + 1].split()[0], 16))
end"""

# The current `record full` instruction number, in the Python variable named.
INSN_NUMBER = ('python %s = re.search(r"Current instruction number is (\\d+)", '
               'gdb.execute("info record", to_string=True)).group(1)')


@pytest.mark.parametrize("own_hook", [None, "before", "after"], ids=["hooked", "own-hook", "own-hook-later"])
@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_registers_changed_without_an_event(roots, tmp_path, gdb, toolchain, own_hook):
    """`record goto` gives the thread other registers and GDB unwinds anew, with no event the
    plugin hears (as `tfind` and `restart` do).  From a replay position where frame #0 was r(0)
    entered (frame #1: r(1) at X), to the one where r(0) itself reaches X (frame #0 inline in
    r(0) at X): GDB asks first about frame #1, the very level the last unwind would have gone on
    at, and a frame with the same PC as the caller prepared for it, but another SP.  The unwinder
    unwinds it anew: its pre-hook on `record goto` drops its records, and where the user has a
    hook of their own there (defined before the plugin is loaded, or after: replacing its own), it
    checks each frame it is asked about against the caller it gave
    (without either it gives the prepared callers: one r too few)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "rec", {"rec.c": RECORD_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), "rec.c"],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    own = ["define record hook-goto", "echo own hook\\n", "end"]
    steps = ["break start_rec", "run", "record full", "break stop_here", "continue", "python import re",
             "break r if $rdi == 0", "reverse-continue", INSN_NUMBER % "a", "delete", RETURN_ADDRESS,
             "break *$ret", "continue", INSN_NUMBER % "b", "frames-dump %s-at-x-first",
             'python gdb.execute("record goto " + a)', 'python gdb.execute("record goto " + b)',
             "frames-dump %s-at-x", "delete", "kill"]
    lines = ["set startup-with-shell off", "set print entry-values no", "set print frame-arguments none",
             "file %s" % orig, *[c % "dwarf" if "%s" in c else c for c in steps],
             *(own if own_hook == "before" else []), "source %s" % PLUGIN, *(own if own_hook == "after" else []),
             "file %s" % noeh, *[c % "sf" if "%s" in c else c for c in steps]]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    ref = out.frames("dwarf-at-x")
    assert [f.name for f in ref] == ["inl", "r", "r", "r", "r", "main"], ref
    assert ref[0].pc == ref[1].pc == ref[2].pc and ref[1].cfa != ref[2].cfa, ref
    check_same(ref, out.frames("dwarf-at-x-first"), ())
    for label in ("sf-at-x-first", "sf-at-x"):
        check_same(ref, out.frames(label), ("r",))
    assert out.count("own hook\n") == (2 if own_hook else 0), out



# caller's last instruction calls die (noreturn): its return address is next_fn's first byte, where
# the CFA rule is another (caller has 0x48 bytes of locals, next_fn none).
NORETURN_C = r"""
volatile long sink;
__attribute__((noinline)) void stop_here(long v) { sink += v; }
__attribute__((noinline, noreturn)) void die(volatile char *p) { stop_here(p[1]); for (;;) sink++; }
__attribute__((noinline)) void caller(long v) { volatile char buf[64]; buf[v & 7] = 1; die(buf); }
__attribute__((noinline)) long next_fn(long v) { long s = 0; for (long i = 0; i < v; i++) s += sink * i; return s; }
__attribute__((noinline)) void outer(long v) { caller(v); sink++; }
int main(int argc, char **argv) { (void)argv; sink = next_fn(argc); outer(1); return 0; }
"""


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_memory_written_from_python(roots, tmp_path, gdb, toolchain):
    """Python's Inferior.write_memory fires memory_changed but GDB keeps the frames it built
    (`frame 1`: #0 and #1, no arguments printed), and `bt` asks on from #2, whose return address
    is next_fn's first byte.  The write puts another return address into main in outer's frame.
    The unwinder forgets what it unwound ahead (it read the old one) but not the levels below: #2
    is a caller, looked up at its return address - 1 (forgetting them, it took #2 for the topmost,
    found next_fn there, and garbage after it)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "noret", {"noret.c": NORETURN_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-falign-functions=1", "-fno-reorder-functions",
                  "-Wa,--gsframe", "-o", str(orig), "noret.c"], cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    head = ["set startup-with-shell off", "set print frame-arguments none", "set print entry-values no"]
    # Where outer's return address is (its CFA - 8), and main's other one (after it calls next_fn).
    probe = run_gdb(gdb, [*head, "file %s" % orig, "break stop_here", "run", "frames-dump probe",
                          "python print('NEXT_FN %#x' % int(gdb.parse_and_eval('(long)&next_fn')))",
                          "python lines = gdb.execute('disassemble main', to_string=True).splitlines()",
                          "python at = next(i for i, l in enumerate(lines) if 'call' in l and '<next_fn>' in l)",
                          "python print('OTHER_RA ' + lines[at + 1].split()[0])", "kill"], tmp_path)
    frames = probe.frames("probe")
    assert [f.name for f in frames] == ["stop_here", "die", "caller", "outer", "main"], frames
    next_fn = int(re.search(r"^NEXT_FN (0x[0-9a-f]+)$", probe, re.M).group(1), 16)
    assert frames[2].pc == next_fn, (frames, hex(next_fn))        # (the layout the test needs)
    other = int(re.search(r"^OTHER_RA (0x[0-9a-f]+)$", probe, re.M).group(1), 16)
    assert other != frames[4].pc, probe
    write = "python gdb.selected_inferior().write_memory(%d, (%d).to_bytes(8, 'little'))" % (frames[3].cfa - 8, other)
    steps = ["break stop_here", "run", "frame 1", write, "mark bt-%s", "bt", "mark end-%s", "frames-dump %s",
             "delete", "kill"]
    lines = [*head, "file %s" % orig, *[c % "dwarf" if "%s" in c else c for c in steps],
             "source %s" % PLUGIN, "file %s" % noeh, *[c % "sf" if "%s" in c else c for c in steps]]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    ref = out.frames("dwarf")
    assert [(f.name, f.pc) for f in ref][3:] == [("outer", frames[3].pc), ("main", other)], ref
    check_same(ref, out.frames("sf"), ("die", "caller", "outer"))     # (unwound anew)
    # `bt` goes on from the frames GDB kept
    bt = {kind: re.findall(r"^#\d+ +(?:(0x[0-9a-f]+) in )?(\w+|\?\?) \(", out.between("bt-" + kind, "end-" + kind), re.M)
          for kind in ("dwarf", "sf")}
    assert [name for _pc, name in bt["dwarf"]] == [f.name for f in ref] and int(bt["dwarf"][4][0], 16) == other, bt
    assert bt["sf"] == bt["dwarf"], bt



# Calls GDB makes that stop inside the called function (at a breakpoint): the error is expected.
CALL = """python
try:
    gdb.execute("call %s")
except gdb.error as exc:
    print("CALL STOPPED", str(exc).splitlines()[0])
end"""


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_frames_above_a_dummy_frame(roots, tmp_path, gdb, toolchain):
    """Stopped at next_fn's first byte, GDB calls a function that stops at a breakpoint: above the
    dummy frame, next_fn has the registers GDB saved (its PC not a return address): it is looked
    up at its PC, not PC - 1 (caller's last byte: another CFA rule, and main was lost).  Below the
    dummy frame, the SFrame-only caller -> die -> stop_here, or libc's getpid (CFI)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "noret", {"noret.c": NORETURN_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-falign-functions=1", "-fno-reorder-functions",
                  "-Wa,--gsframe", "-o", str(orig), "noret.c"], cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    steps = ["break *next_fn", "run", "break stop_here", CALL % "caller(1)", "frames-dump %s-sframe", "kill",
             "run", "break getpid", CALL % "(int)getpid()", "frames-dump %s-cfi", "delete", "kill"]
    lines = ["set startup-with-shell off", "set print frame-arguments none", "file %s" % orig,
             *[c % "dwarf" if "%s" in c else c for c in steps],
             "source %s" % PLUGIN, "file %s" % noeh, *[c % "sf" if "%s" in c else c for c in steps]]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    assert out.count("CALL STOPPED") == 4, out
    ref = out.frames("dwarf-sframe")
    assert [f.name for f in ref] == ["stop_here", "die", "caller", "??", "next_fn", "main"], ref
    check_same(ref, out.frames("sf-sframe"), ("die", "caller", "next_fn"))
    ref = out.frames("dwarf-cfi")
    names = [f.name for f in ref]
    assert names[-3:] == ["??", "next_fn", "main"] and "getpid" in names[0], ref
    check_same(ref, out.frames("sf-cfi"), ("next_fn",))



INLINE_CALLS_LIBC_C = r"""
#include <unistd.h>
volatile int g;
static inline __attribute__((always_inline)) void helper(void) { g += getpid(); g++; }
__attribute__((noinline)) void outer(void) { helper(); g++; }
int main(void) { outer(); g++; return 0; }
"""


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_inline_frame_above_a_declined_one(roots, tmp_path, gdb, toolchain):
    """getpid (libc's CFI: declined) called from an inline function of SFrame-only code: GDB asks
    about #2 (outer) while it works out #1's (the inline frame's) id.  Nothing the unwinder does
    then may touch GDB's frames (walking them there, GDB 13 stopped on an internal error)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "inl", {"inl.c": INLINE_CALLS_LIBC_C})
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), "inl.c"],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    steps = ["break getpid", "run", "mark bt-%s", "bt", "mark end-%s", "frames-dump %s", "delete", "kill"]
    lines = ["set startup-with-shell off", "file %s" % orig, *[c % "dwarf" if "%s" in c else c for c in steps],
             "source %s" % PLUGIN, "file %s" % noeh, *[c % "sf" if "%s" in c else c for c in steps]]
    out = run_gdb(gdb, lines, tmp_path)
    assert "internal-error" not in out and "Traceback" not in out and "Python Exception" not in out, out
    ref = out.frames("dwarf")
    assert [f.name for f in ref][1:] == ["helper", "outer", "main"], ref
    check_same(ref, out.frames("sf"), ("outer",))
    bt = {kind: re.findall(r"^#\d+ +(?:0x[0-9a-f]+ in )?(\w+) \(", out.between("bt-" + kind, "end-" + kind), re.M)
          for kind in ("dwarf", "sf")}
    assert bt["sf"] == bt["dwarf"] and bt["dwarf"][1:] == ["helper", "outer", "main"], bt


# A program stopped in libc (CFI) called from its own code, with a library of SFrame-only code
# loaded (so that the unwinder is active beside the program's CFI).
TWO_BUILDS_C = r"""
#include <unistd.h>
int lib_f(int);
volatile long sink;
__attribute__((noinline)) void a2(long v) { sink += getpid() + v; sink++; }
__attribute__((noinline)) void a1(long v) { a2(v + 1); sink++; }
int main(void) { a1(5); return lib_f(0) & 0; }
"""
TWO_BUILDS_LIB_C = "int lib_f(int x) { return x * 3; }\n"


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_two_inferiors_at_the_same_addresses(roots, tmp_path, gdb, toolchain):
    """Two builds of one program as two inferiors, at the same addresses: inferior 1 with its CFI,
    inferior 2 without.  What the unwinder learnt of inferior 1's PCs (DWARF CFI covers them) is
    not taken for inferior 2's, where SFrame alone describes the same code."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "prog", {"prog.c": TWO_BUILDS_C, "lib.c": TWO_BUILDS_LIB_C})
    flags = ["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    T.run_in(tc, [tc.cc, *flags, "-shared", "-fPIC", "-o", "libcfi.so", "lib.c"], cwd=tmp_path, check=True)
    T.strip_eh(tc, tmp_path / "libcfi.so", tmp_path / "libsfonly.so")
    T.run_in(tc, [tc.cc, *flags, "-o", str(orig), "prog.c", "-L.", "-lsfonly", "-Wl,-rpath,%s" % tmp_path],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    # Both stopped, inferior 1's frames unwound, then inferior 2's (no objfile loads between).
    lines = ["set startup-with-shell off", "source %s" % PLUGIN, "file %s" % orig, "break getpid", "run",
             "add-inferior -exec %s" % noeh, "inferior 2", "run", "inferior 1", "frames-dump one", "info sframe",
             "inferior 2", "frames-dump two", "inferior 1", "frames-dump one-again", "kill inferiors 1 2"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    assert re.search(r"^SFrame unwinder: active \(mode auto: SFrame alone describes \d+ functions? of \S*/libsfonly\.so\)",
                     out, re.M), out
    one = out.frames("one")
    names = [f.name for f in one]
    assert names[1:4] == ["a2", "a1", "main"] and not any(f.sf for f in one), one
    two = out.frames("two")
    check_same(one, two, ("a2", "a1", "main"))
    assert [f.sf for f in two[:4]] == [False, True, True, True], two
    check_untouched(one, out.frames("one-again"))


@pytest.mark.parametrize("gdb,toolchain", COMMAND_CASES, ids=["%s-%s" % c for c in COMMAND_CASES])
def test_idle_in_one_inferior_active_in_another(roots, tmp_path, gdb, toolchain):
    """Inferior 1 all CFI (the unwinder idles there), inferior 2 the same program without its CFI.
    Selecting inferior 2 in a script fires no event GDB 13 has: while there is another inferior
    the idle unwinder stays enabled, deciding at each unwind, and inferior 2's frames are SFrame's
    (switched off, GDB's heuristics unwound them)."""
    tc = T.toolchain(toolchain)
    orig, noeh = twin_paths(tmp_path, "prog", {"prog.c": TWO_BUILDS_C, "lib.c": TWO_BUILDS_LIB_C})
    flags = ["-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    T.run_in(tc, [tc.cc, *flags, "-shared", "-fPIC", "-o", "libsfonly.so", "lib.c"], cwd=tmp_path, check=True)
    T.run_in(tc, [tc.cc, *flags, "-o", str(orig), "prog.c", "-L.", "-lsfonly", "-Wl,-rpath,%s" % tmp_path],
             cwd=tmp_path, check=True)
    T.strip_eh(tc, orig, noeh)
    # (libsfonly.so keeps its CFI here: only inferior 2's program lacks it.)
    lines = ["set startup-with-shell off", "source %s" % PLUGIN, "file %s" % orig, "break getpid", "run",
             "add-inferior -exec %s" % noeh, "inferior 2", "run", "inferior 1", "frames-dump one",
             "python print('UNWINDER', [u.enabled for u in gdb.frame_unwinders if u.name == 'sframe'])",
             "inferior 2", "frames-dump two", "inferior 1", "frames-dump one-again", "kill inferiors 1 2"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    assert "UNWINDER [True]" in out, out
    one = out.frames("one")
    assert [f.name for f in one][1:4] == ["a2", "a1", "main"] and not any(f.sf for f in one), one
    two = out.frames("two")
    check_same(one, two, ("a2", "a1", "main"))
    check_untouched(one, out.frames("one-again"))


@pytest.mark.parametrize("gdb,toolchain", [("gdb13", "host"), ("gdb18", "sid")], ids=["gdb13-host", "gdb18-sid"])
def test_verify_reports_disagreements(corpus, tmp_path, gdb, toolchain):
    """A .sframe whose CFA offset for stop_here is wrong: verify must say so (and bt with DWARF on
    still works, as the plugin's broken frames are the only ones that change)."""
    from sframekit.core.elf.image import ElfImage
    from sframekit.core.sframe import format as F
    src = corpus.get(toolchain, "frames", "O2-nofp").path
    exe = tmp_path / "frames"
    shutil.copy2(src, exe)
    img = ElfImage(exe)
    _, _, _, idx = section_counts(exe)
    addr = img.resolve("stop_here")
    m = idx.lookup(addr)
    assert m.rules.cfa.offset == 8 and m.fre.word_size == 1
    at = img.sframe.file_offset + m.fre.offset + F.FRE_START_SIZE[m.fde.fre_type] + 1
    data = bytearray(exe.read_bytes())
    assert data[at] == 8
    data[at] = 24                     # CFA = rsp + 24 instead of rsp + 8
    exe.write_bytes(bytes(data))
    out = run_gdb(gdb, ["source %s" % PLUGIN, "file %s" % exe, "break stop_here", "run", "sframe verify",
                        "info sframe $pc", "kill"], tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    assert "  CFA = rsp + 24\n" in out, out
    m = re.search(r"^frame #0 \(stop_here\): CFA (0x[0-9a-f]+) with SFrame, (0x[0-9a-f]+) with the reference$",
                  out, re.M)
    assert m and int(m.group(1), 16) == int(m.group(2), 16) + 16, out
    assert re.search(r"^frame #1 .*: PC 0x[0-9a-f]+ with SFrame, 0x[0-9a-f]+ with the reference$", out, re.M), out
    s = _SUMMARY.findall(out)
    assert len(s) == 1 and s[0][2] == "2", out


# A fault planted in the plugin inside GDB: every stack slot the save-slot analysis proves is
# taken 8 bytes lower, so each recovered callee-saved register reads its neighbour's slot.
SHIFTED_SLOTS = """python
import sframekit.core.saves.analysis as _analysis
_plan = _analysis.plan
def _shifted(*args, **kw):
    p = _plan(*args, **kw)
    return _analysis.Plan(tuple((r, b, o - 8) for r, b, o in p.slots), p.unchanged)
_analysis.plan = _shifted
end"""


@pytest.mark.parametrize("gdb,toolchain,fixture", [("gdb13", "host", "recurse"), ("gdb18", "sid", "shrinkwrap")])
def test_verify_reports_a_wrong_callee_saved_register(corpus, tmp_path, gdb, toolchain, fixture):
    """verify's register comparison is shown to fail: with the save slots shifted by a planted
    fault, the callers' callee-saved registers differ from DWARF's, and verify names them as
    disagreements (where without the fault it finds 0 different)."""
    exe = corpus.get(toolchain, fixture, "O2-nofp").path
    run = ["set startup-with-shell off", "source %s" % PLUGIN, "file %s" % exe, "break %s" % STOPS[fixture][0],
           "run %s" % " ".join(STOPS[fixture][1])]
    good = run_gdb(gdb, run + ["sframe verify -steps 3", "kill"], tmp_path)
    bad = run_gdb(gdb, run + SHIFTED_SLOTS.splitlines() + ["sframe verify -steps 3", "kill"], tmp_path)
    for out in (good, bad):
        assert "Traceback" not in out and "Python Exception" not in out, out
    (g_equal, _g_missing, g_diff), = _REGISTERS.findall(good)
    assert int(g_equal) > 0 and g_diff == "0", good
    (_b_equal, _b_missing, b_diff), = _REGISTERS.findall(bad)
    names = set(re.findall(r"^stop \d+ \(pc 0x[0-9a-f]+\): frame #\d+ \([^)]*\): (\w+) 0x[0-9a-f]+ with SFrame, "
                           r"0x[0-9a-f]+ with the reference$", bad, re.M))
    assert int(b_diff) > 0 and names and names <= {"rbx", "r12", "r13", "r14", "r15"}, bad
    (_frames, _stops, disagreements), = _SUMMARY.findall(bad)
    assert int(disagreements) >= int(b_diff), bad


# -- re-run, attach ----------------------------------------------------------------------------------------

WAIT_C = r"""
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) void inner(void) { for (;;) { pause(); sink++; } }
__attribute__((noinline)) void middle(void) { inner(); sink++; }
__attribute__((noinline)) void outer(void) { middle(); sink++; }
int main(void) { outer(); return sink; }
"""


@pytest.mark.parametrize("gdb,toolchain", [("gdb13", "host"), ("gdb18", "sid")], ids=["gdb13-host", "gdb18-sid"])
def test_rerun_and_attach(corpus, tmp_path, gdb, toolchain):
    """The load bias follows the program: two runs with address randomisation on (the PIE moves),
    then a process started outside GDB and attached to."""
    tc = T.toolchain(toolchain)
    exe = corpus.get(toolchain, "frames", "O2-nofp").path
    src = tmp_path / "wait.c"
    src.write_text(WAIT_C)
    waiter = tmp_path / "wait"
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(waiter), str(src)],
             cwd=tmp_path, check=True)
    lines = ["source %s" % PLUGIN, "set disable-randomization off", "file %s" % exe, "break stop_here"]
    for k in (1, 2):
        lines += ["run", "dwarf-unwinders off", "frames-dump run%d" % k, "mark table%d" % k, "info sframe",
                  "mark end%d" % k, "dwarf-unwinders on", "kill"]
    # The waiting process is started by GDB's Python, so that it shares GDB's root and mounts.
    lines += ["delete", "file %s" % waiter,
              "python import subprocess, time; _w = subprocess.Popen(['%s']); time.sleep(0.5)" % waiter,
              "python gdb.execute('attach %d' % _w.pid)",
              "set sframe mode always", "frames-dump attach", "set sframe mode auto", "frames-dump attach-auto",
              "set sframe off", "frames-dump attach-off", "set sframe on",
              "detach", "python _w.kill(); _w.wait()"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "Python Exception" not in out, out
    runs = [out.frames("run1"), out.frames("run2")]
    for frames in runs:
        assert [f.name for f in frames] == ["stop_here", "level3", "level2", "level1", "main"] and all(f.sf for f in frames), frames
    assert runs[0][0].pc != runs[1][0].pc, "the program did not move between the runs"
    file_ranges = []
    for k, frames in ((1, runs[0]), (2, runs[1])):
        row = [r for r in out.between("table%d" % k, "end%d" % k).splitlines() if r.startswith(str(exe))][0]
        lo, hi = (int(x, 16) for x in row.split()[-2].split("-"))
        bias = int(row.split()[-1], 16)
        assert all(lo <= f.pc < hi for f in frames), (row, frames)
        file_ranges.append((lo - bias, hi - bias))
    assert file_ranges[0] == file_ranges[1], file_ranges       # the load bias moved with the program
    att, ref = out.frames("attach"), out.frames("attach-off")
    check_same(ref, att, ("inner", "middle", "outer", "main"))
    check_untouched(ref, out.frames("attach-auto"))


# -- the outermost frame --------------------------------------------------------------------------------

OUTER_C = r"""
volatile int sink;
__attribute__((noinline)) void stop_here(void) { sink++; }
__attribute__((noinline)) void inner(void) { stop_here(); sink++; }
__attribute__((noinline)) void outer_most(void)
{
    __asm__ volatile (".cfi_undefined rip");
    inner();
    sink++;
}
int main(void) { outer_most(); return 0; }
"""


def test_outermost_frame(roots, tmp_path):
    """SFrame V3 marks a function whose return address is undefined (no FRE data words): the
    backtrace ends there, with GDB's "Backtrace stopped" line, as DWARF ends it too."""
    tc = T.toolchain("sid")
    src = tmp_path / "outer.c"
    src.write_text(OUTER_C)
    exe = tmp_path / "outer"
    T.run_in(tc, [tc.cc, "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(exe), str(src)],
             cwd=tmp_path, check=True)
    out = run_gdb("gdb18", ["file %s" % exe, "break stop_here", "run", "frames-dump dwarf",
                            "source %s" % PLUGIN, "dwarf-unwinders off", "frames-dump sframe",
                            "mark bt", "bt", "mark info", "info sframe outer_most", "kill"], tmp_path)
    ref, got = out.frames("dwarf"), out.frames("sframe")
    assert [f.name for f in ref] == ["stop_here", "inner", "outer_most"], ref
    assert [(f.pc, f.name) for f in got] == [(f.pc, f.name) for f in ref], got
    assert [f.cfa for f in got[:2]] == [f.cfa for f in ref[:2]] and got[0].sf and got[1].sf
    assert out.end("sframe") == "frame_did_not_save_the_PC", out.end("sframe")
    assert "#2  0x" in out.between("bt", "info") and "Backtrace stopped: frame did not save the PC" in out
    assert "RA undefined (outermost frame)" in out.between("info"), out


# -- an empty .sframe section ---------------------------------------------------------------------

@pytest.mark.parametrize("gdb", ("gdb13", "gdb18"))
def test_empty_section_is_no_sframe(corpus, tmp_path, gdb):
    """A zero-byte .sframe (gas 2.45+ writes one for inputs without functions) is "no SFrame",
    quietly: GDB's frames as without the plugin, no message unless debugging, and `info sframe
    ADDR` says the section is empty."""
    build = corpus.get("sid", "frames", "O2-nofp")
    (tmp_path / "nothing").write_bytes(b"")
    exe = tmp_path / "empty"
    T.run_in("sid", ["objcopy", "--update-section", ".sframe=nothing", str(build.path), str(exe)],
             cwd=tmp_path, check=True)
    out = run_gdb(gdb, ["source %s" % PLUGIN, "file %s" % exe, "break stop_here", "run", "set sframe off", "frames-dump off",
                        "set sframe on", "frames-dump on", "try-cmd info sframe $pc", "try-cmd info sframe"],
                  tmp_path)
    off, on = out.frames("off"), out.frames("on")
    assert [f.name for f in off[:5]] == list(STOPS["frames"][2]) and on == off and not any(f.sf for f in on)
    assert "TRY-ERROR: No SFrame information covers %#x: the .sframe section of %s is empty (no SFrame data)." \
        % (on[0].pc, exe) in out, out
    assert "No loaded objfile has SFrame information" in out
    assert "[sframe]" not in out and "Traceback" not in out and "internal error" not in out


OUTER_SCRIPT = """import gdb
out = gdb.execute("source %s", to_string=%s)
gdb.write("CAPTURED %%r\\n" %% (out,))
gdb.write("LOADED %%s\\n" %% (__import__("sys").modules.get("sframekit.sframe_gdb.plugin") is not None))
"""


@pytest.mark.parametrize("gdb", ["gdb13", "gdb18"])
def test_sourced_from_python(corpus, tmp_path, gdb):
    """A Python script elsewhere that runs `gdb.execute("source .../sframe_gdb.py")`, printing or
    capturing (to_string=True), loads the plugin (the loader finds its own path, not the outer
    script's): info sframe answers, and bt with the DWARF unwinders off is SFrame's."""
    build = corpus.get("sid" if gdb == "gdb18" else "host", "frames", "O2-nofp")
    outs = {}
    for capture in (False, True):
        outer = tmp_path / ("outer-%s" % capture) / "start.py"
        outer.parent.mkdir()
        outer.write_text(OUTER_SCRIPT % (PLUGIN, capture))
        outs[capture] = run_gdb(gdb, ["source %s" % outer, "file %s" % build.noeh, "break stop_here", "run",
                                      "info sframe", "dwarf-unwinders off", "frames-dump off", "kill"], tmp_path)
    for out in outs.values():
        assert "Traceback" not in out and "FileNotFoundError" not in out, out
        assert "LOADED True" in out and "SFrame unwinder: active" in out, out
        assert [f.name for f in out.frames("off")][:5] == ["stop_here", "level3", "level2", "level1", "main"], out
    assert "SFrame unwinder installed" in outs[False] and "CAPTURED ''" not in outs[True], outs[True]
