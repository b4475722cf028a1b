"""The SFrame stack unwinder shared by the GDB and LLDB adapters and the core-file CLI.

Pure Python, no debugger imports.  Callers give a frame's registers, a memory reader and a
finder that maps a PC to the SFrame index of the module holding it; `step` computes the
caller's frame (or says why it cannot), `walk` repeats that for a whole backtrace.

Every way an unwind can fail ends in a `Stop` with a `StopReason`: nothing a malformed section,
unreadable memory or a corrupt stack can do makes `step`/`walk` raise.

Frames come from one of three methods (`Method`): the SFrame rules of the function, the
frame-pointer chain (no SFrame for the PC, but the module promises frame pointers or the
caller allows the fallback), or the kernel's signal frame (the PC is at the signal-return
trampoline, or in a V3 FDE flagged as a signal frame).
"""

import enum
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Literal, Mapping, NamedTuple, Optional, Tuple, Union

from ..arch import abi as abimod
from ..arch import sigframe
from ..errors import SFrameError
from ..saves import analysis as saves
from ..sframe import format as F
from ..sframe.format import MASK64
from ..sframe.rules import UNCHANGED, RuleKind
from . import framepointer

if TYPE_CHECKING:
    from ..sframe.index import Match

DEFAULT_DEPTH_LIMIT = 100_000

# read(addr, size) -> bytes (None or an exception: unreadable); find(pc) -> an SFrameIndex, an
# (index, module) pair, or None.
ReadMemory = Callable[[int, int], Optional[bytes]]
FindIndex = Callable[[int], object]

# AArch64 pointer authentication.  The PAC of a code pointer lives in the bits above the
# virtual-address size, except bit 55, which selects the upper or lower address range (so it
# survives).  For the usual 48-bit user VA that is bits 48-54 and 56-63.  Stripping follows the
# architecture's XPAC: if bit 55 is clear (user space) the PAC bits are cleared, so the low 48
# bits remain; if bit 55 is set (kernel-range address) they are set, so the top bits stay all ones.
# A debugger that knows the process's real mask (Linux: NT_ARM_PAC_MASK) passes it as `pac_mask`.
DEFAULT_PAC_MASK = 0xFF7F_0000_0000_0000


def strip_pac(addr: int, mask: int = DEFAULT_PAC_MASK) -> int:
    """The address with its pointer-authentication code removed (see DEFAULT_PAC_MASK)."""
    if (addr >> 55) & 1:
        return (addr | mask) & MASK64
    return addr & ~mask & MASK64


class Method(enum.Enum):
    """How a frame was unwound from the frame below it."""
    SFRAME = "sframe"
    FRAME_POINTER = "frame pointer"
    SIGNAL = "signal frame"
    CFI = "DWARF CFI"          # no SFrame covers the PC: the module's .eh_frame / .debug_frame (core.dwarf.rows)


class StopReason(enum.Enum):
    """Why the unwind stops.  The value is the wording used after "Backtrace stopped: "."""
    OUTERMOST = "reached the outermost frame"
    NO_SFRAME = "no SFrame information for the PC"
    MALFORMED = "malformed SFrame section"
    MEMORY_READ = "cannot access memory"
    CFA_NOT_ABOVE_SP = "CFA not above the stack pointer (corrupt stack?)"
    CFA_MISALIGNED = "CFA not word-aligned (corrupt stack?)"
    CFA_NOT_INCREASING = "previous frame inner to this frame (corrupt stack?)"
    FP_BELOW_SP = "frame pointer below the stack pointer (corrupt stack?)"
    FP_UNTRUSTED = "the frame pointer cannot be trusted as a frame record here"
    UNSAFE_UNWIND = "rule needs a register not known in this frame"
    DEPTH_LIMIT = "backtrace limit exceeded"


@dataclass(frozen=True)
class Stop:
    """The end of an unwind: why, for which frame's PC, and the details."""
    reason: StopReason
    detail: str = ""
    pc: Optional[int] = None        # PC of the frame that could not be unwound
    address: Optional[int] = None   # MEMORY_READ: the address that could not be read

    @property
    def is_error(self) -> bool:
        """False for a clean end (outermost frame), True when the stack could not be followed."""
        return self.reason is not StopReason.OUTERMOST

    @property
    def text(self) -> str:
        """The reason and its details, e.g. 'Cannot access memory at address 0x10' (a detail that
        says the reason itself, as an SFrameError's text does, stands alone)."""
        if self.reason is StopReason.MEMORY_READ and self.address is not None:
            text = "Cannot access memory at address %#x" % self.address
        else:
            text = self.reason.value
        if self.detail:
            text = self.detail if self.detail.startswith(text) else text + ": " + self.detail
        return text

    @property
    def message(self) -> str:
        """GDB-style text, e.g. 'Backtrace stopped: Cannot access memory at address 0x10'."""
        return "Backtrace stopped: " + self.text

    def __str__(self):
        return self.message


