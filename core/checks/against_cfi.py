"""`sframe check`: an SFrame section proved against the DWARF CFI of the same file, statically.

Every function that has both SFrame and DWARF CFI (`.eh_frame`, `.debug_frame`) carries two
descriptions of its frames.  For each SFrame FDE and the CFI FDE of the same function, both row
lists are walked together over the union of their row boundaries, and at every address range
what each says about the CFA, the return address and the frame pointer is compared, in the rule
vocabulary of core.sframe.rules (CFI rows are turned into the same `Rule`s, so both sides are worded
alike).  PLT FDEs (PC type MASK) are compared address by address against the CFI's
`DW_CFA_def_cfa_expression`, evaluated at each address.  The DWARF CFI is decoded by
pyelftools (`elftools.dwarf.callframe`); this module only interprets its rows.

Findings: disagreements (one per function, address range and rule), ranges that cannot be
compared (a CFI expression of another shape), and coverage gaps: functions with CFI but no FDE,
FDEs without CFI, FDEs whose range differs from their function's CFI.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from ..arch import abi as abimod
from ..dwarf.rows import MISDECODED_REASON, Expr, _parser_class, cfa_rule, misdecoded, register_rule, shared_structs
from ..elf.image import SHT_NOBITS, ElfImage, load_elf, section_headers
from ..errors import ElfError
from ..sframe.decode import Section
from ..sframe.format import MASK64, PCType
from ..sframe.rules import UNCHANGED, FrameRules, Rule, RuleKind, interpret

# Kinds of findings, and what the summary counts.
DISAGREE = "disagree"
NOT_COMPARABLE = "not comparable"
CFI_WITHOUT_FDE = "CFI without FDE"
FDE_WITHOUT_CFI = "FDE without CFI"
RANGE_DIFFERS = "range differs"
COVERAGE = (CFI_WITHOUT_FDE, FDE_WITHOUT_CFI, RANGE_DIFFERS)
WHATS = ("CFA", "RA", "FP")


@dataclass(frozen=True)
class Finding:
    kind: str
    function: str
    lo: int
    hi: int
    what: str = ""          # CFA, RA or FP (rule findings)
    sframe: str = ""        # SFrame's rule, or range, in words
    cfi: str = ""           # the CFI's
    reason: str = ""        # why not comparable

    def __str__(self) -> str:
        where = "%s %#x-%#x" % (self.function, self.lo, self.hi)
        if self.kind == DISAGREE:
            return "%s: %s: SFrame %s, CFI %s" % (where, self.what, self.sframe, self.cfi)
        if self.kind == NOT_COMPARABLE:
            return "%s: %s not comparable: %s" % (where, self.what, self.reason)
        if self.kind == RANGE_DIFFERS:
            return "%s: range differs: SFrame %s, CFI %s" % (where, self.sframe, self.cfi)
        return "%s: %s" % (where, self.kind)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "function": self.function, "lo": self.lo, "hi": self.hi, "what": self.what,
                "sframe": self.sframe, "cfi": self.cfi, "reason": self.reason}


@dataclass
class Report:
    path: str
    findings: List[Finding] = field(default_factory=list)
    ranges: Dict[str, int] = field(default_factory=dict)     # agree / disagree / not comparable: address ranges
    functions: int = 0        # SFrame FDEs compared with CFI
    text_bytes: int = 0       # bytes of the executable sections
    covered_bytes: int = 0    # bytes SFrame FDEs cover

    def counts(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for f in self.findings:
            out[f.kind] = out.get(f.kind, 0) + 1
        return out

    def as_dict(self) -> dict:
        """The report as one JSON-able document (`sframe check --json`)."""
        return {"file": self.path, "functions": self.functions, "ranges": dict(self.ranges),
                "findings": [f.as_dict() for f in self.findings], "counts": self.counts(),
                "text_bytes": self.text_bytes, "covered_bytes": self.covered_bytes, "failed": failed(self)}


# What makes `sframe check` exit 1: SFrame says something the CFI contradicts.  Functions with
# CFI and no FDE are a coverage gap (C runtime objects are assembled without --gsframe), reported
# and counted, not a failure.
FAILURES = (DISAGREE, FDE_WITHOUT_CFI, RANGE_DIFFERS)


def failed(report: Report) -> bool:
    return any(f.kind in FAILURES for f in report.findings)


# -- the CFI side --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CfiFunction:
    lo: int
    hi: int
    rows: Optional[List[dict]]   # pyelftools' decoded table rows (None: rows it decodes wrongly)
    section: str
    lsda: Optional[int] = None   # the address of its exception table (.eh_frame's `L` augmentation)


def cfi_functions(path: str, image: Optional[ElfImage] = None) -> Tuple[List[CfiFunction], object]:
    """The CFI FDEs of an ELF file (.eh_frame, then .debug_frame), decoded by pyelftools, and
    pyelftools' structs for the file (to parse CFI expressions; None without CFI).  In a
    relocatable file (`image` given) the sections are read with their relocations applied and
    placed as `image` places them, so that the addresses are those of its SFrame FDEs."""
    def load(elf, _fh):
        elf = elf.full()
        if not elf.has_dwarf_info():
            return [], None
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
        from .. import pyelftools
        pyelftools.load()
        from elftools.common.exceptions import DWARFError
        from elftools.dwarf.callframe import FDE, CallFrameInfo
        sources = []
        if image is not None and image.relocatable:
            import io
            for name, eh in ((".eh_frame", True), (".debug_frame", False)):
                placed = image.relocated_section(name)
                if placed is not None:
                    data, addr = placed
                    sources.append((name, CallFrameInfo(io.BytesIO(data), len(data), addr, dwarf.structs,
                                                        for_eh_frame=eh).get_entries))
        else:
            # pyelftools' own parser, reading DW_CFA_AARCH64_negate_ra_state (PAC) as the nop it is here
            for name, sec, eh in ((".eh_frame", dwarf.eh_frame_sec, True), (".debug_frame", dwarf.debug_frame_sec, False)):
                if sec is not None:
                    sources.append((name, _parser_class()(sec.stream, sec.size, sec.address, dwarf.structs,
                                                          for_eh_frame=eh).get_entries))
        out = []
        for name, entries in sources:
            try:
                for e in entries():
                    if isinstance(e, FDE):
                        lo = e["initial_location"] & MASK64
                        rows = None if misdecoded(e) else list(e.get_decoded().table)
                        out.append(CfiFunction(lo, lo + e["address_range"], rows, name, getattr(e, "lsda_pointer", None)))
            except DWARFError as exc:
                import elftools
                raise ElfError("%s: pyelftools %s cannot decode its %s: %s%s" % (
                    path, elftools.__version__, name, exc,
                    " (DW_CFA_AARCH64_negate_ra_state: pyelftools 0.32 and later decode it)"
                    if "0x2d" in str(exc) else "")) from None
        return out, dwarf.structs
    with shared_structs():
        return load_elf(path, load, "DWARF CFI")


def by_start_of(cfis: List[CfiFunction]) -> Tuple[Dict[int, CfiFunction], List[int]]:
    """The CFI FDEs by start address (the first of equal ones), and the starts in order."""
    by_start: Dict[int, CfiFunction] = {}
    for c in cfis:
        by_start.setdefault(c.lo, c)
    return by_start, sorted(by_start)


def covering(by_start: Dict[int, CfiFunction], starts: List[int], pc: int) -> Optional[CfiFunction]:
    """The CFI FDE that starts at pc, or else the one whose range holds it, or None."""
    i = bisect.bisect_right(starts, pc) - 1
    if i < 0:
        return None
    c = by_start[starts[i]]
    return c if c.lo == pc or c.hi > pc else None


def _cfi_rules(row: dict, abi: abimod.ABIInfo, expr: Expr, pc: int) -> Tuple[Dict[str, Optional[Rule]], Dict[str, str]]:
    """The CFA, RA and FP rules of one CFI row as core.sframe.rules Rules ({what: Rule or None}), and
    for those that cannot be put so, why."""
    rules: Dict[str, Optional[Rule]] = {"CFA": cfa_rule(row, expr, pc)}
    why: Dict[str, str] = {}
    if rules["CFA"] is None:
        why["CFA"] = "the CFI's CFA is a DWARF expression of another shape"
    for what, reg in (("RA", abi.ra), ("FP", abi.fp)):
        rules[what], t = register_rule(row, reg)
        if rules[what] is None:
            why[what] = ("the CFI's %s rule is a DWARF expression" % what if t in ("EXPRESSION", "VAL_EXPRESSION")
                         else "the CFI's %s rule is %s" % (what, t))
    return rules, why


# -- the SFrame side -----------------------------------------------------------------------------------

def _sframe_rules(fr: FrameRules) -> Dict[str, Optional[Rule]]:
    """FrameRules with the header's fixed offsets as the slots they are, to compare with CFI."""
    def norm(rule: Rule) -> Rule:
        if rule.kind is RuleKind.FIXED:
            return Rule(RuleKind.AT_CFA, rule.offset)
        if rule.padding:
            return UNCHANGED
        return rule
    return {"CFA": fr.cfa, "RA": norm(fr.ra), "FP": norm(fr.fp)}


