"""Floating-point locals in outer frames (issue 48): AArch64 keeps a `double` that lives across a
call in d8-d15, the callee-saved low halves of v8-v15 (tests/fixtures/floats.c: every frame of
main -> outer -> relay -> middle -> inner -> stop_here holds some, `relay` none of its own).

Without .eh_frame, the plugin gives GDB what DWARF gives: `info locals`, `$d8`-`$d15`, `$s14` and
the low half of `$v14`/`$z14` in every outer frame (GDB reads a variable in v14 through z14 where
qemu's CPU has SVE, its default).  The side file's .debug_frame carries DWARF 72-79 for LLDB:
LLDB 23's `frame variable` through it equals its own on .eh_frame; LLDB 21 takes no side file for a
module with debug information, and its `sframe bt -r` gives GDB's DWARF values.
"""

import re

import pytest
from helpers import shipped
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.gdb import PLUGIN, Qemu, run_gdb
from helpers.lldb import run_lldb

TC = "sid-aarch64"
OUTER = range(1, 6)          # inner, middle, relay, outer, main
DREGS = ["d%d" % i for i in range(8, 16)]
_VALUE = re.compile(r"^\$\d+ = (.*)$", re.M)


def _gdb_session(exe, tmp_path, plugin, core=None):
    """GDB's view of each outer frame of the stop: its locals and floating-point registers (and,
    with `core`, a core file of the stop written by GDB's gcore)."""
    tc = T.toolchain(TC)
    qemu = Qemu(TC, exe)
    lines = ["set startup-with-shell off"] + (["source %s" % PLUGIN] if plugin else []) + [
        "set sysroot %s" % tc.sysroot, "file %s" % exe, "break stop_here", "target remote :%d" % qemu.port,
        "continue", "bt"] + (["gcore %s" % core] if core else [])
    for level in OUTER:
        lines += ["frame %d" % level, "mark f%d" % level, "info locals"]
        lines += ["p/x $%s.u" % d for d in DREGS] + ["p $s14.f", "p/x $v14.d.u[0]", "p/x $z14.d.u[0]",
                                                     "mark u%d" % level, "p/x $v14.d.u[1]"]
    lines += ["mark end", "kill"]
    try:
        return run_gdb("multiarch", lines, tmp_path)
    finally:
        qemu.close()


@pytest.fixture(scope="module")
def gdb_views(corpus, tmp_path_factory):
    """{'orig': GDB's DWARF on the build with .eh_frame, 'noeh': the plugin on the one without}:
    {level: (locals and registers text, $v14's upper half)}."""
    b = corpus.get(TC, "floats", "O2-nofp")
    tmp = tmp_path_factory.mktemp("floats-gdb")
    out = {}
    for tag, exe, plugin in (("orig", b.path, False), ("noeh", b.noeh, True)):
        text = _gdb_session(exe, tmp, plugin, core=tmp / "floats.core" if tag == "noeh" else None)
        assert "Traceback" not in text and "Python Exception" not in text, text[-3000:]
        out[tag] = {level: (text.between("f%d" % level, "u%d" % level),
                            text.between("u%d" % level, "f%d" % (level + 1) if level + 1 in OUTER else "end"))
                    for level in OUTER}
        out[tag]["bt"] = text
    out["core"] = (tmp / "floats.core", b.noeh)
    return out


def test_gdb_float_locals_in_outer_frames(gdb_views):
    """Every outer frame's `double`/`float` locals, d8-d15, s14 and the low halves of v14 and z14,
    with the plugin and no .eh_frame, equal GDB's DWARF unwind of the build that keeps it."""
    orig, noeh = gdb_views["orig"], gdb_views["noeh"]
    known = 0
    for level in OUTER:
        want, got = orig[level][0], noeh[level][0]
        assert got == want, "frame %d:\nwith the plugin:\n%s\nDWARF:\n%s" % (level, got, want)
        values = _VALUE.findall(got)
        assert len(values) == len(DREGS) + 3, got
        known += sum("<" not in v for v in values)
    # (what the stop holds: inner's kept (d14) and also, middle's m1 and m2, outer's before and after)
    for level, local in ((1, "kept = 6.75"), (2, "m2 = 0.7142857142857143"), (4, "before = 5")):
        assert local in noeh[level][0], noeh[level][0]
    assert known == len(OUTER) * (len(DREGS) + 3), known


def test_gdb_v_upper_halves(gdb_views):
    """The upper half of v14 in an outer frame: what the callee's restore (`ldp d14, d15`) leaves
    there, zero, with the plugin; GDB's DWARF unwinder reads 16 bytes from the 8-byte slot the CFI
    names, so its upper half is whatever lies above the slot (in middle's frame, inner's saved d15)."""
    noeh, orig = gdb_views["noeh"], gdb_views["orig"]
    for level in OUTER:
        assert _VALUE.findall(noeh[level][1]) == ["0x0"], (level, noeh[level][1])
    assert _VALUE.findall(orig[2][1]) != ["0x0"], orig[2][1]