# Frames are made once per unwound frame, the hot path: slots and no frozen-dataclass __init__
# (which sets each field through object.__setattr__) make one four times cheaper.  Treat them as
# values all the same: nothing changes a Frame once it is made.
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(**_SLOTS)
class Frame:
    """One frame's registers, as given for the topmost frame or as recovered for a caller.

    `regs` holds any other registers known in the frame, by DWARF number (the topmost frame may
    supply all of them; a signal frame recovers all general registers).  `sp`, `fp` and `ra`
    win over the same registers in `regs`.  `ra` is the ABI's return-address register (AArch64
    x30, s390x r14) and stays None on x86-64: in a caller it holds the return address as it was
    stored (still signed, if it was), while `pc` has the pointer-authentication code stripped.

    For recovered frames, `cfa` is the CFA computed for the callee (the frame this one was
    unwound from), i.e. this frame's SP at the call (plus 160 on s390x); for a frame recovered
    from a signal frame it is the SP at the trampoline.  `interrupted` marks a frame restored
    from a signal frame: its PC is the interrupted instruction, not a return address, and all of
    its registers are known, so it unwinds like a topmost frame.
    """
    pc: int
    sp: int
    fp: Optional[int] = None
    ra: Optional[int] = None
    regs: Mapping[int, int] = field(default_factory=dict, hash=False)
    cfa: Optional[int] = None
    method: Optional[Method] = None
    ra_stripped: bool = False
    interrupted: bool = False
    level: int = 0
    match: Optional["Match"] = field(default=None, hash=False, compare=False, repr=False)  # index Match used
    # Those of `regs` the ABI preserves only in part (ABIInfo.partial: AArch64's v8-v15, of which
    # d8-d15) that were carried over from the frame below, not read from a save slot: the rest of
    # such a register is the frame below's too; restored from a slot, it is what the restore leaves.
    carried: frozenset = field(default=frozenset(), hash=False, compare=False, repr=False)

    def reg(self, abi: abimod.ABIInfo, regnum: int) -> Optional[int]:
        """Value of DWARF register `regnum` in this frame, or None if unknown."""
        if regnum == abi.sp:
            return self.sp
        if regnum == abi.fp and self.fp is not None:
            return self.fp
        if regnum == abi.ra and self.ra is not None:
            return self.ra
        return self.regs.get(regnum)


def lookup_address(pc: int, caller: bool) -> int:
    """Where a frame's unwind data (SFrame, CFI, its symbol) is looked up.

    A caller's PC is a return address, just after its call: the call itself is at PC - 1 (a call
    that ends a function, e.g. to a noreturn one, would otherwise find the next function).  The
    topmost frame's PC, and that of a frame interrupted by a signal, is the instruction itself.
    """
    return pc - 1 if caller and pc else pc


class LazyRegisters:
    """`Frame.regs` of a frame whose every register is valid, read on demand through
    `read(regnum)` (value or None) and remembered: unwinding needs only a few of them."""
    __slots__ = ("_read", "_cache")

    def __init__(self, read: Callable[[int], Optional[int]]):
        self._read = read
        self._cache: Dict[int, Optional[int]] = {}

    def get(self, regnum: int, default: Optional[int] = None) -> Optional[int]:
        cache = self._cache
        if regnum in cache:
            value = cache[regnum]
        else:
            try:
                value = self._read(regnum)
            except Exception:          # a register the debugger cannot read is unknown
                value = None
            cache[regnum] = value
        return default if value is None else value


def frame_from_registers(abi: "abimod.ABIInfo", pc: int, read: Callable[[int], Optional[int]], *, full: bool,
                         regs: Optional[Mapping[int, int]] = None, level: int = 0,
                         interrupted: bool = False) -> Frame:
    """The Frame of a debugger's (or a core file's) frame, from `read(DWARF regnum)` -> value or None.

    In a full frame (the topmost, or one a signal interrupted) every register is valid: the RA
    register comes along, and so does every other register (`regs`, or read through `read` on
    demand).  In an outer frame a debugger unwound, only PC, SP and FP are trusted by the rules;
    `regs` may still give the callee-saved registers the debugger knows there, which the
    save-slot analysis carries on to the caller where they are unchanged.
    """
    ra = read(abi.ra) if full and abi.ra_in_register else None
    known: Mapping[int, int] = {}
    if regs is not None:
        known = regs
    elif full:
        known = LazyRegisters(read)   # type: ignore[assignment]
    # SP is None where the debugger cannot read it: the adapters check before unwinding.
    return Frame(pc=pc & MASK64, sp=read(abi.sp), fp=read(abi.fp), ra=ra, regs=known,  # type: ignore[arg-type]
                 level=level, interrupted=interrupted)


