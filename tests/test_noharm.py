"""Do no harm: where DWARF CFI exists, GDB with the plugin loaded (default mode, auto) prints byte
for byte what it prints without it.

Two GDB sessions run the same script on the fixture programs with their CFI intact, one with
`source sframe_gdb.py` first: at every breakpoint of the suite's stops and of `sframe verify`'s
plan, and at every `stepi` of that plan, `bt full`; at the breakpoints also `info frame` in frames
1 and 2, `up`/`down`, `info registers` in frame 1 and, before moving on, `finish`.  The outputs
must be the same, line for line (lines naming process ids and ports, which differ between two
runs, aside; GDB's warnings are compared like any other line), and so must everything GDB writes to
its standard error in the whole session.  qemu-user places the guest's stack and libraries anew in each run (randomisation
off or not), so under qemu both outputs come from the same process and GDB: the commands that
change nothing run at the stop, then the plugin is sourced and they run again.  The session with the plugin also proves that the plugin was there and would have
taken those frames in mode `always` (the probe lines, outside the compared text).
"""

import re

import pytest
from helpers import toolchains as T
from helpers.gdb import PLUGIN, STOPS, VERIFY_PLAN, Qemu, run_gdb

# (GDB, toolchain): every toolchain that emits SFrame, under each GDB that can run its programs.
CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb16", "trixie"), ("gdb18", "sid"), ("gdb18", "trixie"), ("gdb18", "host"),
         ("multiarch", "sid-aarch64"), ("multiarch", "sid-s390x")]

# Lines that differ between two runs of the same program whatever the plugin does: process ids,
# ports, and glibc's mangled pointers in a jmp_buf (the pointer guard is random in every process).
_VOLATILE = re.compile(r"\(LWP \d+\)|process \d+|Remote debugging using|^Reading |jmp_buf = ")


def stop_plan(fixture):
    """[(breakpoint, stepi count)] of a fixture: its stop and `sframe verify`'s breakpoints."""
    plan = {STOPS[fixture][0]: 0}
    for fx, where, steps in VERIFY_PLAN:
        if fx == fixture:
            plan[where] = max(steps, plan.get(where, 0))
    return list(plan.items())


def session(build, k, stop, steps, with_plugin):
    """The script for one stop, in a run of its own; the compared text lies between `mark cmp`
    and `mark end`."""
    fx = build.fixture
    # `info inferiors` names the process ("process N"): its id may be in a register (getpid).
    lines = ["file %s" % build.path, "break %s" % stop, "run %s" % " ".join(STOPS[fx][1]), "info inferiors"]
    # Every command goes through try-cmd, as one error would end a batch script.
    cmds = list(READ_ONLY)
    for _ in range(steps):
        cmds += ["stepi", "bt full"]
    lines += ["mark cmp %s %s" % (fx, stop)] + ["try-cmd " + c for c in cmds] + ["mark end"]
    if with_plugin:
        lines += ["frames-dump auto-%s-%d" % (fx, k), "set sframe mode always",
                  "frames-dump always-%s-%d" % (fx, k), "set sframe mode auto"]
    # Out of frame 0, then out of an outer frame (GDB needs that frame's caller to stop in it;
    # finish-outer leaves out C library frames, which may never return).
    cmds = ["frame 0", "finish", "bt full", "finish-outer", "bt full", "info registers"]
    lines += ["mark cmp %s %s finish" % (fx, stop)] + ["try-cmd " + c for c in cmds] + ["mark end"]
    lines += ["try-cmd kill", "delete"]
    return lines


def compared(out):
    """The text of every `mark cmp` ... `mark end` block, volatile lines left out."""
    blocks = re.findall(r"^MARK (cmp .*?)\n(.*?)^MARK end$", out, re.M | re.S)
    return [(head, [ln for ln in body.splitlines() if not _VOLATILE.search(ln)]) for head, body in blocks]


def process_ids(out):
    """A pattern of the process and thread ids of a session's programs, which they may hold in
    registers (getpid, raise): in decimal and in hex."""
    ids = set(re.findall(r"(?:process|LWP) (\d+)", out))
    ids |= {"%#x" % int(i) for i in ids}
    return re.compile(r"\b(?:%s)\b" % "|".join(sorted(ids))) if ids else re.compile(r"(?!)")


