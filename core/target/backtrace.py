"""`sframe backtrace CORE` and `sframe backtrace -p PID`: unwind the threads of an ELF core file or
of a running process with SFrame, no debugger.

For a core, registers come from its NT_PRSTATUS notes, memory from its PT_LOAD segments (with
the mapped files for what it left out), modules and biases from NT_FILE (or the dynamic
linker's list in qemu-user cores); for a process, from ptrace, /proc/PID/mem and
/proc/PID/maps (core.target.live), while its threads are held stopped.  Where no SFrame covers a PC
(the C library on Debian), the module's DWARF CFI (`.eh_frame`, `.debug_frame`: core.dwarf.rows)
unwinds the frame, unless `cfi=False`.  Each frame is printed with its PC, symbol, module, CFA
and how it was unwound, then the stop reason, like GDB's "Backtrace stopped: ...":

    #1   0x000055555555522d in in_handler+9 (prog)  CFA 0x00007fffffffd970  [sframe]
    #3   0x0000555555555201 in <signal handler called> (prog)  CFA 0x00007fffffffd980  [sframe]
    #4   0x00005555555552a8 in poke+40 (prog)  CFA 0x00007fffffffe650  [signal frame]
    #9   0x00007ffff7dd124a in __libc_start_call_main+122 (libc.so.6)  CFA 0x00007fffffffe710  [DWARF CFI]

The CFA of a frame is known once its caller has been unwound, so the frame where the walk stops
shows "CFA unknown".  The signal trampoline's row (GDB's "<signal handler called>") shows the
stack pointer at the trampoline, where the kernel's signal frame starts.

Symbols come from the module's .symtab (else .dynsym), or from its separate debug file found by
build ID under <sysroot>/usr/lib/debug/.build-id; PLT entries are named `sym@plt` from the
module's PLT relocations.
"""

import contextlib
import io
import json
import os
import signal as _signal
import sys
import threading
from typing import Dict, Iterator, List, Optional, TextIO, Tuple, Union

from ..dwarf.rows import CfiRow, CfiRows
from ..elf.image import ElfImage, load_elf, section_data, section_headers
from ..errors import ElfError, ProcessError
from ..report.text import registers_line
from ..unwind import ahead
from ..unwind.modules import ModuleSet, finder
from ..unwind.unwinder import DEFAULT_DEPTH_LIMIT, Frame, FrameRow, Stop, frame_from_registers, frame_rows, lookup_address
from .corefile import CoreFile
from .corenotes import Thread, iter_notes

SIGNAL_TRAMPOLINE = "<signal handler called>"
SHT_NOTE = 7
NT_GNU_BUILD_ID = 3


def _signame(num):
    try:
        return _signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


class _Symbols:
    """An extra symbol source for one mapped file: its separate debug file (by build ID)."""

    def __init__(self, path, sysroot):
        self.debug = None
        try:
            self._load(path, sysroot)
        except Exception:          # symbols are a nicety: never let a strange file stop a backtrace
            self.debug = None

    def _load(self, path, sysroot):
        def load(elf, _fh):
            order = "<" if elf.little_endian else ">"
            sections = section_headers(elf)
            build_id = None
            for sec in sections:
                if sec.type == SHT_NOTE:
                    for name, ntype, desc in iter_notes(section_data(elf, sec), order, path):
                        if name == "GNU" and ntype == NT_GNU_BUILD_ID:
                            build_id = desc.hex()
            return build_id, any(sec.name == ".symtab" for sec in sections)
        build_id, has_symtab = load_elf(path, load, "notes")
        if build_id and not has_symtab:
            for root in ([sysroot] if sysroot else []) + ["/"]:
                cand = os.path.join(root, "usr/lib/debug/.build-id", build_id[:2], build_id[2:] + ".debug")
                if os.path.isfile(cand):
                    try:
                        self.debug = ElfImage(cand)
                    except ElfError:
                        self.debug = None
                    break


