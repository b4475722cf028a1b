"""`sframe backtrace` (`sframe bt`): a thread unwound with SFrame by the plugin itself."""

from ...core.report.frames import frame_line, registers_line, stop_line
from ...core.unwind.modules import finder
from ...core.unwind.unwinder import DEFAULT_DEPTH_LIMIT, frame_rows, walk
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
    symbol_namer,
    symbolizer,
    sync,
    where_of,
)
from .common import Command, parse_options, positive_count


class BacktraceCommand(Command):
    short = "Backtrace of a thread unwound with SFrame (not with LLDB's unwinder)."
    long = """Syntax: sframe backtrace [-c COUNT] [-t THREAD] [-f] [-r] [-n]
        sframe bt ...

Unwinds the selected thread (or thread #THREAD, LLDB's index as `thread list` shows it) from its
selected frame with the SFrame sections of the loaded modules, and with their DWARF CFI where no
SFrame covers a PC (the C library), reading registers and memory through LLDB; works on live
processes and core files.  Each line gives the frame like `bt`, what unwinds it in [brackets]
(what covers its PC and so found its caller: sframe, DWARF CFI, frame pointer, signal frame; on
the last frame: outermost, no SFrame or not unwound) and its CFA, with the FDE that gave it.  The
last line says why the unwind stopped.

  -c COUNT   print at most COUNT frames
  -t THREAD  unwind thread #THREAD instead of the selected one (from its selected frame)
  -f         follow the frame-pointer chain through code without SFrame
  -r         print each frame's callee-saved registers: in callers, those the function's own
             code proves saved or unchanged (the rest <not saved>)
  -n         --no-eh-frame: stop where no SFrame covers the PC, instead of going on by the
             module's DWARF CFI (.eh_frame, .debug_frame; such frames are marked [DWARF CFI]),
             to see what SFrame alone covers
"""
    usage = "sframe backtrace [-c COUNT] [-t THREAD] [-f] [-r] [-n]"
    spec = {"-c": ("count", positive_count), "--count": ("count", positive_count),
            "-t": ("thread", positive_count), "--thread": ("thread", positive_count),
            "-f": ("fp", None), "--frame-pointer": ("fp", None),
            "-r": ("registers", None), "--registers": ("registers", None),
            "-n": ("no_cfi", None), "--no-eh-frame": ("no_cfi", None)}

    def run(self, debugger, command, exe_ctx):
        opts, rest = parse_options(command, self.spec, self.usage)
        if rest:
            raise UserError("unexpected argument %r (%s)" % (rest[0], self.usage))
        target = self._target(exe_ctx, debugger)
        process = target.GetProcess()
        if not has_state(process):
            raise UserError("no stopped process or core file to unwind (run, attach or target create --core)")
        if "thread" in opts:
            thread = process.GetThreadByIndexID(opts["thread"])
            if not thread.IsValid():
                raise UserError("no thread #%d (thread list shows them)" % opts["thread"])
            frame = thread.GetSelectedFrame()
        else:
            thread = exe_ctx.GetThread()
            if not thread.IsValid():
                thread = process.GetSelectedThread()
            frame = exe_ctx.GetFrame() if exe_ctx.GetThread().IsValid() else thread.GetSelectedFrame()
        if not thread.IsValid():
            raise UserError("no thread to unwind")
        if frame is None or not frame.IsValid():
            frame = thread.GetFrameAtIndex(0)
        sync(target)
        abi = abi_of(target)
        topmost = frame.GetFrameID() == 0
        count = opts.get("count")
        items = unwind(target, frame, count + 1 if count else DEFAULT_DEPTH_LIMIT, fp_fallback=bool(opts.get("fp")),
                       callee_saved=bool(opts.get("registers")), cfi=not opts.get("no_cfi"))
        initial = frame_state(frame, abi, topmost)
        rows, stop = frame_rows(items)
        lines = [self._header(thread, frame, abi)]
        selected = thread.GetSelectedFrame().GetFrameID()
        start = initial.level
        shown = rows[:count] if count else rows
        for row in shown:
            fr = row.frame
            lines.append(frame_line(fr.level, row, stop, where_of(target, fr.pc, fr.level > start and not fr.interrupted),
                                    selected=fr.level == selected))
            if opts.get("registers"):
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


def unwind(target, frame, limit, fp_fallback=False, callee_saved=False, cfi=True):
    """The core's walk (frames, then a Stop) from an LLDB frame, through LLDB's memory and modules
    (`sync(target)` first)."""
    abi = abi_of(target)
    topmost = frame.GetFrameID() == 0
    return walk(frame_state(frame, abi, topmost), topmost=topmost, abi=abi, read=memory_reader(target.GetProcess()),
                find=finder(TRACKER.modules, owner_of(target)), limit=limit, fp_fallback=fp_fallback,
                symbol=symbol_namer(target), callee_saved=callee_saved, symbolize=symbolizer(target),
                cfi=loaded_cfi(abi).finder(place_of(target)) if cfi else None)