def same_but_ids(x, y, ids_x, ids_y):
    """Two lines are the same, or differ only where each names its own session's process ids
    (GDB pads `info registers` columns to the value's width, so spacing is not compared there)."""
    return x == y or ids_x.sub("PID", x).split() == ids_y.sub("PID", y).split()


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
def test_plugin_changes_nothing_where_cfi_exists(corpus, tmp_path, gdb, toolchain):
    builds = [corpus.get(toolchain, fx, "O2-nofp") for fx in sorted(STOPS)]
    compare_sessions(gdb, toolchain, [(b, stop_plan(b.fixture)) for b in builds], tmp_path)


@pytest.mark.parametrize("gdb,toolchain", [("gdb13", "host"), ("gdb18", "sid")], ids=["gdb13-host", "gdb18-sid"])
def test_debug_frame_counts_as_cfi(roots, tmp_path, gdb, toolchain):
    """-fno-asynchronous-unwind-tables: the program's CFI is in .debug_frame only (GDB's DWARF
    unwinder reads it from the file): the plugin leaves those frames to GDB too."""
    exe = T.build(toolchain, "frames", tmp_path / "build", ("-O2", "-fomit-frame-pointer",
                                                            "-fno-asynchronous-unwind-tables"))
    from sframekit.core.elf.image import ElfImage
    assert ElfImage(exe).section_address(".debug_frame") is not None
    from sframekit.core.unwind.modules import ModuleSet
    ms = ModuleSet()
    m = ms.add(exe, str(exe))
    stop = ElfImage(exe).resolve("stop_here")
    assert ms.find(stop) and ms.cfi_find(m, stop).section == ".debug_frame"
    build = T.Build(toolchain, "frames", "O2-nofp", exe, 0, "x86_64", ())
    compare_sessions(gdb, toolchain, [(build, stop_plan("frames"))], tmp_path)


READ_ONLY = ["bt full", "frame 1", "info frame", "frame 2", "info frame", "frame 0", "up", "down",
             "frame 1", "info registers", "frame 0"]


def compare_in_one_process(gdb, toolchain, plans, tmp_path):
    """Under qemu: at each stop, the read-only commands before and after sourcing the plugin,
    in one GDB session per stop."""
    tc = T.toolchain(toolchain)
    blocks = 0
    for build, plan in plans:
        fx = build.fixture
        for _k, (stop, _) in enumerate(plan):
            q = Qemu(toolchain, build.path, STOPS[fx][1])
            try:
                cmds = ["try-cmd " + c for c in READ_ONLY]
                lines = ["file %s" % build.path, "set sysroot %s" % tc.sysroot,
                         "set solib-search-path %s" % build.path.parent, "break %s" % stop,
                         "target remote :%d" % q.port, "continue",
                         "mark cmp before"] + cmds + ["mark end", "source %s" % PLUGIN, "mark cmp after"] + cmds + \
                        ["mark end", "frames-dump auto", "set sframe mode always", "frames-dump always", "try-cmd kill"]
                out = run_gdb(gdb, lines, tmp_path)
            finally:
                q.close()
            assert "Traceback" not in out and "Python Exception" not in out, out
            got = compared(out)
            assert [h for h, _ in got] == ["cmp before", "cmp after"], out[-3000:]
            (_, x), (_, y) = got
            assert any(ln.startswith("#0  ") for ln in x), "%s %s: no stack there:\n%s" % (fx, stop, "\n".join(x))
            assert len(x) > 20 and x == y, "%s %s: GDB prints otherwise with the plugin loaded:\n%s" % (
                fx, stop, _diff(x, y))
            auto, always = out.frames("auto"), out.frames("always")
            assert auto and not any(f.sf for f in auto), auto
            assert [f.pc for f in always] == [f.pc for f in auto] and any(f.sf for f in always), (auto, always)
            blocks += 1
    print("%s %s: %d stops compared in one process each" % (gdb, toolchain, blocks))


