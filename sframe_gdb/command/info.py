"""`info sframe [ADDR]`: the objfiles with SFrame, or what covers one address."""

import gdb

from ...core.errors import ElfError, SFrameError
from ...core.sframe.format import MASK64
from .. import dwarf_unwinders
from .common import frame_values, has_registers, is_callers_pc, objfile_name_at, parse_address, symbol_at


class InfoSFrame(gdb.Command):
    """Show SFrame information.

Usage: info sframe [ADDR]

Without an argument: a table of the loaded objfiles that have an .sframe section (SFrame version,
ABI, FDE and FRE counts, the text range they cover, the load bias), how many others have none,
those whose section cannot be used and why; and whether the SFrame unwinder is active (some
function only SFrame describes, GDB's DWARF unwinders off, or mode always) or idle.
With ADDR (any expression: $pc, main+4, *0x401000): the objfile and section covering ADDR, its
function's FDE, the FRE in effect at ADDR and its rules in words, where each callee-saved
register of the caller is (found in the function's code: saved at a stack slot, unchanged, or
unknown); when ADDR is the PC of the selected frame of a running program, also the values the
rules give there."""

    def __init__(self, plugin):
        super().__init__("info sframe", gdb.COMMAND_STATUS, gdb.COMPLETE_EXPRESSION)
        self.plugin = plugin

    def invoke(self, arg, from_tty):
        try:
            if arg.strip():
                self._address(arg)
            else:
                self._table()
        except gdb.GdbError:
            raise
        except (gdb.error, SFrameError, ElfError) as exc:     # GDB's, or the user's files: not ours
            raise gdb.GdbError("info sframe: %s" % exc) from None
        except Exception as exc:
            raise gdb.GdbError("info sframe: internal error: %s: %s" % (type(exc).__name__, exc)) from None

    def _table(self):
        from ...core.report import status
        tracker = self.plugin.tracker
        tracker.current()
        lines = status.module_table(tracker.modules(), "objfile")
        lines.append(status.activity_line(*self.plugin.unwinder.activity()))
        gdb.write("\n".join(lines) + "\n")

    def _address(self, arg):
        from ...core.report.lookup import lookup_report
        from ...core.unwind.modules import NotCovered, locate
        addr = parse_address(arg, "info sframe")
        tracker = self.plugin.tracker
        ms = tracker.current()
        try:
            module, match = locate(ms if ms is not None else tracker.modules(), addr, objfile_name_at, "objfile")
        except NotCovered as exc:
            raise gdb.GdbError(str(exc)) from None
        inferior = gdb.selected_inferior()

        def read_code(start, size):
            """The function's code, through GDB: the process's memory, or the executable's sections
            without a process."""
            return bytes(inferior.read_memory(start, size))
        lines = lookup_report(addr, module, match, symbol_at(match.fde.start), caller=is_callers_pc(addr),
                              read_code=read_code, symbolize=symbol_at,
                              after=lambda: self._unwinder_lines(addr, ms, module) + self._values(addr, ms, module))
        gdb.write("\n".join(lines) + "\n")

    def _unwinder_lines(self, addr, ms, module):
        """What DWARF CFI GDB has at ADDR, and which unwinder takes a frame there in the current mode."""
        from ...core.unwind.policy import Mode, choose
        from ...core.unwind.unwinder import lookup_address
        at = lookup_address(addr, is_callers_pc(addr))
        note = "" if at == addr else " (at %#x - 1: a caller's frame is looked up at its return address - 1)" % addr
        cfi = ms.cfi_find(module, at)
        mode = self.plugin.mode
        choice = choose(mode, dwarf_unwinders.enabled(), lambda: cfi)
        if choice.sframe:
            who = "SFrame"
        elif mode is Mode.OFF:
            who = "GDB's own unwinders"
        else:
            who = "GDB's DWARF unwinder"
        return ["DWARF CFI: %s%s" % (cfi if cfi is not None else "none covers %#x" % at, note),
                "Unwinder: %s (%s)" % (who, choice.reason)]

    def _values(self, addr, ms, module):
        from ...core.report.lookup import values_lines
        if not has_registers():
            return []
        frame = gdb.selected_frame()
        try:
            if (int(frame.pc()) & MASK64) != addr:
                return []
        except gdb.error:
            return []
        vals = frame_values(frame, ms, module)
        if vals is None:
            return []
        return values_lines(frame.level(), vals)