class Session:
    """A stopped program, its modules with SFrame (and DWARF CFI for the others), and symbolization:
    what a backtrace needs.  `target` is a core.target.corefile.CoreFile or a core.target.live.LiveProcess
    (threads, read, modules, module_at)."""

    def __init__(self, target, sysroot: Optional[str] = None, cfi: bool = True):
        self.target = target
        self.sysroot = sysroot
        self.abi = target.abi
        self.cfi = cfi
        self.modules = ModuleSet()
        self._extra: dict = {}
        self._symbols: Dict[int, Optional[Tuple[str, int]]] = {}
        self._cfi_rows: Dict[str, CfiRows] = {}
        for mod in target.modules():
            if mod.image is not None:
                self.modules.add(mod.path, mod.image.path, bias=mod.bias)

    def _symbols_of(self, mod):
        key = mod.image.path
        if key not in self._extra:
            self._extra[key] = _Symbols(key, self.sysroot)
        return self._extra[key]

    def symbolize(self, pc: int) -> Optional[Tuple[str, int]]:
        """(name, offset) of the symbol holding pc, or None (memoized: a deep stack repeats PCs)."""
        if pc in self._symbols:
            return self._symbols[pc]
        s = self._symbols[pc] = self._symbolize(pc)
        return s

    def _symbolize(self, pc: int) -> Optional[Tuple[str, int]]:
        mod = self.target.module_at(pc)
        if mod is None or mod.image is None:
            return None
        extra = self._symbols_of(mod)
        s: Optional[Tuple[str, int]]
        try:          # symbols are a nicety: a file that cannot be read (or is gone) names nothing
            s = mod.image.plt_name(pc, mod.bias)
            if s is None and extra.debug is not None:
                s = extra.debug.symbolize(pc, mod.bias)
            if s is None:
                s = mod.image.symbolize(pc, mod.bias)
        except ElfError:
            s = None
        return s

    def symbol(self, pc: int) -> Optional[str]:
        """'name+off' for pc, or None."""
        s = self.symbolize(pc)
        if s is None:
            return None
        return s[0] if s[1] == 0 else "%s+%d" % s

    def module_name(self, pc: int) -> str:
        mod = self.target.module_at(pc)
        return os.path.basename(mod.path) if mod else "??"

    def initial_frame(self, thread: Thread) -> Frame:
        regs = {k: v for k, v in thread.registers.items() if isinstance(k, int)}
        sp_num = self.abi.sp

        def read(num):
            return thread.sp if num == sp_num else regs.get(num)
        return frame_from_registers(self.abi, thread.pc, read, full=True, regs=regs)

    def _owner(self, pc: int) -> Optional[str]:
        mod = self.target.module_at(pc)
        return mod.image.path if mod is not None and mod.image is not None else None

    def trampoline_name(self, pc: int) -> Optional[str]:
        """Symbol name at pc, for the unwinder's signal-trampoline recognition (`symbol=`).

        The trampoline is entered by a return from the handler, at its first instruction, so
        the name is that of the function starting at or containing pc itself (not pc - 1).
        """
        s = self.symbol(pc)
        return s.split("+")[0] if s else None

    def cfi_row(self, pc: int) -> Optional[CfiRow]:
        """The DWARF CFI rules at pc, from the file mapped there (for PCs no SFrame covers)."""
        mod = self.target.module_at(pc)
        if mod is None or mod.image is None:
            return None
        rows = self._cfi_rows.get(mod.image.path)
        if rows is None:
            try:
                sections = mod.image.cfi_sections(mod.bias)
            except ElfError:
                sections = []
            rows = self._cfi_rows[mod.image.path] = CfiRows(sections, self.abi)
        return rows.row(pc)

    def walk(self, thread: Thread, limit: int = DEFAULT_DEPTH_LIMIT,
             fp_fallback: bool = False, callee_saved: bool = False) -> Iterator[Union[Frame, Stop]]:
        return ahead.walk(self.initial_frame(thread), abi=self.abi, read=self.target.read,
                          find=finder(self.modules, self._owner), limit=limit, fp_fallback=fp_fallback,
                          symbol=self.trampoline_name, callee_saved=callee_saved, symbolize=self.symbolize,
                          cfi=self.cfi_row if self.cfi else None)


class CoreSession(Session):
    """A core file's Session."""

    def __init__(self, core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None, cfi: bool = True):
        super().__init__(CoreFile(core_path, sysroot=sysroot, exe=exe), sysroot, cfi)

    @property
    def core(self) -> CoreFile:
        return self.target


def _frame_symbol(session, frame, trampoline):
    if trampoline:
        return SIGNAL_TRAMPOLINE
    lookup_pc = lookup_address(frame.pc, frame.level > 0 and not frame.interrupted)
    sym = session.symbol(lookup_pc)
    if sym is not None and lookup_pc != frame.pc:
        name, _, off = sym.partition("+")
        sym = "%s+%d" % (name, int(off or 0) + 1)
    return sym or "??"


def format_frame(session: Session, row: FrameRow) -> str:
    """The printed line of one frame (a core.unwind.unwinder.FrameRow)."""
    frame, cfa, trampoline = row.frame, row.cfa, row.trampoline
    how = _how(frame)
    return "#%-3d 0x%016x in %s (%s)  CFA %s  [%s]" % (
        frame.level, frame.pc, _frame_symbol(session, frame, trampoline), session.module_name(frame.pc),
        "0x%016x" % cfa if cfa is not None else "unknown", how)


