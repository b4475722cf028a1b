"""SFrame written out as DWARF call-frame information: a `.debug_frame` section whose rows say
exactly what SFrame says, plus the callee-saved registers the save-slot analysis proves.

Every DWARF consumer (GDB, LLDB, elfutils) can then unwind through code that has SFrame but no CFI.
Per SFrame FDE, one DWARF FDE (a PLT FDE of PC type MASK: one per repetition block) with a row at
every FRE and at every instruction where the analysis' answer changes:

- the CFA: SP or FP plus offset (DW_CFA_def_cfa), or a flex rule's register-based value or
  dereference (DW_CFA_def_cfa_expression);
- the RA: at CFA + offset (DW_CFA_offset), still in its register (DW_CFA_same_value: AArch64 x30,
  s390x r14), undefined in an outermost frame (DW_CFA_undefined), or a flex rule (expression);
- the FP: at CFA + offset, or unchanged (DW_CFA_same_value);
- s390x: the caller's SP = CFA - 160 (DW_CFA_val_offset);
- AArch64 return-address signing: DW_CFA_AARCH64_negate_ra_state where the RA's signed state
  changes, and the CIE augmentation "B" for the B key;
- a V3 signal FDE: the CIE augmentation "S" (a signal frame);
- each callee-saved register: saved at CFA + k (DW_CFA_offset) or at a register + k
  (DW_CFA_expression, DW_OP_bregN k) where the analysis proves it, DW_CFA_same_value where it
  proves it unchanged, and DW_CFA_undefined everywhere else: a consumer takes a register the CFI
  does not mention as unchanged, which would show a wrong value.  Unknown, never wrong.
"""

import array
import gc
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from .. import parallel
from ..arch import abi as abimod
from ..saves import save as saves
from ..sframe import format as F
from ..sframe.index import SFrameIndex
from ..sframe.rules import FrameRules, Rule, RuleKind

# DWARF call-frame instructions (DWARF 4, section 6.4.2) and expression operators.
DW_CFA_advance_loc = 0x40
DW_CFA_offset = 0x80
DW_CFA_nop = 0x00
DW_CFA_advance_loc1 = 0x02
DW_CFA_advance_loc2 = 0x03
DW_CFA_advance_loc4 = 0x04
DW_CFA_offset_extended_sf = 0x11
DW_CFA_undefined = 0x07
DW_CFA_same_value = 0x08
DW_CFA_register = 0x09
DW_CFA_def_cfa = 0x0C
DW_CFA_def_cfa_expression = 0x0F
DW_CFA_expression = 0x10
DW_CFA_val_offset_sf = 0x15
DW_CFA_val_expression = 0x16
DW_CFA_AARCH64_negate_ra_state = 0x2D
DW_OP_deref = 0x06
DW_OP_breg0 = 0x70

# Bytes of code worth a process of their own (core.parallel): about 0.1 s of analysis (a fourth
# of that without the callee-saved registers).
CODE_PER_WORKER = 1 << 16

CIE_ID_32 = 0xFFFFFFFF         # .debug_frame's CIE id (32-bit DWARF)
CIE_VERSION = 3                # ULEB128 return-address column; read by GDB, LLDB, elfutils, readelf
CODE_ALIGN = 1
DATA_ALIGN = -8


