"""DWARF CFI rows (pyelftools' decoder) in core.sframe.rules terms: what `sframe check` compares SFrame
with, and what `sframe backtrace` unwinds by where no SFrame covers a PC.

pyelftools decodes the CFI (`elftools.dwarf.callframe`: CIEs, FDEs, their rows); this module
only says what a row means as `Rule`s, evaluates the CFA expressions the toolchains write (the
PLT's), and decodes single FDEs on demand for unwinding: the FDE covering a PC is found by
`core.dwarf.coverage` (the `.eh_frame_hdr` table), so a library's whole `.eh_frame` is never parsed.
"""

from __future__ import annotations

import bisect
import contextlib
import io
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from .. import pyelftools
from ..arch import abi as abimod
from ..sframe.format import MASK64
from ..sframe.rules import UNCHANGED, Rule, RuleKind
from .coverage import CfiIndex, CfiSection

# pyelftools' register rule types, as core.sframe.rules Rules (EXPRESSION rules have no such form).
_SIMPLE = {"SAME_VALUE": lambda arg: UNCHANGED, "UNDEFINED": lambda arg: Rule(RuleKind.UNDEFINED),
           "OFFSET": lambda arg: Rule(RuleKind.AT_CFA, arg), "VAL_OFFSET": lambda arg: Rule(RuleKind.CFA_PLUS, arg)}


# CFA opcodes pyelftools' row decoder gets wrong: DW_CFA_def_cfa_sf (0x12) is scaled by the code
# alignment factor instead of the data alignment factor (0.29 and 0.33), and 0.29 ignores
# DW_CFA_def_cfa_offset_sf (0x13).  An FDE that uses them is no CFI here, never a wrong CFA.
_MISDECODED = (0x12, 0x13)
MISDECODED_REASON = "its CFI uses DW_CFA_def_cfa_sf or DW_CFA_def_cfa_offset_sf, which pyelftools decodes wrongly"


def misdecoded(fde) -> bool:
    """Does this pyelftools FDE (or its CIE) use an opcode pyelftools' rows get wrong?"""
    cie = getattr(fde, "cie", None)
    for instructions in (getattr(cie, "instructions", None) or (), fde.instructions):
        if any(i.opcode in _MISDECODED for i in instructions):
            return True
    return False


_STRUCTS: Dict[tuple, object] = {}     # (byte order, format, address size, version) -> DWARFStructs


def dwarf_structs(little_endian: bool, dwarf_format: int, address_size: int, dwarf_version: int = 2):
    """pyelftools' DWARFStructs for those keys, made once (each takes milliseconds to build, and
    is not changed once built)."""
    key = (little_endian, dwarf_format, address_size, dwarf_version)
    made = _STRUCTS.get(key)
    if made is None:
        pyelftools.load()
        from elftools.dwarf.structs import DWARFStructs
        made = _STRUCTS[key] = DWARFStructs(little_endian=little_endian, dwarf_format=dwarf_format,
                                            address_size=address_size, dwarf_version=dwarf_version)
    return made


@contextlib.contextmanager
def shared_structs() -> Iterator[None]:
    """While pyelftools parses CFI: its DWARFStructs from `dwarf_structs`.

    Its CFI parser builds a new DWARFStructs (about 5 ms) for every CIE and FDE; they differ only
    by those keys, so 50,000 FDEs take seconds, not minutes, and a backtrace through a library
    does not pay for them at each function."""
    pyelftools.load()
    import elftools.dwarf.callframe as callframe
    plain = callframe.DWARFStructs
    callframe.DWARFStructs = dwarf_structs
    try:
        yield
    finally:
        callframe.DWARFStructs = plain


