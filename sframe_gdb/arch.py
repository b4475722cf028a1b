"""GDB architectures the plugin unwinds, and the GDB names of the registers it reads and writes.

GDB names registers its own way (x86-64 `rip`, s390x `pswa` for the PC); the core speaks DWARF
register numbers.  An `Arch` maps between the two for one GDB architecture.
"""

from dataclasses import dataclass, field
from typing import Optional

from ..core import abi as abimod

# GDB architecture name -> (ABI family, PC register, SP, FP, RA register or None, extra PC names)
# s390x: GDB's PC is the pseudo register "pc", computed from the raw "pswa"; a Python unwinder's
# saved registers are looked up by number without computing pseudo registers, so both are saved.
_GDB_ARCHES = {
    "i386:x86-64": ("amd64", "rip", "rsp", "rbp", None, ()),
    "aarch64": ("aarch64", "pc", "sp", "x29", "x30", ()),
    "s390:64-bit": ("s390x", "pswa", "r15", "r11", "r14", ("pc",)),
}

_ABIS = {"amd64": (abimod.AMD64,),
         "aarch64": (abimod.AARCH64_LE, abimod.AARCH64_BE),
         "s390x": (abimod.S390X,)}


@dataclass
class Arch:
    """One GDB architecture: its register names and (once known) the GDB types of those registers."""
    gdb_name: str
    family: str
    pc: str
    sp: str
    fp: str
    ra: Optional[str]
    pc_aliases: tuple = ()
    types: dict = field(default_factory=dict)     # register name -> gdb.Type, filled on first use

    def abi_for(self, sframe_abi):
        """The core ABIInfo for a section's ABI, or None if the section is for another family."""
        try:
            info = abimod.info(sframe_abi)
        except (KeyError, ValueError):
            return None
        return info if info in _ABIS[self.family] else None

    @property
    def default_abi(self):
        return _ABIS[self.family][0]

    def reg_name(self, abi, regnum):
        """GDB's name of DWARF register `regnum` (None for columns that are not registers)."""
        if regnum == abi.ra and self.family == "amd64":
            return None           # x86-64's DWARF 16 is the return-address column, not a register
        return abi.regnames.get(regnum)


def reg_int(value, big_endian):
    """A register's contents as an unsigned integer: its bits, also for floating-point registers
    (s390x leaf functions keep saved GPRs in FPRs)."""
    import gdb
    t = value.type.strip_typedefs()
    if t.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_PTR, gdb.TYPE_CODE_ENUM, gdb.TYPE_CODE_BOOL,
                  gdb.TYPE_CODE_CHAR):
        return int(value) & 0xFFFFFFFFFFFFFFFF
    if hasattr(value, "bytes"):                    # GDB 14 and later
        raw = bytes(value.bytes)[:8]
        return int.from_bytes(raw, "big" if big_endian else "little")
    if t.code == gdb.TYPE_CODE_FLT and t.sizeof == 8:
        import struct
        return struct.unpack(">Q", struct.pack(">d", float(value)))[0]
    return int(value) & 0xFFFFFFFFFFFFFFFF


def lookup(gdb_arch_name):
    """Arch for a GDB architecture name (gdb.Architecture.name()), or None if not supported."""
    spec = _GDB_ARCHES.get(gdb_arch_name)
    if spec is None:
        return None
    family, pc, sp, fp, ra, aliases = spec
    return Arch(gdb_arch_name, family, pc, sp, fp, ra, aliases)


def supported_names():
    return sorted(_GDB_ARCHES)