def compare_sessions(gdb, toolchain, plans, tmp_path):
    """Run the plans [(build, [(stop, steps)])] in GDB without and with the plugin; compare."""
    tc = T.toolchain(toolchain)
    if tc.qemu:
        return compare_in_one_process(gdb, toolchain, plans, tmp_path)
    outs = {}
    for with_plugin in (False, True):
        # The programs write to /dev/null: their output would share GDB's file, whose offset they see.
        lines = ["set startup-with-shell off", "set print thread-events off", "set inferior-tty /dev/null"]
        if with_plugin:
            lines.append("source %s" % PLUGIN)
        for build, plan in plans:
            for k, (stop, steps) in enumerate(plan):
                lines += session(build, k, stop, steps, with_plugin)
        outs[with_plugin] = run_gdb(gdb, lines, tmp_path)
    without, with_ = outs[False], outs[True]
    assert "Traceback" not in with_ and "Python Exception" not in with_, with_
    assert "sframe-gdb: SFrame unwinder installed" in with_
    # GDB's standard error over the whole session, outside the compared blocks too: the plugin adds
    # no warning or error anywhere.
    ids_a, ids_b = process_ids(without), process_ids(with_)
    err_a, err_b = without.stderr.splitlines(), with_.stderr.splitlines()
    assert len(err_a) == len(err_b) and all(same_but_ids(p, q, ids_a, ids_b) for p, q in zip(err_a, err_b)), \
        "GDB's standard error differs with the plugin loaded:\n%s" % _diff(err_a, err_b)
    a, b = compared(without), compared(with_)
    wanted = sum(2 * len(plan) for _, plan in plans)
    assert len(a) == wanted and len(b) == wanted, "%d and %d compared blocks, %d expected" % (len(a), len(b), wanted)
    lines = 0
    for (head, x), (head2, y) in zip(a, b):
        assert head == head2
        assert any(ln.startswith("#0  ") for ln in x), "%s: no stack there:\n%s" % (head, "\n".join(x))
        assert len(x) == len(y) and all(same_but_ids(p, q, ids_a, ids_b) for p, q in zip(x, y)), \
            "%s: GDB prints otherwise with the plugin loaded:\n%s" % (head, _diff(x, y))
        lines += len(x)
    # Something was compared: every block printed frames, with arguments and registers.
    assert lines > 20 * wanted, lines
    assert "#1  0x" in without and re.search(r"^(rip|pc|pswa)\s+0x", without, re.M), without[-3000:]
    # The plugin was loaded and active: in mode auto it took no frame; in mode always, the same
    # frames come from SFrame (the fixture's own functions, up to libc).
    probes = 0
    for build, plan in plans:
        fx = build.fixture
        for k in range(len(plan)):
            auto, always = with_.frames("auto-%s-%d" % (fx, k)), with_.frames("always-%s-%d" % (fx, k))
            assert auto and not any(f.sf for f in auto), auto
            assert [f.pc for f in always] == [f.pc for f in auto], (auto, always)
            probes += any(f.sf for f in always)
    assert probes >= len(plans), "mode always took no frame at %d stops" % probes
    print("%s %s: %d blocks, %d lines compared; SFrame would have taken frames at %d stops"
          % (gdb, toolchain, len(a), lines, probes))


def _diff(x, y):
    import difflib
    return "\n".join(list(difflib.unified_diff(x, y, "without", "with", lineterm=""))[:80])


# -- zero cost: the unwinder idles where DWARF CFI covers every function with SFrame --------------

ONOFF_MAIN = r"""
#include <dlfcn.h>
#include <stdio.h>
volatile int sink;
__attribute__((noinline)) void before_dlopen(void) { sink++; }
__attribute__((noinline)) void after_dlclose(void) { sink++; }
__attribute__((noinline)) int call_it(void *h) { int (*f)(int) = (int (*)(int))dlsym(h, "lib_entry"); return f(3) + 1; }
int main(int argc, char **argv)
{
    before_dlopen();
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int r = call_it(h);
    dlclose(h);
    after_dlclose();
    return r == 0;
}
"""
ONOFF_LIB = r"""
volatile int lib_sink;
__attribute__((noinline)) void lib_stop(int x) { lib_sink += x; }
__attribute__((noinline)) int lib_middle(int x) { char b[40]; b[x & 7] = x; lib_stop(b[3]); return lib_sink + 1; }
__attribute__((noinline)) int lib_entry(int x) { return lib_middle(x * 2) + 2; }
"""


