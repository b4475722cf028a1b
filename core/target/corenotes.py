"""What a core file's notes say: threads and their registers (NT_PRSTATUS), the command
(NT_PRPSINFO), the auxiliary vector (NT_AUXV) and the file mappings (NT_FILE).

`struct elf_prstatus` starts with the same fields on every LP64 Linux (siginfo, cursig, sigpend,
sighold, four pids, four timevals), so `pr_reg` is at byte 112 on all three architectures; only
the `elf_gregset_t` that follows differs (`CoreArch`).
"""

import struct
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..arch import abi as abimod
from ..elf.notes import iter_notes
from ..errors import ElfError

# Note types (owner "CORE").
NT_PRSTATUS = 1
NT_PRFPREG = 2          # the floating-point registers of the thread whose NT_PRSTATUS it follows
# Owner "LINUX": AArch64's SVE and streaming-SVE state (GDB writes one of them instead of
# NT_PRFPREG where the target has SVE): a user_sve_header, then Z0-Z31 (flags bit 0) or, in its
# FPSIMD form, a user_fpsimd_state.
NT_ARM_SVE = 0x405
NT_ARM_SSVE = 0x40B
_SVE_HEADER = "IIHHHH"      # size, max_size, vl (bytes), max_vl, flags, reserved
_SVE_REGS_OFFSET = 16
NT_PRPSINFO = 3
NT_AUXV = 6
NT_FILE = 0x46494C45

# Auxiliary vector keys.
AT_NULL = 0
AT_PHDR = 3
AT_PHNUM = 5
AT_PAGESZ = 6
AT_ENTRY = 9
AT_EXECFN = 31
AT_SYSINFO_EHDR = 33

# struct elf_prstatus on LP64 Linux: elf_siginfo (3 ints) at 0, short pr_cursig at 12,
# pr_sigpend and pr_sighold (longs) at 16 and 24, pr_pid/ppid/pgrp/sid (ints) at 32..48,
# four struct timeval (2 longs each) at 48..112, then elf_gregset_t pr_reg at 112.
_PRSTATUS_CURSIG = 12
_PRSTATUS_PID = 32
_PRSTATUS_REG = 112
# struct elf_prpsinfo on LP64 Linux: pr_fname[16] at 40, pr_psargs[80] at 56.
_PRPSINFO_FNAME = 40
_PRPSINFO_PSARGS = 56
_AUXV_ENTRY = "QQ"          # key, value
_NT_FILE_HEADER = "QQ"      # count, page size
_NT_FILE_ENTRY = "QQQ"      # start, end, file offset in pages


class Mapping(NamedTuple):
    """A file mapping: [start, end) maps the file `path` from byte file_offset on."""
    start: int
    end: int
    file_offset: int
    path: str


@dataclass(frozen=True)
class CoreArch:
    """An architecture's elf_gregset_t: register names and sizes in order, and DWARF numbers."""
    name: str
    gregs: tuple           # (name, size in bytes) in elf_gregset_t order
    dwarf: dict            # register name -> DWARF number
    pc: str                # name of the program counter in gregs
    sp: str                # name of the stack pointer in gregs
    # NT_PRFPREG: (name, DWARF number, byte offset, size) of each floating-point register it holds;
    # of a 16-byte register, the low 64 bits are taken (AArch64's d0-d31 of user_fpsimd_state's
    # v0-v31; s390x's s390_fp_regs holds f0-f15 after the 8-byte fpc word).
    fpregs: tuple = ()
    sve_notes: bool = False    # its floating-point registers may come in NT_ARM_SVE/NT_ARM_SSVE instead


