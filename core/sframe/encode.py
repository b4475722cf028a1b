"""Encoding SFrame sections: exactly from decoded records, or laid out from a simple description.

`encode(header, funcs)` writes the records where their fields say they go, so decoding a real
section and encoding it again gives back the same bytes.  `build(...)` computes the layout,
counts, info bytes and widths itself: the tests use it to make the sections no toolchain here
emits (big-endian AArch64, s390x V2 register encodings, flex FDEs, 4-byte FRE starts, huge sections).
"""

import struct
from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

from ..arch import abi as abimod
from . import format as F
from .records import FDE, FRE, Header


def _word(e, size, value):
    """Pack a data word; control words may be given unsigned, offsets signed."""
    if value >= 1 << (8 * size - 1):
        value -= 1 << (8 * size)
    return struct.pack(e + F.DATAWORD_FORMAT[size], value)


def encode_fre(e: str, fre_type: F.FREType, fre: FRE) -> bytes:
    return (struct.pack(e + F.FRE_START_FORMAT[fre_type] + "B", fre.start, fre.info)
            + b"".join(_word(e, fre.word_size, w) for w in fre.words))


def encode(header: Header, funcs: Sequence[Tuple[FDE, Sequence[FRE]]]) -> bytes:
    """Bytes of a section from its header and [(FDE, FREs), ...], each record at its own offset."""
    h = header
    e = h.endian
    hsize = h.size
    fde_base = hsize + h.fdeoff
    fre_base = hsize + h.freoff
    total = max(fre_base + h.fre_len, fde_base + len(funcs) * h.fde_size)
    out = bytearray(total)
    struct.pack_into(e + F.HEADER_FORMAT, out, 0, F.MAGIC, h.version, h.flags, int(h.abi), h.cfa_fixed_fp_offset,
                     h.cfa_fixed_ra_offset, h.auxhdr_len, h.num_fdes, h.num_fres, h.fre_len, h.fdeoff, h.freoff)
    out[F.HEADER_SIZE:hsize] = h.auxhdr.ljust(h.auxhdr_len, b"\0")
    for i, (fde, fres) in enumerate(funcs):
        off = fde_base + i * h.fde_size
        pos = fre_base + fde.fre_off
        fmt = e + F.FDE_FORMAT[h.version]
        if h.version == 1:
            struct.pack_into(fmt, out, off, fde.start_field, fde.size, fde.fre_off, fde.num_fres, fde.info)
        elif h.version == 2:
            struct.pack_into(fmt, out, off, fde.start_field, fde.size, fde.fre_off, fde.num_fres,
                             fde.info, fde.rep_size, fde.padding)
        else:
            struct.pack_into(fmt, out, off, fde.start_field, fde.size, fde.fre_off)
            struct.pack_into(e + F.V3_ATTR_FORMAT, out, pos, fde.num_fres, fde.info, fde.info2, fde.rep_size)
            pos += F.V3_ATTR_SIZE
        for fre in fres:
            b = encode_fre(e, fde.fre_type, fre)
            out[pos:pos + len(b)] = b
            pos += len(b)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Building sections from a description


@dataclass
class Row:
    """One FRE to build: start offset in the function, data words, CFA base, mangled-RA bit."""
    start: int
    words: tuple
    base: F.BaseReg = F.BaseReg.SP
    mangled: bool = False
    word_size: Optional[int] = None   # 1, 2 or 4; default: the smallest that holds every word


@dataclass
class Func:
    """One function to build.  `start` is an absolute address (resolved against section_addr)."""
    start: int
    size: int
    rows: list = field(default_factory=list)
    pc_type: F.PCType = F.PCType.INC
    rep_size: int = 0
    fde_type: F.FDEType = F.FDEType.DEFAULT
    signal: bool = False
    pauth_key: F.PAuthKey = F.PAuthKey.A
    fre_type: Optional[F.FREType] = None   # default: from the size, as the assembler does


def _fits(size, v):
    return -(1 << (8 * size - 1)) <= v < (1 << (8 * size))


