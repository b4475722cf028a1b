"""What a backtrace needs of a stopped program (a core file or a running process): its threads,
memory and modules with SFrame (DWARF CFI for the others), symbols, and the walk of one thread.

Symbols come from the module's .symtab (else .dynsym), or from its separate debug file found by
build ID under <sysroot>/usr/lib/debug/.build-id; PLT entries are named `sym@plt` from the
module's PLT relocations.
"""

import os
from typing import Dict, Iterator, Optional, Tuple, Union

from ..dwarf.rows import CfiRow, CfiRows
from ..elf.image import ElfImage, load_elf, section_headers
from ..elf.notes import build_id_of, debug_file_path
from ..errors import ElfError
from ..unwind import ahead
from ..unwind.modules import ModuleSet, finder
from ..unwind.unwinder import DEFAULT_DEPTH_LIMIT, Frame, Stop, frame_from_registers
from .corefile import CoreFile
from .corenotes import Thread


class _Symbols:
    """An extra symbol source for one mapped file: its separate debug file (by build ID)."""

    def __init__(self, path, sysroot):
        self.debug = None
        try:
            self._load(path, sysroot)
        except Exception:          # symbols are a nicety: never let a strange file stop a backtrace
            self.debug = None

    def _load(self, path, sysroot):
        def load(elf, _fh):
            sections = section_headers(elf)
            return build_id_of(elf, sections, path), any(sec.name == ".symtab" for sec in sections)
        build_id, has_symtab = load_elf(path, load, "notes")
        if build_id and not has_symtab:
            for root in ([sysroot] if sysroot else []) + ["/"]:
                cand = debug_file_path(os.path.join(root, "usr/lib/debug"), build_id)
                if os.path.isfile(cand):
                    try:
                        self.debug = ElfImage(cand)
                    except ElfError:
                        self.debug = None
                    break


class Session:
    """A stopped program, its modules with SFrame (and DWARF CFI for the others), and symbolization:
    what a backtrace needs.  `target` is a core.target.corefile.CoreFile or a core.target.live.LiveProcess
    (threads, read, modules, module_at)."""

    def __init__(self, target, sysroot: Optional[str] = None, cfi: bool = True):
        self.target = target
        self.sysroot = sysroot
        self.abi = target.abi
        self.cfi = cfi
        self.modules = ModuleSet()
        self._extra: dict = {}
        self._symbols: Dict[int, Optional[Tuple[str, int]]] = {}
        self._cfi_rows: Dict[str, CfiRows] = {}
        for mod in target.modules():
            if mod.image is not None:
                self.modules.add(mod.path, mod.image.path, bias=mod.bias)

    def _symbols_of(self, mod):
        key = mod.image.path
        if key not in self._extra:
            self._extra[key] = _Symbols(key, self.sysroot)
        return self._extra[key]

    def symbolize(self, pc: int) -> Optional[Tuple[str, int]]:
        """(name, offset) of the symbol holding pc, or None (memoized: a deep stack repeats PCs)."""
        if pc in self._symbols:
            return self._symbols[pc]
        s = self._symbols[pc] = self._symbolize(pc)
        return s

    def _symbolize(self, pc: int) -> Optional[Tuple[str, int]]:
        mod = self.target.module_at(pc)
        if mod is None or mod.image is None:
            return None
        extra = self._symbols_of(mod)
        s: Optional[Tuple[str, int]]
        try:          # symbols are a nicety: a file that cannot be read (or is gone) names nothing
            s = mod.image.plt_name(pc, mod.bias)
            if s is None and extra.debug is not None:
                s = extra.debug.symbolize(pc, mod.bias)
            if s is None:
                s = mod.image.symbolize(pc, mod.bias)
        except ElfError:
            s = None
        return s

    def symbol(self, pc: int) -> Optional[str]:
        """'name+off' for pc, or None."""
        s = self.symbolize(pc)
        if s is None:
            return None
        return s[0] if s[1] == 0 else "%s+%d" % s

    def module_name(self, pc: int) -> str:
        mod = self.target.module_at(pc)
        return os.path.basename(mod.path) if mod else "??"

    def initial_frame(self, thread: Thread) -> Frame:
        regs = {k: v for k, v in thread.registers.items() if isinstance(k, int)}
        sp_num = self.abi.sp

        def read(num):
            return thread.sp if num == sp_num else regs.get(num)
        return frame_from_registers(self.abi, thread.pc, read, full=True, regs=regs)

    def _owner(self, pc: int) -> Optional[str]:
        mod = self.target.module_at(pc)
        return mod.image.path if mod is not None and mod.image is not None else None

    def trampoline_name(self, pc: int) -> Optional[str]:
        """Symbol name at pc, for the unwinder's signal-trampoline recognition (`symbol=`).

        The trampoline is entered by a return from the handler, at its first instruction, so
        the name is that of the function starting at or containing pc itself (not pc - 1).
        """
        s = self.symbol(pc)
        return s.split("+")[0] if s else None

    def cfi_row(self, pc: int) -> Optional[CfiRow]:
        """The DWARF CFI rules at pc, from the file mapped there (for PCs no SFrame covers)."""
        mod = self.target.module_at(pc)
        if mod is None or mod.image is None:
            return None
        rows = self._cfi_rows.get(mod.image.path)
        if rows is None:
            try:
                sections = mod.image.cfi_sections(mod.bias)
            except ElfError:
                sections = []
            rows = self._cfi_rows[mod.image.path] = CfiRows(sections, self.abi)
        return rows.row(pc)

    def walk(self, thread: Thread, limit: int = DEFAULT_DEPTH_LIMIT,
             fp_fallback: bool = False, callee_saved: bool = False) -> Iterator[Union[Frame, Stop]]:
        return ahead.walk(self.initial_frame(thread), abi=self.abi, read=self.target.read,
                          find=finder(self.modules, self._owner), limit=limit, fp_fallback=fp_fallback,
                          symbol=self.trampoline_name, callee_saved=callee_saved, symbolize=self.symbolize,
                          cfi=self.cfi_row if self.cfi else None)


class CoreSession(Session):
    """A core file's Session."""

    def __init__(self, core_path: str, exe: Optional[str] = None, sysroot: Optional[str] = None, cfi: bool = True):
        super().__init__(CoreFile(core_path, sysroot=sysroot, exe=exe), sysroot, cfi)

    @property
    def core(self) -> CoreFile:
        return self.target
