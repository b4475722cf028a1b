"""`sframe stats`: how big SFrame is, where its bytes go, what it covers and what it leaves out, in
files, archives and whole trees, for toolchain engineers.

Per file (an archive's members each, named as readelf names them):

- the section: version, flags, ABI, FDEs, FREs, flex FDEs; its bytes against `.eh_frame`,
  `.eh_frame_hdr` and `.debug_frame`;
- where the bytes go: the header, the FDE index, V3's attribute records, the FRE start offsets, the
  FRE info bytes, the data words by width (1, 2, 4 bytes); how many FREs each FDE has;
- coverage: the bytes of code (executable sections) SFrame's FDEs cover and those the CFI covers,
  and each function with CFI but no SFrame FDE, with the reason where the CFI or the names tell
  it (a CFA no SFrame version before 3 can say: a DWARF expression, as stack realignment through a
  DRAP register writes, or a register other than SP and FP; the C runtime's startup code, which is
  assembled without `--gsframe`; a PLT section the linker writes no SFrame for);
- what-if: the same rows laid out again as V2 and V3 sections (core.sframe.rebuild).

Over all of them: totals, the versions and ABIs found, and each input whose version or ABI
differs from most (a link that mixes V2 and V3 objects fails in binutils 2.46 and later).
"""

import bisect
import collections
import struct
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..arch import abi as abimod
from ..dwarf.coverage import DEBUG_FRAME, EH_FRAME, EH_FRAME_HDR, CfiSection
from ..dwarf.rows import shared_structs
from ..elf import archive, walk
from ..elf.image import SHT_NOBITS, ElfImage, load_elf, section_headers
from ..errors import CfiError, ElfError, NoSFrameError, NotElfError, SFrameError
from ..parallel import file_pool
from ..sframe import format as F
from ..sframe.decode import Section
from ..sframe.rebuild import rebuild

SHF_EXECINSTR = 0x4
FLAG_NAMES = ((F.Flag.FDE_SORTED, "FDE_SORTED"), (F.Flag.FRAME_POINTER, "FRAME_POINTER"),
              (F.Flag.FDE_FUNC_START_PCREL, "FDE_FUNC_START_PCREL"))