class _Stopped(Exception):
    """Internal: carries a Stop out of nested helpers."""

    def __init__(self, stop):
        super().__init__(stop.message)
        self.stop = stop


def _abi_info(abi):
    return abi if isinstance(abi, abimod.ABIInfo) else abimod.info(abi)


class _Ctx:
    """Per-step state: the frame, its trust level, and checked memory access."""

    def __init__(self, frame, abi, read, full):
        self.frame = frame
        self.abi = abi
        self.read = read
        self.full = full          # topmost or interrupted: every supplied register is valid
        self.order: Literal["big", "little"] = "big" if abi.big_endian else "little"

    def stop(self, reason, detail="", address=None):
        return _Stopped(Stop(reason, detail, self.frame.pc, address))

    def fetch(self, addr, size):
        """Bytes at addr, or None if the read failed in any way."""
        addr &= MASK64
        try:
            data = self.read(addr, size)
        except Exception:      # the reader may fail however it likes: a failed read
            return None
        if data is None:
            return None
        data = bytes(data)
        return data[:size] if len(data) >= size else None

    def read_exact(self, addr, size):
        data = self.fetch(addr, size)
        if data is None:
            raise self.stop(StopReason.MEMORY_READ, address=addr & MASK64)
        return data

    def word(self, addr):
        return int.from_bytes(self.read_exact(addr, self.abi.ptr_size), self.order)

    def word_or_none(self, addr):
        """The word at addr, or None if it cannot be read (`word` stops the walk instead)."""
        data = self.fetch(addr, self.abi.ptr_size)
        return None if data is None else int.from_bytes(data, self.order)

    def reg(self, regnum, what):
        """A register's value for a rule; only SP and FP are trusted outside the topmost frame."""
        abi = self.abi
        if regnum not in (abi.sp, abi.fp) and not self.full:
            raise self.stop(StopReason.UNSAFE_UNWIND, "%s rule uses %s, only valid in the topmost frame"
                            % (what, abi.regname(regnum)))
        v = self.frame.reg(abi, regnum)
        if v is None:
            raise self.stop(StopReason.UNSAFE_UNWIND, "%s rule uses %s, whose value is not known"
                            % (what, abi.regname(regnum)))
        return v & MASK64


def _apply(ctx, rule, what, cfa):
    """Value given by a CFA/RA/FP rule; None for UNCHANGED (the caller decides what that means)."""
    k = rule.kind
    if k is RuleKind.AT_CFA or k is RuleKind.FIXED:
        return ctx.word(cfa + rule.offset)
    if k is RuleKind.CFA_PLUS:
        return (cfa + rule.offset) & MASK64
    if k is RuleKind.REGISTER:
        addr = (ctx.reg(rule.reg, what) + rule.offset) & MASK64
        return ctx.word(addr) if rule.deref else addr
    if k is RuleKind.UNCHANGED:
        return None
    raise ctx.stop(StopReason.OUTERMOST, "%s undefined" % what)


def _check_cfa(ctx, cfa, prev_cfa, fp_based):
    """The kernel unwinder's sanity checks on a new CFA."""
    frame, abi = ctx.frame, ctx.abi
    if cfa % abi.ptr_size:
        raise ctx.stop(StopReason.CFA_MISALIGNED, "CFA %#x" % cfa)
    if fp_based and (frame.fp is None or frame.fp < frame.sp):
        raise ctx.stop(StopReason.FP_BELOW_SP, "CFA is FP-based but FP %s < SP %#x"
                       % ("?" if frame.fp is None else "%#x" % frame.fp, frame.sp))
    if not ctx.full and cfa <= frame.sp:
        raise ctx.stop(StopReason.CFA_NOT_ABOVE_SP, "CFA %#x, SP %#x" % (cfa, frame.sp))
    if prev_cfa is not None and not frame.interrupted and cfa <= prev_cfa:
        raise ctx.stop(StopReason.CFA_NOT_INCREASING, "CFA %#x, previous frame's CFA %#x" % (cfa, prev_cfa))


def _finish_ra(ctx, raw, mangled, pac_mask):
    """(pc, stripped?) from a recovered return address; a zero RA ends the walk."""
    if raw == 0:
        raise ctx.stop(StopReason.OUTERMOST, "return address is zero")
    if ctx.abi.pointer_auth:
        if mangled:
            return strip_pac(raw, pac_mask), True
    return raw, False