def fre_info(row: Row) -> int:
    words = tuple(row.words)
    size = row.word_size or next((s for s in (1, 2, 4) if all(_fits(s, w) for w in words)), 4)
    code = {1: F.DataWordSize.B1, 2: F.DataWordSize.B2, 4: F.DataWordSize.B4}[size]
    if len(words) > F.FRE_INFO_COUNT_MASK:
        raise ValueError("at most 15 data words per FRE")
    return (int(row.base) << F.FRE_INFO_BASE_BIT | len(words) << F.FRE_INFO_COUNT_SHIFT
            | int(code) << F.FRE_INFO_SIZE_SHIFT | int(row.mangled) << F.FRE_INFO_MANGLED_BIT)


def _fre_type_for(size):
    return F.FREType.ADDR1 if size < 0x100 else F.FREType.ADDR2 if size < 0x10000 else F.FREType.ADDR4


def build(version: int, abi: int, funcs: Sequence[Func], *, section_addr: int = 0, flags: Optional[int] = None,
          fixed_fp: int = 0, fixed_ra: Optional[int] = None, auxhdr: bytes = b"", sort: bool = True,
          fre_order: Optional[Sequence[int]] = None) -> bytes:
    """Lay out and encode a section for `funcs`.  Returns the bytes.  `fre_order`: the functions'
    FRE data laid out in this order (indexes into `funcs`; a linker keeps its inputs' order while
    it sorts the FDEs), else in the FDEs' order."""
    abi = F.ABI(abi)
    desc = abimod.info(abi)
    big = desc.big_endian
    if fixed_ra is None:       # where the RA is in no register, it is always at CFA - ptr (x86-64)
        fixed_ra = 0 if desc.ra_in_register else -desc.ptr_size
    if flags is None:
        flags = F.Flag.FDE_SORTED | (F.Flag.FDE_FUNC_START_PCREL if version >= 2 else 0)
    order = list(range(len(funcs)))
    laid = list(fre_order) if fre_order is not None else None
    if laid is not None and sorted(laid) != list(range(len(funcs))):
        raise ValueError("fre_order must name each function once")
    if sort:
        order.sort(key=lambda k: funcs[k].start)
    if laid is None:
        laid = order
    hsize = F.HEADER_SIZE + len(auxhdr)
    fde_size = F.FDE_SIZE[version]
    fre_base = hsize + len(funcs) * fde_size
    placed = {}
    fre_pos = 0
    num_fres = 0
    for k in laid:                      # the FRE data, function after function
        fn = funcs[k]
        ftype = fn.fre_type if fn.fre_type is not None else _fre_type_for(fn.size)
        fre_off = fre_pos
        pos = fre_base + fre_pos + (F.V3_ATTR_SIZE if version == 3 else 0)
        fres = []
        ssize = F.FRE_START_SIZE[ftype]
        for r in fn.rows:
            fre = FRE(pos, r.start, fre_info(r), tuple(r.words))
            fres.append(fre)
            pos += ssize + fre.size
        fre_pos = pos - fre_base
        num_fres += len(fres)
        placed[k] = (ftype, fre_off, tuple(fres))
    pairs = []
    for i, k in enumerate(order):       # the FDE table
        fn = funcs[k]
        ftype, fre_off, fres_k = placed[k]
        info = (int(ftype) | int(fn.pc_type) << F.FDE_INFO_PCTYPE_BIT | int(fn.pauth_key) << F.FDE_INFO_PAUTH_BIT
                | int(fn.signal) << F.FDE_INFO_SIGNAL_BIT)
        off = hsize + i * fde_size
        field_ = fn.start - section_addr - (off if flags & F.Flag.FDE_FUNC_START_PCREL else 0)
        fde = FDE(i, off, field_, fn.start, fn.size, fre_off, len(fres_k), info,
                  int(fn.fde_type) if version == 3 else 0, fn.rep_size if version >= 2 else 0)
        pairs.append((fde, fres_k))
    header = Header(version, int(flags), abi, fixed_fp, fixed_ra, len(auxhdr), len(funcs), num_fres, fre_pos,
                    0, len(funcs) * fde_size, big, bytes(auxhdr))
    return encode(header, pairs)
