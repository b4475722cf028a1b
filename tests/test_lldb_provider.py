"""LLDB's own `bt` through SFrame: scripted frame providers (LLDB 22 and later), and why the plugin
does not register one.

A frame SFrame unwinds needs its own registers, so a provider must give it as a ScriptedFrame
with a register context.  LLDB 23.1.4 (the lldb23 root) crashes or hangs as soon as a provider
gives a ScriptedFrame anywhere below the top of the stack and LLDB asks for the frame after it
(tests/indebugger/lldb_provider_repro.py: a provider that changes nothing but frame 1); LLDB 22.1.8 does the
same (seen by hand: its python3-lldb cannot share a root with 23's).  So on every LLDB the plugin
says so and does not register a provider: `sframe provider status` gives the reason, `sframe
provider on` refuses in one line, and `sframe bt` works, LLDB 23 included.  The repro test fails
the day LLDB takes such a provider: then the provider can be built.
"""

import re

import pytest
from helpers.lldb import HUNG, PLUGIN, run_lldb

REPO = PLUGIN.parent
REPRO = REPO / "tests" / "indebugger" / "lldb_provider_repro.py"


@pytest.mark.parametrize("lldb", (16, 21))
def test_no_providers_before_lldb_22(corpus, tmp_path, lldb):
    lines = ["command script import %s" % PLUGIN, "sframe provider status", "sframe provider on",
             "sframe provider off", "sframe provider sideways"]
    s = run_lldb(lldb, lines, tmp_path, "provider%d" % lldb, preamble=False)
    out = s.stdout + s.stderr
    assert re.search(r"^lldb version %d\.\d+\.\d+: LLDB %d\.\d+\.\d+ has no scripted frame providers \(LLDB 22 and "
                     r"later have them\)$" % (lldb, lldb), out, re.M), out
    assert "SFrame frame provider: not registered (use 'sframe bt')" in out
    assert re.search(r"^error: sframe: the frame provider is not registered: LLDB %d\.\d+\.\d+ has no scripted "
                     r"frame providers" % lldb, out, re.M), out
    assert "invalid choice: 'sideways'" in out and "usage: sframe provider on|off|status" in out, out
    assert "Traceback" not in out


def test_lldb23_says_why_and_sframe_bt_works(corpus, tmp_path):
    """LLDB 23: the plugin loads, says why no provider is registered, and `sframe bt` on a V3
    binary without .eh_frame gives the PCs of LLDB's own bt of the unstripped binary."""
    b = corpus.get("sid", "frames", "O2-nofp")
    lines = ["command script import %s" % PLUGIN, "sframe provider status", "sframe provider on"]
    for exe in (b.path, b.noeh):
        lines += ["target create %s" % exe, "breakpoint set -n stop_here", "process launch", "bt", "sframe bt",
                  "process kill", "target delete"]
    s = run_lldb(23, lines, tmp_path, "provider23", timeout=600, preamble=False)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out, out
    assert re.search(r"^lldb version 23\.\d+\.\d+: LLDB 23\.\d+\.\d+ crashes or hangs when a frame provider gives a "
                     r"scripted frame below the top of the stack", out, re.M), out
    assert re.search(r"^error: sframe: the frame provider is not registered: LLDB 23", out, re.M), out
    blocks = re.split(r"^\(lldb\) (?:sframe )?bt$", s.stdout, flags=re.M)[1:]
    pcs = [[int(x, 16) for x in re.findall(r"^ +\*? *frame #\d+: (0x[0-9a-f]+) ", block, re.M)] for block in blocks]
    assert len(pcs) == 4, out
    lldb_bt, _ours_orig, _lldb_noeh, ours_noeh = pcs
    # LLDB's own bt of the unstripped program, all of it, exactly: SFrame in the program, then the
    # C library's DWARF CFI (it has no SFrame) to _start.
    modules = re.findall(r"^ +\*? *frame #\d+: 0x[0-9a-f]+ ([^`\s]+)`", blocks[0], re.M)
    assert len(modules) == len(lldb_bt) and modules[0] == "frames" and "libc.so.6" in modules, out
    assert ours_noeh == lldb_bt, (ours_noeh, lldb_bt, modules)
    assert re.findall(r"frames`(\w+)", blocks[3])[:5] == ["stop_here", "level3", "level2", "level1", "main"], out


def test_lldb23_still_fails_on_a_scripted_frame_below_the_top(corpus, tmp_path):
    """The reproduction: a provider that gives frame 1 as a ScriptedFrame and the others as they
    are.  LLDB 23 must still crash or hang on it, or the provider can now be built (issue 11:
    lift _PROVIDERS_BROKEN in lldb_plugin/command/provider.py and register one)."""
    b = corpus.get("sid", "frames", "O2-nofp")
    for exe in (b.path, b.noeh):
        lines = ["command script import %s" % REPRO, "target create %s" % exe, "breakpoint set -n stop_here",
                 "process launch", "target frame-provider register -C lldb_provider_repro.Provider", "bt",
                 "script print('LLDB TOOK ' + 'THE PROVIDER')"]
        s = run_lldb(23, lines, tmp_path, "repro", timeout=20, preamble=False, again=False)
        code, out = s.returncode, s.stdout + s.stderr
        assert "successfully registered scripted frame provider 'lldb_provider_repro.Provider'" in out, out
        assert "LLDB TOOK THE PROVIDER" not in out and code in (HUNG, 128 + 6, 128 + 9, 128 + 11, -6, -9, -11), (
            "LLDB 23 took a ScriptedFrame below the top of the stack (%s): the SFrame frame provider can be "
            "built now (exit %s):\n%s" % (exe, code, out[-3000:]))
