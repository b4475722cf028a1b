"""GDB architectures the plugin unwinds, and the GDB names of the registers it reads and writes.

GDB names registers its own way (x86-64 `rip`, s390x `pswa` for the PC); the core speaks DWARF
register numbers.  An `Arch` maps between the two for one GDB architecture.
"""

import sys
from dataclasses import dataclass, field
from typing import Optional

from ..core import abi as abimod
from ..core.format import MASK64

# GDB architecture name -> (the core ABIs it runs, the first its default; PC register, SP, FP,
# RA register or None, extra PC names).
# s390x: GDB's PC is the pseudo register "pc", computed from the raw "pswa"; a Python unwinder's
# saved registers are looked up by number without computing pseudo registers, so both are saved.
_GDB_ARCHES = {
    "i386:x86-64": ((abimod.AMD64,), "rip", "rsp", "rbp", None, ()),
    "aarch64": ((abimod.AARCH64_LE, abimod.AARCH64_BE), "pc", "sp", "x29", "x30", ()),
    "s390:64-bit": ((abimod.S390X,), "pswa", "r15", "r11", "r14", ("pc",)),
}


@dataclass
class Arch:
    """One GDB architecture: its register names and (once known) the GDB types of those registers."""
    gdb_name: str
    abis: tuple
    pc: str
    sp: str
    fp: str
    ra: Optional[str]
    pc_aliases: tuple = ()
    types: dict = field(default_factory=dict)     # register name -> gdb.Type, filled on first use
    ids: dict = field(default_factory=dict)       # register name -> (id for add_saved_register, own type or None)
    word: object = None                           # gdb.Type of SP: the size of every register saved
    values: dict = field(default_factory=dict)    # int -> gdb.Value of `word` (values recur frame after frame)
    order: str = ""                               # the byte order of `values` (one gdb.Architecture has one)

    @property
    def pc_names(self):
        """The PC and the names GDB also reads it by (s390x: `pc` besides `pswa`)."""
        return (self.pc,) + self.pc_aliases

    def abi_for(self, sframe_abi):
        """The core ABIInfo for a section's ABI, or None if the section is for another family."""
        try:
            info = abimod.info(sframe_abi)
        except (KeyError, ValueError):
            return None
        return info if info in self.abis else None

    def saved_register(self, pf, name):
        """(what UnwindInfo.add_saved_register takes fastest for register `name`, its own gdb.Type
        or None when `word` fits it).  A gdb.RegisterDescriptor is found without the look-up
        among every register name that a name costs on each call (GDB 13: a third of the cost of
        saving a register)."""
        got = self.ids.get(name)
        if got is None:
            import gdb
            if self.word is None:
                self.word = pf.read_register(self.sp).type
            ident = name
            try:
                for d in pf.architecture().registers():
                    if d.name == name:
                        ident = d
                        break
            except (AttributeError, gdb.error):
                pass
            t = pf.read_register(name).type
            got = self.ids[name] = (ident, None if t.sizeof == self.word.sizeof else t)
        return got

    def value(self, n, own=None, order="little"):
        """A gdb.Value with the bits of `n`, for a register of `word`'s size (or of type `own`)."""
        import gdb
        if own is not None:
            return gdb.Value((n & MASK64).to_bytes(own.sizeof, order), own)
        if order != self.order:
            self.values, self.order = {}, order
        values = self.values
        v = values.get(n)
        if v is None:
            if len(values) >= 8192:
                values.clear()
            v = values[n] = gdb.Value((n & MASK64).to_bytes(self.word.sizeof, order), self.word)
        return v

    def reg_name(self, abi, regnum):
        """GDB's name of DWARF register `regnum` (None for columns that are not registers)."""
        if not abi.is_register(regnum):
            return None           # x86-64's DWARF 16 is the return-address column, not a register
        return abi.regnames.get(regnum)


def reg_int(value, big_endian):
    """A register's contents as an unsigned integer: its bits, also for floating-point registers
    (s390x leaf functions keep saved GPRs in FPRs)."""
    import gdb
    t = value.type.strip_typedefs()
    if t.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_PTR, gdb.TYPE_CODE_ENUM, gdb.TYPE_CODE_BOOL,
                  gdb.TYPE_CODE_CHAR):
        return int(value) & MASK64
    if hasattr(value, "bytes"):                    # GDB 14 and later
        raw = bytes(value.bytes)[:8]
        return int.from_bytes(raw, "big" if big_endian else "little")
    if t.code == gdb.TYPE_CODE_FLT and t.sizeof == 8:
        import array
        return int.from_bytes(array.array("d", [float(value)]).tobytes(), sys.byteorder)
    return int(value) & MASK64


def lookup(gdb_arch_name):
    """Arch for a GDB architecture name (gdb.Architecture.name()), or None if not supported."""
    spec = _GDB_ARCHES.get(gdb_arch_name)
    if spec is None:
        return None
    abis, pc, sp, fp, ra, aliases = spec
    return Arch(gdb_arch_name, abis, pc, sp, fp, ra, aliases)


def register_reader(frame, arch, abi):
    """read(DWARF regnum) -> value or None, for a gdb.Frame or gdb.PendingFrame (core.unwind's
    frame_from_registers); registers GDB cannot read are None."""
    big = abi.big_endian
    plain = (arch.pc, arch.sp, arch.fp, arch.ra)     # integer registers: int() is the fast way

    def read(regnum):
        name = arch.reg_name(abi, regnum)
        if name is None:
            return None
        try:
            value = frame.read_register(name)
            return int(value) & MASK64 if name in plain else reg_int(value, big)
        except Exception:
            return None
    return read
