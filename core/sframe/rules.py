"""Interpretation of an FRE's data words into recovery rules for CFA, RA and FP, per ABI and FDE type.

Decoding (decode.py) only splits bytes into words; what the words mean depends on the ABI, the
FDE type (default or V3 flex) and, for s390x V2, on the parity of the word.  This module turns
them into `FrameRules` that the unwinder applies and the printers put into words.
"""

import enum
from dataclasses import dataclass
from typing import List, Optional

from ..arch import abi as abimod
from ..errors import SFrameError
from . import format as F
from .records import FDE, FRE, Header


class RuleKind(enum.Enum):
    AT_CFA = "at CFA+off"              # value = *(CFA + offset)
    FIXED = "fixed from header"        # value = *(CFA + header's fixed offset)
    CFA_PLUS = "CFA+off"               # value = CFA + offset (flex, no dereference)
    REGISTER = "register"              # value = reg + offset, or *(reg + offset) when deref
    UNCHANGED = "unchanged"            # still in its own register (same value as in the callee)
    UNDEFINED = "undefined"            # outermost frame: no caller


@dataclass(frozen=True)
class Rule:
    kind: RuleKind
    offset: int = 0
    reg: Optional[int] = None   # DWARF register number, for REGISTER
    deref: bool = False      # for REGISTER
    padding: bool = False    # s390x: RA padding word (FP saved, RA not)

    def describe(self, what: str, abi: abimod.ABIInfo) -> str:
        """The rule in words, e.g. 'RA = [CFA - 8]', 'rbp unchanged', 'CFA = rsp + 16'."""
        k = self.kind
        if k in (RuleKind.AT_CFA, RuleKind.FIXED):
            s = "%s = [CFA%s]" % (what, _off(self.offset))
            return s + (" (fixed offset from the header)" if k is RuleKind.FIXED else "")
        if k is RuleKind.CFA_PLUS:
            return "%s = CFA%s" % (what, _off(self.offset))
        if k is RuleKind.REGISTER:
            inner = "%s%s" % (abi.regname(self.reg), _off(self.offset))
            return "%s = %s" % (what, "[%s]" % inner if self.deref else inner)
        if k is RuleKind.UNCHANGED:
            if what == "CFA":
                return "CFA unchanged"
            reg = abi.fp if what == "FP" else abi.ra
            name = abi.regname(reg) if what == "FP" or abi.ra_in_register else "RA"
            return "%s unchanged%s" % (name, " (RA padding: not saved)" if self.padding else "")
        return "%s undefined (outermost frame)" % what


def _off(n):
    return "" if n == 0 else (" + %d" % n if n > 0 else " - %d" % -n)


@dataclass(frozen=True)
class FrameRules:
    cfa: Optional[Rule]      # None when the FRE marks the outermost frame
    ra: Rule
    fp: Rule
    ra_mangled: bool = False
    flex: bool = False

    @property
    def outermost(self) -> bool:
        return self.ra.kind is RuleKind.UNDEFINED

    def describe(self, abi: abimod.ABIInfo) -> List[str]:
        out = [self.cfa.describe("CFA", abi)] if self.cfa else []
        ra = self.ra.describe("RA", abi)
        if self.ra_mangled:
            ra += " (signed: pointer authentication)"
        out.append(ra)
        if not self.outermost:
            out.append(self.fp.describe("FP", abi))
        return out


UNCHANGED = Rule(RuleKind.UNCHANGED)
UNDEFINED_RULES = FrameRules(None, Rule(RuleKind.UNDEFINED), UNCHANGED)


def default_ra(header: Header, abi: abimod.ABIInfo) -> Rule:
    if header.cfa_fixed_ra_offset != F.FRE_RA_OFFSET_INVALID:
        return Rule(RuleKind.FIXED, header.cfa_fixed_ra_offset)
    return UNCHANGED


