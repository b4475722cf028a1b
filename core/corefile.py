"""Linux ELF core files: threads and their registers, mapped files, memory, loaded modules.

Supported: 64-bit cores of x86-64 (little-endian), AArch64 (either byte order) and s390x
(big-endian), as written by the kernel, by GDB's `gcore` and by qemu-user.

What a core holds, and where this reader looks:

* Registers: one NT_PRSTATUS note per thread, the thread that crashed (or GDB's selected
  thread) first; qemu-user writes threads in creation order with pr_cursig set only on the
  crashed one, so `threads` moves that one to the front (Thread.note_index keeps the order).  `struct elf_prstatus` starts with the same fields on every LP64 Linux
  (siginfo, cursig, sigpend, sighold, four pids, four timevals), so `pr_reg` is at byte 112
  on all three architectures; only the `elf_gregset_t` that follows differs.
* Mapped files: the NT_FILE note (kernel and GDB cores).  qemu-user cores have none; for
  them the list is rebuilt from the dynamic linker's `r_debug` / `link_map` chain, found
  through the auxiliary vector (NT_AUXV) and the executable's DT_DEBUG entry.
* Memory: the PT_LOAD segments' file contents (p_filesz bytes).  The bytes between p_filesz
  and p_memsz were left out, not zero: for read-only mappings of a file they are read from
  that file (located through `sysroot` and `exe`), otherwise they are unavailable and
  `read` raises CoreMemoryError.
"""

import bisect
import os
import struct
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from .elf import ElfImage, load_elf
from .errors import ElfError

# Note types (owner "CORE").
NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_FILE = 0x46494C45

# Auxiliary vector entries.
AT_NULL = 0
AT_PHDR = 3
AT_PHENT = 4
AT_PHNUM = 5
AT_PAGESZ = 6
AT_BASE = 7
AT_ENTRY = 9
AT_EXECFN = 31
AT_SYSINFO_EHDR = 33

PT_LOAD = 1
PT_DYNAMIC = 2
PT_NOTE = 4
PT_PHDR = 6
PF_X, PF_W, PF_R = 1, 2, 4
DT_NULL = 0
DT_DEBUG = 21

_MAX_LINK_MAP = 4096        # entries walked before the chain is taken as corrupt
_MAX_DYNAMIC = 4096
_MAX_STRING = 4096
_UNSET = object()


class CoreMemoryError(Exception):
    """Memory the core file does not hold and no mapped file can provide."""

    def __init__(self, address, reason="not in the core file nor in a read-only mapped file"):
        self.address = address
        self.reason = reason
        super().__init__("cannot read memory at %#x: %s" % (address, reason))


class Mapping(NamedTuple):
    """A file mapping: [start, end) maps the file `path` from byte file_offset on."""
    start: int
    end: int
    file_offset: int
    path: str


class Module(NamedTuple):
    """A mapped ELF file: its path as the core names it, load bias, and the opened file (or None)."""
    path: str
    bias: int
    image: Optional[ElfImage]


# ----------------------------------------------------------------------------------------
# Register layouts

@dataclass(frozen=True)
class _Arch:
    name: str
    gregs: tuple           # (name, size in bytes) in elf_gregset_t order
    dwarf: dict            # register name -> DWARF number
    pc: str                # name of the program counter in gregs
    sp: str                # name of the stack pointer in gregs


_X86_64 = _Arch(
    "x86_64",
    tuple((n, 8) for n in (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx",
        "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base",
        "ds", "es", "fs", "gs")),
    dict([(n, i) for i, n in enumerate(
        ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"]
        + ["r%d" % i for i in range(8, 16)] + ["rip"])]
        + [("eflags", 49), ("es", 50), ("cs", 51), ("ss", 52), ("ds", 53), ("fs", 54), ("gs", 55),
           ("fs_base", 58), ("gs_base", 59)]),
    pc="rip", sp="rsp")