def _how(frame: Frame) -> str:
    how = "registers" if frame.level == 0 else frame.method.value if frame.method else "?"
    if frame.ra_stripped:
        how += ", RA signature stripped"
    return how


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
                     as_json: bool = False) -> None:
    """Every thread's backtrace (or the first thread's), as text or as one JSON document."""
    threads = session.target.threads if all_threads else session.target.threads[:1]
    doc: dict = {"target": what, "abi": session.abi.name, "threads": [], "warnings": list(session.target.warnings),
                 "modules_with_sframe": [str(m.key) for m in session.modules.with_sframe()], "cfi": session.cfi}
    if not as_json:
        out.write(_header(session, what, fp_fallback) + "\n")
        for w in session.target.warnings:
            out.write("warning: %s\n" % w)
    for n, t in enumerate(threads):
        rows, stop = frame_rows(session.walk(t, limit=limit, fp_fallback=fp_fallback, callee_saved=registers))
        if as_json:
            doc["threads"].append(_thread_doc(session, t, rows, stop, registers))
            continue
        out.write("\nThread %d (LWP %d)%s:\n" % (n + 1, t.tid, ", %s" % _signame(t.signal) if t.signal else ""))
        for row in rows:
            out.write(format_frame(session, row) + "\n")
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
    frames = []
    for row in rows:
        f = row.frame
        d = {"level": f.level, "pc": f.pc, "function": _frame_symbol(session, f, row.trampoline),
             "module": session.module_name(f.pc), "cfa": row.cfa, "how": _how(f)}
        if registers:
            d["registers"] = {session.abi.regname(r): f.regs.get(r) for r in session.abi.callee_saved}
        frames.append(d)
    return {"lwp": t.tid, "signal": _signame(t.signal) if t.signal else None, "frames": frames,
            "stop": None if stop is None else {"reason": stop.reason.name, "text": stop.text, "pc": stop.pc,
                                               "message": _stop_line(session, stop)}}


def backtrace_core(core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None,
                   all_threads: bool = False, out: Optional[TextIO] = None, limit: int = DEFAULT_DEPTH_LIMIT,
                   fp_fallback: bool = False, registers: bool = False, cfi: bool = True, as_json: bool = False) -> int:
    session = CoreSession(core_path, exe=exe, sysroot=sysroot, cfi=cfi)
    try:
        print_backtraces(session, "Core %s" % core_path, out or sys.stdout, all_threads, limit, fp_fallback,
                         registers, as_json)
    finally:
        session.target.close()
    return 0


def backtrace_process(pid: int, all_threads: bool = False, out: Optional[TextIO] = None,
                      limit: int = DEFAULT_DEPTH_LIMIT, fp_fallback: bool = False, registers: bool = False,
                      cfi: bool = True, as_json: bool = False) -> int:
    """The running process's threads are held stopped from before the first register is read
    until the last frame is unwound (then let go, also on an error or an interrupt), and the
    text is printed after that: the process waits for the unwinding, not for the output."""
    from .live import LiveProcess
    out = out or sys.stdout
    text = io.StringIO()
    with _interruptible(), LiveProcess(pid, all_threads=all_threads) as proc:
        session = Session(proc, proc.sysroot, cfi)
        name = os.path.basename(proc.exe_path() or "?")
        print_backtraces(session, "Process %d (%s)" % (pid, name), text, all_threads, limit, fp_fallback,
                         registers, as_json)
        proc.check_still_there()
    out.write(text.getvalue())
    return 0


class _Terminated(BaseException):
    """Raised by a terminating signal (SIGTERM, SIGHUP) so that held threads are let go first."""


@contextlib.contextmanager
def _interruptible():
    """SIGTERM and SIGHUP raise _Terminated (SIGINT already raises KeyboardInterrupt) while threads
    are held, so the `with` that holds them lets them go; the signal's usual end follows.  A
    signal that was ignored (nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: List[int] = []
    active = [True]

    def handler(signum, _frame):
        got.append(signum)
        if active[0] and len(got) == 1:
            raise _Terminated()
    old = {}
    try:
        for sig in (_signal.SIGTERM, _signal.SIGHUP):
            prev = _signal.getsignal(sig)
            if prev is not _signal.SIG_IGN and prev is not None:     # (None: a handler set from C)
                old[sig] = prev
                _signal.signal(sig, handler)
        yield
    except _Terminated:
        pass
    finally:
        active[0] = False
        for sig, h in old.items():
            _signal.signal(sig, h)
    if got:
        os.kill(os.getpid(), got[0])       # die of it as if it had not been caught
        raise ProcessError("interrupted by %s" % _signame(got[0]))   # (its handler let this process live)
