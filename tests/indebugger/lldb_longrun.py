"""Imported into LLDB by tests/test_reliability.py: `long-run STOPS LOADS`, the long session of
tests/indebugger/gdb_longrun.py for LLDB: at every stop of the longrun program `sframe bt` must give the
program's call chain, unwound with SFrame; LLDB's resident memory is sampled after the warm-up
(the first tenth of each phase) and at every stop.  One line of figures per phase:

  LONGRUN phase=P stops=N bad=B addresses=A rss_warm=KiB rss_mid=KiB rss_max=KiB rss_end=KiB rss_low2=KiB rss_low4=KiB ms_per_stop=T
"""

import re
import time

import lldb
from longrun_common import CALLBACK_CHAIN, STOP_CHAIN, Phase  # beside this file: LLDB puts its folder on sys.path

# The loads phase stops in exe_callback, which the library's fix_entry calls: LLDB does not
# resolve a breakpoint in a library again once it was unloaded and loaded at the same address.
CHAINS = {"stop_here": STOP_CHAIN, "exe_callback": CALLBACK_CHAIN}
_NAME = re.compile(r"`(\w+)")


def long_run(debugger, command, exe_ctx, result, internal_dict):
    stops, loads = (int(x) for x in command.split())
    phases = {"stop_here": Phase("stops", stops), "exe_callback": Phase("loads", loads)}
    process = exe_ctx.GetProcess()
    interp = debugger.GetCommandInterpreter()
    while process.GetState() == lldb.eStateStopped:
        t = time.perf_counter()
        frame = process.GetSelectedThread().GetFrameAtIndex(0)
        name = frame.GetFunctionName()
        if name not in CHAINS:
            result.AppendMessage("LONGRUN unexpected stop in %s" % name)
            break
        ret = lldb.SBCommandReturnObject()
        interp.HandleCommand("sframe bt", ret)
        rows = [l for l in (ret.GetOutput() or "").splitlines() if l.lstrip(" *").startswith("frame #")]
        names = tuple(m.group(1) for m in (_NAME.search(r) for r in rows[:len(CHAINS[name])]) if m)
        ok = names == CHAINS[name] and all("[sframe]" in r for r in rows[:len(CHAINS[name])])
        # where the library is: the PC of its frame (fix_entry's call site in the loads phase)
        address = process.GetSelectedThread().GetFrameAtIndex(1 if name == "exe_callback" else 0).GetPC()
        phases[name].record(ok, address, time.perf_counter() - t,
                            ",".join(names) + "|" + (ret.GetError() or "").replace(" ", "_"))
        process.Continue()
    for phase in phases.values():
        result.AppendMessage(phase.line())


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand("command script add -f %s.long_run long-run" % __name__)