def _recover_saved(ctx, index, match, cfa, symbolize):
    """{DWARF regnum: value} of the caller's callee-saved registers that the save-slot analysis
    proves (core.saves.analysis): read from their slots, or carried from this frame where unchanged."""
    frame, abi = ctx.frame, ctx.abi
    out: Dict[int, int] = {}
    try:
        todo = saves.plan(abi, index, match, ctx.fetch, symbolize)
    except Exception:        # the analysis must never cost the frame itself
        return out, frozenset()
    regs = frame.regs
    for reg in todo.unchanged:
        value = regs.get(reg)
        if value is not None:
            out[reg] = value
    carried = abi.partial.intersection(out) if abi.partial else frozenset()
    for reg, holder in todo.moved:
        value = regs.get(holder)     # (known in a frame whose registers are all known: the innermost)
        if value is not None:
            out[reg] = value
    slots = []
    for reg, base, offset in todo.slots:
        origin = cfa if base is None else frame.reg(abi, base)
        if origin is not None:
            slots.append((reg, (origin + offset) & MASK64))
    if slots:
        # The slots lie together below the CFA: one read of them all (one by one if that fails).
        size, order = abi.ptr_size, ctx.order
        lo = min(a for _r, a in slots)
        hi = max(a for _r, a in slots) + size
        block = ctx.fetch(lo, hi - lo) if hi - lo <= 512 else None
        for reg, addr in slots:
            data = block[addr - lo:addr - lo + size] if block is not None else ctx.fetch(addr, size)
            if data is not None:
                out[reg] = int.from_bytes(data, order)
    return out, carried


def _sframe_step(ctx, match, prev_cfa, pac_mask, index=None, callee_saved=False, symbolize=None):
    rules = match.rules
    frame, abi = ctx.frame, ctx.abi
    if rules.outermost:
        raise ctx.stop(StopReason.OUTERMOST, "return address undefined in the SFrame data")
    cfa_rule = rules.cfa
    cfa = _apply(ctx, cfa_rule, "CFA", None)
    fp_based = cfa_rule.kind is RuleKind.REGISTER and cfa_rule.reg == abi.fp
    _check_cfa(ctx, cfa, prev_cfa, fp_based)

    raw = _apply(ctx, rules.ra, "RA", cfa)
    if raw is None:   # RA still in its register: only true while the function has not called anything
        if not ctx.full:
            pad = " (s390x RA padding: RA not saved)" if rules.ra.padding else ""
            raise ctx.stop(StopReason.UNSAFE_UNWIND, "RA is still in %s%s, only valid in the topmost frame"
                           % (abi.regname(abi.ra), pad))
        raw = frame.reg(abi, abi.ra)
        if raw is None:
            raise ctx.stop(StopReason.UNSAFE_UNWIND, "RA is in %s, whose value was not supplied"
                           % abi.regname(abi.ra))
    pc, stripped = _finish_ra(ctx, raw, rules.ra_mangled, pac_mask)

    fp_rule = rules.fp
    if fp_rule.kind is RuleKind.REGISTER and ctx.full and frame.reg(abi, fp_rule.reg) is None:
        # FP kept in a register this frame's registers do not include (an s390x leaf keeps
        # r11 in a floating-point register; qemu's cores hold none): the caller's FP is
        # unknown, the rest of the caller is not.  A later rule that needs it stops there.
        fp = None
    else:
        fp = _apply(ctx, fp_rule, "FP", cfa)
        if fp is None:
            fp = frame.fp
    regs, carried = _recover_saved(ctx, index, match, cfa, symbolize) if callee_saved else ({}, frozenset())
    return Frame(pc=pc, sp=(cfa + abi.sp_val_offset) & MASK64, fp=fp,
                 ra=raw if abi.ra_in_register else None, regs=regs, cfa=cfa, method=Method.SFRAME,
                 ra_stripped=stripped, level=frame.level + 1, match=match, carried=carried)


