"""Where a core's mapped files are: finding them on this machine, checking they are the files that
were mapped, and placing them (load bias) from the core's NT_FILE mappings."""

import os
from typing import BinaryIO, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from ..elf.image import PT_LOAD, PT_NOTE, ElfHeaders, ElfImage, Load, ProgramHeader, parse_elf_headers
from ..errors import ElfError, NotElfError
from .corememory import page_down, page_up
from .corenotes import Mapping

_MAX_NOTE_COMPARED = 1 << 16


class MappedFile(NamedTuple):
    """A mapped ELF file: its path as the core names it, load bias, and the opened file (or None)."""
    path: str
    bias: int
    image: Optional[ElfImage]


class CoreFiles:
    """The files a core names, found on this machine, opened once, checked against the core.

    sysroot: a directory prefixed to the absolute paths the core names (as GDB's `set sysroot`).
    exe: the executable's path, overriding the one in the core.  Relative paths (qemu names the
    executable as it was started) are looked up beside the core, then in the current directory.
    """

    def __init__(self, core_path: str, sysroot: Optional[str], exe: Optional[str], machine: str,
                 read_core_only: Callable[[int, int], Optional[bytes]], warnings: List[str],
                 where: Optional[Callable[[str], Optional[str]]] = None):
        """`where(path)`: a place to look for a named file before the others (a running process's
        /proc/PID/map_files entry, which is the mapped file itself whatever namespace it is in)."""
        self.core_path = core_path
        self.sysroot = sysroot
        self._where = where
        self.exe = exe
        self.machine = machine
        self._read_core_only = read_core_only
        self.warnings = warnings
        self.rejected: Set[str] = set()   # core paths whose file on disk differs from what was mapped
        self._files: Dict[str, Optional[BinaryIO]] = {}      # host path -> open file (None: cannot be opened)
        self._found: Dict[Tuple[str, bool], Optional[str]] = {}          # (path, is_exe) -> host path
        self._images: Dict[Tuple[str, bool], Optional[ElfImage]] = {}    # (path, is_exe) -> ElfImage

    def close(self) -> None:
        for fh in self._files.values():
            if fh is not None:
                fh.close()
        self._files.clear()

    def _candidates(self, path, is_exe):
        if is_exe and self.exe:
            return [self.exe]
        first = self._where(path) if self._where else None
        if first:
            return [first]
        names = [path]
        if path.endswith(" (deleted)"):
            names.append(path[:-len(" (deleted)")])
        out = []
        for name in names:
            if os.path.isabs(name):
                out.append(os.path.join(self.sysroot, name.lstrip("/")) if self.sysroot else name)
            else:
                out.append(os.path.join(os.path.dirname(os.path.abspath(self.core_path)), name))
                out.append(os.path.abspath(name))
        return out

    def find(self, path: str, is_exe: bool) -> Optional[str]:
        """The file on this machine for a path the core names, or None."""
        key = (path, is_exe)
        if key not in self._found:
            hit = None
            for cand in self._candidates(path, is_exe):
                if os.path.isfile(cand):
                    hit = cand
                    break
            if hit is None and is_exe and self.exe:
                self.warnings.append("%s: the executable given (exe=) is not a file" % self.exe)
            self._found[key] = hit
        return self._found[key]

    def file(self, path: str, is_exe: bool):
        host = self.find(path, is_exe)
        if host is None:
            return None
        if host not in self._files:
            try:
                self._files[host] = open(host, "rb")
            except OSError:
                self._files[host] = None
        return self._files[host]

    def image(self, path: str, is_exe: bool) -> Optional[ElfImage]:
        """The ElfImage of a file the core names, or None (not found, not ELF, other machine)."""
        key = (path, is_exe)
        if key not in self._images:
            image = None
            host = self.find(path, is_exe)
            if host is not None:
                try:
                    image = ElfImage(host)
                except NotElfError:
                    pass            # a mapped data file (locales, gconv modules, fonts): nothing to say
                except ElfError as exc:
                    self.warnings.append("%s: %s" % (path, exc))
                if image is not None and image.machine != self.machine:
                    self.warnings.append("%s: %s is for %s, not %s" % (path, host, image.machine, self.machine))
                    image = None
            self._images[key] = image
        return self._images[key]

    def headers(self, path: str, is_exe: bool) -> Optional[ElfHeaders]:
        fh = self.file(path, is_exe)
        if fh is None:
            return None

        def read(off, size):
            fh.seek(off)
            return fh.read(size)
        return parse_elf_headers(read)

    def same_file(self, path: str, is_exe: bool, load_addr: int, bias: int) -> bool:
        """False (and a warning) if the file on disk is not the one mapped at load_addr.

        Compares the ELF header, program headers and notes (build ID) that the core holds at the
        mapping with the file's bytes; what the core lacks is not compared.
        """
        fh = self.file(path, is_exe)
        hdr = self.headers(path, is_exe)
        if fh is None or hdr is None:
            return True
        regions = [(0, load_addr, hdr.header_end)]
        regions += [(p.offset, p.vaddr + bias, p.filesz) for p in hdr.phdrs
                    if p.type == PT_NOTE and p.filesz <= _MAX_NOTE_COMPARED]
        for off, addr, size in regions:
            mem = self._read_core_only(addr, size)
            if mem is None:
                continue
            fh.seek(off)
            if fh.read(size) != mem:
                self.warnings.append("%s: %s differs from the file mapped at crash time; not used"
                                     % (path, self.find(path, is_exe)))
                self.rejected.add(path)
                return False
        return True