def _lldb_lines(exe, port, tag):
    lines = ["target create %s" % exe, "breakpoint set -n stop_here", "gdb-remote %d" % port, "continue",
             "script print('@@ %s')" % tag, "sframe info --wait", "bt"]
    for level in OUTER:
        lines += ["frame select %d" % level, "frame variable"]
    return lines + ["frame select 0", "script print('@@ sbt-%s')" % tag, "sframe bt -r", "script print('@@ end-%s')" % tag,
                    "process kill"]



def _lldb_run(corpus, tmp_path, monkeypatch, lldb, cpu):
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    b = corpus.get(TC, "floats", "O2-nofp")
    out = {}
    for tag, exe in (("orig", b.path), ("noeh", b.noeh)):
        qemu = Qemu(TC, exe, cpu=cpu)
        try:
            s = run_lldb(lldb, _lldb_lines(exe, qemu.port, tag), tmp_path, "floats%d%s" % (lldb, tag))
        finally:
            qemu.close()
        text = s.stdout + s.stderr
        assert s.returncode == 0 and "Traceback" not in text, text[-4000:]
        out.update(shipped.blocks(s.stdout))
    return out


def _variables(block):
    """The `frame variable` lines of each frame selected in an LLDB block, as one text."""
    return "\n".join(line for line in block.splitlines() if re.match(r"^\((double|float|int)\) ", line))


def test_lldb23_frame_variable_through_the_side_file(corpus, tmp_path, monkeypatch):
    """LLDB 23 with the side file of the build without .eh_frame: `frame variable` in every outer
    frame as on the build that keeps it.  (qemu's default CPU has SVE, and LLDB maps no DWARF
    number to its Z registers there, with .eh_frame or without: a Cortex-A72 has none.)"""
    blocks = _lldb_run(corpus, tmp_path, monkeypatch, 23, "cortex-a72")
    assert "attached (" in blocks["noeh"], blocks["noeh"]
    want, got = _variables(blocks["orig"]), _variables(blocks["noeh"])
    assert got == want, "with the side file:\n%s\nwith .eh_frame:\n%s" % (got, want)
    for local in ("kept = 6.75", "m1 = 15", "m2 = 0.7142857142857143", "before = 5", "after = 102"):
        assert local in got, got


_SBT_FRAME = re.compile(r"^\s*\*?\s*(?:frame )?#(\d+):? ")      # LLDB's sframe bt -r, or the CLI's


def _sbt_registers(block):
    """{level: {register: value}} of `sframe bt -r`."""
    out, level = {}, None
    for line in block.splitlines():
        m = _SBT_FRAME.match(line)
        if m:
            level = int(m.group(1))
        elif level is not None and re.match(r"^\s+x19 ", line):
            pairs = re.findall(r"(\w+) (0x[0-9a-f]+|<not saved>)", line)
            out[level] = dict(pairs)
    return out


def test_lldb21_sframe_bt_registers(corpus, tmp_path, monkeypatch, gdb_views):
    """LLDB 21 takes no side file for a module with debug information (it would drop the module's
    load addresses: core.elf.sidecache's reason, said by `sframe info`), so its own `frame variable`
    in outer frames is its own unwinder's; `sframe bt -r` gives d8-d15 of every outer frame, equal
    to GDB's DWARF values."""
    blocks = _lldb_run(corpus, tmp_path, monkeypatch, 21, None)
    assert "not attached: LLDB 21 drops" in blocks["noeh"], blocks["noeh"]
    regs = _sbt_registers(blocks["sbt-noeh"])
    orig = gdb_views["orig"]
    compared = 0
    for level in OUTER:
        dwarf = _VALUE.findall(orig[level][0])[:len(DREGS)]
        assert level in regs, blocks["sbt-noeh"]
        ours = [regs[level].get(d) for d in DREGS]
        assert ours == dwarf, (level, ours, dwarf)
        compared += len(ours)
    assert compared == len(OUTER) * len(DREGS)


def test_core_backtrace_registers(gdb_views):
    """`sframe backtrace CORE -r` of a core GDB wrote at the stop (its NT_PRFPREG note holds the
    stopped thread's v0-v31): d8-d15 of every outer frame, GDB's DWARF values."""
    core, exe = gdb_views["core"]
    assert core.is_file()
    ran = sframe("backtrace", core, "--exe", exe, "-r")
    assert ran.returncode == 0, ran
    regs = _sbt_registers(ran.stdout)
    for level in OUTER:
        dwarf = _VALUE.findall(gdb_views["orig"][level][0])[:len(DREGS)]
        assert [regs.get(level, {}).get(d) for d in DREGS] == dwarf, (level, ran.stdout)