def _words(rule: Optional[Rule], what: str, abi: abimod.ABIInfo) -> str:
    if rule is None:
        return "none"
    text = rule.describe(what, abi)
    return text.split(" = ", 1)[1] if " = " in text else text


# -- the comparison ------------------------------------------------------------------------------------

class _Collector:
    """Findings of one function, adjacent equal ones merged into one range."""

    def __init__(self, report: Report, name: str):
        self.report = report
        self.name = name
        self.last: Dict[str, int] = {}      # what -> position of its last finding in report.findings

    def add(self, kind, lo, hi, what, sframe="", cfi="", reason=""):
        self.report.ranges[kind] = self.report.ranges.get(kind, 0) + 1
        if kind == "agree":
            return
        findings = self.report.findings
        at = self.last.get(what)
        prev = findings[at] if at is not None else None
        if at is not None and prev is not None and prev.hi == lo and (prev.kind, prev.sframe, prev.cfi, prev.reason) == \
                (kind, sframe, cfi, reason):
            findings[at] = Finding(kind, self.name, prev.lo, hi, what, sframe, cfi, reason)
        else:
            self.last[what] = len(findings)
            findings.append(Finding(kind, self.name, lo, hi, what, sframe, cfi, reason))


def _compare_at(col, abi, expr, lo, hi, fr: Optional[FrameRules], row: dict):
    if fr is None:              # before the FDE's first FRE: no SFrame row covers the range
        col.add(DISAGREE, lo, hi, "CFA", "none (no FRE covers it)", _words(_cfi_rules(row, abi, expr, lo)[0]["CFA"],
                                                                            "CFA", abi))
        return
    ours = _sframe_rules(fr)
    theirs, why = _cfi_rules(row, abi, expr, lo)
    for what in WHATS:
        if fr.outermost and what != "RA":
            continue                   # no caller: only "RA undefined" is said
        a, b = ours[what], theirs[what]
        if b is None:
            col.add(NOT_COMPARABLE, lo, hi, what, reason=why[what])
        elif a == b:
            col.add("agree", lo, hi, what)
        else:
            col.add(DISAGREE, lo, hi, what, _words(a, what, abi), _words(b, what, abi))