def lowest_load(phdrs: List[ProgramHeader], bias: int, page: int) -> int:
    """Where the lowest PT_LOAD of a file placed at `bias` starts (page aligned)."""
    loads = [p.vaddr for p in phdrs if p.type == PT_LOAD]
    return page_down(min(loads), page) + bias if loads else bias


def loads_of(hdr: ElfHeaders, image: Optional[ElfImage]) -> List[Load]:
    if image is not None:
        return list(image.loads)
    return [Load(p.vaddr, p.memsz, p.offset, p.filesz) for p in hdr.phdrs if p.type == PT_LOAD]


def mappings_of(path: str, bias: int, loads: List[Load], page: int) -> List[Mapping]:
    """The file mappings a file placed at `bias` makes (what NT_FILE would have said)."""
    return [Mapping(page_down(ld.vaddr + bias, page), page_up(ld.vaddr + bias + ld.filesz, page),
                    page_down(ld.offset, page), path)
            for ld in loads if ld.filesz]


def modules_from_nt_file(maps: List[Mapping], page: int, files: CoreFiles, is_exe: Callable[[str], bool],
                         read_core_only: Callable[[int, int], Optional[bytes]]) -> List[MappedFile]:
    """The mapped ELF files NT_FILE names, each placed by its mapping at file offset 0; the
    executable first."""
    order: List[str] = []
    head_of: Dict[str, Mapping] = {}
    for m in sorted(maps, key=lambda m: m.start):
        if m.path not in order:
            order.append(m.path)
        if m.file_offset == 0 and m.path not in head_of:
            head_of[m.path] = m
    mods = []
    for path in order:
        head = head_of.get(path)
        if head is None:
            continue     # never mapped from its start: no ELF header to place it by
        exe = is_exe(path)
        start = head.start
        core_hdr = parse_elf_headers(lambda off, size, start=start: read_core_only(start + off, size))
        magic = read_core_only(start, 4)
        image = files.image(path, exe)
        if magic is not None and magic != b"\x7fELF":
            continue     # a data file (locale archive, caches)
        if magic is None and image is None:
            continue     # cannot tell what it is
        if image is not None and image.loads:
            lowest = min(ld.vaddr for ld in image.loads)
        elif core_hdr is not None:
            loads = [p.vaddr for p in core_hdr.phdrs if p.type == PT_LOAD]
            lowest = min(loads) if loads else 0
        else:
            lowest = 0
        bias = start - page_down(lowest, page)
        if image is not None and not files.same_file(path, exe, start, bias):
            image = None
        mods.append(MappedFile(path, bias, image))
    return [m for m in mods if is_exe(m.path)] + [m for m in mods if not is_exe(m.path)]


def module_holding(mods: List[MappedFile], addr: int) -> Optional[MappedFile]:
    """The MappedFile (with its file) whose PT_LOAD segments, placed at its bias, hold addr."""
    for mod in mods:
        if mod.image is not None and any(ld.vaddr <= addr - mod.bias < ld.vaddr + ld.memsz for ld in mod.image.loads):
            return mod
    return None
