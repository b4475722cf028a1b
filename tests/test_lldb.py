"""The LLDB commands (lldb_plugin) driven through the real LLDBs.

LLDB 16 runs on the host, LLDB 21 in the sid root.  Each LLDB runs in batch mode over a command
file that covers many stops (one process per LLDB and kind of run), and a small probe module
(tests/indebugger/lldb_probe.py, imported into the same LLDB) prints LLDB's own frames (PC, CFA, module) and wraps
each `sframe` command's output between markers, so every test reads exactly one command's output.

What is checked:
- `sframe backtrace` gives the PCs (and CFAs) of LLDB's own `bt` wherever LLDB unwinds with the
  DWARF CFI of .eh_frame, on every x86-64 fixture, variant and SFrame version (host V1, trixie V2,
  sid V3), live and in core files made with the host GDB's gcore;
- on copies without .eh_frame (strip_eh) it gives the same frames as LLDB's `bt` of the program
  with .eh_frame, where LLDB's own `bt` does not;
- `sframe lookup` prints the same FDE, FRE and rules as `python3 -m core.cli.main lookup FILE ADDR`
  (the lines GDB's `info sframe` shares) for every frame's PC, and the values at the selected
  frame agree with LLDB's CFA and caller's PC;
- AArch64 (live under qemu-aarch64 -g with gdb-remote, and qemu core files) with both LLDBs,
  s390x live with LLDB 16 and from a core file with LLDB 21 (whose own unwinder crashes there);
- `sframe info`, `sframe dump`, the module cache (dlopen, relaunch), loading, errors.
"""

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import time

import pytest
from helpers import toolchains as tcs
from helpers.cli import lookup_lines
from helpers.lldb import HUNG, LLDB16, PLUGIN, PROBE, REPO, SFRAME_FRAME_RE, STOPS, Session, free_ports, run_lldb  # noqa: F401

X86 = ("host", "trixie", "sid")
VARIANTS = tuple(tcs.VARIANTS)
FIXTURES = tuple(STOPS)
# Programs of the roots' toolchains that do not run on the host's older glibc (LLDB 16 runs there):
# sid's alloca, realign and recurse need GLIBC_2.38 (__isoc23_strtol).
NOT_ON_HOST = {("sid", "recurse"), ("sid", "alloca"), ("sid", "realign")}
CORE_FIXTURES = ("frames", "signal", "dlopen", "threads")
# Cross programs: under qemu-user LLDB knows no shared library, so no dlopen (nor libc frames).
CROSS_FIXTURES = ("frames", "recurse", "realign", "bigframe", "alloca", "threads", "signal")
CROSS = {"aarch64": ("sid-aarch64", CROSS_FIXTURES, ("O2-nofp", "O0-fp", "O2-pac", "O2-pacb")),
         "s390x": ("sid-s390x", CROSS_FIXTURES, ("O2-nofp", "O0-fp"))}




def case_id(b, noeh=False):
    return "%s%s" % (b.id, "-noeh" if noeh else "")


def stop_commands(exe, fixture, tag, args=(), start=None, others=False, lookups=True, extra=()):
    """Commands that run `exe` to its fixture's stop and record everything under `tag`."""
    cmds = ["target create %s" % exe]
    if fixture == "signal":
        cmds.append("process handle SIGUSR1 -s false -n false -p true")
    cmds.append("breakpoint set -n %s" % STOPS[fixture])
    cmds.append(start or ("process launch -- %s" % " ".join(args)).rstrip())
    cmds += ["probe frames %s-lldb" % tag,
             "probe run %s-sbt sframe bt -n" % tag,          # SFrame alone
             "probe run %s-sbtc sframe bt" % tag,            # and the DWARF CFI where it has none
             "probe run %s-lookup sframe lookup $pc" % tag]
    if lookups:
        cmds.append("probe lookups %s-at" % tag)
    if others:
        # The callee-saved registers: LLDB's own (DWARF CFI) and `sframe bt -r`'s.
        cmds += ["probe regs %s-regs rbx,rbp,r12,r13,r14,r15" % tag,
                 "probe run %s-sbtr sframe bt -r -n" % tag]
        # From an outer frame (LLDB's registers of frame 1), and another thread than the selected.
        cmds += ["probe frame 1",
                 "probe run %s-up-sbt sframe bt -n" % tag,
                 "probe run %s-up-lookup sframe lookup $pc" % tag,
                 "probe frame 0"]
        if fixture == "threads":
            cmds += ["probe select 1",
                     "probe run %s-t2-sbt sframe bt -t 2 -n" % tag,
                     "probe select 2"]
    cmds += list(extra) + ["process kill", "target delete"]
    return cmds


# ---------------------------------------------------------------------------------------------
# Session fixtures


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("lldb")
    assert str(d.resolve()).startswith("/tmp/"), "pytest's temporary directory must be under /tmp (seen in the roots)"
    return d


def x86_builds(corpus, lldb):
    out = []
    for b in corpus.select(arch="x86_64"):
        if b.fixture in STOPS and not (lldb == 16 and (b.toolchain, b.fixture) in NOT_ON_HOST):
            out.append(b)
    return out


def live_session(corpus, work, lldb):
    lines = []
    for b in x86_builds(corpus, lldb):
        for noeh in (False, True):
            lines += stop_commands(b.noeh if noeh else b.path, b.fixture, case_id(b, noeh), b.args,
                                   others=not noeh, lookups=not noeh)
    return run_lldb(lldb, lines, work, "live%d" % lldb)


@pytest.fixture(scope="module")
def live16(corpus, work):
    return live_session(corpus, work, 16)


@pytest.fixture(scope="module")
def live21(corpus, work):
    return live_session(corpus, work, 21)


@pytest.fixture(scope="module")
def live19(corpus, work):
    return live_session(corpus, work, 19)


@pytest.fixture(scope="module")
def sessions(live16, live19, live21):
    return {16: live16, 19: live19, 21: live21}


@pytest.fixture(scope="module")
def gcores(corpus, work):
    """Core files written by the host GDB's gcore at each core fixture's stop (O2-nofp builds)."""
    d = work / "cores"
    d.mkdir()
    made = {}
    for tc in X86:
        for fx in CORE_FIXTURES:
            b = corpus.get(tc, fx, "O2-nofp")
            for noeh in (False, True):
                exe = b.noeh if noeh else b.path
                core = d / ("%s.core" % case_id(b, noeh))
                argv = ["gdb", "-nx", "-batch", "-ex", "set breakpoint pending on",
                        "-ex", "handle SIGUSR1 nostop noprint pass", "-ex", "break %s" % STOPS[fx],
                        "-ex", "run", "-ex", "gcore %s" % core, "--args", str(exe), *b.args]
                proc = subprocess.run(argv, cwd=d, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      timeout=300)
                assert core.is_file(), "gcore of %s failed:\n%s" % (exe, proc.stdout[-2000:])
                made[case_id(b, noeh)] = (b, exe, core)
    return made


