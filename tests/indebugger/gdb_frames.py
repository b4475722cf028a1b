"""GDB-side helper for tests/test_gdb.py: `source` it in a GDB session under test.

Commands (all print lines a test can parse, and never abort a batch script):

  regs-dump LABEL REG...    one line per frame: REGS LABEL LEVEL REG=VALUE... (VALUE "-" where GDB has
                            none: <not saved>, unavailable, optimized out)
  frames-dump LABEL [MAX]   one line per frame: FRAME LABEL LEVEL PC CFA SFRAME NAME WHERE
                            (CFA = "frame at" of `info frame`, from the frame id; SFRAME 1 when the SFrame
                            unwinder unwound that frame; WHERE = symbol+offset of the PC), then
                            ENDFRAMES LABEL COUNT REASON
  dwarf-unwinders on|off    GDB 13: maint set dwarf unwinders; GDB 16+: maint frame-unwinder
  try-cmd COMMAND...        run COMMAND; print its output, then TRY-OK, or TRY-ERROR: message
  mark TEXT                 print MARK TEXT (section separators in the output)
"""

import re

import gdb

_FRAME_AT = re.compile(r"frame at (0x[0-9a-fA-F]+)")
_FRAME_ID = re.compile(r"\{stack=(0x[0-9a-fA-F]+)")
_SYMBOL = re.compile(r"^(\S+)(?: \+ (\d+))? in section")


def _where(pc):
    try:
        text = gdb.execute("info symbol %#x" % pc, to_string=True)
    except gdb.error:
        return "??"
    m = _SYMBOL.match(text)
    return "%s+%s" % (m.group(1), m.group(2) or 0) if m else "??"


def _cfa(frame, level):
    """"frame at" of `info frame`: the stack address of the frame id, which str(gdb.Frame) shows
    (`info frame` itself can fail half-way on some frames, e.g. AArch64 signal frames with SVE)."""
    m = _FRAME_ID.match(str(frame))
    if m:
        return int(m.group(1), 16)
    try:
        text = gdb.execute("info frame level %d" % level, to_string=True)
    except gdb.error:
        return None
    m = _FRAME_AT.search(text)
    return int(m.group(1), 16) if m else None


def _sframe_levels():
    try:
        import sframekit.sframe_gdb.plugin as p
    except ImportError:
        return {}
    plugin = p.current()
    if plugin is None or not plugin.enabled:
        return {}
    return plugin.unwinder.last


class FramesDump(gdb.Command):
    """frames-dump LABEL [MAX]: print PC and CFA of every frame."""

    def __init__(self):
        super().__init__("frames-dump", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        argv = gdb.string_to_argv(arg)
        label = argv[0] if argv else "frames"
        limit = int(argv[1]) if len(argv) > 1 else 200
        n = 0
        reason = "none"
        try:
            gdb.invalidate_cached_frames()
            f = gdb.newest_frame()
            while f is not None and n < limit:
                level = f.level()
                pc = int(f.pc()) & 0xFFFFFFFFFFFFFFFF
                cfa = _cfa(f, level)
                rec = _sframe_levels().get(level)
                sf = 1 if rec is not None and rec[0] == pc and rec[2] is not None else 0
                name = f.name() or "??"
                gdb.write("FRAME %s %d %#x %s %d %s %s\n" % (label, level, pc, "-" if cfa is None else "%#x" % cfa,
                                                              sf, name, _where(pc)))
                n += 1
                nxt = f.older()
                if nxt is None:
                    r = f.unwind_stop_reason()
                    reason = gdb.frame_stop_reason_string(r).replace(" ", "_") if r else "none"
                f = nxt
        except gdb.error as exc:
            reason = "error:" + str(exc).replace(" ", "_")
        gdb.write("ENDFRAMES %s %d %s\n" % (label, n, reason))


class RegsDump(gdb.Command):
    """regs-dump LABEL REG...: print the named registers of every frame."""

    def __init__(self):
        super().__init__("regs-dump", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        argv = gdb.string_to_argv(arg)
        label, names = argv[0], argv[1:]
        try:
            f = gdb.newest_frame()
            while f is not None:
                parts = []
                for name in names:
                    try:
                        v = f.read_register(name)
                        if v.is_optimized_out:
                            text = "-"
                        elif v.type.strip_typedefs().code == gdb.TYPE_CODE_FLT:
                            text = str(v).replace(" ", "")      # (s390x f8-f15): compared as printed
                        else:
                            text = "%#x" % (int(v) & (2**64 - 1))
                    except (gdb.error, ValueError):
                        text = "-"
                    parts.append("%s=%s" % (name, text))
                gdb.write("REGS %s %d %s\n" % (label, f.level(), " ".join(parts)))
                f = f.older()
        except gdb.error as exc:
            gdb.write("REGS-ERROR %s %s\n" % (label, exc))


class DwarfUnwinders(gdb.Command):
    """dwarf-unwinders on|off: turn GDB's DWARF unwinders on or off (any GDB version)."""

    def __init__(self):
        super().__init__("dwarf-unwinders", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        on = arg.strip() == "on"
        try:
            gdb.execute("maint set dwarf unwinders %s" % ("on" if on else "off"), to_string=True)
        except gdb.error:
            gdb.execute("maint frame-unwinder %s -name dwarf2" % ("enable" if on else "disable"), to_string=True)
        gdb.execute("maint flush register-cache", to_string=True)
        gdb.write("DWARF %s\n" % ("on" if on else "off"))


class TryCmd(gdb.Command):
    """try-cmd COMMAND: run it, report an error instead of stopping the script."""

    def __init__(self):
        super().__init__("try-cmd", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        try:
            out = gdb.execute(arg, to_string=True)
        except gdb.error as exc:
            gdb.write("TRY-ERROR: %s\n" % exc)
            return
        gdb.write(out)
        gdb.write("TRY-OK\n")


class FinishOuter(gdb.Command):
    """finish-outer: select frame 1 and `finish` out of it, if its function is the program's own.

    Out of a C library frame such as a thread's start routine, `finish` may never return: the
    thread exits, and whether GDB then reports the thread or the whole process gone is a race.
    """

    def __init__(self):
        super().__init__("finish-outer", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        frame = gdb.selected_frame().older()
        sym = frame.function() if frame is not None else None
        own = gdb.current_progspace().filename
        if sym is None or sym.symtab is None or sym.symtab.objfile.filename != own:
            gdb.write("finish-outer: frame 1 is not in the program; not finished\n")
            return
        gdb.execute("frame 1")
        gdb.execute("finish")


class Mark(gdb.Command):
    """mark TEXT: print MARK TEXT."""

    def __init__(self):
        super().__init__("mark", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        gdb.write("MARK %s\n" % arg)


FramesDump()
RegsDump()
DwarfUnwinders()
TryCmd()
FinishOuter()
Mark()