# FREs per FDE, in buckets: (upper bound, label)
BUCKETS = ((0, "0"), (1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (1 << 62, "17+"))
WHAT_IF = (2, 3)
# The C runtime's startup code (crt1.o, crti.o, crtn.o, crtbegin.o, crtend.o): assembled or
# compiled without --gsframe, so every program has it without SFrame.
# (and glibc's libc_nonshared.a, linked into every program and library)
CRT_FUNCTIONS = frozenset(("_start", "_init", "_fini", "deregister_tm_clones", "register_tm_clones",
                           "__do_global_dtors_aux", "frame_dummy", "_dl_relocate_static_pie", "__libc_csu_init",
                           "__libc_csu_fini", "call_weak_fn", "atexit", "at_quick_exit", "__stack_chk_fail_local",
                           "pthread_atfork", "__atexit", "_dl_start_user"))

REASON_CRT = "C runtime startup code (crt1.o, crti.o, crtbegin.o, libc_nonshared.a): built without --gsframe"
REASON_PLT = "a PLT section the linker writes no SFrame for"
REASON_EXPR = "its CFA is a DWARF expression (stack realignment through a DRAP register): no SFrame form before V3"
REASON_REG = "its CFA is based on %s, neither SP nor FP: no SFrame form before V3"
REASON_ARGS_SIZE = ("its CFI has DW_CFA_GNU_args_size (GCC writes it with .cfi_escape): gas 2.44 and older write "
                    "no SFrame FDE for a function with a .cfi_escape (seen: 2.40, 2.44; 2.47 writes one)")
_DW_CFA_GNU_ARGS_SIZE = 0x2E
REASON_NONE = "nothing in its CFI or name says why (hand-written assembly, or an input assembled without --gsframe)"


@dataclass
class Gap:
    """A function with CFI but no SFrame FDE."""
    name: str
    lo: int
    hi: int
    reason: str


@dataclass
class FileStats:
    name: str
    kind: str                          # program, library, object
    version: int
    flags: List[str]
    abi: str
    fdes: int
    fres: int
    flex_fdes: int
    sizes: Dict[str, int]              # .sframe, .eh_frame, .eh_frame_hdr, .debug_frame
    parts: Dict[str, int]              # where the .sframe bytes go
    fres_by_width: Dict[str, int]      # FREs whose data words are 1, 2 or 4 bytes wide
    fres_per_fde: Dict[str, int]       # FDEs by their number of FREs (BUCKETS)
    code_bytes: int                    # executable sections
    sframe_bytes: int                  # of them, in an SFrame FDE
    cfi_bytes: int                     # in a CFI FDE
    cfi_functions: int
    gaps: List[Gap] = field(default_factory=list)
    what_if: Dict[str, Optional[int]] = field(default_factory=dict)   # version -> bytes (None: none)
    left_out: Dict[str, int] = field(default_factory=dict)            # version -> functions it cannot hold

    def json(self) -> dict:
        return asdict(self)


def _parts(section: Section) -> Tuple[Dict[str, int], Dict[str, int], Dict[str, int], int]:
    """(where the bytes go, FREs by data-word width, FDEs by FRE count, flex FDEs)."""
    h = section.header
    parts = {"header": h.size, "FDE index": h.num_fdes * h.fde_size,
             "attribute records": F.V3_ATTR_SIZE * h.num_fdes if h.version == 3 else 0,
             "FRE starts": 0, "FRE info": 0, "data words (1 byte)": 0, "data words (2 bytes)": 0,
             "data words (4 bytes)": 0}
    widths = {"0": 0, "1": 0, "2": 0, "4": 0}        # ("0": no data words: the outermost frame)
    per_fde = {label: 0 for _n, label in BUCKETS}
    flex = 0
    for fde in section.fdes():
        fres = section.fres(fde)
        flex += h.version == 3 and fde.fde_type is F.FDEType.FLEX
        per_fde[next(label for n, label in BUCKETS if len(fres) <= n)] += 1
        start = F.FRE_START_SIZE[fde.fre_type]
        for fre in fres:
            parts["FRE starts"] += start
            parts["FRE info"] += 1
            w = fre.word_size if fre.words else 0
            if w:
                parts["data words (%d byte%s)" % (w, "" if w == 1 else "s")] += w * len(fre.words)
            widths[str(w)] += 1
    return parts, widths, per_fde, flex


def _named_reason(name: str, section: str) -> Optional[str]:
    """Why a function has no SFrame FDE, where its name or section tells (no CFI decoded)."""
    if name.split("@", 1)[0] in CRT_FUNCTIONS:
        return REASON_CRT
    if section.startswith(".plt"):
        return REASON_PLT
    return None


def _cfi_reason(cfa: Optional[str]) -> str:
    """Why, from what _cfa_kinds found in its CFI."""
    if cfa == "expression":
        return REASON_EXPR
    if cfa == "args_size":
        return REASON_ARGS_SIZE
    if cfa is not None:
        return REASON_REG % cfa
    return REASON_NONE


def _cfa_kinds(path: str, image: ElfImage, los: Sequence[int]) -> Dict[int, str]:
    """{CFI FDE start: "args_size" (it has DW_CFA_GNU_args_size), "expression" or the register its
    CFA is based on} for the FDEs starting at `los` that have such a thing (pyelftools decodes
    only those)."""
    if not los:
        return {}
    abi = abimod.for_elf(image.machine, image.big_endian)
    wanted = set(los)

    def load(elf, _fh):
        import io

        from .. import pyelftools
        pyelftools.load()
        from elftools.dwarf.callframe import FDE, CallFrameInfo
        full = elf.full()
        if not full.has_dwarf_info():
            return {}
        dwarf = full.get_dwarf_info(relocate_dwarf_sections=False)
        out: Dict[int, str] = {}
        for name, eh in ((EH_FRAME, True), (DEBUG_FRAME, False)):
            got = image.section_bytes(name)
            if got is None:
                continue
            data, addr = got
            try:
                for e in CallFrameInfo(io.BytesIO(data), len(data), addr, dwarf.structs, for_eh_frame=eh).get_entries():
                    lo = e["initial_location"] & F.MASK64 if isinstance(e, FDE) else None
                    if lo not in wanted or lo in out:
                        continue
                    if any(ins.opcode == _DW_CFA_GNU_ARGS_SIZE for ins in e.instructions):
                        out[lo] = "args_size"
                        continue
                    for row in e.get_decoded().table:     # (an expression anywhere says DRAP)
                        cfa = row.get("cfa")
                        if cfa is None:
                            continue
                        if cfa.expr is not None:
                            out[lo] = "expression"
                            break
                        if abi is not None and cfa.reg not in (abi.sp, abi.fp) and lo not in out:
                            out[lo] = abi.regname(cfa.reg)
            except Exception:        # (DWARFError and pyelftools' own: a reason is a courtesy, none is no harm)
                continue
        return out
    try:
        with shared_structs():
            return load_elf(path, load, "DWARF CFI")
    except ElfError:
        return {}


def _union(ranges: Sequence[Tuple[int, int]]) -> int:
    total, end = 0, -1
    for lo, hi in sorted(ranges):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def file_stats(path: str, name: Optional[str] = None) -> FileStats:
    """The figures of one ELF file.  NoSFrameError where it has no SFrame; ElfError, SFrameError
    where it cannot be read."""
    name = name or path
    image = ElfImage(path)
    sf = image.require_sframe()
    section = Section(sf.data, sf.address)
    h = section.header
    section.check_all(keep=False)              # (a malformed section: its own error, here)

    def load(elf, _fh):
        secs = section_headers(elf)
        sizes = {n: 0 for n in (".sframe", EH_FRAME, EH_FRAME_HDR, DEBUG_FRAME)}
        for s in secs:
            if s.type != SHT_NOBITS and s.name in sizes and not sizes[s.name]:
                sizes[s.name] = s.size
        sizes[".sframe"] = len(sf.data)
        code = [((image.section_address(s.name) or 0) if image.relocatable else s.addr, s.size, s.name) for s in secs
                if s.flags & SHF_EXECINSTR and s.type != SHT_NOBITS and s.size]
        return sizes, code
    sizes, code = load_elf(path, load, "section headers")
    kind = "object" if image.relocatable else "library" if image.e_type == "ET_DYN" and not image.interpreter \
        else "program"
    parts, widths, per_fde, flex = _parts(section)
    fdes = list(section.fdes())
    in_code = [(max(f.start, lo), min(f.end, lo + size)) for f in fdes for lo, size, _n in code
               if f.start < lo + size and lo < f.end]
    cfi: List[Tuple[int, int]] = []
    try:
        if image.relocatable:
            for sec_name in (EH_FRAME, DEBUG_FRAME):
                got = image.section_bytes(sec_name)
                if got is not None:
                    cfi += CfiSection(sec_name, got[0], got[1], big_endian=image.big_endian,
                                      addr_size=8 if image.elfclass == 64 else 4).ranges()
        else:
            for s in image.cfi_sections():
                cfi += s.ranges()
    except (CfiError, ElfError):       # (a CFI it cannot read or relocate: no CFI to compare)
        cfi = []
    cfi = sorted(set((lo, hi) for lo, hi in cfi if hi > lo))
    cfi_code = [(max(a, lo), min(b, lo + size)) for a, b in cfi for lo, size, _n in code if a < lo + size and lo < b]
    starts = sorted((f.start, f.end) for f in fdes)
    firsts = [s for s, _e in starts]

    def covered(pc: int) -> bool:
        k = bisect.bisect_right(firsts, pc) - 1
        return k >= 0 and pc < starts[k][1]
    gaps = []
    for lo, hi in cfi:
        if covered(lo):
            continue
        sym = image.symbolize(lo)
        fname = ("%s+%#x" % sym if sym[1] else sym[0]) if sym else "%#x" % lo
        sec = next((n for a, size, n in code if a <= lo < a + size), "")
        gaps.append(Gap(fname, lo, hi, _named_reason(fname, sec) or ""))
    kinds = _cfa_kinds(path, image, [g.lo for g in gaps if not g.reason])     # (the others' CFI is not decoded)
    for g in gaps:
        g.reason = g.reason or _cfi_reason(kinds.get(g.lo))
    what_if: Dict[str, Optional[int]] = {}
    left: Dict[str, int] = {}
    for v in WHAT_IF:
        try:
            again = rebuild(section, v, sf.address)
            what_if[str(v)], left[str(v)] = (again.size if again.data is not None else None), again.left_out
        except (ValueError, SFrameError, KeyError, struct.error):
            what_if[str(v)], left[str(v)] = None, len(fdes)
    flags = [n for bit, n in FLAG_NAMES if h.flags & bit]
    return FileStats(name, kind, h.version, flags, abimod.info(h.abi).name, h.num_fdes, h.num_fres, flex, sizes,
                     parts, widths, per_fde, sum(size for _a, size, _n in code), _union(in_code), _union(cfi_code),
                     len(cfi), gaps, what_if, left)


# -- a whole tree -------------------------------------------------------------------------------

@dataclass
class Problem:
    name: str
    why: str
    no_sframe: bool = False            # an ELF file without SFrame: said, no failure


def _one(found: Tuple[str, bool]) -> Tuple[List[FileStats], List[Problem]]:
    """The figures of a file or of each member of an archive (in a pool's process)."""
    path, given = found
    stats: List[FileStats] = []
    problems: List[Problem] = []
    if not archive.is_archive(path):
        try:
            with open(path, "rb") as fh:
                if fh.read(4) != b"\x7fELF":
                    return [], [Problem(path, "not an ELF file")] if given else []
        except FileNotFoundError:
            return [], [Problem(path, "no such file")] if given else []
        except OSError as exc:
            return [], [Problem(path, "cannot read it: %s" % (exc.strerror or exc))]
    with archive.inputs([path]) as items:
        for item in items:
            if item.path is None:
                text = item.error or "cannot be read"
                problems.append(Problem(item.display, text[len(item.display) + 2:]
                                        if text.startswith(item.display + ": ") else text))
                continue
            try:
                stats.append(file_stats(item.path, item.display))
            except NotElfError:
                if given or not item.member:
                    problems.append(Problem(item.display, "not an ELF file"))   # (a walked .deb's: passed over)
            except NoSFrameError:
                problems.append(Problem(item.display, "no SFrame section", no_sframe=True))
            except (ElfError, SFrameError, OSError) as exc:
                text = str(exc).replace(item.path, item.display) if item.member else str(exc)
                problems.append(Problem(item.display, text[len(item.display) + 2:]
                                        if text.startswith(item.display + ": ") else text))
            except Exception as exc:    # (a defect of ours: one line, the walk goes on, the pool never hangs)
                problems.append(Problem(item.display, "internal error: %s: %s" % (type(exc).__name__, exc)))
    return stats, problems


@dataclass
class Summary:
    files: List[FileStats]
    problems: List[Problem]

    @property
    def failed(self) -> int:
        return sum(not p.no_sframe for p in self.problems)

    def odd(self, key: Callable[[FileStats], object]) -> Tuple[Dict[str, int], List[FileStats]]:
        """({value: files}, the files whose value is not the most common one's)."""
        counts = collections.Counter(str(key(f)) for f in self.files)
        if len(counts) < 2:
            return dict(counts), []
        most = counts.most_common(1)[0][0]
        return dict(counts), [f for f in self.files if str(key(f)) != most]

    def json(self) -> dict:
        versions, odd_v = self.odd(lambda f: f.version)
        abis, odd_a = self.odd(lambda f: f.abi)
        return {"files": [f.json() for f in self.files],
                "problems": [asdict(p) for p in self.problems],
                "totals": totals(self.files),
                "versions": versions, "other_version": [f.name for f in odd_v],
                "abis": abis, "other_abi": [f.name for f in odd_a]}


def totals(files: Sequence[FileStats]) -> dict:
    out: dict = {"files": len(files), "kinds": dict(collections.Counter(f.kind for f in files))}
    for key in ("fdes", "fres", "flex_fdes", "code_bytes", "sframe_bytes", "cfi_bytes", "cfi_functions"):
        out[key] = sum(getattr(f, key) for f in files)
    for key in ("sizes", "parts", "fres_by_width", "fres_per_fde"):
        acc: Dict[str, int] = {}
        for f in files:
            for k, v in getattr(f, key).items():
                acc[k] = acc.get(k, 0) + v
        out[key] = acc
    out["gaps"] = dict(collections.Counter(g.reason for f in files for g in f.gaps))
    out["what_if"] = {v: sum(f.what_if.get(v) or 0 for f in files) for v in map(str, WHAT_IF)}
    out["left_out"] = {v: sum(f.left_out.get(v, 0) for f in files) for v in map(str, WHAT_IF)}
    return out


def run(paths: Sequence[str], processes: int = 1,
        progress: Optional[Callable[[int, int, str], None]] = None) -> Summary:
    """The figures of every ELF file (and archive member) under `paths`; walked directories pass
    over what is neither ELF nor an archive."""
    found, bad = walk.split(paths)
    problems = [Problem(path, why) for path, why in bad]
    files: List[FileStats] = []
    pool = file_pool(processes, len(found))
    try:
        done: Iterator = pool.imap(_one, found, chunksize=4) if pool else map(_one, found)
        for k, (stats, bad) in enumerate(done):
            if progress:
                progress(k + 1, len(found), found[k][0])
            files += stats
            problems += bad
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return Summary(files, problems)


# -- text ---------------------------------------------------------------------------------------

def _n(k: int) -> str:
    return format(k, ",")


def _ratio(a: int, b: int) -> str:
    return "%.2fx" % (a / b) if b else "-"


def _pct(a: int, b: int) -> str:
    return "%.1f%%" % (100.0 * a / b) if b else "-"


def file_line(f: FileStats) -> str:
    """One file in one line."""
    eh = f.sizes[EH_FRAME] + f.sizes[EH_FRAME_HDR]
    return ("%s: V%d %s %s, %s FDEs, %s FREs; .sframe %s B, .eh_frame+hdr %s B (%s)%s; code %s B: SFrame covers %s, "
            "CFI %s%s; as V2 %s, as V3 %s" % (
                f.name, f.version, f.abi, f.kind, _n(f.fdes), _n(f.fres), _n(f.sizes[".sframe"]), _n(eh),
                _ratio(f.sizes[".sframe"], eh), ", .debug_frame %s B" % _n(f.sizes[DEBUG_FRAME])
                if f.sizes[DEBUG_FRAME] else "", _n(f.code_bytes), _pct(f.sframe_bytes, f.code_bytes),
                _pct(f.cfi_bytes, f.code_bytes),
                "; %d function%s with CFI but no SFrame FDE" % (len(f.gaps), "" if len(f.gaps) == 1 else "s")
                if f.gaps else "", _whatif(f, "2"), _whatif(f, "3")))


def _whatif(f: FileStats, v: str) -> str:
    size = f.what_if.get(v)
    text = "-" if size is None else "%s B" % _n(size)
    return text + (" (%d function%s it cannot hold)" % (f.left_out[v], "" if f.left_out[v] == 1 else "s")
                   if f.left_out.get(v) else "")


def lines(summary: Summary, functions: bool = False) -> List[str]:
    """The text report: a line per file, then the totals (and with `functions`, each function with
    CFI but no SFrame FDE)."""
    without = [p.name for p in summary.problems if p.no_sframe]
    if not summary.files:
        return ["total: no file with SFrame%s" % (" (%d ELF file%s without)" % (
            len(without), "" if len(without) == 1 else "s") if without else "")]
    out = [file_line(f) for f in summary.files]
    if functions:
        for f in summary.files:
            out += ["  %s %#x-%#x: %s" % (g.name, g.lo, g.hi, g.reason) for g in f.gaps]
    t = totals(summary.files)
    s = t["sizes"]
    eh = s[EH_FRAME] + s[EH_FRAME_HDR]
    out.append("total: %d file%s (%s); %s FDEs, %s FREs, %s flex" % (
        t["files"], "" if t["files"] == 1 else "s",
        ", ".join("%d %s%s" % (n, k, "" if n == 1 else "s") for k, n in sorted(t["kinds"].items())),
        _n(t["fdes"]), _n(t["fres"]), _n(t["flex_fdes"])))
    out.append("  bytes: .sframe %s, .eh_frame %s, .eh_frame_hdr %s, .debug_frame %s; .sframe / (.eh_frame + "
               ".eh_frame_hdr) = %s" % (_n(s[".sframe"]), _n(s[EH_FRAME]), _n(s[EH_FRAME_HDR]), _n(s[DEBUG_FRAME]),
                                        _ratio(s[".sframe"], eh)))
    out.append("  where .sframe's bytes go: " + ", ".join(
        "%s %s (%s)" % (k, _n(v), _pct(v, s[".sframe"])) for k, v in t["parts"].items() if v))
    out.append("  FREs by data-word width: " + ", ".join(
        ("no words %s" % _n(v)) if k == "0" else "%s byte%s %s" % (k, "" if k == "1" else "s", _n(v))
        for k, v in t["fres_by_width"].items() if v or k != "0"))
    out.append("  FDEs by FREs: " + ", ".join("%s: %s" % (k, _n(v)) for k, v in t["fres_per_fde"].items() if v))
    out.append("  coverage: code %s B; SFrame covers %s (%s), CFI %s (%s); %s CFI functions, %d without an SFrame "
               "FDE" % (_n(t["code_bytes"]), _n(t["sframe_bytes"]), _pct(t["sframe_bytes"], t["code_bytes"]),
                        _n(t["cfi_bytes"]), _pct(t["cfi_bytes"], t["code_bytes"]), _n(t["cfi_functions"]),
                        sum(t["gaps"].values())))
    for reason, n in sorted(t["gaps"].items(), key=lambda x: -x[1]):
        out.append("    %d: %s" % (n, reason))
    out.append("  what-if: as V2 %s B%s, as V3 %s B%s (now %s B)" % (
        _n(t["what_if"]["2"]), " (%d functions it cannot hold)" % t["left_out"]["2"] if t["left_out"]["2"] else "",
        _n(t["what_if"]["3"]), " (%d functions it cannot hold)" % t["left_out"]["3"] if t["left_out"]["3"] else "",
        _n(s[".sframe"])))
    for what, key in (("versions", lambda f: "V%d" % f.version), ("ABIs", lambda f: f.abi)):
        counts, odd = summary.odd(key)
        out.append("  %s: %s" % (what, ", ".join("%s in %d" % (k, n) for k, n in sorted(counts.items()))))
        for f in odd:
            out.append("    differs from most: %s (%s)" % (f.name, key(f)))
    if without:
        out.append("  without SFrame: %d ELF file%s" % (len(without), "" if len(without) == 1 else "s"))
    return out