def _fp_step(ctx, prev_cfa, pac_mask, why, lookup_pc, symbolize):
    """Frame-pointer chain: [FP] = caller's FP, [FP + ptr] = return address, CFA = FP + the distance
    the function's prologue put its frame record below its CFA (core.unwind.framepointer): only
    where its symbol gives its start and its code shows the record set up."""
    frame, abi = ctx.frame, ctx.abi
    if not abi.fp_chain:
        raise ctx.stop(StopReason.NO_SFRAME, "%s, and %s has no frame-pointer chain to fall back on" % (why, abi.name))
    fp = frame.fp
    if fp is None:
        raise ctx.stop(StopReason.NO_SFRAME, "%s, and FP is not known for the frame-pointer fallback" % why)
    if fp == 0:
        raise ctx.stop(StopReason.OUTERMOST, "frame pointer is zero (end of the frame-pointer chain)")
    try:
        named = symbolize(lookup_pc) if symbolize is not None else None
    except Exception:          # the adapter's symbols, however they fail: none
        named = None
    if not named:
        raise ctx.stop(StopReason.FP_UNTRUSTED, "%s; no symbol gives the start of its function, whose prologue "
                       "would show a frame record" % why)
    offset = framepointer.record_cfa_offset(abi, lookup_pc - named[1], lookup_pc, ctx.fetch, ctx.full)
    if isinstance(offset, str):
        raise ctx.stop(StopReason.FP_UNTRUSTED, "%s; %s" % (why, offset))
    cfa = (fp + offset) & MASK64
    _check_cfa(ctx, cfa, prev_cfa, True)
    raw = ctx.word(fp + abi.fp_chain_ra_offset)
    if raw == 0:
        raise ctx.stop(StopReason.OUTERMOST, "return address is zero")
    new_fp = ctx.word(fp)
    pc, stripped = raw, False
    if abi.pointer_auth:
        # Whether this function signs its LR is unknown here; stripping is harmless for user addresses.
        pc = strip_pac(raw, pac_mask)
        stripped = pc != raw
    return Frame(pc=pc, sp=cfa, fp=new_fp, ra=raw if abi.ra_in_register else None, cfa=cfa,
                 method=Method.FRAME_POINTER, ra_stripped=stripped, level=frame.level + 1)


def _cfi_value(ctx, rule, cfa, reg):
    """A register's value in the caller by a CFI rule, or None where it is not known."""
    if rule is None:
        return None
    k = rule.kind
    if k is RuleKind.AT_CFA:
        return ctx.word_or_none(cfa + rule.offset)
    if k is RuleKind.CFA_PLUS:
        return (cfa + rule.offset) & MASK64
    if k is RuleKind.UNCHANGED:
        return ctx.frame.reg(ctx.abi, reg)
    if k is RuleKind.REGISTER:        # reg + offset, or what is stored there (DWARF expressions)
        base = ctx.frame.reg(ctx.abi, rule.reg)
        if base is None:
            return None
        if not rule.deref:
            return (base + rule.offset) & MASK64
        return ctx.word_or_none(base + rule.offset)
    return None


def _cfi_step(ctx, row, prev_cfa, pac_mask):
    """The caller by the DWARF CFI row at the PC (a module without SFrame there).

    Registers known in a frame are trusted by its rules: a caller's come only from CFI rules or
    from what a step proved (never a guess), unlike SFrame rules, which trust SP and FP alone
    outside the topmost frame.  Of the caller's registers, the callee-saved ones (and FP) are
    kept; the others are not known after a call."""
    frame, abi = ctx.frame, ctx.abi
    rule = row.cfa
    if rule is None or rule.kind is not RuleKind.REGISTER:
        raise ctx.stop(StopReason.UNSAFE_UNWIND, "the CFA of %s is a DWARF expression this unwinder cannot follow"
                       % row.where)
    base = frame.reg(abi, rule.reg)
    if base is None:
        raise ctx.stop(StopReason.UNSAFE_UNWIND, "the CFA of %s is based on %s, whose value is not known"
                       % (row.where, abi.regname(rule.reg)))
    cfa = (base + rule.offset) & MASK64
    if rule.deref:
        cfa = ctx.word(cfa)
    regs = row.regs
    ra_rule = regs.get(abi.ra, UNCHANGED)
    if ra_rule is not None and ra_rule.kind is RuleKind.UNDEFINED:
        raise ctx.stop(StopReason.OUTERMOST, "return address undefined in the DWARF CFI")
    _check_cfa(ctx, cfa, prev_cfa, rule.reg == abi.fp)
    if ra_rule is not None and ra_rule.kind is RuleKind.AT_CFA:
        raw = ctx.word(cfa + ra_rule.offset)
    elif ra_rule is not None and not ctx.full and abi.ra_in_register and (
            ra_rule.kind is RuleKind.UNCHANGED or ra_rule.kind is RuleKind.REGISTER and ra_rule.reg == abi.ra):
        # The RA still in its register: true only until the function calls (a caller's RA
        # register holds its own return address, which would give the same frame again).
        raise ctx.stop(StopReason.UNSAFE_UNWIND, "the return address by %s is still in %s, only valid in the "
                       "topmost frame" % (row.where, abi.regname(abi.ra)))
    else:
        raw = _cfi_value(ctx, ra_rule, cfa, abi.ra)
    if raw is None:
        raise ctx.stop(StopReason.UNSAFE_UNWIND, "the return address by %s is not known" % row.where)
    if raw == 0:
        raise ctx.stop(StopReason.OUTERMOST, "return address is zero")
    pc, stripped = raw, False
    if abi.pointer_auth:
        # The CFI's RA-state column is not followed here; stripping is harmless for user addresses.
        pc = strip_pac(raw, pac_mask)
        stripped = pc != raw
    saved = {}
    carried = set()
    for reg in abi.callee_saved:
        rule = regs.get(reg, UNCHANGED)
        value = _cfi_value(ctx, rule, cfa, reg)
        if value is not None:
            saved[reg] = value
            if rule.kind is RuleKind.UNCHANGED and reg in abi.partial:
                carried.add(reg)
    fp = saved.get(abi.fp) if abi.fp in abi.callee_saved else _cfi_value(ctx, regs.get(abi.fp, UNCHANGED), cfa,
                                                                          abi.fp)
    return Frame(pc=pc, sp=(cfa + abi.sp_val_offset) & MASK64, fp=fp, ra=raw if abi.ra_in_register else None,
                 regs=saved, cfa=cfa, method=Method.CFI, ra_stripped=stripped, level=frame.level + 1,
                 carried=frozenset(carried))