def core_session(gcores, work, lldb):
    lines = []
    for cid, (_b, exe, core) in gcores.items():
        lines += ["target create %s --core %s" % (exe, core),
                  "probe frames %s-lldb" % cid,
                  "probe run %s-sbt sframe bt -n" % cid,
                  "probe run %s-lookup sframe lookup $pc" % cid,
                  "target delete"]
    return run_lldb(lldb, lines, work, "cores%d" % lldb)


@pytest.fixture(scope="module")
def core_sessions(gcores, work):
    return {16: core_session(gcores, work, 16), 21: core_session(gcores, work, 21)}


def cross_cases(corpus):
    out = []
    for arch, (tc, fixtures, variants) in CROSS.items():
        for fx in fixtures:
            for v in variants:
                if v not in tcs.variants_for(tc, fx):
                    continue
                b = corpus.get(tc, fx, v)
                out.append((arch, b, False))
                out.append((arch, b, True))
    return out


@pytest.fixture(scope="module")
def qemu_cores(corpus, work):
    """AArch64 and s390x core files: each program stopped at stop_here under qemu-user's GDB
    stub (gdb-multiarch in the sid root), then killed with SIGSEGV, which makes qemu dump a core."""
    d = work / "qcores"
    d.mkdir()
    script = ["ulimit -c unlimited", "cd %s" % d]
    made = {}
    ports = free_ports(len(CROSS))
    for port, (arch, (tc, _fx, _v)) in zip(ports, CROSS.items()):
        b = corpus.get(tc, "frames", "O2-nofp")
        exe = d / ("frames-%s" % arch)
        script += ["cp %s %s" % (b.path, exe),
                   "(%s -L /usr/%s -g %d %s >/dev/null 2>&1 &)" % (b.tc.qemu, b.tc.triplet, port, exe),
                   "sleep 0.5",
                   "gdb-multiarch -nx -batch -ex 'set sysroot /usr/%s' -ex 'target remote :%d' -ex 'break stop_here' "
                   "-ex continue -ex 'signal SIGSEGV' %s >/dev/null 2>&1 || true" % (b.tc.triplet, port, exe),
                   "sleep 0.5",
                   "mv qemu_frames-%s_*.core %s.core" % (arch, arch)]
        made[arch] = (exe, d / ("%s.core" % arch))
    tcs.run_in("sid", ["sh", "-c", "\n".join(script)], cwd=d, check=True, timeout=300)
    for arch, (_exe, core) in made.items():
        assert core.is_file(), "qemu wrote no core for %s" % arch
    return made


