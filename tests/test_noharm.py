"""Do no harm: where DWARF CFI exists, GDB with the plugin loaded (default mode, auto) prints byte
for byte what it prints without it.

Two GDB sessions run the same script on the fixture programs with their CFI intact, one with
`source sframe_gdb.py` first: at every breakpoint of the suite's stops and of `sframe verify`'s
plan, and at every `stepi` of that plan, `bt full`; at the breakpoints also `info frame` in frames
1 and 2, `up`/`down`, `info registers` in frame 1 and, before moving on, `finish`.  The outputs
must be the same, line for line (lines naming process ids and ports, which differ between two
runs, aside).  The session with the plugin also proves that the plugin was there and would have
taken those frames in mode `always` (the probe lines, outside the compared text).
"""

import re

import pytest

import toolchains as T
from test_gdb import PLUGIN, STOPS, VERIFY_PLAN, Qemu, run_gdb

# (GDB, toolchain): every toolchain that emits SFrame, under each GDB that can run its programs.
CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb18", "sid"), ("gdb18", "trixie"), ("gdb18", "host"),
         ("multiarch", "sid-aarch64"), ("multiarch", "sid-s390x")]

# Lines that differ between two runs of the same program whatever the plugin does: process ids,
# ports, and glibc's mangled pointers in a jmp_buf (the pointer guard is random in every process).
_VOLATILE = re.compile(r"\(LWP \d+\)|process \d+|Remote debugging using|^Reading |^warning: |jmp_buf = ")


def stop_plan(fixture):
    """[(breakpoint, stepi count)] of a fixture: its stop and `sframe verify`'s breakpoints."""
    plan = {STOPS[fixture][0]: 0}
    for fx, where, steps in VERIFY_PLAN:
        if fx == fixture:
            plan[where] = max(steps, plan.get(where, 0))
    return list(plan.items())


def session(build, k, stop, steps, with_plugin, remote_port=None, sysroot=None):
    """The script for one stop, in a run of its own; the compared text lies between `mark cmp`
    and `mark end`."""
    fx = build.fixture
    lines = ["file %s" % build.path]
    if sysroot:
        lines += ["set sysroot %s" % sysroot, "set solib-search-path %s" % build.path.parent]
    lines.append("break %s" % stop)
    lines += ["target remote :%d" % remote_port, "continue"] if remote_port else \
        ["run %s" % " ".join(STOPS[fx][1])]
    # Every command goes through try-cmd, as one error would end a batch script.
    cmds = ["bt full", "frame 1", "info frame", "frame 2", "info frame", "frame 0", "up", "down",
            "frame 1", "info registers", "frame 0"]
    for _ in range(steps):
        cmds += ["stepi", "bt full"]
    lines += ["mark cmp %s %s" % (fx, stop)] + ["try-cmd " + c for c in cmds] + ["mark end"]
    if with_plugin:
        lines += ["frames-dump auto-%s-%d" % (fx, k), "set sframe mode always",
                  "frames-dump always-%s-%d" % (fx, k), "set sframe mode auto"]
    # Out of frame 0, then out of an outer frame (GDB needs that frame's caller to stop in it).
    cmds = ["frame 0", "finish", "bt full", "frame 1", "finish", "bt full", "info registers"]
    lines += ["mark cmp %s %s finish" % (fx, stop)] + ["try-cmd " + c for c in cmds] + ["mark end"]
    lines += ["try-cmd kill", "delete"]
    return lines


def compared(out):
    """The text of every `mark cmp` ... `mark end` block, volatile lines left out, and the process
    and thread ids the programs hold in registers (getpid, raise) written as PID."""
    ids = set(re.findall(r"(?:process|LWP) (\d+)", out))
    pid = re.compile(r"\b(?:%s)\b" % "|".join(sorted(ids | {"%#x" % int(i) for i in ids}))) if ids else None
    blocks = re.findall(r"^MARK (cmp .*?)\n(.*?)^MARK end$", out, re.M | re.S)
    return [(head, [pid.sub("PID", ln) if pid else ln for ln in body.splitlines() if not _VOLATILE.search(ln)])
            for head, body in blocks]


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
def test_plugin_changes_nothing_where_cfi_exists(corpus, tmp_path, gdb, toolchain):
    fixtures = sorted(STOPS)
    tc = T.toolchain(toolchain)
    outs = {}
    for with_plugin in (False, True):
        # The programs write to /dev/null: their output would share GDB's file, whose offset they see.
        lines = ["set startup-with-shell off", "set print thread-events off", "set inferior-tty /dev/null"]
        if with_plugin:
            lines.append("source %s" % PLUGIN)
        qemus = []
        try:
            for fx in fixtures:
                build = corpus.get(toolchain, fx, "O2-nofp")
                for k, (stop, steps) in enumerate(stop_plan(fx)):
                    if tc.qemu:
                        q = Qemu(toolchain, build.path, STOPS[fx][1])
                        qemus.append(q)
                        lines += session(build, k, stop, steps, with_plugin, remote_port=q.port, sysroot=tc.sysroot)
                    else:
                        lines += session(build, k, stop, steps, with_plugin)
            outs[with_plugin] = run_gdb(gdb, lines, tmp_path)
        finally:
            for q in qemus:
                q.close()
    without, with_ = outs[False], outs[True]
    assert "Traceback" not in with_ and "Python Exception" not in with_, with_
    assert "sframe-gdb: SFrame unwinder installed" in with_
    a, b = compared(without), compared(with_)
    open("/tmp/noharm-%s-%s.txt" % (gdb, toolchain), "w").write(without + "\n=====WITH=====\n" + with_)
    wanted = sum(2 * len(stop_plan(fx)) for fx in fixtures)
    assert len(a) == wanted and len(b) == wanted, "%d and %d compared blocks, %d expected" % (len(a), len(b), wanted)
    lines = 0
    for (head, x), (head2, y) in zip(a, b):
        assert head == head2
        assert any(ln.startswith("#0  ") for ln in x), "%s: no stack there:\n%s" % (head, "\n".join(x))
        assert x == y, "%s: GDB prints otherwise with the plugin loaded:\n%s" % (head, _diff(x, y))
        lines += len(x)
    # Something was compared: every block printed frames, with arguments and registers.
    assert lines > 20 * wanted, lines
    assert "#1  0x" in without and re.search(r"^(rip|pc|pswa)\s+0x", without, re.M), without[-3000:]
    # The plugin was loaded and active: in mode auto it took no frame; in mode always, the same
    # frames come from SFrame (the fixture's own functions, up to libc).
    probes = 0
    for fx in fixtures:
        for k in range(len(stop_plan(fx))):
            auto, always = with_.frames("auto-%s-%d" % (fx, k)), with_.frames("always-%s-%d" % (fx, k))
            assert auto and not any(f.sf for f in auto), auto
            assert [f.pc for f in always] == [f.pc for f in auto], (auto, always)
            probes += any(f.sf for f in always)
    assert probes >= len(fixtures), "mode always took no frame at %d stops" % probes
    print("%s %s: %d blocks, %d lines compared; SFrame would have taken frames at %d stops"
          % (gdb, toolchain, len(a), lines, probes))


def _diff(x, y):
    import difflib
    return "\n".join(list(difflib.unified_diff(x, y, "without", "with", lineterm=""))[:80])
