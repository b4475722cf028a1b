"""`sframe check --registers`: the save-slot analysis proved against the file's DWARF CFI.

SFrame has no callee-saved registers; the unwinders take them from the save-slot analysis
(core.saves).  Where a file also has DWARF CFI, the CFI says where the compiler saved each one,
so the analysis can be graded at every instruction of every function: for each (instruction,
callee-saved register) place the analysis' answer is

- proved: the slot the CFI gives, or "unchanged" where the CFI says the register keeps its value;
  also where both hold the caller's value but the CFI marks the change a little apart from the
  instruction (a save the CFI records at a later row; a restore it never records, as GCC's x86-64
  epilogues do: the register was just loaded from the CFI's slot, so both places hold the value;
  a save it never records, where the store's own operands put the register at the slot while
  the CFI says it held its caller's value);
- unknown: the analysis declined (with its reason): the unwinders show "unknown";
- wrong: another place than the CFI's, which a debugger would show as a wrong value;
- not comparable: a CFI rule of a shape not compared (a register saved in another register, an
  expression other than `DW_OP_bregN k`).

The walk goes over the union of both sides' change points, so a function costs a few steps per
change, not per instruction; places are counted per instruction (the analysers' own measure).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..arch import abi as abimod
from ..dwarf.rows import Expr, cfa_rule, register_rule, shared_structs, unwind_rule
from ..elf.image import ElfImage
from ..errors import ElfError
from ..saves import analysis as S
from ..saves.lsda import tables_of
from ..sframe.format import PCType
from ..sframe.index import SFrameIndex
from ..sframe.rules import Rule, RuleKind
from .against_cfi import by_start_of, cfi_functions, covering, function_name


class Verdict:
    """What one place is: the words the report and its JSON use."""
    PROVED = "proved"
    UNKNOWN = "unknown"
    WRONG = "wrong"
    NOT_COMPARABLE = "not comparable"


ORDER = (Verdict.PROVED, Verdict.UNKNOWN, Verdict.WRONG, Verdict.NOT_COMPARABLE)


@dataclass(frozen=True)
class Wrong:
    """A place where the analysis names another place than the CFI's."""
    function: str
    lo: int
    hi: int
    register: str
    ours: str
    cfi: str

    def __str__(self) -> str:
        return "%s %#x-%#x: %s: analysis: %s; CFI: %s" % (self.function, self.lo, self.hi, self.register,
                                                         self.ours, self.cfi)


@dataclass
class FunctionCounts:
    name: str
    start: int
    places: Counter = field(default_factory=Counter)       # verdict -> places
    reasons: Counter = field(default_factory=Counter)      # why unknown -> places


@dataclass
class RegisterReport:
    path: str
    abi: str = ""
    functions: List[FunctionCounts] = field(default_factory=list)
    per_register: Dict[str, Counter] = field(default_factory=dict)   # register -> verdict -> places
    wrong: List[Wrong] = field(default_factory=list)
    not_compared: Counter = field(default_factory=Counter)            # why a function was not compared -> FDEs

    def totals(self) -> Counter:
        out: Counter = Counter()
        for f in self.functions:
            out.update(f.places)
        return out

    def reasons(self) -> Counter:
        out: Counter = Counter()
        for f in self.functions:
            out.update(f.reasons)
        return out

    def proved_share(self) -> float:
        """Proved places over the places compared (not comparable ones left out), in percent."""
        t = self.totals()
        compared = t[Verdict.PROVED] + t[Verdict.UNKNOWN] + t[Verdict.WRONG]
        return 100.0 * t[Verdict.PROVED] / compared if compared else 100.0

    def as_dict(self) -> dict:
        return {"file": self.path, "abi": self.abi, "places": {v: self.totals()[v] for v in ORDER},
                "proved_percent": round(self.proved_share(), 4),
                "per_register": {r: {v: c[v] for v in ORDER} for r, c in self.per_register.items()},
                "unknown_reasons": dict(self.reasons().most_common()),
                "functions": [{"function": f.name, "start": f.start, "places": {v: f.places[v] for v in ORDER},
                               "unknown_reasons": dict(f.reasons.most_common())}
                              for f in self.functions],
                "wrong": [w.__dict__ for w in self.wrong], "not_compared": dict(self.not_compared),
                "failed": bool(self.wrong)}


