"""What the save-slot analysis says of one callee-saved register at one PC (`Save`), and the
pieces every per-ISA analyser shares."""

import bisect
import enum
import functools
from dataclasses import dataclass
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..arch import abi as abimod
from ..errors import CfiError
from ..sframe.rules import RuleKind
from .flow import Flow, Op
from .lsda import CallSite, landing_pad

CodeReader = Callable[[int, int], Optional[bytes]]
# symbolize(addr) -> (name, offset) of the function symbol containing addr, or None.
Symbolize = Callable[[int], Optional[Tuple[str, int]]]

# The largest function whose code is read and analysed (a malformed FDE may claim gigabytes).
MAX_FUNCTION_SIZE = 1 << 20


class SaveKind(enum.Enum):
    SAVED = "saved"
    UNCHANGED = "unchanged"
    IN_REGISTER = "in register"       # held in another register of this frame (`base`)
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Save:
    """Where one callee-saved register's caller value is, at one PC."""
    kind: SaveKind
    offset: int = 0
    base: Optional[int] = None     # SAVED: None for CFA + offset, else DWARF register + offset
    why: str = ""                  # UNKNOWN: the reason

    def describe(self, abi: abimod.ABIInfo) -> str:
        """e.g. 'saved at CFA - 24', 'saved at [rbp - 16]', 'unchanged', 'unknown (...)'."""
        if self.kind is SaveKind.SAVED:
            base = "CFA" if self.base is None else abi.regname(self.base)
            off = "" if not self.offset else " %s %d" % ("+" if self.offset > 0 else "-", abs(self.offset))
            return "saved at %s%s" % (base, off)
        if self.kind is SaveKind.UNCHANGED:
            return "unchanged (not saved on the way to this PC: still the caller's value)"
        if self.kind is SaveKind.IN_REGISTER:
            return "in %s (copied there: this frame's %s holds the caller's value)" % (
                abi.regname(self.base), abi.regname(self.base))
        return "unknown (%s)" % self.why if self.why else "unknown"


UNCHANGED = Save(SaveKind.UNCHANGED)


@functools.lru_cache(maxsize=1024)
def unknown(why: str) -> Save:
    return Save(SaveKind.UNKNOWN, why=why)


@functools.lru_cache(maxsize=4096)
def saved(offset: int, base: Optional[int] = None) -> Save:
    """Save(SAVED, offset, base): one object per place, shared by the answers (made once, and
    compared by identity first where answers are compared)."""
    return Save(SaveKind.SAVED, offset, base)


class Plan(NamedTuple):
    """What the unwinder does with the analysis' answer, ready for its hot path: the slots to read
    as (reg, base reg or None for the CFA, offset), and the registers to carry over unchanged."""
    slots: Tuple[Tuple[int, Optional[int], int], ...]
    unchanged: Tuple[int, ...]
    moved: Tuple[Tuple[int, int], ...] = ()   # (reg, the register of this frame holding its value)


def function_code(fde, read_code: CodeReader) -> Optional[bytes]:
    """The function's code bytes, read once; None if they cannot all be read."""
    try:
        code = read_code(fde.start, fde.size)
    except Exception:
        return None
    return bytes(code) if code is not None and len(code) >= fde.size else None


def symbol_of(symbolize: Optional[Symbolize], addr: int) -> Optional[Tuple[str, int]]:
    """symbolize(addr), or None where there is no symbolize or it fails (an adapter's lookup
    must never cost the analysis)."""
    if symbolize is None:
        return None
    try:
        return symbolize(addr)
    except Exception:
        return None


def starts_as_function(abi, rows, start: int) -> bool:
    """Do an FDE's rows start as a function's do: a row at its first byte, CFA = SP + the ABI's
    entry offset (not a part of another function: GCC's .cold parts)?"""
    return bool(rows) and rows[0][0] == start and sp_offset(abi, rows[0][1]) == abi.entry_cfa_offset


def cfa_offsets(abi, rules) -> Tuple[Optional[int], Optional[int]]:
    """(CFA - SP, CFA - FP) under `rules`, each None where the CFA is not based on it (both
    None without rules): what core.saves.flow's rules_at answers."""
    return (sp_offset(abi, rules), fp_offset(abi, rules)) if rules is not None else (None, None)


def sp_offset(abi, rules):
    """The CFA offset where the CFA is SP + offset; None where it is based on anything else."""
    cfa = rules.cfa
    if cfa is not None and cfa.kind is RuleKind.REGISTER and not cfa.deref and cfa.reg == abi.sp:
        return cfa.offset
    return None


def fp_offset(abi, rules):
    cfa = rules.cfa
    if cfa is not None and cfa.kind is RuleKind.REGISTER and not cfa.deref and cfa.reg == abi.fp:
        return cfa.offset
    return None


def landing_pads(index, pieces, ops: Sequence[Op]) -> Tuple[Optional[Dict[int, int]], Optional[str]]:
    """(op number of a call -> op number of its landing pad, from the exception tables of the
    FDEs `pieces`, where the index knows the file's (`index.exceptions`); or why they cannot be
    followed).  A pad outside `ops` is not followed (the code there is not analysed here)."""
    tables = getattr(index, "exceptions", None)
    if tables is None:
        return None, None
    sites: List[CallSite] = []
    try:
        for piece in pieces:
            sites.extend(tables.call_sites(piece.start))
    except CfiError as exc:
        return None, "its exception table cannot be read (%s)" % exc
    if not sites:
        return None, None
    sites.sort()
    site_starts = [s.start for s in sites]
    where = {op.addr: k for k, op in enumerate(ops)}
    starts = [op.addr for op in ops]
    pads: Dict[int, int] = {}
    for k, op in enumerate(ops):
        if op.flow is not Flow.CALL and not op.gone:
            continue
        pad = landing_pad(sites, op.addr + op.length, site_starts)
        if pad is None:
            continue
        j = where.get(pad)
        if j is None:
            i = bisect.bisect_right(starts, pad) - 1
            if i >= 0 and pad < ops[i].addr + ops[i].length:
                return None, "its exception table puts a landing pad at %#x, inside the instruction at %#x" % (
                    pad, ops[i].addr)
            continue
        pads[k] = j
    return pads, None