def _row_at(rows, pcs, pc):
    i = bisect.bisect_right(pcs, pc) - 1
    return rows[max(i, 0)]


def check_file(path: str, function: Optional[str] = None) -> Report:
    """Compare the SFrame section of the ELF file at `path` with its DWARF CFI."""
    img = ElfImage(path)
    sf = img.require_sframe()
    sec = Section(sf.data, sf.address)
    abi = abimod.info(sec.abi)
    cfis, structs = cfi_functions(path, img)
    report = Report(path)
    report.text_bytes = sum(size for start, size in _exec_ranges(path))
    if structs is None or not cfis:
        raise ElfError("%s: no DWARF CFI (.eh_frame or .debug_frame) to check the SFrame section against" % path)
    expr = Expr(structs, abi)
    by_start, starts = by_start_of(cfis)
    matched = set()
    decoded = sec.check_all()
    tiles = _tilings(decoded, by_start, starts)
    for fde, fres in decoded:
        name = function_name(img, fde.start)
        if function is not None and name != function:
            continue
        report.covered_bytes += fde.size
        col = _Collector(report, name)
        cfi = covering(by_start, starts, fde.start)
        if cfi is None:
            report.findings.append(Finding(FDE_WITHOUT_CFI, name, fde.start, fde.end))
            continue
        matched.add(cfi.lo)
        if (cfi.lo, cfi.hi) != (fde.start, fde.end) and not tiles.get(cfi.lo):
            report.findings.append(Finding(RANGE_DIFFERS, name, fde.start, fde.end, "",
                                           "%#x-%#x" % (fde.start, fde.end), "%#x-%#x" % (cfi.lo, cfi.hi)))
        report.functions += 1
        if cfi.rows is None:
            col.add(NOT_COMPARABLE, max(fde.start, cfi.lo), min(fde.end, cfi.hi), "CFA", reason=MISDECODED_REASON)
            continue
        rows = sorted(cfi.rows, key=lambda r: r["pc"])
        pcs = [r["pc"] for r in rows]
        lo, hi = max(fde.start, cfi.lo), min(fde.end, cfi.hi)
        if fde.pc_type is PCType.MASK:
            for pc in range(lo, hi):
                k = (pc - fde.start) % fde.block_size
                fre = None
                for f in fres:
                    if f.start <= k:
                        fre = f
                rules = None if fre is None and fres else interpret(sec.header, fde, fre)
                _compare_at(col, abi, expr, pc, pc + 1, rules, _row_at(rows, pcs, pc))
            continue
        bounds = sorted({lo, hi} | {fde.start + f.start for f in fres if lo < fde.start + f.start < hi}
                        | {p for p in pcs if lo < p < hi})
        fstarts = [fde.start + f.start for f in fres]
        for a, b in zip(bounds, bounds[1:]):
            i = bisect.bisect_right(fstarts, a) - 1
            fre = fres[i] if i >= 0 else None
            rules = None if fre is None and fres else interpret(sec.header, fde, fre)   # no FREs (V3): outermost
            _compare_at(col, abi, expr, a, b, rules, _row_at(rows, pcs, a))
    for c in cfis:
        if c.lo not in matched and c.hi > c.lo:
            name = function_name(img, c.lo)
            if function is None or name == function:
                report.findings.append(Finding(CFI_WITHOUT_FDE, name, c.lo, c.hi))
    return report


