"""Decoded SFrame records.  Raw fields are kept so that encoding gives back the same bytes."""

from dataclasses import dataclass
from typing import NamedTuple

from . import format as F


@dataclass(frozen=True)
class Header:
    version: int
    flags: int
    abi: F.ABI
    cfa_fixed_fp_offset: int
    cfa_fixed_ra_offset: int
    auxhdr_len: int
    num_fdes: int
    num_fres: int
    fre_len: int
    fdeoff: int
    freoff: int
    big_endian: bool
    auxhdr: bytes = b""

    @property
    def size(self) -> int:
        """Header length including the auxiliary header: sub-section offsets count from here."""
        return F.HEADER_SIZE + self.auxhdr_len

    @property
    def fde_size(self) -> int:
        return F.FDE_SIZE[self.version]

    @property
    def endian(self) -> str:
        return ">" if self.big_endian else "<"

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)


class FDE(NamedTuple):
    """One function: the V1/V2 FDE record, or the V3 index entry joined with its attribute record.

    A named tuple rather than a dataclass: lookups create these on the hot path.
    """
    index: int  # type: ignore[assignment]  # shadows tuple.index: the FDE's position is its name
    offset: int          # byte offset of the record (V3: of the index entry) in the section
    start_field: int     # raw sfde_func_start_address / sfdi_func_start_offset
    start: int           # resolved start address (section address + ..., see Section)
    size: int
    fre_off: int         # raw start_fre_off, relative to the FRE sub-section
    num_fres: int
    info: int
    info2: int = 0       # V3 only
    rep_size: int = 0    # V2, V3
    padding: int = 0     # V2's u16 padding, kept for exact re-encoding

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def fre_type(self) -> F.FREType:
        return F.FREType(self.info & F.FDE_INFO_FRE_TYPE_MASK)

    @property
    def pc_type(self) -> F.PCType:
        return F.PCType((self.info >> F.FDE_INFO_PCTYPE_BIT) & 1)

    @property
    def pauth_key(self) -> F.PAuthKey:
        return F.PAuthKey((self.info >> F.FDE_INFO_PAUTH_BIT) & 1)

    @property
    def signal(self) -> bool:
        """V3 signal-frame bit (bit 7 of the info byte; unused before V3)."""
        return bool((self.info >> F.FDE_INFO_SIGNAL_BIT) & 1)

    @property
    def fde_type(self) -> F.FDEType:
        return F.FDEType(self.info2 & F.FDE_INFO2_TYPE_MASK)

    @property
    def block_size(self) -> int:
        """The repeated block of a PC-type MASK FDE (V1 has no rep_size field: 16-byte PLT entries)."""
        return self.rep_size or F.V1_MASK_REP_SIZE

    def contains(self, pc: int) -> bool:
        return self.start <= pc < self.start + self.size


class FRE(NamedTuple):
    """One frame row entry: a PC range's start (relative to the function) and its data words."""
    offset: int          # byte offset of the FRE in the section
    start: int           # sfre_start_address: offset from the function start
    info: int
    words: tuple         # data words, as signed integers

    @property
    def base_reg(self) -> F.BaseReg:
        return F.BaseReg((self.info >> F.FRE_INFO_BASE_BIT) & 1)

    @property
    def count(self) -> int:  # type: ignore[override]  # shadows tuple.count
        return (self.info >> F.FRE_INFO_COUNT_SHIFT) & F.FRE_INFO_COUNT_MASK

    @property
    def word_size(self) -> int:
        return F.DATAWORD_BYTES[F.DataWordSize((self.info >> F.FRE_INFO_SIZE_SHIFT) & F.FRE_INFO_SIZE_MASK)]

    @property
    def mangled_ra(self) -> bool:
        return bool((self.info >> F.FRE_INFO_MANGLED_BIT) & 1)

    def uword(self, i: int) -> int:
        """Data word i read as unsigned (flex FDE control words)."""
        return self.words[i] & ((1 << (8 * self.word_size)) - 1)

    @property
    def size(self) -> int:
        """Encoded length in bytes is start width + 1 + count*word_size; start width is the FDE's."""
        return 1 + self.count * self.word_size
