"""PC -> FDE -> FRE lookup over one SFrame section, lazy and memoized.

Building an index checks the header only.  A lookup binary-searches the FDE index in place
(O(log n) reads of single start fields), decodes just the function it lands on, and caches that
function's FREs and interpreted rules.  A section not flagged sorted is sorted once, on first use.
"""

import bisect
from typing import Dict, List, Literal, NamedTuple, Optional, Tuple, Union

from ..errors import SFrameError
from . import format as F
from .decode import Section
from .records import FDE, FRE
from .rules import FrameRules, interpret

_MASK_BIT = 1 << F.FDE_INFO_PCTYPE_BIT


class Match(NamedTuple):
    """The answer to lookup(pc): the function, the FRE in effect (None if it has none) and its rules."""
    fde: FDE
    fre: Optional[FRE]
    rules: FrameRules
    pc: int


class _FuncCache:
    __slots__ = ("fde", "fres", "starts", "rules")

    def __init__(self, fde, fres):
        self.fde = fde
        self.fres = fres
        self.starts = [f.start for f in fres]
        self.rules = [None] * len(fres)


class SFrameIndex:
    """Lookups in one section loaded at `section_addr` (link-time address plus load bias)."""

    CACHE_LIMIT = 4096

    def __init__(self, data: bytes, section_addr: int = 0):
        self.section = Section(data, section_addr)
        self.header = self.section.header
        # None: sorted already; False: not sorted, the order not yet worked out; else FDE numbers by start
        self._order: Union[None, Literal[False], List[int]] = None if self.header.has(F.Flag.FDE_SORTED) else False
        self._funcs: Dict[int, _FuncCache] = {}
        self._fdes: Dict[int, FDE] = {}
        self._range: Optional[Tuple[int, int]] = None
        self._rules: Dict[tuple, FrameRules] = {}   # (FDE info2, FRE info, data words) -> their rules
        self._rows: Dict[int, Tuple[Tuple[int, FrameRules], ...]] = {}    # FDE number -> `rows`
        self._raw_rules: Dict[Tuple[int, bytes], FrameRules] = {}   # (FDE info2, FRE info and data-word bytes) -> rules
        self.saves: Dict[int, object] = {}    # function start -> save-slot facts (core.saves.analysis)
        self.noreturn: Dict[int, bool] = {}   # function start -> never returns? (core.saves.noreturn)
        self.decoded: Dict[tuple, object] = {}   # a function's decoded instructions (core.saves.flow_analyser)
        self.ahead: Optional[object] = None     # x86-64 functions measured ahead of their turn (core.saves.x86insn.Ahead)
        self.names: Optional[Dict[str, list]] = None   # symbol -> FDEs it starts (core.saves.analysis)
        # The file's exception tables (core.saves.lsda.ExceptionTables), where its CFI was read: the
        # analysis then follows calls to their landing pads.  None: not known.
        self.exceptions: Optional[object] = None

    @property
    def abi(self) -> F.ABI:
        return self.header.abi

    @property
    def version(self) -> int:
        return self.header.version

    def __len__(self):
        return self.header.num_fdes

    def _sorted_order(self):
        if self._order is False:
            sec = self.section
            self._order = sorted(range(len(sec)), key=sec.start_of)
        return self._order

    def _start(self, k):
        order = self._order
        return self.section.start_of(order[k] if order else k)

    def text_range(self) -> Tuple[int, int]:
        """(lowest function start, highest function end) covered, from the first and last FDEs."""
        if self._range is None:
            n = len(self)
            if n == 0:
                self._range = (0, 0)
            else:
                order = self._sorted_order()
                first = self.section.fde(order[0] if order else 0)
                last = self.section.fde(order[-1] if order else n - 1)
                self._range = (first.start, max(first.end, last.end))
        return self._range  # type: ignore[return-value]  # set just above

    def find_fde(self, pc: int) -> Optional[FDE]:
        """The FDE whose [start, start+size) contains pc, or None."""
        n = len(self)
        if n == 0:
            return None
        order = self._sorted_order()
        start = self._start
        if order:
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) // 2
                if start(mid) <= pc:
                    lo = mid + 1
                else:
                    hi = mid
        else:
            lo = self.section.start_search(pc, n)
        k = lo - 1
        if k < 0:
            if order is None and n > 1 and start(1) < start(0):
                # Below the first FDE: that first FDE's neighbour is checked as a hit's would be.
                raise SFrameError(self.section.fde_base + self.header.fde_size,
                                  "FDE 1 starts before FDE 0 though the section is flagged sorted")
            return None
        i = order[k] if order else k
        fde = self._fdes.get(i)
        if fde is None:
            if len(self._fdes) >= self.CACHE_LIMIT:
                self._fdes.clear()
            fde = self._fdes[i] = self.section.fde(i)
        elif order is None:
            return fde if fde.contains(pc) else None     # neighbours checked when first decoded
        if order is None:
            # Flagged sorted: check the neighbours of the hit, so a lie cannot give a wrong answer silently.
            if k > 0 and start(k - 1) > fde.start:
                raise SFrameError(fde.offset, "FDE %d starts before FDE %d though the section is flagged sorted" % (k, k - 1))
            if k + 1 < n and start(k + 1) < fde.start:
                raise SFrameError(fde.offset + self.header.fde_size,
                                  "FDE %d starts before FDE %d though the section is flagged sorted" % (k + 1, k))
        return fde if fde.contains(pc) else None

    def _func(self, fde):
        f = self._funcs.get(fde.index)
        if f is None:
            if len(self._funcs) >= self.CACHE_LIMIT:
                self._funcs.clear()
            f = self._funcs[fde.index] = _FuncCache(fde, self.section.fres(fde))
        return f

    def fres(self, fde: FDE) -> Tuple[FRE, ...]:
        return self._func(fde).fres

    def _interpret(self, fde: FDE, fre: FRE) -> FrameRules:
        """interpret(), memoized by what the rules depend on: the FDE type and the FRE's info byte
        and data words (a section repeats few of them).  A malformed FRE is never remembered, so
        its error always names its own offset."""
        key = (fde.info2, fre.info, fre.words)
        rules = self._rules.get(key)
        if rules is None:
            rules = interpret(self.header, fde, fre)
            if len(self._rules) >= self.CACHE_LIMIT:
                self._rules.clear()
            self._rules[key] = rules
        return rules

    def rows(self, fde: FDE) -> Tuple[Tuple[int, FrameRules], ...]:
        """((address, rules), ...) of each FRE of a function, in order (PC-mask FDEs: the first
        block); memoized (the analysis and the CFI writer each ask).  Made from the FREs' bytes
        where their rules are known by them: a writer asks of every function once, and most
        FREs repeat another's bytes (no FRE is decoded for those)."""
        got = self._rows.get(fde.index)
        if got is not None:
            return got
        known, info2, start = self._raw_rules, fde.info2, fde.start
        out = []
        for raw in self.section.raw_fres(fde):
            rules = known.get((info2, raw[2]))
            if rules is None:
                rules = self._interpret(fde, self.section.decode_fre(raw))
                if len(known) >= self.CACHE_LIMIT:
                    known.clear()
                known[(info2, raw[2])] = rules
            out.append((start + raw[1], rules))
        got = tuple(out)
        if len(self._rows) >= self.CACHE_LIMIT:
            self._rows.clear()
        self._rows[fde.index] = got
        return got

    def lookup(self, pc: int) -> Optional[Match]:
        """Match for pc, or None when no FDE covers it (or pc precedes the function's first FRE)."""
        fde = self.find_fde(pc)
        if fde is None:
            return None
        f = self._func(fde)
        if not f.fres:
            if self.header.version == 3 and fde.fde_type is F.FDEType.DEFAULT:
                return Match(fde, None, interpret(self.header, fde, None), pc)
            return None
        off = pc - fde.start
        if fde.info & _MASK_BIT:
            off %= fde.block_size
        j = bisect.bisect_right(f.starts, off) - 1
        if j < 0:
            return None
        rules = f.rules[j]
        if rules is None:
            rules = f.rules[j] = self._interpret(fde, f.fres[j])
        return Match(fde, f.fres[j], rules, pc)
