"""Imported into LLDB by tests/test_reliability.py: `long-run STOPS LOADS`, the long session of
tests/gdb_longrun.py for LLDB: at every stop of the longrun program `sframe bt` must give the
program's call chain, unwound with SFrame; LLDB's resident memory is sampled after the warm-up
(the first tenth of each phase) and at every stop.  One line of figures per phase:

  LONGRUN phase=P stops=N bad=B addresses=A rss_warm=KiB rss_max=KiB rss_end=KiB ms_per_stop=T
"""

import re
import time

import lldb

# The loads phase stops in exe_callback, which the library's fix_entry calls: LLDB does not
# resolve a breakpoint in a library again once it was unloaded and loaded at the same address.
CHAINS = {"stop_here": ("stop_here", "chain_b", "chain_a", "one_round", "main"),
          "exe_callback": ("exe_callback", "fix_entry", "load_round", "main")}
_NAME = re.compile(r"`(\w+)")


def rss_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def long_run(debugger, command, exe_ctx, result, internal_dict):
    stops, loads = (int(x) for x in command.split())
    expected = {"stop_here": stops, "exe_callback": loads}
    figures = {k: {"stops": 0, "bad": 0, "addresses": set(), "warm": 0, "max": 0, "end": 0, "seconds": 0.0,
                   "first_bad": None} for k in CHAINS}
    process = exe_ctx.GetProcess()
    interp = debugger.GetCommandInterpreter()
    while process.GetState() == lldb.eStateStopped:
        t = time.perf_counter()
        frame = process.GetSelectedThread().GetFrameAtIndex(0)
        name = frame.GetFunctionName()
        if name not in CHAINS:
            result.AppendMessage("LONGRUN unexpected stop in %s" % name)
            break
        f = figures[name]
        ret = lldb.SBCommandReturnObject()
        interp.HandleCommand("sframe bt", ret)
        rows = [l for l in (ret.GetOutput() or "").splitlines() if l.lstrip(" *").startswith("frame #")]
        names = tuple(m.group(1) for m in (_NAME.search(r) for r in rows[:len(CHAINS[name])]) if m)
        ok = names == CHAINS[name] and all("[sframe]" in r for r in rows[1:len(CHAINS[name])])
        if not ok:
            f["bad"] += 1
            f["first_bad"] = f["first_bad"] or ",".join(names) + "|" + (ret.GetError() or "").replace(" ", "_")
        # where the library is: the PC of its frame (fix_entry's call site in the loads phase)
        f["addresses"].add(process.GetSelectedThread().GetFrameAtIndex(1 if name == "exe_callback" else 0).GetPC())
        f["stops"] += 1
        rss = rss_kib()
        if f["stops"] == max(expected[name] // 10, 1):
            f["warm"] = rss
        if f["warm"]:
            f["max"] = max(f["max"], rss)
        f["end"] = rss
        f["seconds"] += time.perf_counter() - t
        process.Continue()
    for name, phase in (("stop_here", "stops"), ("exe_callback", "loads")):
        f = figures[name]
        result.AppendMessage("LONGRUN phase=%s stops=%d bad=%d addresses=%d rss_warm=%d rss_max=%d rss_end=%d "
                             "ms_per_stop=%.2f%s" % (
                                 phase, f["stops"], f["bad"], len(f["addresses"]), f["warm"], f["max"], f["end"],
                                 1e3 * f["seconds"] / max(f["stops"], 1),
                                 " first_bad=%s" % f["first_bad"] if f["first_bad"] else ""))


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand("command script add -f %s.long_run long-run" % __name__)
