"""The text (or JSON) of `sframe backtrace`: every thread's frames, one line each, and why the walk
stopped.

For a core, registers come from its NT_PRSTATUS notes, memory from its PT_LOAD segments (with
the mapped files for what it left out), modules and biases from NT_FILE (or the dynamic
linker's list in qemu-user cores); for a process, from ptrace, /proc/PID/mem and
/proc/PID/maps (core.target.live), while its threads are held stopped.  Where no SFrame covers a PC
(the C library on Debian), the module's DWARF CFI (`.eh_frame`, `.debug_frame`: core.dwarf.rows)
unwinds the frame, unless `cfi=False`.  Each frame is printed with its PC, symbol, module, CFA
and what unwinds it (core.report.frames.unwound_by: what covers its PC and so found its caller),
then the stop reason, like GDB's "Backtrace stopped: ...":

    #1   0x000055555555522d in in_handler+9 (prog)  CFA 0x00007fffffffd970  [sframe]
    #3   0x0000555555555201 in <signal handler called> (prog)  CFA 0x00007fffffffd980  [signal frame]
    #4   0x00005555555552a8 in poke+40 (prog)  CFA 0x00007fffffffe650  [sframe]
    #9   0x00007ffff7dd124a in __libc_start_call_main+122 (libc.so.6)  CFA 0x00007fffffffe710  [DWARF CFI]
    #11  0x0000555555555075 in _start+37 (prog)  CFA unknown  [outermost]

The CFA of a frame is known once its caller has been unwound, so the frame where the walk stops
shows "CFA unknown".  The signal trampoline's row (GDB's "<signal handler called>") shows the
stack pointer at the trampoline, where the kernel's signal frame starts.
"""

import json
import os
import sys
from typing import Optional, TextIO

from ..target.corenotes import Thread
from ..target.session import Session
from ..target.signals import signame
from ..unwind.unwinder import DEFAULT_DEPTH_LIMIT, FrameRow, Stop, frame_rows, lookup_address
from .frames import SIGNAL_TRAMPOLINE, frames_doc, registers_line, unwound_by


def _frame_symbol(session, frame, trampoline):
    if trampoline:
        return SIGNAL_TRAMPOLINE
    lookup_pc = lookup_address(frame.pc, frame.level > 0 and not frame.interrupted)
    sym = session.symbol(lookup_pc)
    if sym is not None and lookup_pc != frame.pc:
        name, _, off = sym.partition("+")
        sym = "%s+%d" % (name, int(off or 0) + 1)
    return sym or "??"


def format_frame(session: Session, row: FrameRow, stop: Optional[Stop] = None) -> str:
    """The printed line of one frame (a core.unwind.unwinder.FrameRow; `stop` ends the walk)."""
    frame, cfa, trampoline = row.frame, row.cfa, row.trampoline
    how = unwound_by(row, stop)
    return "#%-3d 0x%016x in %s (%s)  CFA %s  [%s]" % (
        frame.level, frame.pc, _frame_symbol(session, frame, trampoline), session.module_name(frame.pc),
        "0x%016x" % cfa if cfa is not None else "unknown", how)


def _header(session: Session, what: str, fp_fallback: bool) -> str:
    target = session.target
    n = len(target.threads)
    with_sf = [os.path.basename(str(m.key)) for m in session.modules.with_sframe()]
    if session.cfi:
        rest = "; DWARF CFI where there is no SFrame"
    else:
        rest = "; modules without SFrame end the walk"
    if fp_fallback:
        rest += "; frame-pointer fallback on"
    return "%s: %s, %d thread%s; modules with SFrame: %s%s" % (
        what, session.abi.name, n, "" if n == 1 else "s", ", ".join(with_sf) or "none", rest)


def print_backtraces(session: Session, what: str, out: TextIO, all_threads: bool = False,
                     limit: int = DEFAULT_DEPTH_LIMIT, fp_fallback: bool = False, registers: bool = False,
                     as_json: bool = False, err: Optional[TextIO] = None, thread: Optional[int] = None) -> None:
    """Every thread's backtrace (or the first thread's, or thread number `thread`'s, counting from
    1), as text or as one JSON document (which holds the warnings; as text they go to `err`,
    standard error by default)."""
    numbered = list(enumerate(session.target.threads, 1))
    if thread is not None:
        threads = numbered[thread - 1:thread]
    else:
        threads = numbered if all_threads else numbered[:1]
    doc: dict = {"target": what, "abi": session.abi.name, "threads": [], "warnings": list(session.target.warnings),
                 "modules_with_sframe": [str(m.key) for m in session.modules.with_sframe()], "cfi": session.cfi}
    if not as_json:
        out.write(_header(session, what, fp_fallback) + "\n")
        for w in session.target.warnings:
            (err or sys.stderr).write("warning: %s\n" % w)
    for n, t in threads:
        rows, stop = frame_rows(session.walk(t, limit=limit, fp_fallback=fp_fallback, callee_saved=registers))
        if as_json:
            doc["threads"].append(_thread_doc(session, t, rows, stop, registers))
            continue
        out.write("\nThread %d (LWP %d)%s:\n" % (n, t.tid, ", %s" % signame(t.signal) if t.signal else ""))
        for row in rows:
            out.write(format_frame(session, row, stop) + "\n")
            if registers:
                out.write(registers_line(session.abi, row.frame, "     ") + "\n")
        if stop is not None:
            out.write(_stop_line(session, stop) + "\n")
    if as_json:
        json.dump(doc, out, indent=1)
        out.write("\n")


def _stop_line(session: Session, stop: Stop) -> str:
    where = ""
    if stop.pc is not None:
        where = " (at 0x%x in %s)" % (stop.pc, session.module_name(stop.pc))
    return stop.message + where


def _thread_doc(session: Session, t: Thread, rows, stop: Optional[Stop], registers: bool) -> dict:
    doc = frames_doc(rows, stop, session.abi, lambda row: _frame_symbol(session, row.frame, row.trampoline),
                     session.module_name, _stop_line(session, stop) if stop is not None else "", registers)
    return {"lwp": t.tid, "signal": signame(t.signal) if t.signal else None, **doc}
