"""The set of loaded modules with SFrame, and PC -> module lookup, shared by both debugger adapters.

Adapters say which files are loaded and with which bias (`add`/`remove`/`clear`); the SFrame
index of each is built lazily, on the first `find` after the module set changed.  Modules
without SFrame are remembered as such and cost nothing afterwards.  `find(pc)` is a bisect over
the text ranges the indexes cover, so a PC outside every SFrame range is declined at once.
"""

import bisect
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..arch import abi as abimod
from ..arch.abi import ABIInfo
from ..dwarf.coverage import CfiIndex, CfiRange
from ..dwarf.rows import CfiRow, CfiRows
from ..errors import ElfError, EmptySFrameError, NoSFrameError, SFrameError
from ..sframe.index import SFrameIndex


@dataclass
class Module:
    key: object                 # the adapter's identity for it (objfile, module UUID/path, ...)
    path: str
    bias: object = None         # int, or a callable returning it (computed when first needed)
    image: object = None        # core.elf.image.ElfImage, when the file had to be parsed
    index: Optional[SFrameIndex] = None
    error: Optional[str] = None   # why it has no usable SFrame
    range: tuple = (0, 0)
    extra: dict = field(default_factory=dict)
    loader: object = None       # optional: () -> (section bytes, load address, section name)
    section_name: Optional[str] = None   # where the SFrame data came from, once loaded
    section_addr: Optional[int] = None   # its load address
    cfi_loader: object = None   # optional: () -> [core.dwarf.coverage.CfiSection] of the file, as loaded
    cfi: Optional[CfiIndex] = None       # which addresses DWARF CFI covers, built on first use
    failure: Optional[Exception] = None  # what made it unusable (an SFrameError: a malformed section)
    no_sframe: bool = False     # the file has no SFrame section, or an empty one (error says so)
    empty_sframe: bool = False  # ... an empty one
    uncovered: Optional[int] = None      # how many of its SFrame functions no DWARF CFI covers (see ModuleSet.uncovered)
    entry: Optional[Tuple[int, int]] = None   # [start, end) of an executable's entry code, as loaded (core.elf.entry)
    file: Optional[str] = None  # the local file to read, where `path` (the debugger's name) is not one; "": none
    source: Optional[str] = None   # where its SFrame came from, where not the local file `path` (info sframe)
    reader: Optional[Callable[[int, int], Optional[bytes]]] = None  # read(file offset, size), where no file is

    @property
    def local_path(self) -> str:
        """The file to read the module's sections from ("" where there is none)."""
        return self.path if self.file is None else self.file

    @property
    def unusable(self) -> bool:
        """It has an SFrame section that cannot be used (not merely none)."""
        return self.index is None and bool(self.error) and not self.no_sframe

    @property
    def problem(self) -> str:
        """Why the module has no usable SFrame, naming its file once."""
        error = self.error or ""
        return error if error.startswith(self.path + ":") else "%s: %s" % (self.path, error)

    @property
    def load_bias(self) -> int:
        if callable(self.bias):
            self.bias = self.bias()
        return int(self.bias or 0)   # type: ignore[call-overload]


