"""`sframe backtrace CORE`: unwind every thread of an ELF core file with SFrame, no debugger.

Registers come from the core's NT_PRSTATUS notes, memory from its PT_LOAD segments (with the
mapped files for what it left out), modules and biases from NT_FILE (or the dynamic linker's
list in qemu-user cores).  Each frame is printed with its PC, symbol, module, CFA and how it was
unwound, then the stop reason, like GDB's "Backtrace stopped: ...":

    #1   0x000055555555522d in in_handler+9 (prog)  CFA 0x00007fffffffd970  [sframe]
    #3   0x0000555555555201 in <signal handler called> (prog)  CFA 0x00007fffffffd980  [sframe]
    #4   0x00005555555552a8 in poke+40 (prog)  CFA 0x00007fffffffe650  [signal frame]

The CFA of a frame is known once its caller has been unwound, so the frame where the walk stops
shows "CFA unknown".  The signal trampoline's row (GDB's "<signal handler called>") shows the
stack pointer at the trampoline, where the kernel's signal frame starts.

Symbols come from the module's .symtab (else .dynsym), or from its separate debug file found by
build ID under <sysroot>/usr/lib/debug/.build-id; PLT entries are named `sym@plt` from the
module's PLT relocations.
"""

import os
import signal as _signal
import sys
from typing import Iterator, Optional, TextIO, Tuple, Union

from . import ahead
from .corefile import CoreFile
from .corenotes import Thread
from .elf import ElfImage
from .errors import ElfError
from .modules import ModuleSet, finder
from .text import registers_line
from .unwind import DEFAULT_DEPTH_LIMIT, Frame, FrameRow, Stop, frame_from_registers, frame_rows, lookup_address

SIGNAL_TRAMPOLINE = "<signal handler called>"


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
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            build_id = None
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_NOTE":
                    for note in sec.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = note["n_desc"]
            if build_id and elf.get_section_by_name(".symtab") is None:
                for root in ([sysroot] if sysroot else []) + ["/"]:
                    cand = os.path.join(root, "usr/lib/debug/.build-id", build_id[:2], build_id[2:] + ".debug")
                    if os.path.isfile(cand):
                        try:
                            self.debug = ElfImage(cand)
                        except ElfError:
                            self.debug = None
                        break


class CoreSession:
    """A core file, its modules with SFrame, and symbolization: what a backtrace needs."""

    def __init__(self, core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None):
        self.core = CoreFile(core_path, sysroot=sysroot, exe=exe)
        self.sysroot = sysroot
        self.abi = self.core.abi
        self.modules = ModuleSet()
        self._extra: dict = {}
        for mod in self.core.modules():
            if mod.image is not None:
                self.modules.add(mod.path, mod.image.path, bias=mod.bias)

    def _symbols_of(self, mod):
        key = mod.image.path
        if key not in self._extra:
            self._extra[key] = _Symbols(key, self.sysroot)
        return self._extra[key]

    def symbolize(self, pc: int) -> Optional[Tuple[str, int]]:
        """(name, offset) of the symbol holding pc, or None."""
        mod = self.core.module_at(pc)
        if mod is None or mod.image is None:
            return None
        extra = self._symbols_of(mod)
        s: Optional[Tuple[str, int]]
        try:
            s = mod.image.plt_name(pc, mod.bias)
        except ElfError:
            s = None
        if s is None and extra.debug is not None:
            s = extra.debug.symbolize(pc, mod.bias)
        if s is None:
            s = mod.image.symbolize(pc, mod.bias)
        return s

    def symbol(self, pc: int) -> Optional[str]:
        """'name+off' for pc, or None."""
        s = self.symbolize(pc)
        if s is None:
            return None
        return s[0] if s[1] == 0 else "%s+%d" % s

    def module_name(self, pc: int) -> str:
        mod = self.core.module_at(pc)
        return os.path.basename(mod.path) if mod else "??"

    def initial_frame(self, thread: Thread) -> Frame:
        regs = {k: v for k, v in thread.registers.items() if isinstance(k, int)}
        sp_num = self.abi.sp

        def read(num):
            return thread.sp if num == sp_num else regs.get(num)
        return frame_from_registers(self.abi, thread.pc, read, full=True, regs=regs)

    def _owner(self, pc: int) -> Optional[str]:
        mod = self.core.module_at(pc)
        return mod.image.path if mod is not None and mod.image is not None else None

    def trampoline_name(self, pc: int) -> Optional[str]:
        """Symbol name at pc, for the unwinder's signal-trampoline recognition (`symbol=`).

        The trampoline is entered by a return from the handler, at its first instruction, so
        the name is that of the function starting at or containing pc itself (not pc - 1).
        """
        s = self.symbol(pc)
        return s.split("+")[0] if s else None

    def walk(self, thread: Thread, limit: int = DEFAULT_DEPTH_LIMIT,
             fp_fallback: bool = False, callee_saved: bool = False) -> Iterator[Union[Frame, Stop]]:
        return ahead.walk(self.initial_frame(thread), abi=self.abi, read=self.core.read,
                          find=finder(self.modules, self._owner), limit=limit, fp_fallback=fp_fallback,
                          symbol=self.trampoline_name, callee_saved=callee_saved, symbolize=self.symbolize)


