"""Linux ELF core files: threads and their registers, mapped files, memory, loaded modules.

Supported: 64-bit cores of x86-64 (little-endian), AArch64 (either byte order) and s390x
(big-endian), as written by the kernel, by GDB's `gcore` and by qemu-user.

What a core holds, and where this reader looks:

* Registers: one NT_PRSTATUS note per thread, the thread that crashed (or GDB's selected
  thread) first; qemu-user writes threads in creation order with pr_cursig set only on the
  crashed one, so `threads` moves that one to the front (Thread.note_index keeps the order).
* Mapped files: the NT_FILE note (kernel and GDB cores).  qemu-user cores have none; for
  them the list is rebuilt from the dynamic linker's `r_debug` / `link_map` chain, found
  through the auxiliary vector (NT_AUXV) and the executable's DT_DEBUG entry.
* Memory: the PT_LOAD segments' file contents (p_filesz bytes).  The bytes between p_filesz
  and p_memsz were left out, not zero: for read-only mappings of a file they are read from
  that file (located through `sysroot` and `exe`), otherwise they are unavailable and
  `read` raises CoreMemoryError.

`CoreFile` is the facade over one module per job: `corenotes` (the notes), `corememory` (the
segments' bytes), `mapped` (finding, checking and placing the mapped files), `corelinks`
(the link_map chain of cores without NT_FILE).
"""

import os
from typing import TYPE_CHECKING, List, Literal, Optional, Tuple

from ..elf.image import PF_R, PF_W, PT_LOAD, PT_NOTE, ProgramHeader, load_elf
from ..errors import ElfError
from .corememory import MAX_STRING, CoreMemory, CoreMemoryError
from .corenotes import AT_ENTRY, AT_EXECFN, AT_PAGESZ, AT_PHDR, Mapping, Thread, arch_of, parse_notes
from .mapped import CoreFiles, MappedFile, module_holding, modules_from_nt_file

if TYPE_CHECKING:
    from ..arch.abi import ABIInfo

__all__ = ["CoreFile", "CoreMemoryError", "Mapping", "MappedFile", "Thread"]

_UNSET = object()