class ModuleSet:
    def __init__(self, log: Optional[Callable[[str], None]] = None):
        self._modules: Dict[object, Module] = {}
        self._pending: List[Module] = []
        self._ranges: List[tuple] = []       # sorted (lo, hi, id, module)
        self._los: List[int] = []
        self.log = log or (lambda msg: None)

    def add(self, key: object, path: str, bias: object = None, loader: Optional[Callable[[], tuple]] = None,
            cfi_loader: Optional[Callable[[], list]] = None, **extra) -> Module:
        """Record a loaded file; its index is built on first use.  Re-adding a key replaces it.

        By default the SFrame section is read from the file at `path` and placed at its link-time
        address plus `bias`.  A debugger that already knows where the section is loaded can pass
        `loader` instead (bytes and load address from the debugger's own view of memory: no file
        is parsed); if the loader raises, the file is used.  Likewise `cfi_loader` for the file's
        DWARF CFI (see cfi_find).
        """
        self.remove(key)
        m = Module(key, path, bias, extra=extra, loader=loader, cfi_loader=cfi_loader)
        self._modules[key] = m
        self._pending.append(m)
        return m

    def remove(self, key: object) -> None:
        m = self._modules.pop(key, None)
        if m is not None:
            if m in self._pending:
                self._pending.remove(m)
            self._rebuild_ranges()

    def clear(self) -> None:
        self._modules.clear()
        self._pending.clear()
        self._ranges = []
        self._los = []

    def __iter__(self):
        self._load_pending()
        return iter(list(self._modules.values()))

    def _section(self, m):
        if m.loader is not None:
            try:
                return m.loader()
            except ElfError:      # the file itself says no: reading it again would not help
                raise
            except Exception as exc:
                self.log("%s: %s; reading the file instead" % (m.path, exc))
        from ..elf.image import ElfImage  # pyelftools only when the file must be parsed (its import is slow)
        m.image = ElfImage(m.local_path)
        sf = m.image.require_sframe()
        return sf.data, sf.address + m.load_bias, sf.name

    def _load(self, m):
        try:
            data, m.section_addr, m.section_name = self._section(m)
            m.index = SFrameIndex(data, m.section_addr)
            if len(m.index):
                m.range = m.index.text_range()
            m.entry = entry_code(m)
            if m.entry is not None:
                lo, hi = m.range if m.range[1] > m.range[0] else m.entry
                m.range = (min(lo, m.entry[0]), max(hi, m.entry[1]))
        except (ElfError, SFrameError, OSError) as exc:
            m.error = str(exc)
            m.failure = exc.with_traceback(None)      # the error, not the frames (and data) it was raised in
            m.index = None
            m.no_sframe = isinstance(exc, NoSFrameError)
            m.empty_sframe = isinstance(exc, EmptySFrameError)
            self.log(m.problem)
        except Exception as exc:   # the bias callback is adapter code: report, never propagate
            m.error = "cannot load: %s" % exc
            m.index = None
            self.log(m.problem)

    def _load_pending(self):
        if self._pending:
            pending, self._pending = self._pending, []
            for m in pending:
                self._load(m)
            self._rebuild_ranges()

    def _rebuild_ranges(self):
        self._ranges = sorted((m.range[0], m.range[1], id(m), m) for m in self._modules.values()
                              if m.index is not None and m.range[1] > m.range[0])
        self._los = [r[0] for r in self._ranges]

    def symbolize(self, addr: int) -> Optional[Tuple[str, int]]:
        """(name, offset) of the function symbol holding addr, from the symbol table of the file
        of the module whose SFrame covers it (parsed once, placed by where its SFrame section
        is), or None.  What the save-slot analysis asks inside a debugger's unwinder, where a
        debugger command (GDB's `info symbol`) must not run: it may rebuild the frames being
        unwound."""
        found = self.find(addr)
        if found is not None:
            return self._symbol_in(found[1], addr)
        # Code its SFrame does not cover (the PLT on AArch64 and s390x, where a call to exit@plt
        # must be named to be known never to return): the files already read for their names.
        for m in list(self._modules.values()):
            if m.image is not None:
                got = self._symbol_in(m, addr)
                if got is not None:
                    return got
        return None

    @staticmethod
    def _symbol_in(m: Module, addr: int) -> Optional[Tuple[str, int]]:
        if m.extra.get("no_symbols") or m.section_addr is None:
            return None
        try:
            if m.image is None:
                from ..elf.image import ElfImage
                m.image = ElfImage(m.local_path)
            image = m.image
            return image.symbolize(addr, m.section_addr - image.require_sframe().address)  # type: ignore[attr-defined]
        except Exception:               # (no such file, [vdso], a file that changed): no names
            m.extra["no_symbols"] = True
            return None

    def find(self, pc: int) -> Optional[Tuple[SFrameIndex, Module]]:
        """(SFrameIndex, Module) whose text range holds pc, or None."""
        if self._pending:
            self._load_pending()
        i = bisect.bisect_right(self._los, pc) - 1
        while i >= 0:
            lo, hi, _, m = self._ranges[i]
            if pc < hi:
                return m.index, m
            i -= 1
            if i >= 0 and self._ranges[i][1] <= lo:
                break
        return None

    def cfi_find(self, module: Module, pc: int) -> Optional[CfiRange]:
        """The DWARF CFI range (core.dwarf.coverage.CfiRange) of `module` covering pc, or None.  The coverage
        index is built on first use, from the adapter's cfi_loader or else from the file; a file
        or section that cannot be read counts as no CFI (and is logged)."""
        if module.cfi is None:
            module.cfi = CfiIndex(lambda: self._cfi_sections(module), self.log)
        return module.cfi.find(pc)

    def uncovered(self, module: Module) -> int:
        """How many functions of the module's SFrame no DWARF CFI of it covers (at their first
        instruction), worked out once: where none, a debugger's own DWARF unwinder takes every
        frame SFrame could, and an unwinder of SFrame need not be asked (`set sframe mode auto`)."""
        if module.uncovered is None:
            index = module.index
            n = 0
            if index is not None:
                section = index.section
                for i in range(len(section)):
                    if self.cfi_find(module, section.start_of(i)) is None:
                        n += 1
            module.uncovered = n
        return module.uncovered

    def sframe_only(self) -> List[Tuple[Module, int]]:
        """(module, functions) of the loaded modules with functions that only SFrame describes."""
        out = []
        for m in self.with_sframe():
            n = self.uncovered(m)
            if n:
                out.append((m, n))
        return out

    def _cfi_sections(self, m):
        try:
            if m.cfi_loader is not None:
                return m.cfi_loader()
            from ..elf.image import ElfImage
            return (m.image or ElfImage(m.local_path)).cfi_sections(m.load_bias)
        except Exception as exc:       # a missing file, or adapter code: report, never propagate
            self.log("%s: cannot read its DWARF CFI: %s" % (m.path, exc))
            return []

    def by_path(self, path: str) -> Optional[Module]:
        self._load_pending()
        for m in self._modules.values():
            if m.path == path:
                return m
        return None

    def with_sframe(self) -> List[Module]:
        self._load_pending()
        return [m for m in self._modules.values() if m.index is not None]