def _frame_symbol(session, frame, trampoline):
    if trampoline:
        return SIGNAL_TRAMPOLINE
    lookup_pc = lookup_address(frame.pc, frame.level > 0 and not frame.interrupted)
    sym = session.symbol(lookup_pc)
    if sym is not None and lookup_pc != frame.pc:
        name, _, off = sym.partition("+")
        sym = "%s+%d" % (name, int(off or 0) + 1)
    return sym or "??"


def format_frame(session: CoreSession, row: FrameRow) -> str:
    """The printed line of one frame (a core.unwind.FrameRow)."""
    frame, cfa, trampoline = row.frame, row.cfa, row.trampoline
    how = "registers" if frame.level == 0 else frame.method.value if frame.method else "?"
    if frame.ra_stripped:
        how += ", RA signature stripped"
    return "#%-3d 0x%016x in %s (%s)  CFA %s  [%s]" % (
        frame.level, frame.pc, _frame_symbol(session, frame, trampoline), session.module_name(frame.pc),
        "0x%016x" % cfa if cfa is not None else "unknown", how)


def backtrace_core(core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None,
                   all_threads: bool = False, out: Optional[TextIO] = None, limit: int = DEFAULT_DEPTH_LIMIT,
                   fp_fallback: bool = False, registers: bool = False) -> int:
    out = out or sys.stdout
    session = CoreSession(core_path, exe=exe, sysroot=sysroot)
    threads = session.core.threads if all_threads else session.core.threads[:1]
    with_sf = [os.path.basename(m.path) for m in session.modules.with_sframe()]
    out.write("Core %s: %s, %d thread%s; modules with SFrame: %s%s\n" % (
        core_path, session.abi.name, len(session.core.threads), "" if len(session.core.threads) == 1 else "s",
        ", ".join(with_sf) or "none",
        "; frame-pointer fallback on" if fp_fallback else "; modules without SFrame end the walk (--fp-fallback continues by frame pointer)"))
    for w in session.core.warnings:
        out.write("warning: %s\n" % w)
    for n, t in enumerate(threads):
        out.write("\nThread %d (LWP %d)%s:\n" % (n + 1, t.tid, ", %s" % _signame(t.signal) if t.signal else ""))
        rows, stop = frame_rows(session.walk(t, limit=limit, fp_fallback=fp_fallback, callee_saved=registers))
        for row in rows:
            out.write(format_frame(session, row) + "\n")
            if registers:
                out.write(registers_line(session.abi, row.frame, "     ") + "\n")
        if stop is not None:
            where = ""
            if stop.pc is not None:
                where = " (at 0x%x in %s)" % (stop.pc, session.module_name(stop.pc))
            out.write(stop.message + where + "\n")
    return 0
