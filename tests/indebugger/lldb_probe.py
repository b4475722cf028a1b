"""The probe the LLDB sessions of the tests import beside the plugin: `probe run|frames|lookups|
select|frame|regs|eval ...` prints tagged blocks (@BEGIN TAG ... @END TAG) that tests/helpers/lldb.py
parses."""
import lldb


def __lldb_init_module(debugger, internal_dict):
    debugger.HandleCommand("command script add -o -f %s.probe probe" % __name__)

def _emit(result, tag, out, err):
    lines = ["@BEGIN " + tag]
    lines += (out or "").rstrip("\n").split("\n") if out else []
    lines += ["@ERR " + e for e in (err or "").rstrip("\n").split("\n")] if err else []
    lines.append("@END " + tag)
    result.Print("\n".join(lines) + "\n")

def _thread(exe_ctx, which):
    if which:
        return exe_ctx.GetProcess().GetThreadByIndexID(int(which))
    return exe_ctx.GetThread()

def probe(debugger, command, exe_ctx, result, internal_dict):
    words = command.split(None, 2)
    op = words[0]
    if op == "run":                      # probe run TAG COMMAND
        ret = lldb.SBCommandReturnObject()
        debugger.GetCommandInterpreter().HandleCommand(words[2], ret)
        _emit(result, words[1], ret.GetOutput(), ret.GetError())
    elif op == "frames":                 # probe frames TAG [THREAD]: LLDB's own unwind
        target = exe_ctx.GetTarget()
        thread = _thread(exe_ctx, words[2] if len(words) > 2 else None)
        out = []
        for f in thread:
            m = f.GetModule()
            path = m.GetFileSpec().fullpath if m.IsValid() and m.GetFileSpec().fullpath else "?"
            base = m.GetObjectFileHeaderAddress().GetLoadAddress(target) if m.IsValid() else lldb.LLDB_INVALID_ADDRESS
            out.append("F %d %#x %#x %s %#x" % (f.GetFrameID(), f.GetPC(), f.GetCFA(), path, base))
        _emit(result, words[1], "\n".join(out), None)
    elif op == "lookups":                # probe lookups TAG: sframe lookup of every frame's PC
        thread = exe_ctx.GetThread()
        for f in thread:
            ret = lldb.SBCommandReturnObject()
            debugger.GetCommandInterpreter().HandleCommand("sframe lookup %#x" % f.GetPC(), ret)
            _emit(result, "%s-%d" % (words[1], f.GetFrameID()), ret.GetOutput(), ret.GetError())
    elif op == "select":                 # probe select THREAD: select it without printing
        exe_ctx.GetProcess().SetSelectedThreadByIndexID(int(words[1]))
    elif op == "frame":                  # probe frame N: select frame N of the thread, silently
        exe_ctx.GetThread().SetSelectedFrame(int(words[1]))
    elif op == "regs":                   # probe regs TAG NAME,NAME...: LLDB's values of registers per frame
        names = words[2].split(",")
        out = []
        for f in exe_ctx.GetThread():
            vals = []
            for name in names:
                v = f.FindRegister(name)
                err = lldb.SBError()
                x = v.GetValueAsUnsigned(err, 0) if v is not None and v.IsValid() else None
                vals.append("%s=%s" % (name, "?" if x is None or not err.Success() else "%#x" % x))
            out.append("R %d %#x %s" % (f.GetFrameID(), f.GetPC(), " ".join(vals)))
        _emit(result, words[1], "\n".join(out), None)
    elif op == "eval":                   # probe eval TAG EXPR: a Python expression's value
        _emit(result, words[1], repr(eval(words[2], {"lldb": lldb, "target": exe_ctx.GetTarget()})), None)