def entry_code(m: Module) -> Optional[Tuple[int, int]]:
    """[start, end) of the entry code (as loaded) of the module's file when it is an executable,
    else None: the outermost frame of its main thread (core.elf.entry).  Where an SFrame FDE
    starts at the entry point, it gives the extent."""
    from ..elf import entry as entrymod
    from ..elf.image import parse_elf_headers
    index = m.index
    if index is None:
        return None
    try:
        read = m.reader or entrymod.file_reader(m.local_path)
        hdr = parse_elf_headers(read)
        entry = entrymod.program_entry(read, hdr) if hdr is not None else None
        code = entrymod.code_reader(read, hdr) if entry is not None else None
        if entry is None or code is None:
            return None
        linked = entrymod.sframe_segment(read, hdr)
        if linked is not None and linked[1] != index.section.data:
            return None       # (the file on disk is no longer the one loaded: its entry point is another's)
        bias = m.section_addr - linked[0] if linked is not None and m.section_addr is not None else m.load_bias
        extent = entrymod.entry_extent_in(abimod.info(index.abi), entry, code, index, bias)
    except Exception:     # a file that cannot be read or decoded: no entry code known
        return None
    return None if extent is None else (extent[0] + bias, extent[1] + bias)


def finder(modules: ModuleSet, owner: Callable[[int], Optional[str]]):
    """core.unwind.unwinder's `find(pc)` over `modules`, for a debugger-free walk.  A PC in a file whose
    SFrame section is malformed (`owner(pc)` names the file holding a PC) raises that section's
    SFrameError: the walk then ends on "malformed SFrame section at byte offset N: rule", which
    is why, not on "no SFrame information"."""
    def find(pc: int):
        found = modules.find(pc)
        if found is None:
            path = owner(pc)
            m = modules.by_path(path) if path else None
            if m is not None and isinstance(m.failure, SFrameError):
                raise SFrameError(m.failure.offset, m.failure.rule)     # a new one: no traceback piles up
        return found
    return find