def _cfi_row(cfi, pc):
    try:
        return cfi(pc)
    except Exception:          # the file's CFI, however it fails: none there
        return None


def _signal_step(ctx, lay):
    """Restore the interrupted context from the kernel's signal frame at SP."""
    frame, abi = ctx.frame, ctx.abi
    pc, regs = sigframe.recover(abi, lay, frame.sp, ctx.read_exact)
    sp = regs.get(abi.sp)
    if pc == 0:
        raise ctx.stop(StopReason.OUTERMOST, "signal frame holds a zero PC")
    if pc is None or sp is None:
        raise ctx.stop(StopReason.UNSAFE_UNWIND, "the signal frame layout gives no PC or SP")
    if pc == frame.pc and sp == frame.sp:
        raise ctx.stop(StopReason.CFA_NOT_INCREASING, "signal frame restores this very frame (corrupt stack?)")
    return Frame(pc=pc, sp=sp, fp=regs.get(abi.fp), ra=regs.get(abi.ra) if abi.ra_in_register else None,
                 regs=regs, cfa=frame.sp, method=Method.SIGNAL, interrupted=True, level=frame.level + 1)


def _index_of(found):
    if found is None:
        return None
    return found[0] if isinstance(found, tuple) else found


def entry_code_of(found) -> Optional[Tuple[int, int]]:
    """The entry code's extent of the module in a `find` result (core.unwind.modules.Module.entry),
    or None."""
    return getattr(found[1], "entry", None) if isinstance(found, tuple) else None


def at_entry(found, pc: int) -> Optional[Tuple[int, int]]:
    """The extent of the entry code holding pc (a frame's look-up address) in the module of a `find`
    result, or None: such a frame is the outermost one, whatever else covers it."""
    entry = entry_code_of(found)
    return entry if entry is not None and entry[0] <= pc < entry[1] else None


def _lookup(ctx, find, pc, entry_ends=True):
    """(index, match) for pc; either may be None.  A malformed section becomes a MALFORMED stop;
    a PC in an executable's entry code, the OUTERMOST stop (with `entry_ends`)."""
    try:
        found = find(pc)
        index = _index_of(found)
    except SFrameError as e:
        raise ctx.stop(StopReason.MALFORMED, str(e)) from None
    if index is None:
        return None, None
    entry = at_entry(found, pc) if entry_ends else None
    if entry is not None:
        raise ctx.stop(StopReason.OUTERMOST, "the program's entry point %#x: nothing called its code" % entry[0])
    try:
        match = index.lookup(pc)
        if match is not None and _abi_info(index.abi) != ctx.abi:
            raise SFrameError(4, "section is for %s, the frame is %s" % (_abi_info(index.abi).name, ctx.abi.name))
    except SFrameError as e:
        raise ctx.stop(StopReason.MALFORMED, str(e)) from None
    except Exception as e:     # a decoder slip on hostile data must not escape either
        raise ctx.stop(StopReason.MALFORMED, "%s: %s" % (type(e).__name__, e)) from None
    return index, match


def _is_signal(index, match):
    """A V3 FDE with the signal-frame bit (the bit is unused, so ignored, before V3)."""
    return index.version >= 3 and match.fde.signal


def _signal_layout(ctx, match, symbol):
    """The signal-frame layout if the frame is at a signal trampoline, else None."""
    frame, abi = ctx.frame, ctx.abi
    exact = ctx.full
    if match is not None:
        # A V3 FDE flagged as a signal frame.  s390x has two layouts: tell them apart by the code.
        lays = sigframe.layouts(abi)
        if not lays:
            return None
        return sigframe.by_code(abi, frame.pc, ctx.fetch, exact) or lays[0]
    if symbol is not None:
        try:
            name = symbol(frame.pc)
        except Exception:
            name = None
        lay = sigframe.by_symbol(abi, name)
        if lay is not None:
            return lay
    return sigframe.by_code(abi, frame.pc, ctx.fetch, exact)