_AARCH64 = _Arch(
    "aarch64",
    tuple(("x%d" % i, 8) for i in range(31)) + (("sp", 8), ("pc", 8), ("pstate", 8)),
    dict([("x%d" % i, i) for i in range(31)] + [("sp", 31), ("pc", 32)]),
    pc="pc", sp="sp")

_S390X = _Arch(
    "s390x",
    (("pswm", 8), ("pswa", 8)) + tuple(("r%d" % i, 8) for i in range(16))
    + tuple(("a%d" % i, 4) for i in range(16)) + (("orig_gpr2", 8),),
    dict([("r%d" % i, i) for i in range(16)] + [("a%d" % i, 48 + i) for i in range(16)]
         + [("pswm", 64), ("pswa", 65)]),
    pc="pswa", sp="r15")

_ARCHES = {"EM_X86_64": _X86_64, "EM_AARCH64": _AARCH64, "EM_S390": _S390X}

# struct elf_prstatus on LP64 Linux: elf_siginfo (3 ints) at 0, short pr_cursig at 12,
# pr_sigpend and pr_sighold (longs) at 16 and 24, pr_pid/ppid/pgrp/sid (ints) at 32..48,
# four struct timeval (2 longs each) at 48..112, then elf_gregset_t pr_reg at 112.
_PRSTATUS_CURSIG = 12
_PRSTATUS_PID = 32
_PRSTATUS_REG = 112
# struct elf_prpsinfo on LP64 Linux: pr_fname[16] at 40, pr_psargs[80] at 56.
_PRPSINFO_FNAME = 40
_PRPSINFO_PSARGS = 56


@dataclass
class Thread:
    """One NT_PRSTATUS note: a thread's id (pr_pid), signal (pr_cursig) and general registers.

    `registers` is keyed both by DWARF register number and by name; "pc" and "sp" are
    also present on every architecture (aliases of rip/rsp, pc/sp, pswa/r15).
    """
    tid: int
    signal: int
    registers: dict = field(repr=False)
    note_index: int = 0     # position of its NT_PRSTATUS note in the core

    @property
    def pc(self):
        return self.registers["pc"]

    @property
    def sp(self):
        return self.registers["sp"]


def _decode_gregs(arch, data, order):
    regs = {}
    off = 0
    for name, size in arch.gregs:
        value = int.from_bytes(data[off:off + size], order)
        off += size
        regs[name] = value
        num = arch.dwarf.get(name)
        if num is not None:
            regs[num] = value
    regs.setdefault("pc", regs[arch.pc])
    regs.setdefault("sp", regs[arch.sp])
    return regs


def _gregs_size(arch):
    return sum(size for _name, size in arch.gregs)


# ----------------------------------------------------------------------------------------
# Small helpers

def _align4(n):
    return (n + 3) & ~3


def _page_down(x, page):
    return x - x % page


def _page_up(x, page):
    return _page_down(x + page - 1, page)


def _cstring(data):
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _iter_notes(data, order, where):
    """(name, type, desc) for each note in a PT_NOTE segment's bytes."""
    off = 0
    end = len(data)
    while off + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from(order + "III", data, off)
        name_at = off + 12
        desc_at = name_at + _align4(namesz)
        if desc_at + descsz > end:
            raise ElfError("%s: truncated note at offset %#x of the note segment" % (where, off))
        name = data[name_at:name_at + namesz].rstrip(b"\0").decode("ascii", "replace")
        yield name, ntype, data[desc_at:desc_at + descsz]
        off = desc_at + _align4(descsz)


