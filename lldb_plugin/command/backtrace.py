"""`sframe backtrace` (`sframe bt`): a thread unwound with SFrame by the plugin itself."""

import functools

from ...core.report.frames import SIGNAL_TRAMPOLINE, frame_line, frames_doc, registers_line, stop_line
from ...core.unwind.modules import finder
from ...core.unwind.unwinder import DEFAULT_DEPTH_LIMIT, frame_rows, lookup_address, walk
from ..access import (
    TRACKER,
    UserError,
    abi_of,
    frame_state,
    has_state,
    loaded_cfi,
    memory_reader,
    owner_of,
    place_of,
    symbol_at,
    symbol_namer,
    symbolizer,
    sync,
    where_of,
)
from .common import Command, built_once, parse


def _parser():
    from ...core.cli import options as O  # (argparse: not imported by the stop hook, which needs `unwind` alone)
    p = O.CommandParser("sframe backtrace", description="Unwind the selected thread (or thread N, LLDB's index as `thread "
                        "list` shows it, or every thread) from its selected frame with the SFrame sections of the loaded "
                        "modules, and with their DWARF CFI where no SFrame covers a PC (the C library), reading "
                        "registers and memory through LLDB; live processes and core files.  `sframe bt` is the same.")
    O.add_count(p)
    O.add_threads(p, "LLDB's index, as `thread list` shows it; default: the selected thread")
    O.add_fp_fallback(p, old=("--frame-pointer",))
    O.add_registers(p, "print each frame's callee-saved registers: in callers, those the function's own code proves "
                    "saved or unchanged (the rest <not saved>)")
    O.add_eh_frame(p, short=True)
    O.add_json(p)
    return p


class BacktraceCommand(Command):
    short = "Backtrace of a thread unwound with SFrame (not with LLDB's unwinder)."
    parser = built_once(_parser)
    long = """Each line gives the frame like `bt`, what unwinds it in [brackets] (what covers its PC and so
found its caller: sframe, DWARF CFI, frame pointer, signal frame; on the last frame: outermost, no
SFrame or not unwound) and its CFA, with the FDE that gave it.  The last line says why the unwind
stopped.
"""

    def run(self, debugger, command, exe_ctx):
        opts = parse(self.parser, command)
        if opts.thread is not None and opts.all_threads:
            raise UserError("-t N picks one thread: not with -a")
        target = self._target(exe_ctx, debugger)
        process = target.GetProcess()
        if not has_state(process):
            raise UserError("no stopped process or core file to unwind (run, attach or target create --core)")
        if opts.all_threads:
            picked = [(thread, thread.GetSelectedFrame()) for thread in process]
            if opts.json:
                return [self._json(target, picked, opts)]
            lines = []
            for thread, frame in picked:
                lines += self._thread_lines(target, thread, frame, opts)
            return lines
        if opts.thread is not None:
            thread = process.GetThreadByIndexID(opts.thread)
            if not thread.IsValid():
                raise UserError("no thread #%d (thread list shows them)" % opts.thread)
            frame = thread.GetSelectedFrame()
        else:
            thread = exe_ctx.GetThread()
            if not thread.IsValid():
                thread = process.GetSelectedThread()
            frame = exe_ctx.GetFrame() if exe_ctx.GetThread().IsValid() else thread.GetSelectedFrame()
        if not thread.IsValid():
            raise UserError("no thread to unwind")
        if opts.json:
            return [self._json(target, [(thread, frame)], opts)]
        return self._thread_lines(target, thread, frame, opts)

    def _json(self, target, picked, opts):
        """One JSON document of the threads' walks (the fields of `sframe backtrace --json`)."""
        abi = abi_of(target)
        threads = []
        for thread, frame in picked:
            frame, rows, stop = _walk(target, thread, frame, opts, opts.count or DEFAULT_DEPTH_LIMIT)
            rows = rows[:opts.count] if opts.count else rows
            function_of = functools.partial(function_name, target, start=frame.GetFrameID())
            threads.append({"thread": thread.GetIndexID(), "tid": thread.GetThreadID(), "name": thread.GetName(),
                            **frames_doc(rows, stop, abi, function_of, lambda pc: module_name(target, pc),
                                         stop_line(stop) if stop is not None else "", opts.registers)})
        doc = {"target": target.GetExecutable().fullpath, "abi": abi.name, "threads": threads}
        import json
        return json.dumps(doc, indent=1)

    def _thread_lines(self, target, thread, frame, opts):
        count = opts.count
        frame, rows, stop = _walk(target, thread, frame, opts, count + 1 if count else DEFAULT_DEPTH_LIMIT)
        abi = abi_of(target)
        lines = [self._header(thread, frame, abi)]
        selected = thread.GetSelectedFrame().GetFrameID()
        start = frame.GetFrameID()
        shown = rows[:count] if count else rows
        for row in shown:
            fr = row.frame
            lines.append(frame_line(fr.level, row, stop, where_of(target, fr.pc, fr.level > start and not fr.interrupted),
                                    selected=fr.level == selected))
            if opts.registers:
                lines.append(registers_line(abi, fr))
        if count and len(rows) > count:
            lines.append("  (more frames not shown: -c %d)" % count)
        elif stop is not None:
            where = None
            if stop.pc is not None:
                last = rows[-1][0] if rows else None
                ret = last is not None and last.pc == stop.pc and last.level > start and not last.interrupted
                where = where_of(target, stop.pc, ret)
            lines.append(stop_line(stop, where))
        return lines

    @staticmethod
    def _header(thread, frame, abi):
        name = thread.GetName()
        reason = thread.GetStopDescription(256)
        text = "* thread #%d" % thread.GetIndexID()
        if name:
            text += ", name = '%s'" % name
        if reason:
            text += ", stop reason = %s" % reason
        return text + "  (SFrame unwind from frame #%d, %s)" % (frame.GetFrameID(), abi.name)


def _walk(target, thread, frame, opts, limit):
    """(the frame walked from: the thread's newest if `frame` is none, its rows, the Stop) of one
    thread, with `opts`' fallback, registers and CFI."""
    if frame is None or not frame.IsValid():
        frame = thread.GetFrameAtIndex(0)
    sync(target)
    rows, stop = frame_rows(unwind(target, frame, limit, fp_fallback=opts.fp_fallback, callee_saved=opts.registers,
                                   cfi=opts.eh_frame))
    return frame, rows, stop


def function_name(target, row, start):
    """'symbol+offset' of a frame (a return address by the call before it), as the CLI's JSON has it."""
    f = row.frame
    if row.trampoline:
        return SIGNAL_TRAMPOLINE
    _mod, name, sym_start = symbol_at(target, lookup_address(f.pc, f.level > start and not f.interrupted))
    return "%s+%d" % (name, f.pc - sym_start) if name and sym_start is not None else "??"


def module_name(target, pc):
    mod = symbol_at(target, pc)[0]
    return mod or "??"


def unwind(target, frame, limit, fp_fallback=False, callee_saved=False, cfi=True):
    """The core's walk (frames, then a Stop) from an LLDB frame, through LLDB's memory and modules
    (`sync(target)` first)."""
    abi = abi_of(target)
    topmost = frame.GetFrameID() == 0
    return walk(frame_state(frame, abi, topmost), topmost=topmost, abi=abi, read=memory_reader(target.GetProcess()),
                find=finder(TRACKER.modules, owner_of(target)), limit=limit, fp_fallback=fp_fallback,
                symbol=symbol_namer(target), callee_saved=callee_saved, symbolize=symbolizer(target),
                cfi=loaded_cfi(abi).finder(place_of(target)) if cfi else None)
