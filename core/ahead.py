"""Unwinding ahead: many outer frames at once, each from rules compiled once per return address.

A debugger asks a Python unwinder for one frame at a time, and a deep stack repeats a few return
addresses over and over.  `Ahead` compiles what `unwind.step` does at a caller's PC (the FDE and
FRE look-up, the CFA/RA/FP rules, the save-slot plan) into a `_Plan` once per PC, reads the stack
in blocks, and applies a plan with a few additions and word reads.

It computes only the ordinary case.  Everything else (a safety check fails, a read fails, no FDE,
a signal frame, the outermost frame, a rule that needs more than SP and FP) goes to `unwind.step`,
which gives the same frame or the Stop with its reason: the fast path never decides a stop.
tests/test_ahead.py checks that both agree frame for frame.
"""

import struct
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Union

from . import abi as abimod
from . import saves
from .format import MASK64
from .rules import RuleKind
from .unwind import (
    DEFAULT_DEPTH_LIMIT,
    DEFAULT_PAC_MASK,
    FindIndex,
    Frame,
    Method,
    ReadMemory,
    Stop,
    lookup_address,
    step,
    strip_pac,
)
from .unwind import walk as unwind_walk


class _Plan(NamedTuple):
    """One caller PC's step, precomputed."""
    match: object               # the index Match the rules come from (as step puts on its Frame)
    fp_based: bool              # CFA = FP + cfa_offset, else SP + cfa_offset
    cfa_offset: int
    ra_offset: int              # RA = [CFA + ra_offset]
    fp_offset: Optional[int]    # FP = [CFA + fp_offset]; None: unchanged
    strip: bool                 # the RA is signed (AArch64 PAC): strip it for the PC
    slots: tuple                # (regnum, base regnum or None for the CFA, offset) of saved registers
    unchanged: tuple            # regnums the function has not touched at this PC


_AT = (RuleKind.AT_CFA, RuleKind.FIXED)


class StackReader:
    """Words of the debugger's memory, read in aligned blocks: one read serves many frames.

    Memory cannot change while a debugger unwinds one stop, so the caller clears the reader (or
    makes a new one) at each new unwind.  A block that cannot be read as a whole is retried as a
    page, then as the exact bytes asked for.
    """
    BLOCK = 16384
    PAGE = 4096

    def __init__(self, read: ReadMemory, ptr_size: int, big_endian: bool):
        self._read = read
        self._size = ptr_size
        self._unpack = struct.Struct((">" if big_endian else "<") + ("Q" if ptr_size == 8 else "I")).unpack_from
        self.clear()

    def clear(self) -> None:
        self._lo = 0
        self._data = b""

    def _get(self, addr: int, size: int) -> Optional[bytes]:
        try:
            data = self._read(addr, size)
        except Exception:           # the reader may fail however it likes: a failed read
            return None
        if data is None or len(data) < size:
            return None
        return bytes(data)

    def fetch(self, addr: int, size: int) -> Optional[bytes]:
        """`size` bytes at `addr`, or None if they cannot be read."""
        addr &= MASK64
        off = addr - self._lo
        if 0 <= off and off + size <= len(self._data):
            return self._data[off:off + size]
        for lo, n in ((addr & -self.PAGE, self.BLOCK), (addr & -self.PAGE, self.PAGE)):
            if lo <= addr and addr + size <= lo + n and lo + n <= MASK64 + 1:
                data = self._get(lo, n)
                if data is not None:
                    self._lo, self._data = lo, data
                    return data[addr - lo:addr - lo + size]
        return self._get(addr, size)

    def word(self, addr: int) -> Optional[int]:
        """The pointer-sized word at `addr`, or None if it cannot be read."""
        off = addr - self._lo
        if 0 <= off <= len(self._data) - self._size:
            return self._unpack(self._data, off)[0]
        data = self.fetch(addr, self._size)
        return None if data is None else self._unpack(data)[0]