class Expr:
    """A CFI expression evaluated at one address: registers are symbols (only one may appear,
    added to constants), the PC register is the address; the result is Rule(REGISTER, off, reg,
    deref) or None when the expression has another shape."""

    def __init__(self, structs, abi: abimod.ABIInfo):
        pyelftools.load()
        from elftools.dwarf.dwarf_expr import DWARFExprParser
        self.parser = DWARFExprParser(structs)
        self.abi = abi
        self.pc_reg = abi.ra if not abi.ra_in_register else None     # x86-64: DWARF 16 is rip
        self._parsed: Dict[tuple, list] = {}

    def rule(self, expr, pc: int) -> Optional[Rule]:
        try:
            return self._rule(expr, pc)
        except Exception:      # the file's bytes: an expression pyelftools or this cannot follow
            return None

    def _rule(self, expr, pc: int) -> Optional[Rule]:  # noqa: C901  (one opcode per branch)
        key = tuple(expr)
        ops = self._parsed.get(key)
        if ops is None:
            ops = self._parsed[key] = self.parser.parse_expr(list(expr))
        stack: List[Tuple[Optional[int], int, bool]] = []     # (register or None, constant, dereferenced)
        try:
            for op in ops:
                name = op.op_name
                if name.startswith("DW_OP_lit"):
                    stack.append((None, int(name[9:]), False))
                elif name.startswith("DW_OP_breg"):
                    if name == "DW_OP_bregx":
                        return None        # (register, offset) arguments: not in the shapes compared
                    reg = int(name[10:])
                    if reg == self.pc_reg:
                        stack.append((None, pc + op.args[0], False))
                    else:
                        stack.append((reg, op.args[0], False))
                elif name in ("DW_OP_const1u", "DW_OP_const1s", "DW_OP_const2u", "DW_OP_const2s",
                              "DW_OP_const4u", "DW_OP_const4s", "DW_OP_const8u", "DW_OP_const8s",
                              "DW_OP_constu", "DW_OP_consts"):
                    stack.append((None, op.args[0], False))
                elif name == "DW_OP_plus_uconst":
                    r, c, d = stack.pop()
                    if d:
                        return None
                    stack.append((r, c + op.args[0], False))
                elif name == "DW_OP_deref":
                    r, c, d = stack.pop()
                    if d or r is None:
                        return None
                    stack.append((r, c, True))
                elif name in ("DW_OP_plus", "DW_OP_minus", "DW_OP_and", "DW_OP_ge", "DW_OP_shl", "DW_OP_gt",
                              "DW_OP_lt", "DW_OP_le", "DW_OP_eq", "DW_OP_ne", "DW_OP_or", "DW_OP_shr"):
                    b, a = stack.pop(), stack.pop()
                    if a[2] or b[2]:
                        return None
                    if name == "DW_OP_plus" and (a[0] is None or b[0] is None):
                        stack.append((a[0] if a[0] is not None else b[0], a[1] + b[1], False))
                        continue
                    if name == "DW_OP_minus" and b[0] is None:
                        stack.append((a[0], a[1] - b[1], False))
                        continue
                    if a[0] is not None or b[0] is not None:
                        return None
                    x, y = a[1], b[1]
                    v = {"DW_OP_plus": x + y, "DW_OP_minus": x - y, "DW_OP_and": x & y, "DW_OP_or": x | y,
                         "DW_OP_ge": int(x >= y), "DW_OP_gt": int(x > y), "DW_OP_lt": int(x < y),
                         "DW_OP_le": int(x <= y), "DW_OP_eq": int(x == y), "DW_OP_ne": int(x != y),
                         "DW_OP_shl": x << (y & 63), "DW_OP_shr": x >> (y & 63)}[name]
                    stack.append((None, v, False))
                else:
                    return None
        except (IndexError, KeyError, TypeError, ValueError):
            return None
        if len(stack) != 1 or stack[0][0] is None:
            return None
        top_reg, off, deref = stack[0]
        return Rule(RuleKind.REGISTER, off, reg=top_reg, deref=deref)


def cfa_rule(row: dict, expr: Expr, pc: int) -> Optional[Rule]:
    """The CFA rule of a pyelftools row at address `pc` (its expression evaluated there), or None
    for an expression of another shape."""
    cfa = row["cfa"]
    if cfa.expr is not None:
        return expr.rule(cfa.expr, pc)
    return Rule(RuleKind.REGISTER, cfa.offset, reg=cfa.reg)


def register_rule(row: dict, reg: int) -> Tuple[Optional[Rule], str]:
    """(Rule, pyelftools' rule type) for a register in a pyelftools row; the Rule is None for a
    DWARF expression (or a type pyelftools adds later).  A register the row does not name keeps
    its value: DWARF's default on the ABIs here (GCC and GDB take it so)."""
    r = row.get(reg)
    if r is None:
        return UNCHANGED, "SAME_VALUE"
    make = _SIMPLE.get(r.type)
    if make is not None:
        return make(r.arg), r.type
    if r.type == "REGISTER":
        return (UNCHANGED if r.arg == reg else Rule(RuleKind.REGISTER, 0, reg=r.arg)), r.type
    return None, r.type