class CoreFile:
    """An opened core file.

    Fields: path, machine (e_machine as pyelftools names it, e.g. "EM_X86_64"), arch
    ("x86_64", "aarch64", "s390x"), big_endian, byte_order ("little"/"big"), page_size,
    threads (list of Thread, the one that took the signal first; kernel and GDB cores write it
    first, qemu-user cores are reordered), auxv (dict), command (pr_psargs) and fname (pr_fname)
    from NT_PRPSINFO, mappings (list of Mapping), mappings_source ("NT_FILE", "link_map" or
    None), warnings (list of str: files rejected and why).

    sysroot: a directory prefixed to the absolute paths the core names (as GDB's `set
    sysroot`).  exe: the executable's path, overriding the one in the core.  Relative paths
    (qemu names the executable as it was started) are looked up beside the core, then in
    the current directory.

    Holds the core file and the mapped files it reads open; close() (or `with`) releases them.
    """

    def __init__(self, path: str, sysroot: Optional[str] = None, exe: Optional[str] = None):
        self.path = os.fspath(path)
        self.warnings: List[str] = []
        self.sysroot = os.fspath(sysroot) if sysroot else None
        self.exe = os.fspath(exe) if exe else None
        self._modules: Optional[List[MappedFile]] = None
        self._mappings: Optional[List[Mapping]] = None
        self._maps_so_far: List[Mapping] = []   # mappings usable by read() while the list is being built
        self._building = False
        self._exe_path_cache = _UNSET
        load_elf(self.path, self._load, "core file structure")

    def _load(self, elf, fh):
        if elf["e_type"] != "ET_CORE":
            raise ElfError("%s: not a core file (ELF type %s)" % (self.path, elf["e_type"]))
        self.machine = elf["e_machine"]
        arch = arch_of(self.machine)
        if arch is None:
            raise ElfError("%s: unsupported core file architecture %s (x86-64, AArch64 and s390x "
                           "are supported)" % (self.path, self.machine))
        if elf.elfclass != 64:
            raise ElfError("%s: 32-bit core files are not supported" % self.path)
        self.arch = arch.name
        self.big_endian = not elf.little_endian
        self.byte_order: Literal["big", "little"] = "big" if self.big_endian else "little"
        from ..arch.abi import for_elf
        self._abi = for_elf(self.machine, self.big_endian)
        self.order = ">" if self.big_endian else "<"
        size = os.fstat(fh.fileno()).st_size
        segments, notes = [], []
        for seg in elf.iter_segments():
            ptype = seg["p_type"]
            if ptype == PT_LOAD:
                filesz = seg["p_filesz"]
                if seg["p_offset"] + filesz > size:   # a truncated core: keep what is there
                    filesz = max(0, size - seg["p_offset"])
                    self.warnings.append("%s: segment at %#x is truncated" % (self.path, seg["p_vaddr"]))
                segments.append(ProgramHeader(PT_LOAD, seg["p_flags"], seg["p_offset"], seg["p_vaddr"], filesz,
                                              seg["p_memsz"]))
            elif ptype == PT_NOTE:
                fh.seek(seg["p_offset"])
                data = fh.read(seg["p_filesz"])
                if len(data) < seg["p_filesz"]:
                    raise ElfError("%s: note segment is truncated" % self.path)
                notes.append(data)
        self.memory = CoreMemory(self.path, segments, self.byte_order)
        self.files = CoreFiles(self.path, self.sysroot, self.exe, self.machine, self.memory.read_core_only,
                               self.warnings)
        n = parse_notes(notes, arch, self.order, self.path)
        self.threads, self.auxv, self.command, self.fname = n.threads, n.auxv, n.command, n.fname
        self._nt_file = n.nt_file
        self._mappings_source = None
        # GDB writes 1 as NT_FILE's page size (its offsets are in bytes): prefer AT_PAGESZ.
        nt_page = self._nt_file[0] if self._nt_file else 0
        self.page_size = self.auxv.get(AT_PAGESZ) or (nt_page if nt_page > 1 else 4096)
        if self._nt_file is not None:
            self._mappings = self._nt_file[1]
            self._mappings_source = "NT_FILE"
            self._maps_so_far = self._mappings

    # -- resources -------------------------------------------------------------------------

    def close(self) -> None:
        self.memory.close()
        self.files.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def abi(self) -> "ABIInfo":
        """The core.arch.abi ABIInfo of this core's architecture."""
        assert self._abi is not None        # every machine arch_of accepts has one
        return self._abi

    # -- memory ----------------------------------------------------------------------------

    def read(self, addr: int, size: int) -> bytes:
        """size bytes at addr: from the core, else from a read-only mapped file.

        Raises CoreMemoryError naming the first address neither provides.
        """
        return self.memory.read(addr, size, self._from_file, self._why_missing)

    def readable(self, addr: int, size: int) -> bool:
        try:
            self.read(addr, size)
            return True
        except CoreMemoryError:
            return False

    def read_pointer(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, 8), self.byte_order)

    def read_cstring(self, addr: int, limit: int = MAX_STRING) -> str:
        """A NUL-terminated string at addr (read in small steps: it may end near a gap)."""
        return CoreMemory.cstring(self.read, addr, limit)

    def _mapping_at(self, addr):
        if self._mappings is None and not self._building:
            self._build_from_link_map()
        for m in self._maps_so_far:
            if m.start <= addr < m.end:
                return m
        return None

    def _from_file(self, cur, end, seg):
        """Bytes from cur (up to end) out of the read-only file mapped there, or None.

        Without a segment at cur: GDB's gcore writes no program header at all for file
        mappings it leaves out (unmodified ones, such as a library's text), where the kernel
        writes one with p_filesz 0; the mapped file then holds the bytes.
        """
        if seg is not None and (not seg.flags & PF_R or seg.flags & PF_W):
            return None
        m = self._mapping_at(cur)
        if m is None or m.path in self.files.rejected:
            return None
        fh = self.files.file(m.path, self._is_exe_path(m.path))
        if fh is None:
            return None
        limit = min(end, m.end) if seg is None else min(end, m.end, seg.vaddr + seg.memsz)
        nxt = self.memory.next_segment_start(cur)
        if nxt is not None:
            limit = min(limit, nxt)
        fh.seek(m.file_offset + cur - m.start)
        return fh.read(limit - cur) or None

    def _why_missing(self, cur):
        m = self._mapping_at(cur)
        if m is None:
            return "not in the core file, and no mapped file known there"
        if m.path in self.files.rejected:
            return "not in the core file, and %s differs from the file mapped at crash time" % m.path
        return "not in the core file, and the mapped file %s is not found or too short" % m.path

    # -- mappings and modules --------------------------------------------------------------

    @property
    def mappings(self) -> List[Mapping]:
        """File mappings: NT_FILE's, or (qemu cores) rebuilt from the link_map chain."""
        if self._mappings is None:
            self._build_from_link_map()
        return list(self._mappings or ())

    @property
    def mappings_source(self) -> Optional[str]:
        """"NT_FILE", "link_map" (rebuilt from the dynamic linker's list) or None (unknown)."""
        if self._mappings is None:
            self._build_from_link_map()
        return self._mappings_source

    def exe_core_path(self) -> Optional[str]:
        """The executable's path as the core names it, or None."""
        if self._nt_file is not None:
            maps = self._nt_file[1]
            for key in (AT_ENTRY, AT_PHDR):
                at = self.auxv.get(key)
                if not at:
                    continue
                for m in maps:
                    if m.start <= at < m.end:
                        return m.path
            return maps[0].path if maps else None
        name = None
        if self.auxv.get(AT_EXECFN):
            try:
                name = self.read_cstring(self.auxv[AT_EXECFN])
            except CoreMemoryError:
                name = None
        if not name and self.command:
            name = self.command.split()[0]
        return name or self.fname or None

    def _is_exe_path(self, path):
        if self._exe_path_cache is _UNSET:
            self._exe_path_cache = None         # no recursion through read()
            self._exe_path_cache = self.exe_core_path()
        return path == self._exe_path_cache

    def modules(self) -> List[MappedFile]:
        """Mapped ELF files as MappedFile(path, bias, image), the executable first where known."""
        if self._modules is None:
            if self._nt_file is not None:
                self._modules = modules_from_nt_file(self._nt_file[1], self.page_size, self.files,
                                                     self._is_exe_path, self.memory.read_core_only)
            else:
                self._build_from_link_map()
        return list(self._modules or ())

    def _build_from_link_map(self) -> None:
        """Modules and mappings of a core without NT_FILE, from r_debug's link_map chain."""
        from .corelinks import walk_link_map
        self._maps_so_far = []
        mods: List[MappedFile] = []
        self._mappings_source = None
        self._building = True
        try:
            exe_path = self._exe_path_cache = self.exe_core_path()
            walk_link_map(self, exe_path, mods, self._maps_so_far)
        finally:
            self._mappings = sorted(self._maps_so_far, key=lambda m: m.start)
            self._maps_so_far = self._mappings
            self._modules = mods
            self._building = False
            if self._mappings:
                self._mappings_source = "link_map"

    # -- lookups ---------------------------------------------------------------------------

    def module_at(self, addr: int) -> Optional[MappedFile]:
        """The MappedFile whose PT_LOAD segments (or, without its file, mappings) hold addr, or None."""
        mods = self.modules()
        mod = module_holding(mods, addr)
        if mod is not None:
            return mod
        for mp in self.mappings:
            if mp.start <= addr < mp.end:
                for mod in mods:
                    if mod.path == mp.path and mod.image is None:
                        return mod
        return None

    def vdso(self) -> Optional[Tuple[int, bytes]]:
        """(address, bytes) of the vDSO image the core holds, or None.

        The vDSO is no file, so it is not among modules(); write these bytes to a file to
        open it as an ElfImage (its bias is the address minus its lowest PT_LOAD p_vaddr).
        qemu-user cores leave it out.
        """
        from .corenotes import AT_SYSINFO_EHDR
        addr = self.auxv.get(AT_SYSINFO_EHDR)
        seg = self.memory.segment_at(addr) if addr else None
        if seg is None or seg.vaddr != addr or seg.filesz == 0:
            return None
        return addr, self.memory.core_bytes(seg.offset, seg.filesz)