# What makes two functions' reasons differ in words only: addresses, symbol names.
_SPECIFIC = ((re.compile(r"0x[0-9a-f]+"), "ADDR"),
             (re.compile(r"^\S+ is a part of a function"), "F.cold is a part of a function"),
             (re.compile(r"is inside \S+ \(at \+ \d+\)"), "is inside F (at + N)"))


def _reason(why: str) -> str:
    """An unknown's reason without its addresses and names, so that equal reasons add up."""
    for pattern, general in _SPECIFIC:
        why = pattern.sub(general, why)
    return why or "unknown"


def _same_slot(save: S.Save, rule: Rule, cfa: Optional[Rule]) -> bool:
    """Whether the analysis' SAVED place is the slot of the CFI's rule (AT_CFA N, or the
    expression's `*(reg + k)`), converting between CFA- and register-relative through the CFA."""
    if rule.kind is RuleKind.AT_CFA:
        want: Tuple[Optional[int], int] = (None, rule.offset)
    elif rule.kind is RuleKind.REGISTER and rule.deref:
        want = (rule.reg, rule.offset)
    else:
        return False
    got: Tuple[Optional[int], int] = (save.base, save.offset)
    if got == want:
        return True
    if cfa is None or cfa.kind is not RuleKind.REGISTER or cfa.deref:
        return False
    # CFA = cfa.reg + cfa.offset: [reg + k] is [CFA + k - cfa.offset]
    def on_cfa(place):
        base, off = place
        if base is None:
            return off
        return off - cfa.offset if base == cfa.reg else None
    a, b = on_cfa(got), on_cfa(want)
    return a is not None and a == b


def _describe_rule(rule: Optional[Rule], kind: str, abi: abimod.ABIInfo) -> str:
    if rule is None:
        return "a DWARF expression (%s) of another shape" % kind.lower()
    if rule.kind is RuleKind.UNCHANGED:
        return "unchanged"
    if rule.kind is RuleKind.AT_CFA:
        return "saved at CFA %s %d" % ("+" if rule.offset >= 0 else "-", abs(rule.offset))
    if rule.kind is RuleKind.REGISTER and rule.deref:
        return "saved at [%s %s %d]" % (abi.regname(rule.reg), "+" if rule.offset >= 0 else "-", abs(rule.offset))
    return rule.describe("value", abi)