def _parse_elf_headers(read):
    """ELF header fields and program headers of a 64-bit ELF, through read(offset, size).

    read returns bytes or None.  Returns a dict, or None if the bytes are not available or
    not a 64-bit ELF header.
    """
    ehdr = read(0, 64)
    if not ehdr or len(ehdr) < 64 or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2:
        return None
    order = "<" if ehdr[5] == 1 else ">"
    entry, phoff = struct.unpack_from(order + "QQ", ehdr, 24)
    phentsize, phnum = struct.unpack_from(order + "HH", ehdr, 54)
    if phentsize < 56 or phnum > 4096:
        return None
    table = read(phoff, phentsize * phnum)
    if table is None or len(table) < phentsize * phnum:
        return None
    phdrs = []
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz = struct.unpack_from(
            order + "IIQQQQQ", table, i * phentsize)
        phdrs.append((p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
    return {"order": order, "entry": entry, "phoff": phoff, "phentsize": phentsize,
            "phnum": phnum, "phdrs": phdrs, "header_end": phoff + phentsize * phnum}


# ----------------------------------------------------------------------------------------

class CoreFile:
    """An opened core file.

    Fields: path, machine (e_machine as pyelftools names it, e.g. "EM_X86_64"), arch
    ("x86_64", "aarch64", "s390x"), big_endian, byte_order ("little"/"big"), ptr_size,
    page_size, threads (list of Thread, the one that took the signal first; kernel and GDB
    cores write it first, qemu-user cores are reordered), auxv (dict), command (pr_psargs) and fname
    (pr_fname) from NT_PRPSINFO, mappings (list of Mapping), mappings_source ("NT_FILE",
    "link_map" or None), warnings (list of str: files rejected and why).

    sysroot: a directory prefixed to the absolute paths the core names (as GDB's `set
    sysroot`).  exe: the executable's path, overriding the one in the core.  Relative paths
    (qemu names the executable as it was started) are looked up beside the core, then in
    the current directory.

    Holds the core file and the mapped files it reads open; close() (or `with`) releases them.
    """

    def __init__(self, path, sysroot=None, exe=None):
        self.path = os.fspath(path)
        self.sysroot = os.fspath(sysroot) if sysroot else None
        self.exe = os.fspath(exe) if exe else None
        self.warnings = []
        self._fh = None
        self._files = {}       # host path -> open file (or None if it cannot be opened)
        self._found = {}       # (path, is_exe) -> host path or None
        self._images = {}      # (path, is_exe) -> ElfImage or None
        self._rejected = set()  # core paths whose file on disk differs from what was mapped
        self._modules = None
        self._mappings = None
        self._maps_so_far = []  # mappings usable by read() while the list is being built
        self._building = False
        self._exe_path_cache = _UNSET
        load_elf(self.path, self._load, "core file structure")

    # -- parsing ---------------------------------------------------------------------------

    def _load(self, elf, fh):
        if elf["e_type"] != "ET_CORE":
            raise ElfError("%s: not a core file (ELF type %s)" % (self.path, elf["e_type"]))
        self.machine = elf["e_machine"]
        arch = _ARCHES.get(self.machine)
        if arch is None:
            raise ElfError("%s: unsupported core file architecture %s (x86-64, AArch64 and s390x "
                           "are supported)" % (self.path, self.machine))
        if elf.elfclass != 64:
            raise ElfError("%s: 32-bit core files are not supported" % self.path)
        self._arch = arch
        self.arch = arch.name
        self.big_endian = not elf.little_endian
        self.byte_order = "big" if self.big_endian else "little"
        self._order = ">" if self.big_endian else "<"
        self.ptr_size = 8
        size = os.fstat(fh.fileno()).st_size

        self._segments = []     # (vaddr, memsz, offset, filesz, flags), sorted by vaddr
        notes = []
        for seg in elf.iter_segments():
            ptype = seg["p_type"]
            if ptype == "PT_LOAD":
                filesz = seg["p_filesz"]
                if seg["p_offset"] + filesz > size:   # a truncated core: keep what is there
                    filesz = max(0, size - seg["p_offset"])
                    self.warnings.append("%s: segment at %#x is truncated" % (self.path, seg["p_vaddr"]))
                self._segments.append((seg["p_vaddr"], seg["p_memsz"], seg["p_offset"], filesz,
                                       seg["p_flags"]))
            elif ptype == "PT_NOTE":
                fh.seek(seg["p_offset"])
                data = fh.read(seg["p_filesz"])
                if len(data) < seg["p_filesz"]:
                    raise ElfError("%s: note segment is truncated" % self.path)
                notes.append(data)
        self._segments.sort()
        self._seg_starts = [s[0] for s in self._segments]

        self.threads = []
        self.auxv = {}
        self.command = None
        self.fname = None
        self._nt_file = None
        self._mappings_source = None
        gsize = _gregs_size(arch)
        for data in notes:
            for name, ntype, desc in _iter_notes(data, self._order, self.path):
                if name != "CORE":
                    continue
                if ntype == NT_PRSTATUS:
                    if len(desc) < _PRSTATUS_REG + gsize:
                        raise ElfError("%s: NT_PRSTATUS note of %d bytes is too short for %s "
                                       "(needs %d)" % (self.path, len(desc), arch.name,
                                                       _PRSTATUS_REG + gsize))
                    (signal,) = struct.unpack_from(self._order + "h", desc, _PRSTATUS_CURSIG)
                    (tid,) = struct.unpack_from(self._order + "i", desc, _PRSTATUS_PID)
                    regs = _decode_gregs(arch, desc[_PRSTATUS_REG:_PRSTATUS_REG + gsize], self.byte_order)
                    self.threads.append(Thread(tid, signal, regs, len(self.threads)))
                elif ntype == NT_PRPSINFO and len(desc) >= _PRPSINFO_PSARGS + 80:
                    self.fname = _cstring(desc[_PRPSINFO_FNAME:_PRPSINFO_FNAME + 16])
                    self.command = _cstring(desc[_PRPSINFO_PSARGS:_PRPSINFO_PSARGS + 80]).rstrip()
                elif ntype == NT_AUXV:
                    for i in range(0, len(desc) - 15, 16):
                        key, value = struct.unpack_from(self._order + "QQ", desc, i)
                        if key == AT_NULL:
                            break
                        self.auxv.setdefault(key, value)
                elif ntype == NT_FILE and self._nt_file is None:
                    self._nt_file = self._parse_nt_file(desc)
        # GDB writes 1 as NT_FILE's page size (its offsets are in bytes): prefer AT_PAGESZ.
        nt_page = self._nt_file[0] if self._nt_file else 0
        self._order_threads()
        self.page_size = self.auxv.get(AT_PAGESZ) or (nt_page if nt_page > 1 else 4096)
        if self._nt_file is not None:
            self._mappings = self._nt_file[1]
            self._mappings_source = "NT_FILE"
            self._maps_so_far = self._mappings

    def _order_threads(self):
        """Put the thread that took the signal first.

        The kernel and GDB already write it first (and give every thread the same
        pr_cursig); qemu-user writes the threads in creation order and gives pr_cursig only
        to the one that crashed.
        """
        if self.threads and self.threads[0].signal == 0:
            for i, t in enumerate(self.threads):
                if t.signal != 0:
                    self.threads.insert(0, self.threads.pop(i))
                    break

    def _parse_nt_file(self, desc):
        o = self._order
        if len(desc) < 16:
            raise ElfError("%s: NT_FILE note of %d bytes is too short" % (self.path, len(desc)))
        count, page = struct.unpack_from(o + "QQ", desc, 0)
        names_at = 16 + 24 * count
        if names_at > len(desc):
            raise ElfError("%s: NT_FILE note claims %d mappings but holds %d bytes"
                           % (self.path, count, len(desc)))
        names = desc[names_at:].split(b"\0")
        if len(names) < count:
            raise ElfError("%s: NT_FILE note has %d file names for %d mappings"
                           % (self.path, len(names), count))
        maps = []
        for i in range(count):
            start, end, pgoff = struct.unpack_from(o + "QQQ", desc, 16 + 24 * i)
            maps.append(Mapping(start, end, pgoff * page,
                                names[i].decode("utf-8", "surrogateescape")))
        return page, maps

    # -- resources -------------------------------------------------------------------------

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for fh in self._files.values():
            if fh is not None:
                fh.close()
        self._files.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- architecture ----------------------------------------------------------------------

    @property
    def abi(self):
        """The core.abi ABIInfo of this core's architecture."""
        from . import abi
        return abi.for_elf(self.machine, self.big_endian)

    # -- memory ----------------------------------------------------------------------------

    def _segment_at(self, addr):
        """The PT_LOAD segment containing addr, or None."""
        i = bisect.bisect_right(self._seg_starts, addr) - 1
        if i >= 0:
            seg = self._segments[i]
            if addr < seg[0] + seg[1]:
                return seg
        return None

    def _next_segment_start(self, addr):
        i = bisect.bisect_right(self._seg_starts, addr)
        return self._seg_starts[i] if i < len(self._seg_starts) else None

    def _core_bytes(self, offset, size):
        if self._fh is None:
            self._fh = open(self.path, "rb")
        self._fh.seek(offset)
        return self._fh.read(size)

    def _read_core_only(self, addr, size):
        """Bytes at addr held by the core file itself, or None (no file fallback)."""
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            seg = self._segment_at(cur)
            if seg is None or cur >= seg[0] + seg[3]:
                return None
            n = min(end, seg[0] + seg[3]) - cur
            data = self._core_bytes(seg[2] + cur - seg[0], n)
            if len(data) < n:
                return None
            out += data
            cur += n
        return bytes(out)

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
        if seg is not None:
            flags = seg[4]
            if not flags & PF_R or flags & PF_W:
                return None
        m = self._mapping_at(cur)
        if m is None or m.path in self._rejected:
            return None
        fh = self._file(m.path, self._is_exe_path(m.path))
        if fh is None:
            return None
        limit = min(end, m.end) if seg is None else min(end, m.end, seg[0] + seg[1])
        nxt = self._next_segment_start(cur)
        if nxt is not None:
            limit = min(limit, nxt)
        fh.seek(m.file_offset + cur - m.start)
        data = fh.read(limit - cur)
        return data or None

    def read(self, addr, size):
        """size bytes at addr: from the core, else from a read-only mapped file.

        Raises CoreMemoryError naming the first address neither provides.
        """
        if size < 0:
            raise ValueError("negative read size %d" % size)
        if addr < 0 or addr + size > 1 << 64:
            raise CoreMemoryError(addr, "address out of range")
        out = bytearray()
        cur, end = addr, addr + size
        while cur < end:
            seg = self._segment_at(cur)
            if seg is not None and cur < seg[0] + seg[3]:
                n = min(end, seg[0] + seg[3]) - cur
                data = self._core_bytes(seg[2] + cur - seg[0], n)
                if len(data) < n:
                    raise CoreMemoryError(cur + len(data), "core file is truncated")
            else:
                data = self._from_file(cur, end, seg)
                if data is None:
                    if seg is None:
                        raise CoreMemoryError(cur, "not mapped in the process")
                    if seg[4] & PF_W or not seg[4] & PF_R:
                        raise CoreMemoryError(cur, "not in the core file (a %s mapping the core left out)"
                                              % ("writable" if seg[4] & PF_W else "non-readable"))
                    m = self._mapping_at(cur)
                    if m is None:
                        raise CoreMemoryError(cur, "not in the core file, and no mapped file known there")
                    if m.path in self._rejected:
                        raise CoreMemoryError(cur, "not in the core file, and %s differs from the "
                                                   "file mapped at crash time" % m.path)
                    raise CoreMemoryError(cur, "not in the core file, and the mapped file %s is not "
                                               "found or too short" % m.path)
            out += data
            cur += len(data)
        return bytes(out)

    def readable(self, addr, size):
        try:
            self.read(addr, size)
            return True
        except CoreMemoryError:
            return False

    def read_pointer(self, addr):
        return int.from_bytes(self.read(addr, 8), self.byte_order)

    def read_cstring(self, addr, limit=_MAX_STRING):
        """A NUL-terminated string at addr (read in small steps: it may end near a gap)."""
        out = bytearray()
        while len(out) < limit:
            chunk_end = _page_up(addr + 1, 64)
            chunk = self.read(addr, chunk_end - addr)
            nul = chunk.find(b"\0")
            if nul >= 0:
                out += chunk[:nul]
                break
            out += chunk
            addr = chunk_end
        return out.decode("utf-8", "surrogateescape")

    # -- files -----------------------------------------------------------------------------

    def _candidates(self, path, is_exe):
        if is_exe and self.exe:
            return [self.exe]
        names = [path]
        if path.endswith(" (deleted)"):
            names.append(path[:-len(" (deleted)")])
        out = []
        for name in names:
            if os.path.isabs(name):
                out.append(os.path.join(self.sysroot, name.lstrip("/")) if self.sysroot else name)
            else:
                out.append(os.path.join(os.path.dirname(os.path.abspath(self.path)), name))
                out.append(os.path.abspath(name))
        return out

    def _find(self, path, is_exe):
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

    def _file(self, path, is_exe):
        host = self._find(path, is_exe)
        if host is None:
            return None
        if host not in self._files:
            try:
                self._files[host] = open(host, "rb")
            except OSError:
                self._files[host] = None
        return self._files[host]

    def _image(self, path, is_exe):
        """The ElfImage of a file the core names, or None (not found, not ELF, other machine)."""
        key = (path, is_exe)
        if key not in self._images:
            image = None
            host = self._find(path, is_exe)
            if host is not None:
                try:
                    image = ElfImage(host)
                except ElfError as exc:
                    self.warnings.append("%s: %s" % (path, exc))
                if image is not None and image.machine != self.machine:
                    self.warnings.append("%s: %s is for %s, not %s" % (path, host, image.machine, self.machine))
                    image = None
            self._images[key] = image
        return self._images[key]

    def _file_headers(self, path, is_exe):
        fh = self._file(path, is_exe)
        if fh is None:
            return None

        def read(off, size):
            fh.seek(off)
            return fh.read(size)
        return _parse_elf_headers(read)

    def _check_same_file(self, path, is_exe, load_addr, bias):
        """False (and a warning) if the file on disk is not the one mapped at load_addr.

        Compares the ELF header, program headers and notes (build ID) that the core holds
        at the mapping with the file's bytes; what the core lacks is not compared.
        """
        fh = self._file(path, is_exe)
        hdr = self._file_headers(path, is_exe)
        if fh is None or hdr is None:
            return True
        regions = [(0, load_addr, hdr["header_end"])]
        regions += [(p[2], p[3] + bias, p[4]) for p in hdr["phdrs"] if p[0] == PT_NOTE and p[4] <= 1 << 16]
        for off, addr, size in regions:
            mem = self._read_core_only(addr, size)
            if mem is None:
                continue
            fh.seek(off)
            if fh.read(size) != mem:
                self.warnings.append("%s: %s differs from the file mapped at crash time; not used"
                                     % (path, self._find(path, is_exe)))
                self._rejected.add(path)
                return False
        return True

    # -- mappings and modules --------------------------------------------------------------

    @property
    def mappings(self):
        """File mappings: NT_FILE's, or (qemu cores) rebuilt from the link_map chain."""
        if self._mappings is None:
            self._build_from_link_map()
        return list(self._mappings)

    @property
    def mappings_source(self):
        """"NT_FILE", "link_map" (rebuilt from the dynamic linker's list) or None (unknown)."""
        if self._mappings is None:
            self._build_from_link_map()
        return self._mappings_source

    def _exe_core_path(self):
        """The executable's path as the core names it, or None."""
        if self._nt_file is not None:
            maps = self._nt_file[1]
            entry = self.auxv.get(AT_ENTRY)
            if entry:
                for m in maps:
                    if m.start <= entry < m.end:
                        return m.path
            phdr = self.auxv.get(AT_PHDR)
            if phdr:
                for m in maps:
                    if m.start <= phdr < m.end:
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
            self._exe_path_cache = self._exe_core_path()
        return path == self._exe_path_cache

    def modules(self):
        """Mapped ELF files as Module(path, bias, image), the executable first where known."""
        if self._modules is None:
            if self._nt_file is not None:
                self._modules = self._modules_from_nt_file()
            else:
                self._build_from_link_map()
        return list(self._modules)

    def _modules_from_nt_file(self):
        maps = self._nt_file[1]
        page = self.page_size
        order = []
        head_of = {}
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
            is_exe = self._is_exe_path(path)
            core_hdr = _parse_elf_headers(lambda off, size: self._read_core_only(head.start + off, size))
            magic = self._read_core_only(head.start, 4)
            image = self._image(path, is_exe)
            if magic is not None and magic != b"\x7fELF":
                continue     # a data file (locale archive, caches)
            if magic is None and image is None:
                continue     # cannot tell what it is
            if image is not None and image.loads:
                lowest = min(ld[0] for ld in image.loads)
            elif core_hdr is not None:
                loads = [p[3] for p in core_hdr["phdrs"] if p[0] == PT_LOAD]
                lowest = min(loads) if loads else 0
            else:
                lowest = 0
            bias = head.start - _page_down(lowest, page)
            if image is not None and not self._check_same_file(path, is_exe, head.start, bias):
                image = None
            mods.append(Module(path, bias, image))
        exe = [m for m in mods if self._is_exe_path(m.path)]
        return exe + [m for m in mods if not self._is_exe_path(m.path)]

    def _loads_of(self, hdr, image):
        if image is not None:
            return [(v, memsz, off, filesz) for v, memsz, off, filesz in image.loads]
        return [(p[3], p[5], p[2], p[4]) for p in hdr["phdrs"] if p[0] == PT_LOAD]

    def _add_maps(self, path, bias, loads):
        page = self.page_size
        for vaddr, _memsz, off, filesz in loads:
            if filesz == 0:
                continue
            start = _page_down(vaddr + bias, page)
            end = _page_up(vaddr + bias + filesz, page)
            self._maps_so_far.append(Mapping(start, end, _page_down(off, page), path))

    def _build_from_link_map(self):
        """Modules and mappings of a core without NT_FILE, from r_debug's link_map chain."""
        self._maps_so_far = []
        mods = []
        self._mappings_source = None
        self._building = True
        try:
            self._walk_link_map(mods)
        finally:
            self._mappings = sorted(self._maps_so_far, key=lambda m: m.start)
            self._maps_so_far = self._mappings
            self._modules = mods
            self._building = False
            if self._mappings:
                self._mappings_source = "link_map"

    def _walk_link_map(self, mods):
        exe_path = self._exe_core_path()
        self._exe_path_cache = exe_path
        if exe_path is None:
            self.warnings.append("%s: no NT_FILE note and no executable name in the core" % self.path)
            return
        image = self._image(exe_path, True)
        hdr = self._file_headers(exe_path, True)
        # Program headers as loaded (from the core) beat the file's.
        phdr_addr, phnum = self.auxv.get(AT_PHDR), self.auxv.get(AT_PHNUM)
        phdrs = None
        if phdr_addr and phnum:
            raw = self._read_core_only(phdr_addr, phnum * 56)
            if raw is not None:
                phdrs = [struct.unpack_from(self._order + "IIQQQQQ", raw, i * 56) for i in range(phnum)]
                phdrs = [(t, f, o, v, fs, ms) for t, f, o, v, _pa, fs, ms in phdrs]
        if phdrs is None and hdr is not None:
            phdrs = hdr["phdrs"]
        if phdrs is None:
            self.warnings.append("%s: executable %s not found (pass exe=)" % (self.path, exe_path))
            return
        bias = None
        pt_phdr = [p for p in phdrs if p[0] == PT_PHDR]
        if phdr_addr and pt_phdr:
            bias = phdr_addr - pt_phdr[0][3]
        elif self.auxv.get(AT_ENTRY) and hdr is not None:
            bias = self.auxv[AT_ENTRY] - hdr["entry"]
        elif phdr_addr and hdr is not None:
            loads = [p for p in phdrs if p[0] == PT_LOAD and p[2] <= hdr["phoff"] < p[2] + p[4]]
            if loads:
                bias = phdr_addr - (loads[0][3] + hdr["phoff"] - loads[0][2])
        if bias is None:
            self.warnings.append("%s: cannot place the executable %s" % (self.path, exe_path))
            return
        if image is not None and not self._check_same_file(exe_path, True, self._lowest_load(phdrs, bias), bias):
            image = None
        if image is not None:
            self._add_maps(exe_path, bias, self._loads_of(hdr, image))
        mods.append(Module(exe_path, bias, image))

        dyn = [p for p in phdrs if p[0] == PT_DYNAMIC]
        if not dyn:
            return       # static executable
        r_debug = None
        try:
            at = dyn[0][3] + bias
            for i in range(_MAX_DYNAMIC):
                tag, val = struct.unpack(self._order + "QQ", self.read(at + 16 * i, 16))
                if tag == DT_NULL:
                    break
                if tag == DT_DEBUG:
                    r_debug = val
                    break
        except CoreMemoryError as exc:
            self.warnings.append("%s: cannot read the executable's dynamic section: %s" % (self.path, exc))
            return
        if not r_debug:
            self.warnings.append("%s: DT_DEBUG is not set; shared libraries unknown" % self.path)
            return
        vdso = None
        if self.auxv.get(AT_SYSINFO_EHDR):
            vdso = self._segment_at(self.auxv[AT_SYSINFO_EHDR])
        try:
            lm = self.read_pointer(r_debug + 8)
            seen = set()
            first = True
            while lm and lm not in seen and len(seen) < _MAX_LINK_MAP:
                seen.add(lm)
                l_addr, l_name, l_ld, l_next = struct.unpack(self._order + "QQQQ", self.read(lm, 32))
                if first:
                    first = False      # the executable itself, placed above
                elif vdso is not None and vdso[0] <= l_ld < vdso[0] + vdso[1]:
                    pass               # the vDSO: no file behind it
                else:
                    name = self.read_cstring(l_name) if l_name else ""
                    if name:
                        lib = self._image(name, False)
                        lhdr = self._file_headers(name, False) if lib is not None else None
                        if lhdr is None or not self._check_same_file(
                                name, False, self._lowest_load(lhdr["phdrs"], l_addr), l_addr):
                            lib = None
                        if lib is not None:
                            self._add_maps(name, l_addr, self._loads_of(lhdr, lib))
                        mods.append(Module(name, l_addr, lib))
                lm = l_next
        except CoreMemoryError as exc:
            self.warnings.append("%s: link_map chain unreadable: %s" % (self.path, exc))

    def _lowest_load(self, phdrs, bias):
        loads = [p[3] for p in phdrs if p[0] == PT_LOAD]
        return _page_down(min(loads), self.page_size) + bias if loads else bias

    # -- lookups ---------------------------------------------------------------------------

    def module_at(self, addr):
        """The Module whose PT_LOAD segments (or, without its file, mappings) hold addr, or None."""
        mods = self.modules()
        for mod in mods:
            if mod.image is not None and any(v <= addr - mod.bias < v + memsz
                                             for v, memsz, _off, _filesz in mod.image.loads):
                return mod
        for mp in self.mappings:
            if mp.start <= addr < mp.end:
                for mod in mods:
                    if mod.path == mp.path and mod.image is None:
                        return mod
        return None

    def vdso(self):
        """(address, bytes) of the vDSO image the core holds, or None.

        The vDSO is no file, so it is not among modules(); write these bytes to a file to
        open it as an ElfImage (its bias is the address minus its lowest PT_LOAD p_vaddr).
        qemu-user cores leave it out.
        """
        addr = self.auxv.get(AT_SYSINFO_EHDR)
        seg = self._segment_at(addr) if addr else None
        if seg is None or seg[0] != addr or seg[3] == 0:
            return None
        return addr, self._core_bytes(seg[2], seg[3])
