"""SFrame format constants, named as in the specification (spec/sframe-spec-v3.txt)."""

import enum

MAGIC = 0xDEE2
HEADER_SIZE = 28           # sframe_header without the auxiliary header; the same in every version
FDE_SIZE = {1: 17, 2: 20, 3: 16}   # V3: the FDE index entry only
V3_ATTR_SIZE = 5           # V3 FDE attribute record at the start of a function's FRE data


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


FRE_START_SIZE = {FREType.ADDR1: 1, FREType.ADDR2: 2, FREType.ADDR4: 4}


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
