"""Unwinding ahead: many outer frames at once, each from rules compiled once per return address.

A debugger asks a Python unwinder for one frame at a time, and a deep stack repeats a few return
addresses over and over.  `Ahead` compiles what `unwind.step` does at a caller's PC (the FDE and
FRE look-up, the CFA/RA/FP rules, the save-slot plan) into a `_Plan` once per PC, reads the stack
in blocks, and applies a plan with a few additions and word reads.

It computes only the ordinary case.  Everything else (a safety check fails, a read fails, no FDE,
a signal frame, the outermost frame, a rule that needs more than SP and FP) goes to `unwind.step`,
which gives the same frame or the Stop with its reason: the fast path never decides a stop.
tests/test_backtrace.py (test_ahead_agrees_with_step) checks that both agree frame for frame.
"""

import operator
import struct
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

from ..arch import abi as abimod
from ..saves import analysis as saves
from ..sframe.format import MASK64
from ..sframe.rules import RuleKind
from .unwinder import (
    DEFAULT_DEPTH_LIMIT,
    DEFAULT_PAC_MASK,
    FindIndex,
    Frame,
    Method,
    ReadMemory,
    Stop,
    at_entry,
    lookup_address,
    step,
    strip_pac,
)
from .unwinder import walk as unwind_walk

if TYPE_CHECKING:
    from ..sframe.index import Match

# Callers unwound at once: few at first (`bt 3`, `up` need few), twice as many each time after (a
# whole backtrace needs all), up to MAX_CHUNK.
FIRST_CHUNK, MAX_CHUNK = 8, 1024


def next_chunk(size: int) -> int:
    """How many callers to unwind at once after a chunk of `size`."""
    return min(2 * size, MAX_CHUNK)


class _Plan(NamedTuple):
    """One caller PC's step, precomputed."""
    match: "Match"              # the index Match the rules come from (as step puts on its Frame)
    fp_based: bool              # CFA = FP + cfa_offset, else SP + cfa_offset
    cfa_offset: int
    ra_offset: int              # RA = [CFA + ra_offset]
    fp_offset: Optional[int]    # FP = [CFA + fp_offset]; None: unchanged
    strip: bool                 # the RA is signed (AArch64 PAC): strip it for the PC
    at_cfa: tuple               # (regnum, offset): saved registers at CFA + offset
    based: tuple                # (regnum, base regnum, offset): saved at [base register + offset]
    unchanged: tuple            # regnums the function has not touched at this PC
    carry: Optional[Callable]   # the values of `unchanged` from a frame's regs (KeyError if one is unknown)
    covered: frozenset          # `unchanged` and the registers of `at_cfa`: a frame's regs with just
                                # these keys are copied whole, and the saved ones overwritten
    carried: frozenset          # those of `unchanged` the ABI preserves only in part (Frame.carried)


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

    def block(self) -> Tuple[bytes, int, int]:
        """(the current block, its address, the last offset in it where a word starts), for
        readers that take words from the block themselves while they can."""
        return self._data, self._lo, len(self._data) - self._size

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
            if index is None or abimod.info(index.abi) != abi or at_entry(found, lookup_address(pc, True)):
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
            at_cfa = tuple((reg, offset) for reg, base, offset in slots if base is None)
            based = tuple(slot for slot in slots if slot[1] is not None)
            carry = None
            if unchanged:
                get = operator.itemgetter(*unchanged)
                carry = get if len(unchanged) > 1 else (lambda regs: (get(regs),))
            return _Plan(match, cfa.reg == abi.fp and abi.fp != abi.sp, cfa.offset, ra.offset, fp_offset,
                         bool(rules.ra_mangled and abi.pointer_auth), at_cfa, based, unchanged, carry,
                         frozenset(unchanged) | frozenset(reg for reg, _offset in at_cfa),
                         frozenset(unchanged) & abi.partial)
        except Exception:             # malformed or unexpected: step says what it is
            return None

    def _plan(self, pc: int) -> Optional[_Plan]:
        plans = self._plans
        if pc in plans:
            return plans[pc]
        if len(plans) >= self.PLAN_LIMIT:
            plans.clear()
        plan = plans[pc] = self._compile(pc)
        return plan

    def step(self, frame: Frame, prev_cfa: Optional[int]) -> Union[Frame, Stop]:
        """The caller of `frame`, an outer frame (not topmost, not restored from a signal frame)."""
        return self.walk(frame, 1, prev_cfa=prev_cfa)[0]

    def walk(self, frame: Frame, count: int, *, prev_cfa: Optional[int] = None, increasing: bool = True,  # noqa: C901
             go_on: Optional[Callable[[Frame], bool]] = None) -> List[Union[Frame, Stop]]:  # (one loop on purpose)
        """Up to `count` callers in a row, from `frame` outwards (as repeated steps would give).

        `increasing`: check that each CFA is above the previous one (from `prev_cfa` on), as
        `unwind.walk` does; a debugger that checks its frames itself may leave it to them.  The
        list ends early after a Stop, a frame restored from a signal frame (the adapter decides
        how to go on from it), or a frame for which `go_on` says no (it is asked once per PC:
        its answer may depend on the frame's PC only).

        This loop is the hot path of whole backtraces: the plan's rule is applied inline, and
        words come straight from the stack reader's current block; anything out of the ordinary goes
        to `unwind.step`.
        """
        out: List[Union[Frame, Stop]] = []
        abi = self.abi
        ptr = abi.ptr_size
        sp_val = abi.sp_val_offset
        ra_reg = abi.ra_in_register
        pac_mask = self._pac_mask
        stack = self.stack
        unpack = stack._unpack
        slow_word = stack.word
        plans = self._plans
        plan_for = self._plan
        append = out.append
        sframe, signal = Method.SFRAME, Method.SIGNAL
        mask = MASK64
        asked: Dict[int, bool] = {}       # PC -> what go_on said of a frame there
        data, lo, top = stack.block()
        for _ in range(count):
            pc = frame.pc
            plan = plans[pc] if pc in plans else plan_for(pc)
            nxt: Optional[Frame] = None
            while plan is not None and not frame.interrupted:   # one pass; `break` leaves it to step
                (match, fp_based, cfa_offset, ra_offset, fp_offset, strip, at_cfa, based, unchanged, carry, covered,
                 carried) = plan
                sp, fp = frame.sp, frame.fp
                if fp_based:
                    if fp is None or fp < sp:
                        break
                    cfa = (fp + cfa_offset) & mask
                else:
                    cfa = (sp + cfa_offset) & mask
                if cfa % ptr or cfa <= sp or (increasing and prev_cfa is not None and cfa <= prev_cfa):
                    break
                off = cfa + ra_offset - lo
                raw = unpack(data, off)[0] if 0 <= off <= top else None
                if raw is None:           # outside the current block
                    raw = slow_word(cfa + ra_offset)
                    data, lo, top = stack.block()
                if not raw:               # unreadable, or zero (the outermost frame)
                    break
                if fp_offset is not None:
                    off = cfa + fp_offset - lo
                    fp = unpack(data, off)[0] if 0 <= off <= top else None
                    if fp is None:
                        fp = slow_word(cfa + fp_offset)
                        data, lo, top = stack.block()
                        if fp is None:
                            break
                if carry is None:
                    regs: Dict[int, int] = {}
                else:
                    known = frame.regs
                    if known.keys() == covered:       # the same registers as the frame below (the
                        regs = dict(known)            # usual case): a copy, the saved ones overwritten
                    else:
                        try:
                            regs = dict(zip(unchanged, carry(known)))
                        except KeyError:      # some are unknown in the frame: carry the others
                            regs = {reg: known[reg] for reg in unchanged if reg in known}
                for reg, offset in at_cfa:
                    off = cfa + offset - lo
                    value = unpack(data, off)[0] if 0 <= off <= top else None
                    if value is None:
                        value = slow_word((cfa + offset) & mask)
                        data, lo, top = stack.block()
                    if value is not None:
                        regs[reg] = value
                    elif reg not in unchanged:
                        regs.pop(reg, None)   # unreadable: unknown (not the copied value)
                if based:
                    self._read_based(frame, based, regs)
                    data, lo, top = stack.block()
                nxt = Frame(strip_pac(raw, pac_mask) if strip else raw, (cfa + sp_val) & mask, fp,
                            raw if ra_reg else None, regs, cfa, sframe, strip, False, frame.level + 1, match,
                            carried)
                break
            if nxt is None:
                got = step(frame, abi=abi, read=stack.fetch, find=self._find, topmost=False,
                           prev_cfa=prev_cfa if increasing else None, **self._options)
                data, lo, top = stack.block()
                append(got)
                if isinstance(got, Stop) or got.method is signal:
                    break
                nxt = got
            else:
                append(nxt)
            if go_on is not None:
                verdict = asked.get(nxt.pc)
                if verdict is None:
                    verdict = asked[nxt.pc] = go_on(nxt)
                if not verdict:
                    break
            frame, prev_cfa = nxt, nxt.cfa
        return out

    def _read_based(self, frame: Frame, based: tuple, regs: Dict[int, int]) -> None:
        """Into `regs`, the saved registers at [base register + offset] (x86-64 realigned frames)."""
        for reg, base, offset in based:
            origin = frame.reg(self.abi, base)
            if origin is not None:
                value = self.stack.word((origin + offset) & MASK64)
                if value is not None:
                    regs[reg] = value