def unwind_rule(row: dict, reg: int, expr: "Expr") -> Optional[Rule]:
    """A register's rule for unwinding: register_rule's, and for the expression rules the shapes
    Expr follows: DW_CFA_expression (the register saved at the address the expression gives, as
    DRAP-realigned x86-64 frames save rbp: `DW_OP_breg6 0`) as Rule(REGISTER, deref), and
    DW_CFA_val_expression (the value itself) as Rule(REGISTER); other shapes None (not known)."""
    rule, kind = register_rule(row, reg)
    if rule is not None or kind not in ("EXPRESSION", "VAL_EXPRESSION"):
        return rule
    at = expr.rule(row[reg].arg, row["pc"])
    if at is None or at.deref and kind == "EXPRESSION":
        return None
    return Rule(RuleKind.REGISTER, at.offset, reg=at.reg, deref=at.deref or kind == "EXPRESSION")


# DW_CFA_AARCH64_negate_ra_state (GNU_window_save elsewhere): pyelftools 0.29 stops at it ("Unknown
# CFI opcode"), so a PAC-enabled AArch64 library would have no CFI here at all.  It only toggles
# whether the RA is signed, and the unwinder strips every AArch64 RA's signature: it is read as
# DW_CFA_nop.
_NEGATE_RA_STATE = 0x2D
_NOP = 0x00


def _uleb_end(data: bytes, pos: int) -> int:
    while pos < len(data) and data[pos] & 0x80:
        pos += 1
    return pos + 1


def _block_end(data: bytes, pos: int) -> int:
    end = _uleb_end(data, pos)
    value = shift = 0
    for b in data[pos:end]:
        value |= (b & 0x7F) << shift
        shift += 7
    return end + value


# The operands of each low CFA opcode (DWARF 5, 6.4.2; GNU): "u" ULEB128, "s" SLEB128 (one form),
# "b" a ULEB128-counted block, or a fixed byte count.
_OPERANDS = {0x00: (), 0x02: (1,), 0x03: (2,), 0x04: (4,), 0x05: "uu", 0x06: "u", 0x07: "u", 0x08: "u", 0x09: "uu",
             0x0A: (), 0x0B: (), 0x0C: "uu", 0x0D: "u", 0x0E: "u", 0x0F: "b", 0x10: "ub", 0x11: "us", 0x12: "us",
             0x13: "s", 0x14: "uu", 0x15: "us", 0x16: "ub", 0x1D: (8,), 0x2D: (), 0x2E: "u", 0x2F: "uu"}


def without_negate_ra_state(code: bytes) -> Optional[bytes]:
    """A CFA instruction stream with each DW_CFA_AARCH64_negate_ra_state made a DW_CFA_nop, or None
    when the stream holds an opcode whose length is not known here (DW_CFA_set_loc among them)."""
    out = bytearray(code)
    pos = 0
    while pos < len(code):
        op = code[pos]
        pos += 1
        if op & 0xC0:                          # advance_loc, offset (a ULEB128 operand), restore
            if op & 0xC0 == 0x80:
                pos = _uleb_end(code, pos)
            continue
        if op == _NEGATE_RA_STATE:
            out[pos - 1] = _NOP
        operands = _OPERANDS.get(op)
        if operands is None:
            return None
        for kind in operands:
            if isinstance(kind, int):
                pos += kind
            elif kind == "b":
                pos = _block_end(code, pos)
            else:
                pos = _uleb_end(code, pos)
    return bytes(out) if pos == len(code) else None


_PARSER: list = []


def _parser_class():
    """pyelftools' CallFrameInfo, reading DW_CFA_AARCH64_negate_ra_state as DW_CFA_nop (made once)."""
    if _PARSER:
        return _PARSER[0]
    pyelftools.load()
    from elftools.dwarf.callframe import CallFrameInfo

    class Parser(CallFrameInfo):
        stream: Any

        def _parse_instructions(self, structs, offset, end_offset):
            stream = self.stream
            data = stream.getvalue()
            code = data[offset:end_offset]
            if _NEGATE_RA_STATE in code:
                fixed = without_negate_ra_state(code)
                if fixed is not None and fixed != code:
                    self.stream = io.BytesIO(data[:offset] + fixed + data[end_offset:])
            try:
                return super()._parse_instructions(structs, offset, end_offset)
            finally:
                # get_entries goes on from the stream's position: the one the copy reached
                stream.seek(self.stream.tell())
                self.stream = stream
    _PARSER.append(Parser)
    return Parser