class _Function:
    """One function's two tables, walked together."""

    def __init__(self, abi, expr, regs, analysis, cfi_rows, insns=(), stores_at=None):
        self.abi, self.expr, self.regs = abi, expr, regs
        self.insns = insns                         # the function's instruction starts
        self.stores_at = stores_at                 # pc -> ((reg, base, offset), ...) it stores
        self.ours = analysis                       # [(addr, {reg: Save})]
        self.our_pcs = [a for a, _ in analysis]
        self.rows = cfi_rows
        self.row_pcs = [r["pc"] for r in cfi_rows]

    def ours_at(self, pc):
        k = max(bisect.bisect_right(self.our_pcs, pc) - 1, 0)
        return self.ours[k][1], k

    def row_at(self, pc):
        k = bisect.bisect_right(self.row_pcs, pc) - 1
        return self.rows[max(k, 0)], max(k, 0)

    def cfi_rule(self, row, reg) -> Tuple[Optional[Rule], str]:
        rule, kind = register_rule(row, reg)
        if rule is None and kind in ("EXPRESSION", "VAL_EXPRESSION"):
            rule = unwind_rule(row, reg, self.expr)
        return rule, kind

    def verdict(self, pc, reg) -> Tuple[str, str, Optional[Rule], str]:
        """(verdict, why it is unknown (else ""), the CFI's rule, its pyelftools kind)."""
        saves, k = self.ours_at(pc)
        save = saves.get(reg)
        row, j = self.row_at(pc)
        rule, kind = self.cfi_rule(row, reg)
        if save is None or save.kind is S.SaveKind.UNKNOWN:
            return Verdict.UNKNOWN, (save.why if save is not None else "not analysed"), rule, kind
        if save.kind is S.SaveKind.IN_REGISTER:
            held = rule is not None and rule.kind is RuleKind.REGISTER and not rule.deref and not rule.offset \
                and rule.reg == save.base
            return (Verdict.PROVED if held else Verdict.WRONG), "", rule, kind
        if rule is None or rule.kind not in (RuleKind.UNCHANGED, RuleKind.AT_CFA) and \
                not (rule.kind is RuleKind.REGISTER and rule.deref):
            return Verdict.NOT_COMPARABLE, "", rule, kind
        cfa = cfa_rule(row, self.expr, pc)
        if save.kind is S.SaveKind.UNCHANGED:
            if rule.kind is RuleKind.UNCHANGED:
                return Verdict.PROVED, "", rule, kind
            # A restore the CFI does not record: the analysis saw the register loaded back from
            # this very slot (its last answer other than "unchanged" was that slot), so both
            # places hold the value.
            while k > 0 and self.ours[k][1].get(reg) == save:
                k -= 1
            before = self.ours[k][1].get(reg)
            if before is not None and before.kind is S.SaveKind.SAVED and _same_slot(before, rule, cfa):
                return Verdict.PROVED, "", rule, kind
            return Verdict.WRONG, "", rule, kind
        if rule.kind is not RuleKind.UNCHANGED:
            return (Verdict.PROVED if _same_slot(save, rule, cfa) else Verdict.WRONG), "", rule, kind
        # Saved, where the CFI still says unchanged: a save the CFI records a little later (GCC's
        # notes follow the store by a few instructions) is the same slot at its next change.
        for later in self.rows[j + 1:]:
            lrule, _lkind = self.cfi_rule(later, reg)
            if lrule is not None and lrule.kind is RuleKind.UNCHANGED:
                continue
            lcfa = cfa_rule(later, self.expr, later["pc"])
            if lrule is not None and _same_slot(save, lrule, lcfa) and self._held_until(reg, save, pc, later["pc"]):
                return Verdict.PROVED, "", rule, kind
            break
        if self._unrecorded_save(reg, save, pc, k, j):
            return Verdict.PROVED, "", rule, kind
        return Verdict.WRONG, "", rule, kind

    def _unrecorded_save(self, reg, save, pc, k, j) -> bool:
        """A save the CFI never records (GCC writes no notes on a path that ends in a trap): the
        instruction before the analysis' change to this slot stored the register there (by its
        own operands and the CFI's CFA), and the CFI says the register held its caller's value
        from that instruction to here, so the slot holds that value too."""
        while k > 0 and self.ours[k - 1][1].get(reg) == save:
            k -= 1
        n = bisect.bisect_left(self.insns, self.our_pcs[k]) - 1
        if n < 0 or self.stores_at is None:
            return False
        store_pc = self.insns[n]
        row, i = self.row_at(store_pc)
        for r in self.rows[i:j + 1]:
            was = self.cfi_rule(r, reg)[0]
            if was is None or was.kind is not RuleKind.UNCHANGED:
                return False
        cfa_then, cfa_now = cfa_rule(row, self.expr, store_pc), cfa_rule(self.row_at(pc)[0], self.expr, pc)
        for r, base, off in self.stores_at(store_pc):
            if r != reg or off is None or cfa_then is None or cfa_then.kind is not RuleKind.REGISTER \
                    or cfa_then.deref or base != cfa_then.reg:
                continue
            slot = off - cfa_then.offset                      # CFA-relative
            if save.base is None and save.offset == slot:
                return True
            if cfa_now is not None and cfa_now.kind is RuleKind.REGISTER and not cfa_now.deref \
                    and save.base == cfa_now.reg and save.offset - cfa_now.offset == slot:
                return True
        return False

    def _held_until(self, reg, save, pc, until) -> bool:
        """The analysis keeps the register in that slot from pc up to the CFI row at `until`."""
        k = bisect.bisect_right(self.our_pcs, pc) - 1
        while k + 1 < len(self.ours) and self.our_pcs[k + 1] < until:
            k += 1
            if self.ours[k][1].get(reg) != save:
                return False
        return True


