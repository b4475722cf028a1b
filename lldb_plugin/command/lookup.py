"""`sframe lookup ADDR`: the SFrame FDE, FRE and rules covering an address, and their values."""

from ...core.report.lookup import lookup_report, values_lines
from ...core.unwind.modules import NotCovered, locate
from ...core.unwind.unwinder import rule_values
from ..access import (
    TRACKER,
    UserError,
    abi_of,
    frame_state,
    has_state,
    memory_reader,
    owner_of,
    resolve_address,
    symbol_at,
    symbolizer,
    sync,
)
from .common import Command


class LookupCommand(Command):
    short = "Show the SFrame FDE, FRE and recovery rules covering an address."
    long = """Syntax: sframe lookup ADDR

ADDR is a load address (0x..., decimal), $pc or another $register, symbol[+offset], or any
expression LLDB can evaluate.  Prints the module, the SFrame section, the function (FDE), the
row in effect (FRE), the CFA/RA/FP rules in words and where the caller's callee-saved registers
are (from the function's code): the lines of GDB's `info sframe ADDR`, and of `sframe lookup
--registers FILE ADDR` with load addresses.  When ADDR is the PC of the selected frame of a live
process or a core file, the values the rules give there (CFA, RA, FP, the caller's callee-saved
registers) follow.
"""

    def run(self, debugger, command, exe_ctx):
        target = self._target(exe_ctx, debugger)
        frame = exe_ctx.GetFrame()
        process = target.GetProcess()
        if not has_state(process):
            frame = None
        addr = resolve_address(command, target, frame)
        sync(target)
        try:
            module, match = locate(TRACKER.modules, addr, owner_of(target))
        except NotCovered as exc:
            raise UserError(str(exc)) from None
        symbol = module.image.symbolize(match.fde.start, module.load_bias)
        if symbol is None:
            _, name, start = symbol_at(target, match.fde.start)
            if name:
                symbol = (name, match.fde.start - start)
        selected = frame is not None and frame.IsValid() and frame.GetPC() == addr
        image, bias = module.image, module.load_bias

        def read_code(start, size):
            return image.file_bytes(start - bias, size) if image is not None else None
        def values():
            if not selected:
                return []
            abi = abi_of(target)
            topmost = frame.GetFrameID() == 0
            state = frame_state(frame, abi, topmost)
            return values_lines(frame.GetFrameID(), rule_values(state, abi=abi, read=memory_reader(process),
                                                                find=TRACKER.find, topmost=topmost,
                                                                callee_saved=True, symbolize=symbolizer(target)))
        # A caller's frame is looked up at its return address - 1, inside the call (as GDB does).
        return lookup_report(addr, module, match, symbol, caller=selected and frame.GetFrameID() > 0,
                             read_code=read_code, symbolize=symbolizer(target), after=values)