@pytest.mark.parametrize("gdb,toolchain", [("gdb13", "host"), ("gdb18", "sid")], ids=["gdb13-host", "gdb18-sid"])
def test_unwinder_idles_until_sframe_only_code_loads(tmp_path, gdb, toolchain):
    """A program whose CFI covers every function with SFrame: the unwinder idles (GDB does not
    call it).  A library with SFrame and no CFI, loaded by dlopen: it becomes active and
    unwinds the library's frames as DWARF does the library with CFI; after dlclose it idles again.
    `maint set dwarf unwinders off` (in a script, no prompt between) makes it active at once, and
    its frames SFrame's."""
    (tmp_path / "main.c").write_text(ONOFF_MAIN)
    (tmp_path / "lib.c").write_text(ONOFF_LIB)
    flags = ["-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe"]
    script = ["gcc %s -o main main.c -ldl" % " ".join(flags),
              "gcc %s -shared -fPIC -o libcf.so lib.c" % " ".join(flags),
              "objcopy -R .eh_frame -R .eh_frame_hdr libcf.so libsf.so"]
    T.run_in(toolchain, ["sh", "-c", " && ".join(script)], cwd=tmp_path, binds=[tmp_path], check=True)
    outs = {}
    for lib in ("libcf.so", "libsf.so"):      # (names of one length: the same stack addresses)
        lines = ["set startup-with-shell off", "source %s" % PLUGIN, "file %s" % (tmp_path / "main"),
                 "break before_dlopen", "break lib_stop", "break after_dlclose",
                 "run %s" % (tmp_path / lib), "mark start", "info sframe", "bt", "info unwinder", "continue", "mark lib", "info sframe", "info unwinder",
                 "frames-dump lib", "continue", "mark closed", "info sframe", "bt", "info unwinder",
                 "dwarf-unwinders off", "mark off", "info unwinder", "info sframe", "frames-dump off",
                 "dwarf-unwinders on", "mark on", "info sframe", "bt", "info unwinder", "kill"]
        outs[lib] = run_gdb(gdb, lines, tmp_path)
    sf, cfi = outs["libsf.so"], outs["libcf.so"]
    assert "Traceback" not in sf and "Python Exception" not in sf, sf
    state = lambda out, a, b=None: re.search(r"^SFrame unwinder: (active|idle)", out.between(a, b), re.M).group(1)  # noqa: E731
    assert state(sf, "start", "lib") == "idle", sf.between("start", "lib")
    assert state(sf, "lib", "closed") == "active" and "functions of %s" % (tmp_path / "libsf.so") in sf.between("lib", "closed")
    assert state(sf, "closed", "off") == "idle", sf.between("closed", "off")
    assert state(sf, "off", "on") == "active", sf.between("off", "on")
    assert state(sf, "on") == "idle", sf.between("on")
    assert state(cfi, "lib", "closed") == "idle"
    # Idle, GDB calls it no more; the hooks on GDB's DWARF switch wake it at once (no prompt
    # in between), and the frames after it are SFrame's.
    called = lambda out, a, b=None: re.search(r"^  sframe( \[disabled\])?$", out.between(a, b), re.M).group(1) is None  # noqa: E731
    assert not called(sf, "closed", "off") and not called(sf, "on") and not called(cfi, "start", "lib"), sf
    assert called(sf, "off", "on") and called(sf, "lib", "closed"), sf
    assert [f.name for f in sf.frames("off")[:2]] == ["after_dlclose", "main"] and sf.frames("off")[0].sf, sf.frames("off")
    # The library's frames: SFrame's (no CFI) equal to DWARF's (the library with its CFI).
    got, want = sf.frames("lib"), cfi.frames("lib")
    assert [f.pc for f in got] == [f.pc for f in want] and [f.cfa for f in got] == [f.cfa for f in want], (got, want)
    assert [f.name for f in got[:4]] == ["lib_stop", "lib_middle", "lib_entry", "call_it"], got
    assert any(f.sf for f in got) and not any(f.sf for f in want), (got, want)