def uleb128(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb128(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


# A column's rule in a row, as the writer says it: ("undefined",), ("same",), ("offset", k),
# ("val_offset", k), ("expr", bytes), ("val_expr", bytes), ("register", regnum).
ColumnRule = tuple
UNDEFINED: ColumnRule = ("undefined",)
SAME: ColumnRule = ("same",)


@dataclass(frozen=True)
class CfiRow:
    """One row of a function's CFI table: from `addr` on, until the next row."""
    addr: int
    cfa: Tuple                       # ("reg", regnum, offset) or ("expr", bytes)
    columns: Tuple[Tuple[int, ColumnRule], ...]    # (DWARF column, rule), sorted
    ra_signed: bool = False

    def column(self, col: int) -> Optional[ColumnRule]:
        return dict(self.columns).get(col)


def _breg(reg: int, offset: int, deref: bool = False) -> bytes:
    if reg < 32:
        out = bytes([DW_OP_breg0 + reg]) + sleb128(offset)
    else:
        out = b"\x92" + uleb128(reg) + sleb128(offset)        # DW_OP_bregx
    return out + (bytes([DW_OP_deref]) if deref else b"")


def _cfa(rule: Rule) -> Tuple:
    if rule.deref:
        return ("expr", _breg(rule.reg, rule.offset, True))    # type: ignore[arg-type]
    return ("reg", rule.reg, rule.offset)


def _column(rule: Rule) -> ColumnRule:
    """A RA or FP rule of SFrame as the rule of its DWARF column."""
    k = rule.kind
    if k in (RuleKind.AT_CFA, RuleKind.FIXED):
        return ("offset", rule.offset)
    if k is RuleKind.CFA_PLUS:
        return ("val_offset", rule.offset)
    if k is RuleKind.UNCHANGED:
        return SAME
    if k is RuleKind.UNDEFINED:
        return UNDEFINED
    assert rule.reg is not None
    if rule.deref:
        return ("expr", _breg(rule.reg, rule.offset))
    if rule.offset == 0:
        return ("register", rule.reg)
    return ("val_expr", _breg(rule.reg, rule.offset))


def _save_column(save: saves.Save) -> ColumnRule:
    if save.kind is saves.SaveKind.SAVED:
        return ("offset", save.offset) if save.base is None else ("expr", _breg(save.base, save.offset))
    if save.kind is saves.SaveKind.UNCHANGED:
        return SAME
    if save.kind is saves.SaveKind.IN_REGISTER and save.base is not None:
        return ("register", save.base)
    return UNDEFINED


Frows = Sequence[Tuple[int, Optional[FrameRules]]]
Saved = Sequence[Tuple[int, Dict[int, saves.Save]]]
_NOT_ANALYSED = saves.unknown("not analysed")


_ANALYSIS: List[Any] = []


def _analysis() -> Any:
    """core.saves.analysis, imported at its first use (a debugger's first stop needs none), then
    kept (a function's import statement costs at every call)."""
    if not _ANALYSIS:
        from ..saves import analysis
        _ANALYSIS.append(analysis)
    return _ANALYSIS[0]


def _rows(abi: abimod.ABIInfo, frows: Frows, saved: Saved) -> List[CfiRow]:
    regs = [r for r in abi.callee_saved if r != abi.fp]
    places = sorted({a for a, _ in frows} | {a for a, _ in saved})
    rows: List[CfiRow] = []
    fi = si = 0
    last_cfa: Tuple = ("reg", abi.sp, abi.entry_cfa_offset)
    no_saves: Dict[int, saves.Save] = {}
    prev_where: Optional[Dict[int, saves.Save]] = None
    reg_cols: Dict[int, ColumnRule] = {}
    for addr in places:
        while fi + 1 < len(frows) and frows[fi + 1][0] <= addr:
            fi += 1
        while si + 1 < len(saved) and saved[si + 1][0] <= addr:
            si += 1
        rules: Optional[FrameRules] = frows[fi][1] if frows[fi][0] <= addr else None
        if rules is None or rules.cfa is None:
            cfa = last_cfa                      # outermost: the CFA only names the frame
            cols = {abi.ra: UNDEFINED}
            if abi.sp_val_offset:
                cols[abi.sp] = ("val_offset", abi.sp_val_offset)
            signed = False
        else:
            cfa, frame_cols, signed, _abi = _frame_columns(abi, rules)
            last_cfa = cfa
            cols = dict(frame_cols)
        where = saved[si][1] if saved and saved[si][0] <= addr else no_saves
        if where is not prev_where:             # (the registers' columns, once per answer)
            reg_cols = {r: _save_column(where[r]) if r in where else UNDEFINED for r in regs}
            prev_where = where
        for r, rule in reg_cols.items():
            if r not in cols:
                cols[r] = rule
        row = CfiRow(addr, cfa, tuple(sorted(cols.items())), signed)
        if rows and (rows[-1].cfa, rows[-1].columns, rows[-1].ra_signed) == (row.cfa, row.columns, row.ra_signed):
            continue
        rows.append(row)
    return rows


# FrameRules -> (CFA, {RA, FP and s390x SP columns}, RA signed): a section repeats few rules, and
# the index memoizes them, so their columns are worked out once (looked up by identity).
_FRAME_COLUMNS: Dict[int, Tuple[FrameRules, Tuple]] = {}


def _frame_columns(abi: abimod.ABIInfo, rules: FrameRules) -> Tuple:
    got = _FRAME_COLUMNS.get(id(rules))
    if got is not None and got[0] is rules and got[1][3] is abi:
        return got[1]
    assert rules.cfa is not None
    cols: Dict[int, ColumnRule] = {abi.ra: _column(rules.ra), abi.fp: _column(rules.fp)}
    if abi.sp_val_offset:
        cols[abi.sp] = ("val_offset", abi.sp_val_offset)
    value = (_cfa(rules.cfa), cols, rules.ra_mangled, abi)
    if len(_FRAME_COLUMNS) >= 4096:
        _FRAME_COLUMNS.clear()
    _FRAME_COLUMNS[id(rules)] = (rules, value)
    return value


_COLUMN_CODE: Dict[Tuple[int, ColumnRule], bytes] = {}


def _column_code(col: int, rule: ColumnRule) -> bytes:
    """`_column_instructions`, memoized: a section repeats few (column, rule) pairs."""
    key = (col, rule)
    got = _COLUMN_CODE.get(key)
    if got is None:
        if len(_COLUMN_CODE) >= 4096:
            _COLUMN_CODE.clear()
        got = _COLUMN_CODE[key] = _column_instructions(col, rule)
    return got


def _column_instructions(col: int, rule: ColumnRule) -> bytes:
    kind = rule[0]
    if kind == "undefined":
        return bytes([DW_CFA_undefined]) + uleb128(col)
    if kind == "same":
        return bytes([DW_CFA_same_value]) + uleb128(col)
    if kind == "offset":
        off = rule[1]
        if off % DATA_ALIGN == 0 and off // DATA_ALIGN >= 0 and col < 64:
            return bytes([DW_CFA_offset | col]) + uleb128(off // DATA_ALIGN)
        if off % DATA_ALIGN == 0:
            return bytes([DW_CFA_offset_extended_sf]) + uleb128(col) + sleb128(off // DATA_ALIGN)
        return bytes([DW_CFA_expression]) + uleb128(col) + _block(_cfa_relative(off))
    if kind == "val_offset":
        off = rule[1]
        if off % DATA_ALIGN == 0:
            return bytes([DW_CFA_val_offset_sf]) + uleb128(col) + sleb128(off // DATA_ALIGN)
        return bytes([DW_CFA_val_expression]) + uleb128(col) + _block(_cfa_relative(off))
    if kind == "register":
        return bytes([DW_CFA_register]) + uleb128(col) + uleb128(rule[1])
    if kind == "expr":
        return bytes([DW_CFA_expression]) + uleb128(col) + _block(rule[1])
    assert kind == "val_expr", rule
    return bytes([DW_CFA_val_expression]) + uleb128(col) + _block(rule[1])


def _cfa_relative(off: int) -> bytes:
    """An expression for CFA + off: the CFA is pushed before a register rule's expression runs."""
    return b"\x23" + uleb128(off) if off >= 0 else b"\x11" + sleb128(off) + b"\x22"   # plus_uconst / consts, plus


def _block(expr: bytes) -> bytes:
    return uleb128(len(expr)) + expr


def _advance(delta: int, endian: str) -> bytes:
    if delta < 0x40:
        return bytes([DW_CFA_advance_loc | delta])
    if delta < 0x100:
        return bytes([DW_CFA_advance_loc1, delta])
    if delta < 0x10000:
        return struct.pack(endian + "BH", DW_CFA_advance_loc2, delta)
    return struct.pack(endian + "BI", DW_CFA_advance_loc4, delta)


def row_program(rows: List[CfiRow], start: int, endian: str) -> bytes:
    """The call-frame instructions that build `rows` from nothing (the CIE's initial rules are
    empty), each row from the one before."""
    out = bytearray()
    prev_cfa: Optional[Tuple] = None
    prev: Dict[int, ColumnRule] = {}
    signed = False
    loc = start
    for row in rows:
        if row.addr != loc:
            out += _advance(row.addr - loc, endian)
            loc = row.addr
        if row.cfa != prev_cfa:
            if row.cfa[0] == "reg":
                out += bytes([DW_CFA_def_cfa]) + uleb128(row.cfa[1]) + uleb128(row.cfa[2]) if row.cfa[2] >= 0 \
                    else bytes([0x12]) + uleb128(row.cfa[1]) + sleb128(row.cfa[2] // DATA_ALIGN)   # def_cfa_sf
            else:
                out += bytes([DW_CFA_def_cfa_expression]) + _block(row.cfa[1])
            prev_cfa = row.cfa
        for col, rule in row.columns:
            if prev.get(col) != rule:
                out += _column_code(col, rule)
                prev[col] = rule
        if row.ra_signed != signed:
            out.append(DW_CFA_AARCH64_negate_ra_state)
            signed = row.ra_signed
    return bytes(out)


class _Programs:
    """Functions' row programs, made once per shape: the program depends only on the rows'
    places relative to the function's start, SFrame's rules and the registers' columns, and
    functions of one shape are many (leaves, one push, one frame size).  The rules are told apart
    by identity (the index memoizes them; each is held here, so that its id is not reused)."""

    LIMIT = 1 << 14

    def __init__(self, abi: abimod.ABIInfo, endian: str, analysed: bool):
        self.abi, self.endian = abi, endian
        self.regs = [r for r in abi.callee_saved if r != abi.fp]
        self.table = _analysis().table if analysed else None     # core.saves.analysis.table
        self.tokens: Dict[int, Tuple[Optional[FrameRules], int]] = {}
        self.issued = 0
        self.programs: Dict[tuple, bytes] = {}
        self.by_fres: Dict[tuple, bytes] = {}    # without the analysis: (FDE type, FREs) -> program
        self.answers: Dict[int, Tuple[Dict[int, saves.Save], tuple]] = {}   # the analysis' answers' columns

    def looked_up(self, index: SFrameIndex, fde) -> bytes:
        """The call-frame instructions of one function (of a MASK FDE: of each block) without
        the analysis: they depend only on the FDE type and the FREs' starts and bytes
        (index._interpret's key), looked up by them before anything is decoded."""
        raw = index.section.raw_fres(fde)
        key = (fde.info2, tuple([(start, words) for _off, start, words in raw]))
        got = self.by_fres.get(key)
        if got is None:
            got = self.make(index, fde, None, None)
            if len(self.by_fres) >= self.LIMIT:
                self.by_fres.clear()
            self.by_fres[key] = got
        return got

    def make(self, index: SFrameIndex, fde, read_code: Optional[saves.CodeReader],
             symbolize: Optional[saves.Symbolize]) -> bytes:
        """The call-frame instructions of one function (of a MASK FDE: of each block), made of
        what its rows are made of: SFrame's rows and the analysis' answers (where there is code
        to read: the `analysed` this was made with); memoized by their shape."""
        # (A V3 default FDE without FREs: the outermost frame throughout, as no rows say.)
        frows: Frows = index.rows(fde) or ((fde.start, None),)
        saved: Saved
        if read_code is not None and self.table is not None:
            saved = self.table(self.abi, index, fde, read_code, symbolize)
        else:
            saved = [(fde.start, {r: _NOT_ANALYSED for r in self.regs})]
        start, tokens, regs = fde.start, self.tokens, self.regs
        shape: List[tuple] = []
        for addr, rules in frows:
            token = tokens.get(id(rules))
            if token is None or token[0] is not rules:
                if len(tokens) >= self.LIMIT:
                    tokens.clear()
                self.issued += 1
                token = tokens[id(rules)] = (rules, self.issued)
            shape.append((addr - start, token[1]))
        answers = self.answers
        for addr, where in saved:
            cols = answers.get(id(where))
            if cols is None or cols[0] is not where:
                if len(answers) >= self.LIMIT:
                    answers.clear()
                cols = answers[id(where)] = (where, tuple([_save_column(where[r]) if r in where else UNDEFINED
                                                           for r in regs]))
            shape.append((addr - start, cols[1]))
        key = tuple(shape)
        got = self.programs.get(key)
        if got is None:
            if len(self.programs) >= self.LIMIT:
                self.programs.clear()
            got = self.programs[key] = row_program(_rows(self.abi, frows, saved), start, self.endian)
        return got


def _spans(index: SFrameIndex, count: int) -> List[Tuple[int, int]]:
    """The FDEs (numbers first..stop-1) cut into `count` runs of about equal code, where the
    section is sorted (else of equal numbers of FDEs)."""
    n = len(index)
    count = max(1, min(count, n))
    if not index.header.has(F.Flag.FDE_SORTED):
        cuts = [n * k // count for k in range(count + 1)]
    else:
        lo, hi = index.text_range()
        cuts = [0]
        for k in range(1, count):
            at = lo + (hi - lo) * k // count       # the first FDE starting at or after it
            cuts.append(max(cuts[-1], index.section.start_search(at - 1, n)))
        cuts.append(n)
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if a < b]


def _part_begins(index: SFrameIndex, span: Tuple[int, int], read_code: Optional[saves.CodeReader]) -> None:
    """Tell the analysis (where it runs) that the functions of FDEs span[0]..span[1]-1 are asked in
    turn now: by the addresses they start in, where the section is sorted (saves.analysis.writing)."""
    if read_code is None:
        return
    from ..saves.analysis import writing
    if not index.header.has(F.Flag.FDE_SORTED):
        writing(index)
        return
    first, stop = span
    writing(index, index.section.start_of(first), index.section.start_of(stop) if stop < len(index) else None)


def _entry_kind(abi: abimod.ABIInfo, version: int, fde) -> Tuple[str, bool]:
    """(the CIE augmentation of an FDE's entries, one entry per repeated block?): what its info
    bytes say."""
    return (("S" if fde.signal and version == 3 else "")
            + ("B" if abi.pointer_auth and fde.pauth_key is F.PAuthKey.B else ""), fde.pc_type is F.PCType.MASK)


def _add_entries(blob: bytearray, offsets: array.array, entry: Callable[[int, int, bytes], bytes], start: int,
                 size: int, block: int, program: bytes) -> None:
    """A function's entries (`entry`) appended to `blob`, where each starts to `offsets`: one, or
    one per repeated `block` (a MASK FDE's; none for one of size 0)."""
    if block and block != size:
        for first in range(start, start + size, block):
            offsets.append(len(blob))
            blob += entry(first, min(block, start + size - first), program)
    else:
        offsets.append(len(blob))
        blob += entry(start, size, program)


@dataclass
class _Part:
    """The entries of a run of functions, made apart from the others (core.parallel): their CIE
    pointers are set when the parts are put together."""
    entries: bytearray
    offsets: array.array       # where each entry starts in `entries`
    runs: List[Tuple[int, str]]    # (first entry, CIE augmentation) of each run of entries sharing one
    functions: int


@dataclass
class Written:
    """A `.debug_frame` section and what went into it."""
    data: bytes
    fdes: int            # DWARF FDEs written (a MASK FDE gives one per block)
    functions: int       # SFrame FDEs turned into them


class Progress(Protocol):
    """Told how far a `debug_frame` is: the number of parts, then each part done (in whichever
    process did it: core.parallel)."""

    def begin(self, parts: int) -> None: ...

    def part_done(self) -> None: ...


def outermost_rows(abi: abimod.ABIInfo, start: int) -> List[CfiRow]:
    """The rows of a program's entry function (`_start`), which no SFrame FDE may cover: the
    outermost frame throughout (its RA undefined, as glibc's own CFI for it says), so that a
    debugger ends the stack there instead of guessing a caller.  The CFA only names the frame."""
    return [CfiRow(start, ("reg", abi.sp, abi.entry_cfa_offset), ((abi.ra, UNDEFINED),))]


def debug_frame(index: SFrameIndex, read_code: Optional[saves.CodeReader], *,
                symbolize: Optional[saves.Symbolize] = None, address_size: int = 8,
                keep: Optional[Callable[[int, int], bool]] = None, base: int = 0,
                outermost: Tuple[Tuple[int, int], ...] = (), workers: Optional[int] = None,
                progress: Optional[Progress] = None, numbers: Optional[Sequence[int]] = None) -> Written:
    """The `.debug_frame` entries of a whole SFrame section, at the addresses the index has (the
    file's own addresses for a side file).  `keep(start, end)`: write only the functions it
    accepts (None: all).  `base`: where the entries will start in the section (after a program's
    own `.debug_frame`), which the FDEs' CIE pointers count from.  `outermost`: (start, size) of
    functions without SFrame that are the outermost frame (a program's entry point).  `workers`:
    at most this many processes (None: one per core; core.parallel).  `progress`: told of each part
    done.  `numbers`: the FDEs to write (None: all; else in one process, each decoded alone)."""
    abi = abimod.info(index.abi)
    e = ">" if abi.big_endian else "<"
    addr_fmt = {4: "I", 8: "Q"}[address_size]
    out = bytearray()
    cies: Dict[str, int] = {}
    fdes = functions = 0

    def cie(aug: str) -> int:
        if aug not in cies:
            body = struct.pack(e + "IB", CIE_ID_32, CIE_VERSION) + aug.encode() + b"\0"
            body += uleb128(CODE_ALIGN) + sleb128(DATA_ALIGN) + uleb128(abi.ra)
            body += b"\0" * (-(len(body) + 4) % address_size)         # DW_CFA_nop padding
            cies[aug] = base + len(out)
            out.extend(struct.pack(e + "I", len(body)) + body)
        return cies[aug]

    head = struct.Struct(e + "II" + addr_fmt * 2)
    fixed, pack_head = head.size - 4, head.pack
    zeros = [b"\0" * k for k in range(address_size)]

    def entry(start: int, size: int, program: bytes) -> bytes:
        """An FDE, its CIE pointer 0 (set when the part is placed: `place`), padded so that the
        whole entry is aligned."""
        length = fixed + len(program)
        pad = -(length + 4) % address_size
        return pack_head(length + pad, 0, start, size) + program + zeros[pad]

    def part(span: Tuple[int, int]) -> _Part:
        """The entries of the functions kept among FDEs span[0]..span[1]-1."""
        got = _Part(bytearray(), array.array("I"), [], 0)
        blob, offsets, runs = got.entries, got.offsets, got.runs
        programs = _Programs(abi, e, read_code is not None)
        kinds: Dict[int, Tuple[str, bool]] = {}   # FDE info | info2 << 8 -> (augmentation, MASK?)
        _part_begins(index, span, read_code)
        functions = 0
        for fde in index.section.fdes(*span):
            start, size = fde.start, fde.size
            if keep is not None and not keep(start, start + size):
                continue
            # (With the analysis every function's program is made: there is nothing to look up first.)
            program = programs.looked_up(index, fde) if read_code is None else \
                programs.make(index, fde, read_code, symbolize)
            kind = kinds.get(fde.info | fde.info2 << 8)
            if kind is None:
                kind = kinds[fde.info | fde.info2 << 8] = _entry_kind(abi, index.version, fde)
            aug = kind[0]
            if not runs or runs[-1][1] != aug:
                runs.append((len(offsets), aug))
            _add_entries(blob, offsets, entry, start, size, fde.block_size if kind[1] else 0, program)
            functions += 1
        got.functions = functions
        if progress is not None:
            progress.part_done()
        return got

    def place(got: _Part) -> None:
        """A part's entries, each pointing to its CIE (written before its first entry)."""
        offsets, blob, pack = got.offsets, got.entries, struct.Struct(e + "I").pack_into
        bounds = [k for k, _aug in got.runs[1:]] + [len(offsets)]
        for (k, aug), stop in zip(got.runs, bounds):
            where = cie(aug)
            if k == stop:
                continue          # (a PLT FDE of size 0: no entry, its CIE all the same, as before)
            lo = offsets[k]
            hi = offsets[stop] if stop < len(offsets) else len(blob)
            shift = len(out) - lo + 4
            out.extend(blob[lo:hi])
            for j in range(k, stop):
                pack(out, offsets[j] + shift, where)

    for start, size in outermost:
        place(_Part(bytearray(entry(start, size, row_program(outermost_rows(abi, start), start, e))),
                    array.array("I", [0]), [(0, "")], 0))
        fdes += 1
    if numbers is not None:
        count, spans = 1, [(k, k + 1) for k in sorted(set(numbers))]
    else:
        lo, hi = index.text_range()
        count = parallel.workers(hi - lo, CODE_PER_WORKER * (1 if read_code is not None else 4), workers)
        spans = _spans(index, 1 if count == 1 else min(count * 8, parallel.MAX_PARTS))
    # The analysis makes many small objects, and what it keeps it keeps in its caches: the cycle
    # collector's passes over them cost a sixth of the time (in forked children also their pages'
    # copies) and free nothing a later pass would not.
    if progress is not None:
        progress.begin(len(spans))
    collecting = gc.isenabled()
    gc.disable()
    try:
        parts = parallel.run(part, spans, count)
    finally:
        if collecting:
            gc.enable()
    for got in parts:
        place(got)
        fdes += len(got.offsets)
        functions += got.functions
    return Written(bytes(out), fdes, functions)