def cross_session(corpus, work, lldb, qemu_cores):
    """LLDB over qemu-user's GDB stub (gdb-remote) for the cross programs, then the qemu cores.

    LLDB 21 crashes (SIGSEGV inside its own unwinder) as soon as an s390x program stops, live or
    from a core: it gets the AArch64 programs live, and the s390x core with `sframe` commands only.
    """
    cases = [c for c in cross_cases(corpus) if lldb == 16 or c[0] == "aarch64"]
    ports = free_ports(len(cases))
    starts = []
    lines = []
    for port, (_arch, b, noeh) in zip(ports, cases):
        exe = b.noeh if noeh else b.path
        starts.append("%s -L /usr/%s -g %d %s %s >/dev/null 2>&1 &" % (b.tc.qemu, b.tc.triplet, port, exe,
                                                                       " ".join(b.args)))
        tag = case_id(b, noeh)
        lines += stop_commands(exe, b.fixture, tag, start="gdb-remote %d\ncontinue" % port, lookups=not noeh,
                               extra=["probe run %s-info sframe info" % tag])
    for arch, (exe, core) in qemu_cores.items():
        tag = "qcore-%s" % arch
        lines += ["target create %s --core %s" % (exe, core)]
        if lldb == 16 or arch != "s390x":
            lines.append("probe frames %s-lldb" % tag)
        lines += ["probe run %s-sbt sframe bt -n" % tag, "probe run %s-lookup sframe lookup $pc" % tag,
                  "probe run %s-info sframe info" % tag, "target delete"]
    qemus = "\n".join(starts) + "\nwait\n"
    if lldb == 21:
        # qemu and LLDB in one root session; the qemu still waiting at the end are killed.
        script = work / "cross21.sh"
        cmdfile = work / "cross21.cmds"
        head = ["command script import %s" % PLUGIN, "command script import %s" % PROBE]
        cmdfile.write_text("\n".join(head + lines) + "\n")
        script.write_text("\n".join(starts) + "\nsleep 1\n"
                          "lldb -b -x -o 'command source -e false %s'\nstatus=$?\n"
                          "kill $(jobs -p) 2>/dev/null\nexit $status\n" % cmdfile)
        proc = tcs.run_in("sid", ["bash", str(script)], cwd=work, timeout=900)
        return Session("cross21", proc.stdout, proc.stderr, proc.returncode)
    # LLDB 16 on the host talks to qemu running in the sid root (same network namespace).
    argv, env = tcs.wrap_argv("sid", ["sh", "-c", qemus], cwd=work)
    runner = subprocess.Popen(argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        time.sleep(1.5)
        return run_lldb(16, lines, work, "cross16")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(timeout=60)


@pytest.fixture(scope="module")
def cross_sessions(corpus, work, qemu_cores):
    return {16: cross_session(corpus, work, 16, qemu_cores), 21: cross_session(corpus, work, 21, qemu_cores)}


# ---------------------------------------------------------------------------------------------
# Helpers for the checks


def sframe_modules(frames):
    """Paths of modules with SFrame among LLDB's frames (the fixtures' own files)."""
    return {f[3] for f in frames if f[3] != "?" and "/tmp/" in f[3]}


_FDE_RANGES = {}


def _fde_ranges(path, base):
    """[(start, end)] of the functions the module's SFrame describes, loaded at `base` (its ELF
    header's load address), as binutils' readelf prints them (not as our decoder reads them, so a
    look-up regression of ours cannot shrink what the walk is required to reach)."""
    key = (path, base)
    if key not in _FDE_RANGES:
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            first_load = min(seg["p_vaddr"] for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD")
            version = elf.get_section_by_name(".sframe").data()[2]
        text = tcs.readelf_sframe(path, "host" if version == 1 else "sid")
        fdes = tcs.parse_readelf_sframe(text).fdes
        assert fdes, text
        _FDE_RANGES[key] = [(f.pc + base - first_load, f.pc + base - first_load + f.size) for f in fdes]
    return _FDE_RANGES[key]


def covered_prefix(frames):
    """Number of LLDB frames an SFrame unwind must reproduce at least: up to and including the
    first frame that SFrame does not cover (outside the fixture's modules, e.g. in the C library,
    or in a function without an FDE, e.g. DRAP-realigned ones before V3), by readelf's FDEs."""
    own = sframe_modules(frames)
    for k, f in enumerate(frames):
        at = f[1] - 1 if k else f[1]
        if f[3] not in own or not any(lo <= at < hi for lo, hi in _fde_ranges(f[3], f[4])):
            return k + 1
    return len(frames)


def _last_marker(stop_line):
    """The marker of the frame where `sframe bt` stopped, from its stop line."""
    if "no SFrame information for the PC" in stop_line:
        return "no SFrame"
    return "outermost" if "reached the outermost frame" in stop_line else "not unwound"


def check_matches_lldb(ours, stop_line, lldb, what, cfas=True, one_more=False):
    """Our frames are LLDB's first frames (PC and, where SFrame gave it, CFA) and cover the prefix."""
    assert ours, what
    assert [r[0] for r in ours] == list(range(len(ours))), what
    need = covered_prefix(lldb)
    assert len(ours) >= need, "%s: sframe bt has %d frames, LLDB's bt reaches %d in SFrame code:\n%s\n%s" % (
        what, len(ours), need, ours, lldb)
    # one_more: LLDB does not know the libraries (qemu-user) and stops at the executable's
    # outermost frame, while the SFrame walk shows the caller in the C library, then stops.
    assert len(ours) <= len(lldb) + (1 if one_more else 0), "%s: more frames than LLDB's bt: %s\n%s" % (
        what, ours, lldb)
    assert [hex(r[1]) for r in ours[:len(lldb)]] == [hex(f[1]) for f in lldb[:len(ours)]], what
    for r, f in zip(ours, lldb):
        if cfas and r[5] is not None:    # CFA from an SFrame FDE: LLDB's (DWARF) CFA is the same
            assert r[4] == f[2], "%s: frame #%d CFA %#x, LLDB's %#x" % (what, r[0], r[4], f[2])
    assert stop_line.startswith("  Backtrace stopped: "), what
    # Each frame's marker says what unwinds it: SFrame all the way (the signal trampoline's row:
    # the signal frame), and on the last frame why the walk ends there.
    whole = "(not compared)" not in stop_line
    assert all(r[3].split(",")[0] in ("sframe", "signal frame") for r in (ours[:-1] if whole else ours)), (what, ours)
    assert not whole or ours[-1][3].split(",")[0] == _last_marker(stop_line), (what, ours[-1], stop_line)


def sframe_table(text):
    """{path: its row's words} of the module table `sframe info` prints (core.report.status.module_table)."""
    lines = text.splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("Module ") and "Load bias" in line)
    rows = {}
    for line in lines[head + 1:]:
        words = line.split()
        if len(words) < 7 or not words[-1].startswith("0x"):
            break
        rows[words[0]] = words
    return rows


_FUNC_RE = re.compile(r"^(Function: .* at )0x([0-9a-f]+)(, size .*)$")
_FRE_RE = re.compile(r"^(FRE \d+ of \d+: )0x([0-9a-f]+)\.\.0x([0-9a-f]+)(,.*)$")
_SECTION_RE = re.compile(r"^Section: (\S+) at 0x([0-9a-f]+)(, .*)$")
_ADDRESS_RE = re.compile(r"^Address: 0x([0-9a-f]+) in (\S+)")


def rebase(lines, bias):
    out = []
    for line in lines:
        m = _FUNC_RE.match(line)
        if m:
            line = "%s%#x%s" % (m.group(1), int(m.group(2), 16) - bias, m.group(3))
        m = _FRE_RE.match(line)
        if m:
            line = "%s%#x..%#x%s" % (m.group(1), int(m.group(2), 16) - bias, int(m.group(3), 16) - bias, m.group(4))
        if re.match(r"^  \w+ +unknown \(", line):      # the reason names an instruction's address
            line = re.sub(r"0x[0-9a-f]+", lambda h: "%#x" % (int(h.group(0), 16) - bias), line)
        out.append(line)
    return out


def check_lookup_matches_cli(block, what):
    """An `sframe lookup` block says what `core.cli.main lookup FILE ADDR` says (file addresses rebased)."""
    assert not block.err, "%s: %s" % (what, block.err)
    lines = block.out
    m = _ADDRESS_RE.match(lines[0])
    assert m, "%s: %r" % (what, lines[:2])
    addr, path = int(m.group(1), 16), m.group(2)
    ms = _SECTION_RE.match(lines[1])
    assert ms, what
    from sframekit.core.elf.image import ElfImage
    file_sec = ElfImage(path).sframe.address
    bias = int(ms.group(2), 16) - file_sec
    rc, cli, err = lookup_lines(path, addr - bias)
    assert rc == 0, "%s: cli lookup %s %#x: %s" % (what, path, addr - bias, err)
    assert cli[1] == "Section: %s at %#x%s" % (ms.group(1), file_sec, ms.group(3)), what
    end = next((k for k, line in enumerate(lines) if line.startswith("Values in frame #")), len(lines))
    ours = lines[2:end]
    # A caller's frame is looked up at its return address - 1: the CLI says the same there.
    m = re.match(r"^Callee-saved registers \(looked up at 0x([0-9a-f]+)\):$", next(
        (line for line in ours if line.startswith("Callee-saved registers")), ""))
    if m:
        k = ours.index(m.group(0))
        rc, at, err = lookup_lines(path, int(m.group(1), 16) - bias)
        assert rc == 0, err
        cli = cli[:cli.index("Callee-saved registers:")] + [m.group(0)] + at[at.index("Callee-saved registers:") + 1:]
        assert len(ours) - k == len(cli) - cli.index(m.group(0)), what
    assert rebase(ours, bias) == cli[2:], "%s:\nLLDB:\n%s\nCLI:\n%s" % (what, "\n".join(lines), "\n".join(cli))
    return addr, bias, lines


def values_of(lines, level=0):
    head = "Values in frame #%d:" % level
    assert head in lines, lines
    out = {}
    for line in lines[lines.index(head) + 1:]:
        m = re.match(r"^  (.+) = (0x[0-9a-f]+)$", line)
        if m:
            out[m.group(1)] = int(m.group(2), 16)
    return out


def live_keys(lldb):
    keys = []
    for tc in X86:
        for fx in FIXTURES:
            if lldb == 16 and (tc, fx) in NOT_ON_HOST:
                continue
            for v in VARIANTS:
                keys.append((lldb, tc, fx, v))
    return keys


LIVE = live_keys(16) + live_keys(19) + live_keys(21)
LIVE_IDS = ["lldb%d-%s-%s-%s" % k for k in LIVE]


# ---------------------------------------------------------------------------------------------
# Live x86-64: backtraces, lookups, values


@pytest.mark.parametrize("key", LIVE, ids=LIVE_IDS)
def test_backtrace_matches_lldb_bt(key, corpus, sessions):
    lldb, tc, fx, v = key
    s = sessions[lldb]
    tag = corpus.get(tc, fx, v).id
    frames = s.lldb_frames(tag + "-lldb")
    ours, last = s.sframe_bt(tag + "-sbt")
    check_matches_lldb(ours, last, frames, "%s %s" % (s.name, tag))
    # The walk ends where the fixture's modules end: the C library has no SFrame section.
    assert "no SFrame information for the PC" in last, last


@pytest.mark.parametrize("key", LIVE, ids=LIVE_IDS)
def test_backtrace_goes_on_by_cfi_like_the_cli(key, corpus, sessions):
    """`sframe bt` without -n goes on where no SFrame covers the PC by the module's DWARF CFI, as
    `sframe backtrace` does: the whole of LLDB's own bt (through the C library to _start or the
    thread's start), PC and CFA; each frame marked by what unwinds it: sframe where readelf lists
    an FDE covering its PC, DWARF CFI elsewhere (the C library; DRAP-realigned functions, which gas
    before 2.46 leaves out), signal frame on the signal trampoline, outermost on the last."""
    lldb, tc, fx, v = key
    s = sessions[lldb]
    tag = corpus.get(tc, fx, v).id
    frames = s.lldb_frames(tag + "-lldb")
    ours, last = s.sframe_bt(tag + "-sbtc")
    what = "%s %s" % (s.name, tag)
    assert [hex(r[1]) for r in ours] == [hex(f[1]) for f in frames], (what, ours, frames, last)
    own = sframe_modules(frames)
    for k, (r, f) in enumerate(zip(ours[:-1], frames)):
        if r[3] == "signal frame":
            continue              # (the trampoline's "CFA" is its SP: LLDB's differs)
        at = f[1] - 1 if k else f[1]
        covered = f[3] in own and any(lo <= at < hi for lo, hi in _fde_ranges(f[3], f[4]))
        want = "sframe" if covered else "DWARF CFI"
        assert r[3].split(",")[0] == want, (what, r, f[3])
        assert r[4] == f[2], "%s: frame #%d CFA %s, LLDB's %#x" % (what, r[0], r[4], f[2])
    assert ours[-1][3] == "outermost" and "reached the outermost frame" in last, (what, ours[-1], last)


def test_backtrace_registers_match_lldb(corpus, sessions):
    """`sframe bt -r`: in every frame of every live x86-64 stop, each callee-saved register the
    SFrame walk recovers equals LLDB's own value (LLDB unwinds these programs with their DWARF
    CFI), and as many of those LLDB knows are recovered as the recorded baseline."""
    counts = {lldb: [0, 0] for lldb in sessions}     # LLDB -> [equal, not recovered]
    wrong = []
    for key in LIVE:
        lldb, tc, fx, v = key
        s = sessions[lldb]
        tag = corpus.get(tc, fx, v).id
        truth = {}
        for line in s.block(tag + "-regs").out:
            if line.startswith("R "):
                _, level, pc, *vals = line.split()
                truth[int(level)] = (int(pc, 16), dict(x.split("=") for x in vals))
        b = s.block(tag + "-sbtr")
        assert not b.err, b.err
        ours = {}
        level = None
        for line in b.out[1:-1]:
            m = SFRAME_FRAME_RE.match(line)
            if m:
                level = int(m.group(1))
                ours[level] = (int(m.group(2), 16), {})
                continue
            pairs = re.findall(r"(\w+) (<not saved>|0x[0-9a-f]+)", line)
            assert level is not None and len(pairs) == 6, "%s %s: %r" % (s.name, tag, line)
            ours[level][1].update(pairs)
        assert ours and set(ours) <= set(truth), (tag, sorted(ours), sorted(truth))
        for level, (pc, regs) in ours.items():
            if truth[level][0] != pc:
                break
            for name, want in truth[level][1].items():
                got = regs[name]
                if want == "?":
                    continue
                if got == "<not saved>":
                    counts[lldb][1] += 1
                elif int(got, 16) == int(want, 16):
                    counts[lldb][0] += 1
                else:
                    wrong.append("%s %s frame #%d %s: %s, LLDB %s" % (s.name, tag, level, name, got, want))
    for lldb, (equal, missing) in sorted(counts.items()):
        print("LLDB %d sframe bt -r: %d callee-saved registers equal LLDB's, %d not recovered" % (lldb, equal, missing))
    assert not wrong, "\n".join(wrong[:40])
    # The measured figures: not recovered may not grow, equal may not move by more than 2%.
    # The measured figures: not recovered may not grow, equal may not move by more than 2%.
    for lldb, (equal, missing) in counts.items():
        base_equal, base_missing = LLDB_REGISTER_BASELINE[lldb]
        assert missing <= base_missing and abs(equal - base_equal) <= 0.02 * base_equal, (lldb, equal, missing)


# sframe bt -r against LLDB's own values: LLDB -> (equal, not recovered), as measured.
LLDB_REGISTER_BASELINE = {16: (3617, 1), 19: (4733, 1), 21: (4733, 1)}


@pytest.mark.parametrize("key", LIVE, ids=LIVE_IDS)
def test_backtrace_without_eh_frame(key, corpus, sessions):
    """On the copy without .eh_frame, `sframe bt` gives the frames LLDB's DWARF unwind gives for
    the program with it (same code, same addresses: LLDB disables address randomisation)."""
    lldb, tc, fx, v = key
    s = sessions[lldb]
    b = corpus.get(tc, fx, v)
    truth = s.lldb_frames(b.id + "-lldb")
    with_eh, _ = s.sframe_bt(b.id + "-sbt")
    ours, last = s.sframe_bt(b.id + "-noeh-sbt")
    # Another process, whose stack sits elsewhere (its path is longer, and realigned or dynamic
    # frames then differ in size): the PCs are the same, the CFAs not.
    check_matches_lldb(ours, last, truth, "%s %s-noeh" % (s.name, b.id), cfas=False)
    assert [r[1] for r in ours] == [r[1] for r in with_eh]


def test_lldb_own_bt_breaks_without_eh_frame(corpus, sessions):
    """Where LLDB's own unwinder (x86 assembly profiling, no CFI) goes wrong, SFrame does not:
    in realign (stack realignment through a DRAP register, described by V3 flex FDEs) LLDB goes
    wrong after main; and in nearly every program it adds a bogus repeated `_start` at the end."""
    broken = set()
    for lldb in (16, 19, 21):
        s = sessions[lldb]
        for b in x86_builds(corpus, lldb):
            truth = [f[1] for f in s.lldb_frames(b.id + "-lldb")]
            own = [f[1] for f in s.lldb_frames(b.id + "-noeh-lldb")]
            ours = [r[1] for r in s.sframe_bt(b.id + "-noeh-sbt")[0]]
            assert ours == truth[:len(ours)]
            if own != truth:
                broken.add((lldb, b.id))
        if lldb != 21:
            continue                     # (LLDB 21: sid's realign, which LLDB 16's host cannot run)
        b = corpus.get("sid", "realign", "O2-nofp")
        truth = s.lldb_frames(b.id + "-lldb")
        own = s.lldb_frames(b.id + "-noeh-lldb")
        ours, _ = s.sframe_bt(b.id + "-noeh-sbt")
        names = [r[2].split("`")[1] for r in ours]
        assert names[:3] == ["stop_here", "realigned_drap", "main"], names
        # LLDB's own: right up to main, then wrong (alone: main again, a frame that does not
        # exist; after the program with .eh_frame in the same session: it stops in main).
        assert [f[1] for f in own[:3]] == [f[1] for f in truth[:3]]
        assert [f[1] for f in own] != [f[1] for f in truth], (own, truth)
    assert len(broken) > 100, broken


@pytest.mark.parametrize("key", LIVE, ids=LIVE_IDS)
def test_lookup_matches_cli_and_values(key, corpus, sessions):
    lldb, tc, fx, v = key
    s = sessions[lldb]
    tag = corpus.get(tc, fx, v).id
    frames = s.lldb_frames(tag + "-lldb")
    own = sframe_modules(frames)
    # $pc at the stop, with the values of the rules there.
    addr, _bias, lines = check_lookup_matches_cli(s.block(tag + "-lookup"), "%s %s $pc" % (s.name, tag))
    assert addr == frames[0][1]
    vals = values_of(lines)
    assert vals["CFA"] == frames[0][2], lines
    assert vals["RA"] == frames[1][1], lines
    # Every frame's PC: frames in the fixture's modules are described like the CLI does; the others
    # are not covered.
    checked = 0
    for f in frames:
        block = s.block("%s-at-%d" % (tag, f[0]))
        if f[3] in own and any(lo <= f[1] < hi for lo, hi in _fde_ranges(f[3], f[4])):
            check_lookup_matches_cli(block, "%s %s frame %d" % (s.name, tag, f[0]))
            checked += 1
        else:
            assert len(block.err) == 1 and "No SFrame information covers %#x: " % f[1] in block.err[0], block.err
            why = (r"no FDE of \S+'s \.sframe contains it\.|it lies outside the SFrame range of \S+\." if f[3] in own
                   else r"\S+ has no \.sframe section\.|it is not in any loaded module\.")
            assert re.search(r": (%s)$" % why, block.err[0]), block.err
    assert checked >= 2
    # From frame 1: LLDB's registers there; the values are frame 1's CFA and frame 2's PC.
    up, last = s.sframe_bt(tag + "-up-sbt")
    assert up[0][0] == 1          # (its marker, like the others', is checked below)
    relabelled = [(r[0] - 1,) + r[1:] for r in up]
    check_matches_lldb(relabelled, last, frames[1:],
                       "%s %s from frame 1" % (s.name, tag))
    if len(up) > 1:
        _, _, lines = check_lookup_matches_cli(s.block(tag + "-up-lookup"), "%s %s frame 1 $pc" % (s.name, tag))
        vals = values_of(lines, 1)
        assert vals["CFA"] == frames[1][2] and vals["RA"] == frames[2][1], lines


@pytest.mark.parametrize("lldb", (16, 19, 21))
def test_backtrace_of_another_thread(lldb, corpus, sessions):
    """threads: with the main thread selected, `sframe bt -t 2` unwinds the worker thread."""
    s = sessions[lldb]
    for tc in X86:
        for v in VARIANTS:
            tag = corpus.get(tc, "threads", v).id
            frames = s.lldb_frames(tag + "-lldb")
            ours, last = s.sframe_bt(tag + "-t2-sbt")
            assert s.block(tag + "-t2-sbt").out[0].startswith("* thread #2")
            check_matches_lldb(ours, last, frames, "%s %s -t 2" % (s.name, tag))
            assert [r[2].split("`")[1] for r in ours[:3]] == ["thread_stop_here", "worker_chain", "worker"]


@pytest.mark.parametrize("lldb", (16, 19, 21))
def test_signal_frame_is_crossed(lldb, corpus, sessions):
    """signal: stop_here <- in_handler <- (handler) <- __restore_rt, then the kernel's signal frame
    gives back the interrupted frame in libc, as LLDB's own bt has it."""
    s = sessions[lldb]
    for tc in X86:
        tag = corpus.get(tc, "signal", "O2-nofp").id
        ours, _ = s.sframe_bt(tag + "-sbt")
        assert any(r[3] == "signal frame" for r in ours), ours
        ours_noeh, _ = s.sframe_bt(tag + "-noeh-sbt")
        assert any(r[3] == "signal frame" for r in ours_noeh)


def test_no_traceback_in_any_session(sessions):
    for s in sessions.values():
        assert "Traceback" not in s.stdout + s.stderr
        assert "internal error" not in s.stdout + s.stderr


GDB_LOOKUPS = ("main", "level3+4", "stop_here", "leaf_work")


@pytest.mark.parametrize("lldb", (16, 21))
def test_lookup_equals_gdb_info_sframe(lldb, corpus, work):
    """`sframe lookup ADDR` prints what the GDB plugin's `info sframe ADDR` prints (host GDB 13):
    without a process (file addresses), at the stop and in the caller's frame (the values differ
    only by where each debugger put the stack)."""
    for tc in X86:
        b = corpus.get(tc, "frames", "O2-nofp")
        tags = ["static%d" % i for i in range(len(GDB_LOOKUPS))] + ["pc", "up"]
        gdb = ["gdb", "-nx", "-batch", "-ex", "source %s" % (REPO / "sframe_gdb.py")]
        lines = ["target create %s" % b.path]
        for tag, a in zip(tags, GDB_LOOKUPS):
            gdb += ["-ex", "echo @BEGIN %s\\n" % tag, "-ex", "info sframe %s" % a, "-ex", "echo @END %s\\n" % tag]
            lines.append("probe run %s sframe lookup %s" % (tag, a))
        gdb += ["-ex", "break stop_here", "-ex", "run",
                "-ex", "echo @BEGIN pc\\n", "-ex", "info sframe $pc", "-ex", "echo @END pc\\n", "-ex", "up",
                "-ex", "echo @BEGIN up\\n", "-ex", "info sframe $pc", "-ex", "echo @END up\\n", str(b.path)]
        lines += ["breakpoint set -n stop_here", "process launch", "probe run pc sframe lookup $pc",
                  "probe frame 1", "probe run up sframe lookup $pc", "process kill"]
        proc = subprocess.run(gdb, cwd=work, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        g = Session("gdb", proc.stdout, "", proc.returncode)
        s = run_lldb(lldb, lines, work, "vsgdb%d-%s" % (lldb, tc))
        for tag in tags:
            ours, theirs = s.block(tag).out, g.block(tag).out
            assert not s.block(tag).err and ours, (tag, s.block(tag).err)
            # GDB alone says what DWARF CFI it has there and which of its unwinders takes the frame.
            gdb_only = [x for x in theirs if x.startswith(("DWARF CFI: ", "Unwinder: "))]
            assert [x.split(":")[0] for x in gdb_only] == ["DWARF CFI", "Unwinder"], theirs
            theirs = [x for x in theirs if x not in gdb_only]
            cut = [next((k for k, x in enumerate(t) if x.startswith("Values in frame")), len(t)) for t in (ours, theirs)]
            assert ours[:cut[0]] == theirs[:cut[1]], "%s %s:\nLLDB:\n%s\nGDB:\n%s" % (
                tc, tag, "\n".join(ours), "\n".join(theirs))
            if tag in ("pc", "up"):
                assert ours[cut[0]] == theirs[cut[1]] == "Values in frame #%d:" % (tag == "up")
                assert [x.split(" = ")[0] for x in ours[cut[0]:]] == [x.split(" = ")[0] for x in theirs[cut[1]:]]
            else:
                assert cut[0] == len(ours) and cut[1] == len(theirs)


# ---------------------------------------------------------------------------------------------
# Core files (gcore)


CORE_KEYS = [(lldb, tc, fx, noeh) for lldb in (16, 21) for tc in X86 for fx in CORE_FIXTURES
             for noeh in (False, True)]


@pytest.mark.parametrize("key", CORE_KEYS, ids=["lldb%d-%s-%s%s" % (k[0], k[1], k[2], "-noeh" if k[3] else "")
                                                for k in CORE_KEYS])
def test_core_file(key, corpus, core_sessions, gcores):
    lldb, tc, fx, noeh = key
    s = core_sessions[lldb]
    b = corpus.get(tc, fx, "O2-nofp")
    tag = case_id(b, noeh)
    ours, last = s.sframe_bt(tag + "-sbt")
    # LLDB's DWARF unwind of the core of the program with .eh_frame is the truth for both cores
    # (GDB runs programs without address randomisation: same addresses).
    truth = s.lldb_frames(case_id(b) + "-lldb")
    if lldb == 21:
        # The cores come from the host, whose libc is not the root's: LLDB 21 reads the root's
        # libc for what the core leaves out, and its frames stop (or go wrong) there.  The frames
        # in the fixture's modules must still agree, and the SFrame walk goes at least as far.
        own = sframe_modules(truth)
        n = next((k for k, f in enumerate(truth) if f[3] not in own), len(truth))
        assert n >= 2 and len(ours) >= n
        ours, truth = ours[:n], truth[:n]
        last = "  Backtrace stopped: (not compared)"
    check_matches_lldb(ours, last, truth, "%s %s" % (s.name, tag), cfas=not noeh)
    addr, _, lines = check_lookup_matches_cli(s.block(tag + "-lookup"), "%s %s" % (s.name, tag))
    vals = values_of(lines)
    assert addr == truth[0][1] and vals["CFA"] == ours[0][4] and vals["RA"] == ours[1][1]
    assert "Traceback" not in s.stdout + s.stderr
    if lldb == 16:
        assert "no SFrame information for the PC" in last


# ---------------------------------------------------------------------------------------------
# AArch64 and s390x under qemu-user


def cross_keys():
    keys = []
    for lldb in (16, 21):
        for arch, (tc, fixtures, variants) in CROSS.items():
            if lldb == 21 and arch == "s390x":
                continue
            for fx in fixtures:
                for v in variants:
                    if v in tcs.variants_for(tc, fx):
                        keys.append((lldb, arch, tc, fx, v))
    return keys


CROSS_KEYS = cross_keys()


@pytest.mark.parametrize("key", CROSS_KEYS, ids=["lldb%d-%s-%s-%s" % (k[0], k[2], k[3], k[4]) for k in CROSS_KEYS])
def test_cross_live(key, corpus, cross_sessions):
    lldb, arch, tc, fx, v = key
    s = cross_sessions[lldb]
    b = corpus.get(tc, fx, v)
    frames = s.lldb_frames(b.id + "-lldb")
    ours, last = s.sframe_bt(b.id + "-sbt")
    assert frames[0][3] == str(b.path), frames
    if fx == "signal":
        # Through qemu's signal trampoline to the interrupted frame (in libc, unknown to LLDB).
        # LLDB does not know the trampoline: LLDB 16 on s390x stops at in_handler, on AArch64
        # both LLDBs go on with a guess; only the frames before the trampoline are comparable.
        k = [r[3] for r in ours].index("signal frame") + 1     # the interrupted frame
        assert [r[2].split("`")[1] for r in ours[:2]] == ["stop_here", "in_handler"] and k >= 3
        n = min(k, len(frames))
        assert [r[1] for r in ours[:n]] == [f[1] for f in frames[:n]]
        assert ours[k - 1][2] == "??`???" and ours[k - 1][3] == "signal frame" and ours[k - 2][3] == "sframe"
    else:
        check_matches_lldb(ours, last, frames, "%s %s" % (s.name, b.id), one_more=True)
    assert ours[-1][2] == "??`???" and "no SFrame information for the PC" in last
    addr, _, lines = check_lookup_matches_cli(s.block(b.id + "-lookup"), "%s %s" % (s.name, b.id))
    vals = values_of(lines)
    assert vals["CFA"] == frames[0][2] and vals["RA"] == frames[1][1]
    for f in frames:
        if f[3] == str(b.path):
            check_lookup_matches_cli(s.block("%s-at-%d" % (b.id, f[0])), "%s %s #%d" % (s.name, b.id, f[0]))
    if "pac" in v:
        assert any("RA signature stripped" in r[3] for r in ours), ours
    # Without .eh_frame: the same frames, relative to where qemu put the executable this time.
    info = s.block(b.id + "-noeh-info").text
    noeh_base = int(next(iter(sframe_table(info).values()))[-1], 16)      # (the executable: the one with SFrame)
    base = frames[0][4]
    ours_noeh, last_noeh = s.sframe_bt(b.id + "-noeh-sbt")
    exe_frames = [f for f in frames if f[3] == str(b.path)]
    assert [r[1] - noeh_base for r in ours_noeh[:len(exe_frames)]] == [f[1] - base for f in exe_frames]
    assert len(ours_noeh) == len(ours) and "no SFrame information for the PC" in last_noeh


def test_lldb_own_bt_on_aarch64_realign_without_eh_frame(corpus, cross_sessions):
    """LLDB 21's own unwind of realign without .eh_frame stops after one frame; SFrame goes on."""
    s = cross_sessions[21]
    b = corpus.get("sid-aarch64", "realign", "O2-nofp")
    own = s.lldb_frames(b.id + "-noeh-lldb")
    ours, _ = s.sframe_bt(b.id + "-noeh-sbt")
    assert len(own) == 1
    assert [r[2].split("`")[1] for r in ours[:3]] == ["stop_here", "realigned_drap", "main"]


@pytest.mark.parametrize("lldb", (16, 21))
@pytest.mark.parametrize("arch", sorted(CROSS))
def test_cross_core(lldb, arch, cross_sessions, qemu_cores):
    s = cross_sessions[lldb]
    tag = "qcore-%s" % arch
    ours, last = s.sframe_bt(tag + "-sbt")
    # LLDB 21 cannot unwind s390x at all (it crashes): LLDB 16's bt of the same core is the truth.
    truth = cross_sessions[16].lldb_frames(tag + "-lldb")
    exe = str(qemu_cores[arch][0])
    assert truth[0][3] == exe
    check_matches_lldb(ours, last, truth, "%s %s" % (s.name, tag), one_more=True)
    assert [r[2].split("`")[1] for r in ours[:5]] == ["stop_here", "level3", "level2", "level1", "main"]
    _, _, lines = check_lookup_matches_cli(s.block(tag + "-lookup"), "%s %s" % (s.name, tag))
    assert values_of(lines)["RA"] == truth[1][1]
    info = s.block(tag + "-info").text
    row = next(iter(sframe_table(info).values()))         # (the executable: LLDB knows no library under qemu)
    assert row[1] == "3" and " ".join(row[2:4]) == {"aarch64": "AArch64 little-endian", "s390x": "s390x big-endian"}[arch]


# ---------------------------------------------------------------------------------------------
# Modules, info, dump, loading, errors


@pytest.mark.parametrize("lldb", (16, 21))
def test_module_cache_info_and_dump(lldb, corpus, work):
    """dlopen: before the library is loaded only the executable has SFrame; after, both (one new
    index built, the executable's kept); a relaunch at the same addresses keeps both; dump prints
    what `sframe dump FILE` prints."""
    b = corpus.get("sid" if lldb == 21 else "host", "dlopen", "O2-nofp")
    state = "probe eval %s " + "__import__('sframekit.lldb_plugin.access').lldb_plugin.access.TRACKER.builds"
    lines = ["target create %s" % b.path,
             "probe run noproc-info sframe info",
             "probe run noproc-lookup sframe lookup call_library",
             "breakpoint set -n main",
             "breakpoint set -n lib_stop_here",
             "process launch",
             "probe run before sframe info", state % "builds-before",
             "continue",
             "probe run after sframe info", state % "builds-after",
             "probe run bt1 sframe bt", state % "builds-bt1",
             "probe run bt2 sframe bt -c 2", state % "builds-bt2",
             "probe run dump-lib sframe dump libfix.so",
             "probe run dump-exe sframe dump",
             "probe run dump-path sframe dump %s" % b.path,
             "process kill",
             "process launch",
             "continue",
             "probe run bt3 sframe bt", state % "builds-bt3",
             "process kill"]
    s = run_lldb(lldb, lines, work, "modules%d" % lldb)
    noproc = s.block("noproc-info").text
    assert "no process: file addresses" in noproc and [r[-1] for r in sframe_table(noproc).values()] == ["0x0"]
    check_lookup_matches_cli(s.block("noproc-lookup"), "no process")
    before, after = s.block("before").text, s.block("after").text
    assert len(sframe_table(before)) == 1 and "libfix.so" not in before
    assert len(sframe_table(after)) == 2 and str(b.lib) in sframe_table(after)
    n = {k: int(s.block("builds-" + k).out[0]) for k in ("before", "after", "bt1", "bt2", "bt3")}
    assert n["after"] == n["before"] + 1 and n["bt1"] == n["bt2"] == n["bt3"] == n["after"]
    ours, last = s.sframe_bt("bt1")
    assert ours[0][2].startswith("libfix.so`lib_stop_here")
    two = s.block("bt2").out
    assert len(two) == 4 and two[-1] == "  (more frames not shown: -c 2)"
    assert [r[1] for r in s.sframe_bt("bt3")[0]] == [r[1] for r in ours]
    from sframekit.core.cli import main as cli
    for tag, path in (("dump-lib", b.lib), ("dump-exe", b.path), ("dump-path", b.path)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["dump", str(path)]) == 0
        assert s.block(tag).text + "\n" == out.getvalue(), tag


@pytest.mark.parametrize("lldb", (16, 21))
def test_loading_help_and_errors(lldb, corpus, work):
    b = corpus.get("host", "frames", "O2-nofp")
    lines = ["command script import %s" % PLUGIN,         # again: replaces the commands
             "probe run help help sframe",
             "probe run help-bt help sframe backtrace",
             "probe run noproc sframe bt",
             "target create %s" % b.path,
             "probe run noproc2 sframe bt",
             "probe run badaddr sframe lookup no_such_symbol_here",
             "probe run nocover sframe lookup 0x10",
             "probe run noargs sframe lookup",
             "breakpoint set -n stop_here",
             "process launch",
             "probe run badopt sframe bt -x",
             "probe run badcount sframe bt -c zero",
             "probe run badthread sframe bt -t 99",
             "probe run extra sframe bt now",
             "probe run badmod sframe dump libnothing.so",
             "probe run nosf sframe dump libc.so.6",
             "probe run infoargs sframe info please",
             "probe run ok sframe bt -c 1",
             "probe run fp sframe bt --fp-fallback",
             "probe run fpold sframe bt --frame-pointer",
             "probe run all sframe bt -a -c 1",
             "probe run json sframe bt --json -c 3",
             "probe run jsonall sframe bt --json -a -r",
             "probe run alland sframe bt -a -t 1",
             "probe run flagvalue sframe bt -f=1",
             "probe run regs sframe lookup $rsp",
             "probe run expr sframe lookup (char *)&level2 + 2",
             "probe run symoff sframe lookup level2+2",
             "process kill"]
    s = run_lldb(lldb, lines, work, "errors%d" % lldb)
    helptext = s.block("help").text
    for sub in ("backtrace", "bt", "dump", "info", "lookup"):
        assert re.search(r"^\s+%s\s+--" % sub, helptext, re.M), helptext
    help_bt = " ".join(s.block("help-bt").text.split())        # (LLDB 21 and later reflow help text)
    assert "--count N" in help_bt and "-f, --fp-fallback" in help_bt and "usage: sframe backtrace" in help_bt, help_bt
    expect = {"noproc": "no target", "noproc2": "no stopped process",
              "badaddr": "cannot evaluate 'no_such_symbol_here'", "nocover": "No SFrame information covers",
              "noargs": "an address is needed", "badopt": "unrecognized arguments: -x", "badcount": "'zero' is not a whole number of at least 1",
              "badthread": "no thread #99", "extra": "unrecognized arguments: now", "alland": "-t N picks one thread: not with -a",
              "badmod": "no loaded module 'libnothing.so'", "nosf": "no SFrame section",
              "infoargs": "unrecognized arguments: please", "regs": "No SFrame information covers",
              "flagvalue": "argument -f/--fp-fallback: ignored explicit argument '1'"}
    for tag, text in expect.items():
        blk = s.block(tag)
        assert not blk.out and len(blk.err) == 1, (tag, blk.out, blk.err)
        assert blk.err[0].startswith("error: sframe: ") and text in blk.err[0], (tag, blk.err)
    assert len(s.sframe_bt("ok")[0]) == 1
    assert s.block("all").out[0].startswith("* thread #1") and len(s.sframe_bt("all")[0]) == 1
    assert s.block("fpold").out == s.block("fp").out       # (--frame-pointer: the old spelling)
    doc, whole = json.loads(s.block("json").text), json.loads(s.block("jsonall").text)
    assert [f["function"].split("+")[0] for f in doc["threads"][0]["frames"]] == ["stop_here", "level3", "level2"], doc
    assert doc["threads"][0]["frames"][0]["how"] == "sframe" and doc["abi"] == "amd64", doc
    thread = whole["threads"][0]
    assert [f["pc"] for f in thread["frames"][:3]] == [f["pc"] for f in doc["threads"][0]["frames"]], whole
    assert thread["stop"]["reason"] == "OUTERMOST" and "rbx" in thread["frames"][1]["registers"], whole
    fp, last = s.sframe_bt("fp")           # through libc by frame pointer: wherever that leads
    assert [r[2].split("`")[1] for r in fp[:5]] == ["stop_here", "level3", "level2", "level1", "main"]
    assert last.startswith("  Backtrace stopped: ")
    e = check_lookup_matches_cli(s.block("expr"), "expression")[0]
    assert check_lookup_matches_cli(s.block("symoff"), "symbol+offset")[0] == e
    assert "Traceback" not in s.stdout + s.stderr


@pytest.mark.parametrize("lldb", (16, 21))
def test_missing_pyelftools_is_one_line(lldb, work):
    """Without pyelftools the import says how to install it, in one line, and adds no command."""
    lines = ["script import sys; sys.modules['elftools'] = None",
             "command script import %s" % PLUGIN,
             "sframe info"]
    s = run_lldb(lldb, lines, work, "noelf%d" % lldb, preamble=False)
    out = s.stdout + s.stderr
    msgs = [line for line in out.splitlines() if "pyelftools" in line and "sys.modules" not in line]
    assert len(msgs) == 1, out
    assert msgs[0].startswith("sframe: pyelftools is missing") and "apt-get install python3-pyelftools" in msgs[0]
    assert "Traceback" not in out
    assert re.search(r"'sframe' is not a valid command", out), out


# ---------------------------------------------------------------------------------------------
# core.unwind.tracker without a debugger


def test_module_tracker_keeps_indexes_of_unchanged_modules(corpus):
    from sframekit.core.unwind.tracker import LoadedModule, ModuleTracker, file_identity
    b = corpus.get("sid", "dlopen", "O2-nofp")
    exe = LoadedModule(file_identity(str(b.path)), str(b.path), 0x555555554000, "dlopen")
    lib = LoadedModule(file_identity(str(b.lib)), str(b.lib), 0x7ffff7fb0000, "libfix.so")
    t = ModuleTracker()
    assert t.sync([exe]) and t.builds == 1
    first = t.modules.by_path(str(b.path))
    assert not t.sync([exe]) and t.builds == 1
    assert t.sync([exe, lib]) and t.builds == 2 and t.modules.by_path(str(b.path)) is first
    moved = LoadedModule(lib.identity, lib.path, lib.bias + 0x10000, lib.name)
    assert t.sync([exe, moved]) and t.builds == 3
    assert t.modules.by_path(str(b.lib)).load_bias == moved.bias
    assert t.sync([exe]) and len(t.modules.with_sframe()) == 1
    assert file_identity("/x", "ABCD") == "uuid:ABCD:/x"


@pytest.mark.parametrize("lldb", (16, 21))
def test_empty_section_is_no_sframe(lldb, corpus, work):
    """A zero-byte .sframe: `sframe dump` prints what readelf 2.47 prints, the rest says "no SFrame"."""
    b = corpus.get("sid", "frames", "O2-nofp")
    (work / "nothing").write_bytes(b"")
    exe = work / "empty-sframe"
    tcs.run_in("sid", ["objcopy", "--update-section", ".sframe=nothing", str(b.path), str(exe)], cwd=work, check=True)
    s = run_lldb(lldb, ["target create %s" % exe, "probe run dump sframe dump",
                        "breakpoint set -n stop_here", "process launch",
                        "probe run lookup sframe lookup $pc", "probe run info sframe info",
                        "probe run bt sframe bt -n", "process kill"], work, "empty%d" % lldb)
    assert s.block("dump").out == ["", "Section '.sframe' has no debugging data."] and not s.block("dump").err
    lookup = s.block("lookup")
    assert not lookup.out and len(lookup.err) == 1 and \
        "the .sframe section of %s is empty (no SFrame data)" % exe in lookup.err[0], lookup.err
    assert "Traceback" not in s.stdout + s.stderr and "internal error" not in s.stdout + s.stderr
    assert len(s.block("info").out) == 2 and re.match(r"No loaded module has SFrame information \(\d+ modules? tracked\)\.$",
                                                       s.block("info").out[1]), s.block("info").out
    bt, last = s.sframe_bt("bt")
    assert len(bt) == 1 and last.startswith("  Backtrace stopped: no SFrame information for the PC"), (bt, last)
