"""What the GDB commands share: reading addresses, symbols and the selected frame."""


import gdb

from ...core.sframe.format import MASK64
from .. import arch as archmod
from ..symbols import INFO_SYMBOL_RE as _INFO_SYMBOL_RE
from ..symbols import symbol_at

__all__ = ["symbol_at"]


def has_registers():
    """True when there is a thread with registers (live process, core file, remote target)."""
    try:
        return gdb.selected_thread() is not None and gdb.selected_frame() is not None
    except gdb.error:
        return False


def parse_address(arg, cmd):
    """An address from any GDB expression: $pc, main+4, *0x401000, 0x401000, a function name."""
    text = arg.strip()
    if text.startswith("*"):
        text = text[1:].strip()
    if not text:
        raise gdb.GdbError("%s: an address is needed" % cmd)
    try:
        value = gdb.parse_and_eval(text)
        t = value.type.strip_typedefs()
        if t.code == gdb.TYPE_CODE_FUNC:
            value = value.address
        elif t.code not in (gdb.TYPE_CODE_PTR, gdb.TYPE_CODE_INT, gdb.TYPE_CODE_ENUM,
                            gdb.TYPE_CODE_CHAR, gdb.TYPE_CODE_BOOL):
            raise gdb.GdbError("%s: %s is a value of type %s, not an address" % (cmd, arg.strip(), value.type))
        return int(value) & MASK64
    except gdb.GdbError:
        raise
    except gdb.error as exc:
        raise gdb.GdbError("%s: cannot evaluate %s: %s" % (cmd, arg.strip(), exc)) from None


def objfile_name_at(addr):
    """Name of the objfile holding addr (whatever its unwind data), or None."""
    ps = gdb.current_progspace()
    if hasattr(ps, "objfile_for_address"):
        try:
            o = ps.objfile_for_address(addr)
            if o is not None:
                return (o.owner or o).filename
        except Exception:
            pass
    try:
        name = ps.solib_name(addr)
        if name:
            return name
    except Exception:
        pass
    try:
        text = gdb.execute("info symbol %#x" % addr, to_string=True).strip()
    except gdb.error:
        return None
    m = _INFO_SYMBOL_RE.match(text.splitlines()[0]) if text else None
    if m:
        return m.group(4) or gdb.current_progspace().filename
    return None


def is_callers_pc(addr):
    """Is addr the PC of the selected frame, and that frame a caller (GDB looks its unwind data up
    at PC - 1, inside the call)?"""
    if not has_registers():
        return False
    try:
        frame = gdb.selected_frame()
        if (int(frame.pc()) & MASK64) != addr or frame.level() == 0:
            return False
        newer = frame.newer()
        while newer is not None and newer.type() == gdb.INLINE_FRAME:
            newer = newer.newer()
        return newer is not None and newer.type() == gdb.NORMAL_FRAME
    except gdb.error:
        return False


def frame_arch(frame):
    return archmod.lookup(frame.architecture().name())


def frame_values(frame, ms, module):
    """[(what, value)] of the selected frame from SFrame (CFA, RA, FP), or a Stop."""
    from ...core.unwind.unwinder import frame_from_registers, rule_values
    a = frame_arch(frame)
    if a is None:
        return None
    abi = a.abi_for(module.index.abi)
    if abi is None:
        return None
    top = frame.level() == 0
    inferior = gdb.selected_inferior()
    f = frame_from_registers(abi, int(frame.pc()), archmod.register_reader(frame, a, abi), full=top)
    return rule_values(f, abi=abi, read=lambda addr, n: inferior.read_memory(addr, n), find=ms.find, topmost=top,
                       callee_saved=True, symbolize=symbol_at)


def flush_frames():
    """Make GDB forget the frames it has unwound (so they are unwound again with the new setting)."""
    try:
        gdb.invalidate_cached_frames()
    except Exception:
        try:
            gdb.execute("maint flush register-cache", to_string=True)
        except gdb.error:
            pass