def step(frame: Frame, *, abi: Union[int, abimod.ABIInfo], read: ReadMemory, find: FindIndex, topmost: bool,
         prev_cfa: Optional[int] = None, fp_fallback: bool = False, pac_mask: int = DEFAULT_PAC_MASK,
         symbol: Optional[Callable[[int], Optional[str]]] = None, detect_signal: bool = True,
         callee_saved: bool = False, symbolize: Optional[saves.Symbolize] = None,
         cfi: Optional[Callable[[int], object]] = None) -> Union[Frame, Stop]:
    """Unwind one frame: the caller of `frame` as a Frame, or a Stop saying why not.

    abi:         ABIInfo or SFrame ABI number of the process.
    read:        read(addr, size) -> bytes; raising or returning short data is a failed read.
    find:        find(pc) -> (SFrameIndex, info) or None (a bare SFrameIndex is accepted too);
                 the index must have the module's load bias applied.
    topmost:     frame is the innermost frame (level 0): every register in it is valid.
    prev_cfa:    CFA computed by the previous step, for the strictly-increasing check (not
                 applied across a signal frame: the handler may run on an alternate stack).
    fp_fallback: unwind by the frame-pointer chain when there is no SFrame for the PC, even
                 if the module's header does not promise frame pointers (SFRAME_F_FRAME_POINTER).
    pac_mask:    AArch64 pointer-authentication bits to strip from signed return addresses.
    symbol:      optional symbol(pc) -> name, to recognise the signal trampoline by name
                 (e.g. when its code is not in a core file).
    detect_signal: False turns signal-frame recognition off.
    callee_saved: recover the caller's callee-saved registers (core.saves.analysis: from their stack
                 slots, or carried from `frame.regs` where unchanged) into its `regs`; the
                 function's code is read once through `read`.
    symbolize:   optional symbolize(addr) -> (function name, offset): tells the save-slot
                 analysis whether an FDE starts a function (core.saves.analysis).
    cfi:         optional cfi(pc) -> core.dwarf.rows.CfiRow or None: the DWARF CFI rules at a PC
                 no SFrame FDE covers (before the frame-pointer fallback).

    A frame marked `interrupted` (restored from a signal frame) is treated like a topmost one.
    An SFrameError from `find` or the index becomes a MALFORMED stop; any other exception
    raised by `find` is a bug in the caller and propagates.

    Work per frame: one lookup and at most three memory reads (CFA, RA, FP); a PC without an
    FDE costs one more read to check for the signal trampoline, a signal frame two or three.
    With callee_saved, one more read per saved register (the code once per function).
    """
    abi = _abi_info(abi)
    full = topmost or frame.interrupted
    ctx = _Ctx(frame, abi, read, full)
    try:
        pc = frame.pc & MASK64
        lookup_pc = lookup_address(pc, not full)
        index, match = _lookup(ctx, find, lookup_pc)
        if match is None and lookup_pc != pc:
            # The signal trampoline may start a function: the handler "returns" to its first byte.
            idx2, m2 = _lookup(ctx, find, pc, entry_ends=False)
            if m2 is not None and _is_signal(idx2, m2):
                index, match = idx2, m2
        if match is not None:
            if detect_signal and _is_signal(index, match):
                lay = _signal_layout(ctx, match, symbol)
                if lay is not None:
                    return _signal_step(ctx, lay)
            return _sframe_step(ctx, match, prev_cfa, pac_mask, index, callee_saved, symbolize)
        if detect_signal:
            lay = _signal_layout(ctx, None, symbol)
            if lay is not None:
                return _signal_step(ctx, lay)
        if cfi is not None:
            row = _cfi_row(cfi, lookup_pc)
            if row is not None:
                return _cfi_step(ctx, row, prev_cfa, pac_mask)
        why = "no SFrame FDE covers PC %#x" % pc if index is not None else "no module with SFrame covers PC %#x" % pc
        promised = index is not None and index.header.has(F.Flag.FRAME_POINTER)
        if fp_fallback or promised:
            return _fp_step(ctx, prev_cfa, pac_mask, why, lookup_pc, symbolize)
        raise ctx.stop(StopReason.NO_SFRAME, why)
    except _Stopped as s:
        return s.stop