def check_registers(path: str, function: Optional[str] = None, limit_wrong: int = 1000) -> RegisterReport:
    """Grade the save-slot analysis of every function of the ELF file at `path` that has both
    SFrame and DWARF CFI, at every instruction, against the CFI."""
    img = ElfImage(path)
    sf = img.require_sframe()
    index = SFrameIndex(sf.data, sf.address)
    abi = abimod.info(index.abi)
    cfis, structs = cfi_functions(path, img)
    if structs is None or not cfis:
        raise ElfError("%s: no DWARF CFI (.eh_frame or .debug_frame) to check the analysis against" % path)
    index.exceptions = tables_of(img, {c.lo: c.lsda for c in cfis if c.lsda is not None})
    report = RegisterReport(path, abi.name)
    regs = [r for r in abi.callee_saved if r != abi.fp]
    names = {r: abi.regname(r) for r in regs}
    for r in regs:
        report.per_register[names[r]] = Counter()
    read = img.code_reader()
    by_start, starts = by_start_of(cfis)
    with shared_structs():
        expr = Expr(structs, abi)
        for fde in index.section.fdes():
            name = function_name(img, fde.start)
            if function is not None and name != function:
                continue
            if fde.pc_type is PCType.MASK:
                report.not_compared["a PLT FDE (repeating pattern): no callee-saved registers to check"] += 1
                continue
            cfi = covering(by_start, starts, fde.start)
            if cfi is None:
                report.not_compared["no DWARF CFI covers the function"] += 1
                continue
            if not cfi.rows:
                report.not_compared["its CFI cannot be decoded here"] += 1
                continue
            table = S.table(abi, index, fde, read, img.symbolize)
            insns = S.instruction_starts(abi, index, fde, read)
            if insns is None:
                report.not_compared["its instructions cannot be decoded"] += 1
                continue
            lo, hi = max(fde.start, cfi.lo), min(fde.end, cfi.hi)
            rows = sorted(cfi.rows, key=lambda r: r["pc"])
            fn = _Function(abi, expr, regs, table, rows, insns,
                           lambda pc, fde=fde: S.stores_at(abi, fde, read, pc))
            counts = FunctionCounts(name, fde.start)
            report.functions.append(counts)
            bounds = sorted({lo, hi} | {a for a in fn.our_pcs if lo < a < hi} | {p for p in fn.row_pcs if lo < p < hi})
            for a, b in zip(bounds, bounds[1:]):
                n = bisect.bisect_left(insns, b) - bisect.bisect_left(insns, a)
                if n <= 0:
                    continue
                for reg in regs:
                    verdict, why, rule, kind = fn.verdict(a, reg)
                    counts.places[verdict] += n
                    report.per_register[names[reg]][verdict] += n
                    if verdict == Verdict.UNKNOWN:
                        counts.reasons[_reason(why)] += n
                    elif verdict == Verdict.WRONG and len(report.wrong) < limit_wrong:
                        ours = fn.ours_at(a)[0][reg]
                        report.wrong.append(Wrong(name, a, b, names[reg], ours.describe(abi),
                                                  _describe_rule(rule, kind, abi)))
    return report


def summary_lines(report: RegisterReport, top: int = 10) -> List[str]:
    """The text report: totals, per register, the reasons for unknowns, the functions with most."""
    t = report.totals()
    compared = t[Verdict.PROVED] + t[Verdict.UNKNOWN] + t[Verdict.WRONG]
    lines = ["sframe check --registers: %s (%s): %d functions; (instruction, callee-saved register) places: "
             "%d compared: %d proved (%.3f%%), %d unknown, %d wrong; %d not comparable"
             % (report.path, report.abi, len(report.functions), compared, t[Verdict.PROVED], report.proved_share(),
                t[Verdict.UNKNOWN], t[Verdict.WRONG], t[Verdict.NOT_COMPARABLE])]
    lines.append("per register: " + ", ".join(
        "%s %d/%d" % (r, c[Verdict.PROVED], c[Verdict.PROVED] + c[Verdict.UNKNOWN] + c[Verdict.WRONG])
        for r, c in report.per_register.items()))
    reasons = report.reasons()
    if reasons:
        lines.append("unknown places, by reason:")
        for why, n in reasons.most_common():
            lines.append("  %d (%.1f%%): %s" % (n, 100.0 * n / t[Verdict.UNKNOWN], why))
        worst = sorted((f for f in report.functions if f.places[Verdict.UNKNOWN]),
                       key=lambda f: (-f.places[Verdict.UNKNOWN], f.start))[:top]
        lines.append("functions with most unknown places:")
        for f in worst:
            total = sum(f.places[v] for v in (Verdict.PROVED, Verdict.UNKNOWN, Verdict.WRONG))
            lines.append("  %s: %d of %d unknown: %s" % (f.name, f.places[Verdict.UNKNOWN], total,
                                                           f.reasons.most_common(1)[0][0]))
    for why, n in sorted(report.not_compared.items()):
        lines.append("not compared: %d FDE%s: %s" % (n, "" if n == 1 else "s", why))
    return lines