class LoadedCfi:
    """The DWARF CFI (`.eh_frame`, `.debug_frame`) of loaded files, any file, with SFrame or not,
    by path and load bias: for a walk outside the debugger's own unwinder that goes on by CFI
    where no SFrame covers a PC (LLDB's `sframe bt` through the C library, as `sframe backtrace`
    does).  Each file's sections are read once, its FDEs decoded one at a time (CfiRows)."""

    FILES = 64                # files kept; more (a program with many libraries, reloaded) starts afresh

    def __init__(self, abi: ABIInfo):
        self.abi = abi
        self._files: Dict[Tuple[str, int], CfiRows] = {}

    def row(self, path: str, bias: int, pc: int) -> Optional[CfiRow]:
        """The rules at pc (as loaded) from the file at `path` loaded with `bias`, or None."""
        rows = self._files.get((path, bias))
        if rows is None:
            if len(self._files) >= self.FILES:
                self._files.clear()
            from ..elf.image import ElfImage
            try:
                sections = ElfImage(path).cfi_sections(bias)
            except (ElfError, OSError):
                sections = []
            rows = self._files[(path, bias)] = CfiRows(sections, self.abi)
        return rows.row(pc)

    def finder(self, place: Callable[[int], Optional[Tuple[str, int]]]) -> Callable[[int], Optional[CfiRow]]:
        """core.unwind.unwinder's `cfi(pc)`: the rules of the file `place(pc)` says holds pc, as
        (path, load bias), or None."""
        def cfi(pc: int) -> Optional[CfiRow]:
            where = place(pc)
            return None if where is None else self.row(where[0], where[1], pc)
        return cfi


class NotCovered(LookupError):
    """No SFrame covers an address; str() says why, in the one wording every front end prints."""


def locate(modules: ModuleSet, addr: int, owner: Optional[Callable[[int], Optional[str]]] = None,
           noun: str = "module"):
    """(Module, Match) of the SFrame data covering a load address, or raises NotCovered saying why.

    `owner(addr)` names the loaded file holding addr (None: no loaded file does), which only the
    debugger knows for files without SFrame; `noun` is what the debugger calls a loaded file.
    """
    head = "No SFrame information covers %#x: " % addr
    found = modules.find(addr)
    if found is None:
        path = owner(addr) if owner is not None else None
        if path is None:
            raise NotCovered(head + "it is not in any loaded %s." % noun)
        m = modules.by_path(path)
        if m is not None and m.index is not None:
            raise NotCovered(head + "it lies outside the SFrame range of %s." % path)
        if m is not None and m.unusable:
            raise NotCovered(head + "the SFrame section of %s cannot be used: %s" % (path, m.error))
        if m is not None and m.empty_sframe:
            raise NotCovered(head + "the .sframe section of %s is empty (no SFrame data)." % path)
        raise NotCovered(head + "%s has no .sframe section." % path)
    index, module = found
    try:
        match = index.lookup(addr)
    except SFrameError as exc:
        raise NotCovered("%s: %s" % (module.path, exc)) from None
    if match is None:
        raise NotCovered(head + "no FDE of %s's .sframe contains it." % module.path)
    return module, match