class Ahead:
    """`unwind.step` for outer frames, fast where the stack is ordinary (see the module's docstring).

    One per debugger session and ABI.  `new_unwind()` when the stopped program may have changed
    (each unwind); `forget()` when modules come or go (the plans hold their SFrame look-ups).
    """
    PLAN_LIMIT = 65536

    def __init__(self, abi: abimod.ABIInfo, read: ReadMemory, find: FindIndex, *, callee_saved: bool = False,
                 symbolize: Optional[saves.Symbolize] = None, pac_mask: int = DEFAULT_PAC_MASK, **step_options):
        self.abi = abi
        self.stack = StackReader(read, abi.ptr_size, abi.big_endian)
        self._find = find
        self._callee_saved = callee_saved
        self._symbolize = symbolize
        self._pac_mask = pac_mask
        self._options = dict(step_options, pac_mask=pac_mask, callee_saved=callee_saved, symbolize=symbolize)
        self._plans: Dict[int, Optional[_Plan]] = {}

    def new_unwind(self) -> None:
        self.stack.clear()

    def forget(self) -> None:
        self._plans = {}

    def _compile(self, pc: int) -> Optional[_Plan]:
        """The plan for an outer frame whose PC is `pc`, or None where only `step` will do."""
        abi = self.abi
        try:
            found = self._find(lookup_address(pc, True))
            index: Any = found[0] if isinstance(found, tuple) else found
            if index is None or abimod.info(index.abi) != abi:
                return None
            match = index.lookup(lookup_address(pc, True))
            if match is None or (index.version >= 3 and match.fde.signal):
                return None
            rules = match.rules
            cfa, ra, fp = rules.cfa, rules.ra, rules.fp
            if rules.outermost or cfa is None or cfa.kind is not RuleKind.REGISTER or cfa.deref \
                    or cfa.reg not in (abi.sp, abi.fp) or ra.kind not in _AT:
                return None
            if fp.kind in _AT:
                fp_offset: Optional[int] = fp.offset
            elif fp.kind is RuleKind.UNCHANGED:
                fp_offset = None
            else:
                return None
            slots: tuple = ()
            unchanged: tuple = ()
            if self._callee_saved:
                try:
                    got = saves.plan(abi, index, match, self.stack.fetch, self._symbolize)
                    slots, unchanged = got.slots, got.unchanged
                except Exception:     # as in step: the analysis never costs the frame itself
                    pass
            return _Plan(match, cfa.reg == abi.fp and abi.fp != abi.sp, cfa.offset, ra.offset, fp_offset,
                         bool(rules.ra_mangled and abi.pointer_auth), slots, unchanged)
        except Exception:             # malformed or unexpected: step says what it is
            return None

    def step(self, frame: Frame, prev_cfa: Optional[int]) -> Union[Frame, Stop]:
        """The caller of `frame`, an outer frame (not topmost, not restored from a signal frame)."""
        pc = frame.pc
        plans = self._plans
        if pc in plans:
            plan = plans[pc]
        else:
            if len(plans) >= self.PLAN_LIMIT:
                plans.clear()
            plan = plans[pc] = self._compile(pc)
        got = None if plan is None or frame.interrupted else self._apply(plan, frame, prev_cfa)
        if got is None:
            return step(frame, abi=self.abi, read=self.stack.fetch, find=self._find, topmost=False,
                        prev_cfa=prev_cfa, **self._options)
        return got

    def walk(self, frame: Frame, count: int, *, prev_cfa: Optional[int] = None, increasing: bool = True,
             go_on: Optional[Callable[[Frame], bool]] = None) -> List[Union[Frame, Stop]]:
        """Up to `count` callers in a row, from `frame` outwards (as repeated steps would give).

        `increasing`: check that each CFA is above the previous one (from `prev_cfa` on), as
        `unwind.walk` does; a debugger that checks its frames itself may leave it to them.  The
        list ends early after a Stop, a frame restored from a signal frame (the adapter decides
        how to go on from it), or a frame for which `go_on` says no.
        """
        out: List[Union[Frame, Stop]] = []
        for _ in range(count):
            nxt = self.step(frame, prev_cfa if increasing else None)
            out.append(nxt)
            if isinstance(nxt, Stop) or nxt.method is Method.SIGNAL or (go_on is not None and not go_on(nxt)):
                break
            frame, prev_cfa = nxt, nxt.cfa
        return out

    def _apply(self, plan: _Plan, frame: Frame, prev_cfa: Optional[int]) -> Optional[Frame]:
        """The caller by `plan`, or None wherever step must decide (it then says why)."""
        sp, fp = frame.sp, frame.fp
        if plan.fp_based:
            if fp is None or fp < sp:
                return None
            cfa = (fp + plan.cfa_offset) & MASK64
        else:
            cfa = (sp + plan.cfa_offset) & MASK64
        abi = self.abi
        if cfa % abi.ptr_size or cfa <= sp or (prev_cfa is not None and cfa <= prev_cfa):
            return None
        word = self.stack.word
        raw = word(cfa + plan.ra_offset)
        if not raw:                   # unreadable, or zero (the outermost frame)
            return None
        if plan.fp_offset is not None:
            fp = word(cfa + plan.fp_offset)
            if fp is None:
                return None
        regs: Dict[int, int] = {}
        if plan.unchanged:
            known = frame.regs
            for reg in plan.unchanged:
                value = known.get(reg)
                if value is not None:
                    regs[reg] = value
        for reg, base, offset in plan.slots:
            origin = cfa if base is None else frame.reg(abi, base)
            if origin is not None:
                value = word((origin + offset) & MASK64)
                if value is not None:
                    regs[reg] = value
        pc = strip_pac(raw, self._pac_mask) if plan.strip else raw
        return Frame(pc, (cfa + abi.sp_val_offset) & MASK64, fp, raw if abi.ra_in_register else None, regs, cfa,
                     Method.SFRAME, plan.strip, False, frame.level + 1, plan.match)


def walk(initial: Frame, *, abi: abimod.ABIInfo, read: ReadMemory, find: FindIndex, limit: int = DEFAULT_DEPTH_LIMIT,
         **options) -> Iterator[Union[Frame, Stop]]:
    """`unwind.walk` from a topmost frame, the outer frames unwound by an `Ahead` (same frames,
    same Stop): for whole backtraces of deep stacks, such as `sframe backtrace` of a core file."""
    step_options = {k: v for k, v in options.items() if k not in ("callee_saved", "symbolize", "pac_mask")}
    ahead = Ahead(abi, read, find, callee_saved=options.get("callee_saved", False), symbolize=options.get("symbolize"),
                  pac_mask=options.get("pac_mask", DEFAULT_PAC_MASK), **step_options)
    return unwind_walk(initial, abi=abi, read=read, find=find, limit=limit, outer=ahead.step, **options)
