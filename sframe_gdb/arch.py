"""GDB architectures the plugin unwinds, and the GDB names of the registers it reads and writes.

GDB names registers its own way (x86-64 `rip`, s390x `pswa` for the PC); the core speaks DWARF
register numbers.  An `Arch` maps between the two for one GDB architecture.
"""

import operator
import sys
from dataclasses import dataclass, field
from typing import Optional

import gdb

from ..core.arch import abi as abimod
from ..core.sframe.format import MASK64

# GDB architecture name -> (the core ABIs it runs, the first its default; PC register, SP, FP,
# RA register or None, extra PC names).
# s390x: GDB's PC is the pseudo register "pc", computed from the raw "pswa"; a Python unwinder's
# saved registers are looked up by number without computing pseudo registers, so both are saved.
_GDB_ARCHES = {
    "i386:x86-64": ((abimod.AMD64,), "rip", "rsp", "rbp", None, ()),
    "aarch64": ((abimod.AARCH64_LE, abimod.AARCH64_BE), "pc", "sp", "x29", "x30", ()),
    "s390:64-bit": ((abimod.S390X,), "pswa", "r15", "r11", "r14", ("pc",)),
}

# The GDB registers of a register the ABI preserves only in part (ABIInfo.partial), by its DWARF
# number: (the first such number, the names of its low parts besides the part recovered (d8, the
# ABI's name), the names of the whole register, the raw registers it may be, in order).  GDB asks a Python unwinder for each by its own number
# (pseudo registers are not computed from the raw one there), and reads a variable in AArch64's v8
# (DWARF 72) from the raw register its DWARF reader maps to: z8 where the target has SVE, else v8.
# Before GDB 15 a pseudo register (d8, and v8 beside z8) of a frame GDB's own unwinders made is the
# innermost frame's: every value is therefore worked out from the raw register, read once.
_PARTIAL_VIEWS = {
    "aarch64": (64, ("s%d",), ("v%d", "q%d", "z%d"), ("z%d", "v%d")),
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
    pc_ids: tuple = ()                            # ids of pc_names
    regids: dict = field(default_factory=dict)    # DWARF regnum of a callee-saved register -> its ids entry
    regids_for: object = None                     # the core ABIInfo regids were made for
    word: object = None                           # gdb.Type of SP: the size of every register saved
    values: dict = field(default_factory=dict)    # int -> gdb.Value of `word` (values recur frame after frame)
    order: str = ""                               # the byte order of `values` (one gdb.Architecture has one)
    shapes: dict = field(default_factory=dict)    # which registers a caller has -> (ids, head, own types or None)
    pc_id: object = None                          # what read_register reads the PC by (see read_pc_by)
    sp_id: object = None                          # and the SP (set by prepare)
    partial: dict = field(default_factory=dict)   # DWARF regnum -> (low views, whole views): see with_views
    missing_raw: object = None                    # a raw vector register name pattern the target lacks (z%d)

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

    def read_pc_by(self, pf):
        """What PendingFrame.read_register reads the PC by fastest, for GDB 13 (no PendingFrame.pc()):
        its gdb.RegisterDescriptor.  By name, GDB 13 looks the name up among every register's
        names on each read: some 2,200 more instructions a frame on x86-64 (callgrind)."""
        if self.pc_id is None:
            self.pc_id = _descriptors(pf).get(self.pc, self.pc)
        return self.pc_id

    def prepare(self, pf, abi):
        """Learn, once, how to give GDB each register the unwinder saves (PC, SP, FP, RA, the
        callee-saved ones): see `ids`.  A gdb.RegisterDescriptor is what
        UnwindInfo.add_saved_register takes fastest (a name is looked up among every register
        name on each call: on GDB 13 a third of the cost of saving a register)."""
        order = "big" if abi.big_endian else "little"
        if self.word is not None and self.regids_for is abi and order == self.order:
            return
        if self.word is None:
            self.word = pf.read_register(self.sp).type
        if order != self.order or not isinstance(self.values, _Values):
            self.values, self.order = _Values(self.word, order), order
        descs = _descriptors(pf)
        names = [n for n in self.pc_names + (self.sp, self.fp, self.ra) if n is not None]
        regnames = {r: self.reg_name(abi, r) for r in abi.callee_saved}
        for name in names + [n for n in regnames.values() if n is not None]:
            if name in self.ids:
                continue
            try:
                size = pf.read_register(name).type
            except (gdb.error, ValueError):
                size = None            # not readable here: GDB checks the size when it is given
            own = None if size is None or size.sizeof == self.word.sizeof else size
            self.ids[name] = (descs.get(name, name), own)
        self.pc_ids = tuple(self.ids[n] for n in self.pc_names)
        self.sp_id = self.ids[self.sp][0]
        self.read_pc_by(pf)
        self.regids = {r: self.ids[n] for r, n in regnames.items() if n is not None}
        self.partial = self._partial_views(pf, abi, descs)
        self.regids_for = abi
        self.shapes = {}

    def _partial_views(self, pf, abi, descs):
        """{DWARF regnum: (low views, whole views)} for the registers the ABI preserves in part,
        each view (its id for add_saved_register, its gdb.Type), those GDB has on this target."""
        spec = _PARTIAL_VIEWS.get(self.gdb_name)
        if spec is None or not abi.partial or abi.big_endian:
            return {}                        # (big-endian: see whole)
        first, lows, wholes, _raw = spec
        out = {}
        for r in sorted(abi.partial):
            views = []
            for names in (lows, wholes):
                got = []
                for pattern in names:
                    name = pattern % (r - first)
                    if name not in descs:
                        continue
                    try:
                        got.append((descs[name], pf.read_register(name).type))
                    except (gdb.error, ValueError):
                        continue
                views.append(tuple(got))
            out[r] = tuple(views)
        return out

    def whole(self, frame, abi, regnum):
        """The whole of register `regnum` (ABIInfo.partial) in a gdb.Frame or PendingFrame, as an
        unsigned integer, from the raw register GDB has for it (z8, else v8), lane by lane (never
        its bytes, whose order in a big-endian process is GDB's own); None where GDB cannot give
        all of it (not saved, unavailable)."""
        spec = _PARTIAL_VIEWS.get(self.gdb_name)
        if spec is None or abi.big_endian:
            return None                      # (which lane holds d8 in a big-endian process is not followed here)
        first, _lows, _wholes, raws = spec
        for pattern in raws:
            name = pattern % (regnum - first)
            if self.missing_raw == pattern:
                continue
            try:
                value = frame.read_register(name)
            except ValueError:               # no such register on this target: not asked again
                self.missing_raw = pattern
                continue
            except gdb.error:
                return None
            try:
                lanes = value["d"]["u"]
                count = value.type.sizeof // 8
                return sum((int(lanes[k]) & MASK64) << (64 * k) for k in range(count))
            except (gdb.error, ValueError, TypeError):
                return None                  # (optimized out, unavailable, or another shape)
        return None

    def with_views(self, pf, abi, res, ids, vals, below):
        """`ids` and `vals` (the registers saved for the caller `res`) with the other GDB registers
        of each register of `res` the ABI preserves in part, and the whole registers' values for
        the next caller: {DWARF regnum: int}.  Low parts (s8) are bits of the value recovered (d8).
        The whole register (v8, q8, z8) is the frame below's where the value was carried over from
        it (`below`, or worked out from `pf`, the pending frame, when it is that frame); else what
        the callee's restore leaves in it: the value recovered, zero-extended, as a load of d8
        leaves v8 (and z8).  Where the frame below's is not known, the whole views are not given."""
        regs, carried, order = res.regs, res.carried, self.order
        more_ids, more_vals, now = [], [], {}
        for r, (lows, wholes) in self.partial.items():
            n = regs.get(r)
            if n is None:
                continue
            for ident, typ in lows:
                more_ids.append(ident)
                more_vals.append(gdb.Value((n & ((1 << 8 * typ.sizeof) - 1)).to_bytes(typ.sizeof, order), typ))
            if r in carried:
                whole = below.get(r) if below is not None else None
                if whole is None and pf is not None:
                    whole = self.whole(pf, abi, r)
                if whole is None or whole & MASK64 != n & MASK64:
                    continue                 # (not known; or not the value carried: given no whole)
            else:
                whole = n & MASK64
            now[r] = whole
            for ident, typ in wholes:
                more_ids.append(ident)
                more_vals.append(gdb.Value((whole & ((1 << 8 * typ.sizeof) - 1)).to_bytes(typ.sizeof, order), typ))
        return ids + tuple(more_ids), vals + tuple(more_vals), now

    def shape(self, frame):
        """(register ids, head, own types or None) of what GDB is given for a caller the core
        unwound: its SP, its PC (under each of its names), FP and RA where known, then its
        callee-saved registers in `frame.regs` order.  `head(frame)` gives the numbers of PC, FP
        and RA as in that order.  Worked out once per set of registers present (`shapes`)."""
        key = (frame.fp is None, frame.ra is None, *frame.regs)
        shape = self.shapes.get(key)
        return shape if shape is not None else self._shape(key)

    def saved(self, frame):
        """(register ids, gdb.Values) of what GDB is given for a caller the core unwound (see
        `shape`).  Values recur, and come from `values`."""
        ids, head, owns = self.shape(frame)
        nums = (frame.sp, *head(frame), *frame.regs.values())
        values = self.values
        if owns is None:
            return ids, tuple(map(values.__getitem__, nums))
        return ids, tuple([values[n] if own is None else _value(n, own, self.order) for n, own in zip(nums, owns)])

    def _shape(self, key):
        absent_fp, absent_ra, regnums = key[0], key[1] or self.ra is None, key[2:]
        names = ["pc"] * len(self.pc_ids)
        entries = [self.ids[self.sp]] + list(self.pc_ids)
        if not absent_fp:
            names.append("fp")
            entries.append(self.ids[self.fp])
        if not absent_ra:
            names.append("ra")
            entries.append(self.ids[self.ra])
        entries += [self.regids[r] for r in regnums]
        owns = tuple(own for _ident, own in entries)
        get = operator.attrgetter(*names)
        head = get if len(names) > 1 else (lambda frame: (get(frame),))
        shape = (tuple(ident for ident, _own in entries), head, None if all(o is None for o in owns) else owns)
        if len(self.shapes) >= 1024:
            self.shapes.clear()
        self.shapes[key] = shape
        return shape

    def reg_name(self, abi, regnum):
        """GDB's name of DWARF register `regnum` (None for columns that are not registers)."""
        if not abi.is_register(regnum):
            return None           # x86-64's DWARF 16 is the return-address column, not a register
        return abi.regnames.get(regnum)


def _descriptors(pf):
    """Register name -> gdb.RegisterDescriptor of the pending frame's architecture (empty where GDB
    has none)."""
    try:
        return {d.name: d for d in pf.architecture().registers()}
    except (AttributeError, gdb.error):
        return {}


class _Values(dict):
    """int -> gdb.Value of a register-sized type: made on first use, then shared (return addresses,
    function starts and unchanged registers recur frame after frame).  Bounded, and emptied when the
    inferior runs on (SFrameUnwinder.resumed)."""
    LIMIT = 8192

    def __init__(self, word, order):
        super().__init__()
        self.word = word
        self.order = order
        self.size = word.sizeof

    def __missing__(self, n):          # the hot path: _value inlined
        if len(self) >= self.LIMIT:
            self.clear()
        v = self[n] = gdb.Value((n & MASK64).to_bytes(self.size, self.order), self.word)
        return v


def _value(n, typ, order):
    """A gdb.Value of type `typ` with the bits of `n`."""
    return gdb.Value((n & MASK64).to_bytes(typ.sizeof, order), typ)


def reg_int(value, big_endian):
    """A register's contents as an unsigned integer: its bits, also for floating-point registers
    (s390x leaf functions keep saved GPRs in FPRs)."""
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
    """read(DWARF regnum) -> value or None, for a gdb.Frame or gdb.PendingFrame (core.unwind.unwinder's
    frame_from_registers); registers GDB cannot read are None."""
    big = abi.big_endian
    plain = (arch.pc, arch.sp, arch.fp, arch.ra)     # integer registers: int() is the fast way

    partial = abi.partial

    def read(regnum):
        name = arch.reg_name(abi, regnum)
        if name is None:
            return None
        if regnum in partial:                  # (d8: from the raw register, see _PARTIAL_VIEWS)
            whole = arch.whole(frame, abi, regnum)
            return None if whole is None else whole & MASK64
        try:
            value = frame.read_register(name)
            return int(value) & MASK64 if name in plain else reg_int(value, big)
        except Exception:
            return None
    return read