_X86_64 = CoreArch(
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

_AARCH64 = CoreArch(
    "aarch64",
    tuple(("x%d" % i, 8) for i in range(31)) + (("sp", 8), ("pc", 8), ("pstate", 8)),
    dict([("x%d" % i, i) for i in range(31)] + [("sp", 31), ("pc", 32)]),
    pc="pc", sp="sp", fpregs=tuple(("d%d" % i, 64 + i, 16 * i, 16) for i in range(32)), sve_notes=True)

_S390X = CoreArch(
    "s390x",
    (("pswm", 8), ("pswa", 8)) + tuple(("r%d" % i, 8) for i in range(16))
    + tuple(("a%d" % i, 4) for i in range(16)) + (("orig_gpr2", 8),),
    dict([("r%d" % i, i) for i in range(16)] + [("a%d" % i, 48 + i) for i in range(16)]
         + [("pswm", 64), ("pswa", 65)]),
    pc="pswa", sp="r15", fpregs=tuple(("f%d" % n, abimod.S390X.regnum("f%d" % n), 8 + 8 * n, 8) for n in range(16)))

_ARCHES = {"EM_X86_64": _X86_64, "EM_AARCH64": _AARCH64, "EM_S390": _S390X}



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
    def pc(self) -> int:
        return self.registers["pc"]

    @property
    def sp(self) -> int:
        return self.registers["sp"]


@dataclass
class Notes:
    """What the notes of one core say."""
    threads: List[Thread]
    auxv: Dict[int, int]
    command: Optional[str]          # pr_psargs
    fname: Optional[str]            # pr_fname
    nt_file: Optional[Tuple[int, List[Mapping]]]   # (page size, mappings), or None without NT_FILE


def arch_of(machine: str) -> Optional[CoreArch]:
    """The register layout of an e_machine (pyelftools' name), or None if unsupported."""
    return _ARCHES.get(machine)


def parse_notes(segments, arch: CoreArch, order: str, path: str) -> Notes:
    """Decode the PT_NOTE segments' bytes of a core of architecture `arch` ("<" or ">" order)."""
    byte_order = "big" if order == ">" else "little"
    notes = Notes([], {}, None, None, None)
    gsize = sum(size for _name, size in arch.gregs)
    for data in segments:
        for name, ntype, desc in iter_notes(data, order, path):
            if name == "LINUX" and ntype in (NT_ARM_SVE, NT_ARM_SSVE) and notes.threads and arch.sve_notes:
                notes.threads[-1].registers.update(decode_sve(arch, desc, order, byte_order))
            if name != "CORE":
                continue
            if ntype == NT_PRSTATUS:
                if len(desc) < _PRSTATUS_REG + gsize:
                    raise ElfError("%s: NT_PRSTATUS note of %d bytes is too short for %s "
                                   "(needs %d)" % (path, len(desc), arch.name, _PRSTATUS_REG + gsize))
                (signal,) = struct.unpack_from(order + "h", desc, _PRSTATUS_CURSIG)
                (tid,) = struct.unpack_from(order + "i", desc, _PRSTATUS_PID)
                regs = decode_gregs(arch, desc[_PRSTATUS_REG:_PRSTATUS_REG + gsize], byte_order)
                notes.threads.append(Thread(tid, signal, regs, len(notes.threads)))
            elif ntype == NT_PRFPREG and notes.threads and arch.fpregs:
                notes.threads[-1].registers.update(decode_fpregs(arch, desc, byte_order))
            elif ntype == NT_PRPSINFO and len(desc) >= _PRPSINFO_PSARGS + 80:
                notes.fname = _cstring(desc[_PRPSINFO_FNAME:_PRPSINFO_FNAME + 16])
                notes.command = _cstring(desc[_PRPSINFO_PSARGS:_PRPSINFO_PSARGS + 80]).rstrip()
            elif ntype == NT_AUXV:
                for i in range(0, len(desc) - 15, 16):
                    key, value = struct.unpack_from(order + _AUXV_ENTRY, desc, i)
                    if key == AT_NULL:
                        break
                    notes.auxv.setdefault(key, value)
            elif ntype == NT_FILE and notes.nt_file is None:
                notes.nt_file = _parse_nt_file(desc, order, path)
    _order_threads(notes.threads)
    return notes


def _order_threads(threads):
    """Put the thread that took the signal first.

    The kernel and GDB already write it first (and give every thread the same pr_cursig);
    qemu-user writes the threads in creation order and gives pr_cursig only to the one that
    crashed.
    """
    if threads and threads[0].signal == 0:
        for i, t in enumerate(threads):
            if t.signal != 0:
                threads.insert(0, threads.pop(i))
                break


def _parse_nt_file(desc, order, path):
    if len(desc) < 16:
        raise ElfError("%s: NT_FILE note of %d bytes is too short" % (path, len(desc)))
    count, page = struct.unpack_from(order + _NT_FILE_HEADER, desc, 0)
    names_at = 16 + 24 * count
    if names_at > len(desc):
        raise ElfError("%s: NT_FILE note claims %d mappings but holds %d bytes" % (path, count, len(desc)))
    names = desc[names_at:].split(b"\0")
    if len(names) < count:
        raise ElfError("%s: NT_FILE note has %d file names for %d mappings" % (path, len(names), count))
    maps = []
    for i in range(count):
        start, end, pgoff = struct.unpack_from(order + _NT_FILE_ENTRY, desc, 16 + 24 * i)
        maps.append(Mapping(start, end, pgoff * page, names[i].decode("utf-8", "surrogateescape")))
    return page, maps


def decode_gregs(arch, data, order):
    """A register set (elf_gregset_t: a core note's pr_reg, or PTRACE_GETREGSET's NT_PRSTATUS) as a
    dict keyed by register name and by DWARF number, with "pc" and "sp" aliases."""
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


def decode_fpregs(arch, data, order):
    """The floating-point registers of an NT_PRFPREG note, keyed by name and by DWARF number (of a
    16-byte register, its low 64 bits); those the note is too short for are left out."""
    regs = {}
    for name, num, off, size in arch.fpregs:
        if off + size > len(data):
            continue
        raw = data[off:off + size]
        if size == 16:             # the low 64 bits: first in memory little-endian, last big-endian
            raw = raw[8:] if order == "big" else raw[:8]
        regs[name] = regs[num] = int.from_bytes(raw, order)
    return regs


def decode_sve(arch, data, order, byte_order):
    """The floating-point registers of an NT_ARM_SVE or NT_ARM_SSVE note: the low 64 bits of each
    Z register (its d register), or of each V register in the note's FPSIMD form; {} where the
    note is too short for its header or claims no registers."""
    if len(data) < struct.calcsize(order + _SVE_HEADER):
        return {}
    size, _max_size, vl, _max_vl, flags, _reserved = struct.unpack_from(order + _SVE_HEADER, data, 0)
    body = data[_SVE_REGS_OFFSET:min(size, len(data))]
    if not flags & 1:
        return decode_fpregs(arch, body, byte_order)
    if byte_order == "big":
        return {}                  # (a Z register's bytes in a big-endian process: not followed here)
    regs = {}
    for name, num, _off, _size in arch.fpregs:
        at = (num - arch.fpregs[0][1]) * vl
        if vl < 8 or at + 8 > len(body):
            continue
        regs[name] = regs[num] = int.from_bytes(body[at:at + 8], byte_order)
    return regs


def _cstring(data):
    return data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
