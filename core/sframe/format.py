"""SFrame format constants and binary layout, named as in the specification (spec/sframe-spec-v3.txt).

The one home of the layout: the decoder, the encoder and the dump take their struct formats,
sizes and bit fields from here.  Formats have no byte-order prefix: a section's header gives it
(`Header.endian`, "<" or ">").
"""

import enum
import struct
from typing import Dict, Literal, cast

MAGIC = 0xDEE2
MAGIC_SWAPPED = 0xE2DE     # the magic read in the other byte order
MASK64 = (1 << 64) - 1     # addresses are 64-bit: wrap-around arithmetic is masked with this

# sframe_header: preamble (magic, version, flags), ABI, fixed FP and RA offsets, auxiliary
# header length, then num_fdes, num_fres, fre_len, fdeoff, freoff.
HEADER_FORMAT = "HBBBbbB5I"
HEADER_SIZE = struct.calcsize("<" + HEADER_FORMAT)   # 28, the same in every version
MAGIC_FORMAT = "H"
HEADER_FIELDS_AT = 2       # the fields after the magic ...
HEADER_FIELDS_FORMAT = "BBBbbB"   # ... version, flags, ABI, fixed FP, fixed RA, auxhdr_len
HEADER_COUNTS_AT = 8       # num_fdes, num_fres, fre_len, fdeoff, freoff
HEADER_COUNTS_FORMAT = "5I"

# FDE records: start (func_start_address), size, start_fre_off, then V1/V2 num_fres, info
# (V2: rep_size, padding); V3 keeps num_fres, info, info2 and rep_size in an attribute record
# at the start of the function's FRE data.
FDE_FORMAT = {1: "iIIIB", 2: "iIIIBBH", 3: "qII"}
FDE_SIZE = {v: struct.calcsize("<" + f) for v, f in FDE_FORMAT.items()}   # 17, 20, 16
FDE_START_FORMAT: Dict[int, Literal["i", "q"]] = {                        # the first field
    v: cast(Literal["i", "q"], f[0]) for v, f in FDE_FORMAT.items()}
V3_ATTR_FORMAT = "HBBB"
V3_ATTR_SIZE = struct.calcsize("<" + V3_ATTR_FORMAT)                      # 5
V1_MASK_REP_SIZE = 16      # V1 has no rep_size field; its only MASK users are 16-byte PLT entries


class Flag(enum.IntFlag):
    FDE_SORTED = 0x1
    FRAME_POINTER = 0x2          # V1, V2 only
    FDE_FUNC_START_PCREL = 0x4   # V2 (errata 1) and V3


ALLOWED_FLAGS = {
    1: Flag.FDE_SORTED | Flag.FRAME_POINTER,
    2: Flag.FDE_SORTED | Flag.FRAME_POINTER | Flag.FDE_FUNC_START_PCREL,
    3: Flag.FDE_SORTED | Flag.FDE_FUNC_START_PCREL,
}


class ABI(enum.IntEnum):
    AARCH64_ENDIAN_BIG = 1
    AARCH64_ENDIAN_LITTLE = 2
    AMD64_ENDIAN_LITTLE = 3
    S390X_ENDIAN_BIG = 4


class FREType(enum.IntEnum):
    """Width of an FRE's start offset: 1, 2 or 4 bytes."""
    ADDR1 = 0
    ADDR2 = 1
    ADDR4 = 2


FRE_START_FORMAT = {FREType.ADDR1: "B", FREType.ADDR2: "H", FREType.ADDR4: "I"}
FRE_START_SIZE = {t: struct.calcsize(f) for t, f in FRE_START_FORMAT.items()}


class PCType(enum.IntEnum):
    INC = 0
    MASK = 1    # repetitive blocks such as PLT entries: match (pc - start) % rep_size


class FDEType(enum.IntEnum):
    DEFAULT = 0
    FLEX = 1    # V3 only


class DataWordSize(enum.IntEnum):
    B1 = 0
    B2 = 1
    B4 = 2


DATAWORD_BYTES = {DataWordSize.B1: 1, DataWordSize.B2: 2, DataWordSize.B4: 4}
DATAWORD_FORMAT = {1: "b", 2: "h", 4: "i"}   # by width in bytes: data words are signed


def _fre_data_bytes(info):
    code = (info >> FRE_INFO_SIZE_SHIFT) & FRE_INFO_SIZE_MASK
    if code > max(DataWordSize):
        return None
    return ((info >> FRE_INFO_COUNT_SHIFT) & FRE_INFO_COUNT_MASK) * DATAWORD_BYTES[DataWordSize(code)]


class BaseReg(enum.IntEnum):
    """fre_cfa_base_reg_id of a default FDE's FRE."""
    FP = 0
    SP = 1


class PAuthKey(enum.IntEnum):
    A = 0
    B = 1


# FDE info byte (all versions): bits 0-3 FRE type, bit 4 PC type, bit 5 pauth key, bit 7 signal (V3).
FDE_INFO_FRE_TYPE_MASK = 0x0F
FDE_INFO_PCTYPE_BIT = 4
FDE_INFO_PAUTH_BIT = 5
FDE_INFO_SIGNAL_BIT = 7
# V3 FDE info2 byte: bits 0-4 FDE type.
FDE_INFO2_TYPE_MASK = 0x1F

# FRE info byte: bit 0 CFA base, bits 1-4 data-word count, bits 5-6 data-word size, bit 7 mangled RA.
FRE_INFO_BASE_BIT = 0
FRE_INFO_COUNT_SHIFT = 1
FRE_INFO_COUNT_MASK = 0xF
FRE_INFO_SIZE_SHIFT = 5
FRE_INFO_SIZE_MASK = 0x3
FRE_INFO_MANGLED_BIT = 7

# s390x
S390X_CFA_OFFSET_ALIGNMENT_FACTOR = 8
S390X_CFA_OFFSET_ADJUSTMENT = -160
S390X_SP_VAL_OFFSET = -160
FRE_RA_OFFSET_INVALID = 0

# V3 flex FDE control word
FLEX_REG_P = 0x1
FLEX_DEREF_P = 0x2
FLEX_REGNUM_SHIFT = 3

# Bytes of data words that follow an FRE's info byte, by info byte (None: invalid size code).
FRE_DATA_BYTES = tuple(_fre_data_bytes(i) for i in range(256))


def fre_words_format(info):
    """(count, width, struct format without byte order) of the data words an FRE info byte
    announces (its size code valid)."""
    count = (info >> FRE_INFO_COUNT_SHIFT) & FRE_INFO_COUNT_MASK
    width = FRE_DATA_BYTES[info] // count if count else 1
    return count, width, "%d%s" % (count, DATAWORD_FORMAT[width])