class CfiRow(NamedTuple):
    """The DWARF CFI rules at one address, for the unwinder: the CFA rule (None: an expression
    it cannot follow) and every register's rule the row names ({DWARF number: Rule or None})."""
    cfa: Optional[Rule]
    regs: Dict[int, Optional[Rule]]
    where: str                  # e.g. ".eh_frame FDE at offset 0x1234", for messages


class CfiRows:
    """The DWARF CFI of one loaded file (`.eh_frame`, `.debug_frame`), decoded one FDE at a time.

    `row(pc)` finds the FDE covering pc through `core.dwarf.coverage.CfiIndex` (the `.eh_frame_hdr` table:
    O(log n), no full parse), has pyelftools decode that FDE alone, and memoizes its rows, so a
    backtrace through a library costs one decode per function it passes.  A malformed section,
    or an FDE pyelftools cannot decode, is no CFI there (None)."""

    FDE_LIMIT = 4096          # decoded FDEs kept per file

    def __init__(self, sections: List[CfiSection], abi: abimod.ABIInfo):
        self.abi = abi
        self.index = CfiIndex(lambda: sections)
        self._sections = {s.name: s for s in sections}
        self._parsers: Dict[str, Any] = {}
        # (section, FDE offset) -> (row pcs as linked, [(register rules, CFA rule or None, the row)], bias)
        self._fdes: Dict[Tuple[str, int], Optional[Tuple[List[int], list, int]]] = {}
        self._structs = None
        self._expr: Optional[Expr] = None

    def row(self, pc: int) -> Optional[CfiRow]:
        """The rules at `pc` (as loaded), or None where this file has no usable CFI for it."""
        rng = self.index.find(pc)
        if rng is None:
            return None
        key = (rng.section, rng.fde_offset)
        if key in self._fdes:
            fde = self._fdes[key]
        else:
            if len(self._fdes) >= self.FDE_LIMIT:
                self._fdes.clear()
            fde = self._fdes[key] = self._decode(rng.section, rng.fde_offset)
        if fde is None:
            return None
        pcs, rows, bias = fde
        i = bisect.bisect_right(pcs, pc - bias) - 1
        if i < 0:
            return None
        regs, cfa, row = rows[i]
        if cfa is None:               # a CFA expression: evaluated at this very address
            assert self._expr is not None
            cfa = cfa_rule(row, self._expr, pc - bias)
        return CfiRow(cfa, regs, str(rng))

    def _decode(self, name: str, offset: int) -> Optional[Tuple[List[int], list, int]]:
        sec = self._sections.get(name)
        if sec is None:
            return None
        try:
            pyelftools.load()
            from elftools.dwarf.callframe import FDE
            if self._structs is None:
                self._structs = dwarf_structs(not self.abi.big_endian, 32, self.abi.ptr_size)
                self._expr = Expr(self._structs, self.abi)
            bias = sec.bias()
            parser = self._parsers.get(name)
            if parser is None:
                # Addresses as linked (the section's own, unbiased): the rows' pcs get the bias.
                data = sec.r.data
                parser = self._parsers[name] = _parser_class()(io.BytesIO(data), len(data), (sec.address - bias) & MASK64,
                                                               self._structs, for_eh_frame=sec.eh)
            with shared_structs():
                entry = parser._parse_entry_at(offset)     # one FDE (pyelftools has no public call for it)
                if not isinstance(entry, FDE) or misdecoded(entry):
                    return None
                table = sorted(entry.get_decoded().table, key=lambda r: r["pc"])
                # Each row's rules, worked out once (a loop in a library passes them again and again).
                expr = self._expr
                rules = [({reg: unwind_rule(row, reg, expr) for reg in row if isinstance(reg, int)},
                          None if row["cfa"].expr is not None else cfa_rule(row, self._expr, row["pc"]), row)
                         for row in table]
        except Exception:         # the file's bytes, as pyelftools reads them: no CFI there
            return None
        return [r["pc"] for r in table], rules, bias