def _tilings(decoded, by_start, starts) -> Dict[int, bool]:
    """{CFI FDE start: True} for the CFI FDEs that several SFrame FDEs cover exactly, one after
    the other (the PLT: one CFI FDE, an SFrame FDE for PLT0 and a MASK FDE for the entries)."""
    parts: Dict[int, List[Tuple[int, int]]] = {}
    for fde, _fres in decoded:
        i = bisect.bisect_right(starts, fde.start) - 1
        if i >= 0 and by_start[starts[i]].hi > fde.start:
            parts.setdefault(starts[i], []).append((fde.start, fde.end))
    out = {}
    for lo, ranges in parts.items():
        ranges.sort()
        cfi = by_start[lo]
        out[lo] = len(ranges) > 1 and ranges[0][0] == cfi.lo and ranges[-1][1] == cfi.hi and \
            all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    return out


def function_name(img: ElfImage, addr: int) -> str:
    s = img.symbolize(addr)
    if s is None:
        return "%#x" % addr
    return s[0] if s[1] == 0 else "%s+%#x" % s


def _exec_ranges(path: str) -> Iterable[Tuple[int, int]]:
    def load(elf, _fh):
        return [(s.addr, s.size) for s in section_headers(elf) if s.flags & 0x4 and s.type != SHT_NOBITS]  # SHF_EXECINSTR
    return load_elf(path, load, "section headers")


def summary_lines(report: Report) -> List[str]:
    r = report.ranges
    counts = report.counts()
    share = 100.0 * report.covered_bytes / report.text_bytes if report.text_bytes else 0.0
    nc: Dict[str, int] = {}
    for f in report.findings:
        if f.kind == NOT_COMPARABLE:
            nc[f.reason] = nc.get(f.reason, 0) + 1
    lines = ["sframe check: %s: %d functions compared; address ranges x rules: %d agree, %d disagree, %d not comparable"
             % (report.path, report.functions, r.get("agree", 0), r.get(DISAGREE, 0), r.get(NOT_COMPARABLE, 0))]
    for reason, n in sorted(nc.items()):
        lines.append("  not comparable (%d): %s" % (n, reason))
    lines.append("coverage: %d functions with CFI but no FDE, %d FDEs without CFI, %d FDEs whose range differs; "
                 "SFrame covers %.1f%% of the executable sections' %d bytes"
                 % (counts.get(CFI_WITHOUT_FDE, 0), counts.get(FDE_WITHOUT_CFI, 0), counts.get(RANGE_DIFFERS, 0),
                    share, report.text_bytes))
    return lines
