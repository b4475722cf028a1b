"""LLDB's command interpreter as a function (the plugin's setup, the side files' attaching and
their checks run LLDB's own commands: `target symbols add`, `image show-unwind`, settings)."""

import lldb


def run(debugger, command, target=None):
    """(succeeded, text) of an LLDB command; in the target's process where one is given (a stop
    hook runs with no process selected for commands)."""
    res = lldb.SBCommandReturnObject()
    interp = debugger.GetCommandInterpreter()
    if target is None:
        interp.HandleCommand(command, res)
    else:
        process = target.GetProcess()
        thread = process.GetSelectedThread() if process is not None and process.IsValid() else None
        where = lldb.SBExecutionContext(thread) if thread is not None and thread.IsValid() else \
            lldb.SBExecutionContext(target)
        interp.HandleCommand(command, where, res)
    return res.Succeeded(), (res.GetError() or res.GetOutput() or "").strip()
