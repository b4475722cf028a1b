"""`sframe backtrace CORE`: unwind every thread of an ELF core file with SFrame, no debugger.

Registers come from the core's NT_PRSTATUS notes, memory from its PT_LOAD segments (with the
mapped files for what it left out), modules and biases from NT_FILE (or the dynamic linker's
list in qemu-user cores).  Each frame is printed with its PC, symbol, module, CFA and how it was
unwound, then the stop reason, like GDB's "Backtrace stopped: ...".
"""

import os
import signal as _signal

from .corefile import CoreFile
from .modules import ModuleSet
from .unwind import DEFAULT_DEPTH_LIMIT, Frame, Method, Stop, walk


def _signame(num):
    try:
        return _signal.Signals(num).name
    except ValueError:
        return "signal %d" % num


class CoreSession:
    """A core file, its modules with SFrame, and symbolization: what a backtrace needs."""

    def __init__(self, core_path, exe=None, sysroot=None):
        self.core = CoreFile(core_path, sysroot=sysroot, exe=exe)
        self.abi = self.core.abi
        self.modules = ModuleSet()
        for mod in self.core.modules():
            if mod.image is not None:
                self.modules.add(mod.path, mod.image.path, bias=mod.bias)

    def symbol(self, pc):
        """'name+off' for pc, or None."""
        mod = self.core.module_at(pc)
        if mod is None or mod.image is None:
            return None
        s = mod.image.symbolize(pc, mod.bias)
        if s is None:
            return None
        return s[0] if s[1] == 0 else "%s+%d" % s

    def module_name(self, pc):
        mod = self.core.module_at(pc)
        return os.path.basename(mod.path) if mod else "??"

    def initial_frame(self, thread):
        regs = {k: v for k, v in thread.registers.items() if isinstance(k, int)}
        abi = self.abi
        return Frame(pc=thread.pc, sp=thread.sp, fp=regs.get(abi.fp),
                     ra=regs.get(abi.ra) if abi.name != "amd64" else None, regs=regs)

    def walk(self, thread, limit=DEFAULT_DEPTH_LIMIT, fp_fallback=False):
        def symbol_name(pc):
            s = self.symbol(pc)
            return s.split("+")[0] if s else None
        return walk(self.initial_frame(thread), abi=self.abi, read=self.core.read, find=self.modules.find,
                    limit=limit, fp_fallback=fp_fallback, symbol=symbol_name)


def frame_rows(items):
    """Pair each frame with its own CFA (known once its caller was unwound): [(frame, cfa)], stop."""
    frames, stop = [], None
    for item in items:
        if isinstance(item, Stop):
            stop = item
        else:
            if frames and item.cfa is not None:
                frames[-1] = (frames[-1][0], item.cfa)
            frames.append((item, None))
    return frames, stop


def format_frame(session, frame, cfa):
    lookup_pc = frame.pc - 1 if frame.level > 0 and not frame.interrupted else frame.pc
    sym = session.symbol(lookup_pc)
    if sym is not None and lookup_pc != frame.pc:
        name, _, off = sym.partition("+")
        sym = "%s+%d" % (name, int(off or 0) + 1)
    how = "registers" if frame.level == 0 else frame.method.value if frame.method else "?"
    if frame.ra_stripped:
        how += ", RA signature stripped"
    return "#%-3d 0x%016x in %s (%s)  CFA %s  [%s]" % (
        frame.level, frame.pc, sym or "??", session.module_name(frame.pc),
        "0x%016x" % cfa if cfa is not None else "unknown", how)


def backtrace_core(core_path, exe=None, sysroot=None, all_threads=False, out=None, limit=DEFAULT_DEPTH_LIMIT,
                   fp_fallback=False):
    import sys
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
        frames, stop = frame_rows(session.walk(t, limit=limit, fp_fallback=fp_fallback))
        for frame, cfa in frames:
            out.write(format_frame(session, frame, cfa) + "\n")
        if stop is not None:
            where = ""
            if stop.pc is not None:
                where = " (at 0x%x in %s)" % (stop.pc, session.module_name(stop.pc))
            out.write(stop.message + where + "\n")
    return 0