def walk(initial: Frame, *, abi: Union[int, abimod.ABIInfo], read: ReadMemory, find: FindIndex,
         limit: int = DEFAULT_DEPTH_LIMIT, topmost: bool = True,
         outer: Optional[Callable[[Frame, Optional[int]], Union[Frame, Stop]]] = None,
         **options) -> Iterator[Union[Frame, Stop]]:
    """Whole backtrace: yields `initial`, then each caller, then one final Stop.

    `topmost`: `initial` is the innermost frame (yielded as level 0, all its registers trusted).
    Otherwise it is an outer frame a debugger already unwound: only its SP and FP are trusted,
    its PC is a return address, and levels go on from `initial.level`.
    `options` are passed to `step` (fp_fallback, pac_mask, symbol, detect_signal, callee_saved:
    with it, a register unchanged in one frame carries its value on to the next).  `limit`
    bounds the number of frames yielded; reaching it ends with a DEPTH_LIMIT stop.
    """
    abi = _abi_info(abi)
    frame = initial if initial.level == 0 or not topmost else replace(initial, level=0)
    yield frame
    count = 1
    prev_cfa = None
    while True:
        if count >= limit:
            yield Stop(StopReason.DEPTH_LIMIT, "limit of %d frames" % limit, frame.pc)
            return
        first = topmost and count == 1
        if outer is not None and not first:
            nxt = outer(frame, prev_cfa)      # the same step for an outer frame, done another way
        else:
            nxt = step(frame, abi=abi, read=read, find=find, topmost=first, prev_cfa=prev_cfa, **options)
        if isinstance(nxt, Stop):
            yield nxt
            return
        yield nxt
        count += 1
        prev_cfa = nxt.cfa
        frame = nxt


def with_callers(items: Iterable[Union[Frame, Stop]]) -> Tuple[List[Tuple[Frame, Optional[Frame]]], Optional[Stop]]:
    """Frames of a walk, each paired with its caller (None for the last), and the final Stop.

    A frame's own CFA is known only once its caller is unwound (it is the caller's `cfa`), and so
    is how the caller was found: printers of whole backtraces need both on the frame's line.
    """
    pairs: List[Tuple[Frame, Optional[Frame]]] = []
    stop = None
    for item in items:
        if isinstance(item, Stop):
            stop = item
            break
        if pairs:
            pairs[-1] = (pairs[-1][0], item)
        pairs.append((item, None))
    return pairs, stop


class FrameRow(NamedTuple):
    """One frame of a printed backtrace, with what is known only once its caller was unwound."""
    frame: Frame
    cfa: Optional[int]          # the frame's own CFA (None where the walk stopped)
    match: Optional["Match"]    # the SFrame match that gave that CFA (None: not from SFrame)
    trampoline: bool            # the caller came from a signal frame: this is the trampoline
    unwound_by: Optional[Method] = None   # what covers this frame's PC and found its caller (None: the last)


def frame_rows(items: Iterable[Union[Frame, Stop]]) -> Tuple[List[FrameRow], Optional[Stop]]:
    """The frames of a walk as FrameRows, and the final Stop."""
    pairs, stop = with_callers(items)
    rows = []
    for f, c in pairs:
        if c is None:
            rows.append(FrameRow(f, None, None, False))
        else:
            rows.append(FrameRow(f, c.cfa, c.match if c.method is Method.SFRAME else None,
                                 c.method is Method.SIGNAL, c.method))
    return rows, stop


def rule_values(frame: Frame, *, abi: Union[int, abimod.ABIInfo], read: ReadMemory, find: FindIndex, topmost: bool,
                callee_saved: bool = False, symbolize: Optional[saves.Symbolize] = None
                ) -> Union[List[Tuple[str, int]], Stop]:
    """[(what, value)] that the SFrame rules give in `frame` (CFA, RA, FP), or the Stop saying why not;
    with `callee_saved`, also the caller's callee-saved registers recovered ("caller's rbx").

    The unwinder's own step from the frame, so an outer frame's rules are those at its PC - 1.
    """
    info = _abi_info(abi)
    res = step(frame, abi=info, read=read, find=find, topmost=topmost, callee_saved=callee_saved, symbolize=symbolize)
    if isinstance(res, Stop):
        return res
    out: List[Tuple[str, int]] = [("CFA", res.cfa or 0), ("RA", res.ra if res.ra is not None else res.pc)]
    if res.ra_stripped:
        out.append(("RA without its signature (caller's PC)", res.pc))
    if res.fp is not None:
        out.append(("FP", res.fp))
    for regnum in sorted(res.regs):
        out.append(("caller's %s" % info.regname(regnum), res.regs[regnum]))
    return out


def backtrace(initial: Frame, **kwargs) -> Tuple[List[Frame], Stop]:
    """([frames], stop): `walk` collected into a list."""
    frames: List[Frame] = []
    for item in walk(initial, **kwargs):
        if isinstance(item, Stop):
            return frames, item
        frames.append(item)
    raise AssertionError("walk ended without a Stop")   # pragma: no cover