def walk(initial: Frame, *, abi: abimod.ABIInfo, read: ReadMemory, find: FindIndex, limit: int = DEFAULT_DEPTH_LIMIT,
         **options) -> Iterator[Union[Frame, Stop]]:
    """`unwind.walk` from a topmost frame, the outer frames unwound by an `Ahead` (same frames,
    same Stop): for whole backtraces of deep stacks, such as `sframe backtrace` of a core file."""
    step_options = {k: v for k, v in options.items() if k not in ("callee_saved", "symbolize", "pac_mask")}
    ahead = Ahead(abi, read, find, callee_saved=options.get("callee_saved", False), symbolize=options.get("symbolize"),
                  pac_mask=options.get("pac_mask", DEFAULT_PAC_MASK), **step_options)
    return unwind_walk(initial, abi=abi, read=read, find=find, limit=limit, outer=_Chunks(ahead), **options)


class _Chunks:
    """`Ahead.step` for a walk from one frame to the next: the callers are unwound in chunks
    (FIRST_CHUNK, then next_chunk) and given one at a time, so a deep stack pays the set-up of
    `Ahead.walk` once per chunk, not once per frame."""

    def __init__(self, ahead: Ahead):
        self._ahead = ahead
        self._next: List[Union[Frame, Stop]] = []     # the rest of the chunk, the next caller last
        self._last: Optional[Frame] = None             # the caller given last
        self._size = FIRST_CHUNK

    def __call__(self, frame: Frame, prev_cfa: Optional[int]) -> Union[Frame, Stop]:
        if not self._next or frame is not self._last:
            got = self._ahead.walk(frame, self._size, prev_cfa=prev_cfa)
            self._size = next_chunk(self._size)
            got.reverse()
            self._next = got
        nxt = self._next.pop()
        self._last = nxt if isinstance(nxt, Frame) else None
        return nxt