def default_fp(header: Header, abi: abimod.ABIInfo) -> Rule:
    if header.cfa_fixed_fp_offset != 0:
        return Rule(RuleKind.FIXED, header.cfa_fixed_fp_offset)
    return UNCHANGED


def interpret(header: Header, fde: FDE, fre: Optional[FRE]) -> FrameRules:
    """FrameRules for one FRE of one FDE (fre None: a V3 default FDE without FREs, outermost)."""
    abi = abimod.info(header.abi)
    if fre is None or fre.count == 0:
        return UNDEFINED_RULES
    if fde.fde_type is F.FDEType.FLEX:
        return _flex(header, abi, fre)
    return _default(header, abi, fre)


def _default(header, abi, fre):
    w = fre.words
    base = abi.sp if fre.base_reg is F.BaseReg.SP else abi.fp
    cfa = Rule(RuleKind.REGISTER, w[0] * abi.cfa_scale - abi.cfa_adjust, reg=base)
    ra = default_ra(header, abi)
    fp = default_fp(header, abi)
    idx = 1
    if ra.kind is not RuleKind.FIXED:
        if len(w) > idx:
            ra = _slot(header, abi, w[idx], is_ra=True)
        idx += 1
    if fp.kind is not RuleKind.FIXED and len(w) > idx:
        fp = _slot(header, abi, w[idx], is_ra=False)
        idx += 1
    if len(w) > idx:
        raise SFrameError(fre.offset, "%d data words in a default FRE, more than %s uses" % (len(w), abi.name))
    return FrameRules(cfa, ra, fp, fre.mangled_ra)


def _slot(header, abi, word, is_ra):
    if abi.sframe_slot_registers:
        if is_ra and word == F.FRE_RA_OFFSET_INVALID:
            return Rule(RuleKind.UNCHANGED, padding=True)
        if header.version == 2 and word & 1:
            return Rule(RuleKind.REGISTER, 0, reg=word >> 1)
    return Rule(RuleKind.AT_CFA, word)


def _flex(header, abi, fre):
    w = fre.words
    n = len(w)
    if n < 2:
        raise SFrameError(fre.offset, "flex FRE with %d data word(s): the CFA needs a control and an offset word" % n)
    ctrl = fre.uword(0)
    if not ctrl & F.FLEX_REG_P:
        raise SFrameError(fre.offset, "flex FRE: the CFA rule names no base register (control word %#x)" % ctrl)
    # The CFA offset is stored as in default FDEs: scaled on s390x (readelf and real s390x
    # code agree: a flex FDE's first row, at the entry, stores 0 for CFA = r15 + 160).
    cfa = _flex_rule(ctrl, w[1] * abi.cfa_scale - abi.cfa_adjust)
    ra, idx = default_ra(header, abi), 2
    if n > idx:
        ra, idx = _flex_pair(fre, idx, ra)
    fp = default_fp(header, abi)
    if n > idx:
        fp, idx = _flex_pair(fre, idx, fp)
    if n > idx:
        raise SFrameError(fre.offset, "flex FRE with %d data words: %d left over after CFA, RA and FP" % (n, n - idx))
    return FrameRules(cfa, ra, fp, fre.mangled_ra, flex=True)


def _flex_pair(fre, idx, default):
    ctrl = fre.uword(idx)
    if ctrl == 0:
        return default, idx + 1
    if idx + 1 >= len(fre.words):
        raise SFrameError(fre.offset, "flex FRE: control word %d has no offset word after it" % idx)
    return _flex_rule(ctrl, fre.words[idx + 1]), idx + 2


def _flex_rule(ctrl, offset):
    deref = bool(ctrl & F.FLEX_DEREF_P)
    if ctrl & F.FLEX_REG_P:
        return Rule(RuleKind.REGISTER, offset, reg=ctrl >> F.FLEX_REGNUM_SHIFT, deref=deref)
    return Rule(RuleKind.AT_CFA, offset) if deref else Rule(RuleKind.CFA_PLUS, offset)
