"""Human-readable descriptions of sections, modules, FDEs and FREs, shared by the CLI and both debugger
adapters."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from ..arch import abi as abimod
from ..sframe import format as F
from ..sframe.records import FDE, FRE, Header

if TYPE_CHECKING:
    from ..sframe.index import Match, SFrameIndex
    from ..unwind.modules import Module


def abi_text(abi: int) -> str:
    return abimod.info(abi).title


def flags_text(flags: int) -> str:
    names = [f.name or "" for f in F.Flag if flags & f]
    return "|".join(names) if names else "none"


def section_line(header: Header) -> str:
    return "SFrame version %d, flags %s, ABI %s" % (header.version, flags_text(header.flags), abi_text(header.abi))


def fde_attributes(fde: FDE, header: Header) -> List[str]:
    """Attribute words of an FDE: type, PC type, rep size, signal, pauth key."""
    parts = ["type %s" % (fde.fde_type.name.lower() if header.version == 3 else "default"),
             "PC type %s" % fde.pc_type.name]
    if fde.pc_type is F.PCType.MASK:
        parts.append("rep size %d" % fde.block_size)
    if fde.signal and header.version == 3:
        parts.append("signal frame")
    if abimod.info(header.abi).pointer_auth:
        parts.append("pauth key %s" % fde.pauth_key.name)
    return parts


def fre_range(match: "Match", fres: Sequence[FRE]) -> Tuple[int, int]:
    """(start, end) offsets, relative to the function (or to the repeat block for MASK), of the FRE in effect."""
    fre = match.fre
    assert fre is not None
    nxt = [f.start for f in fres if f.start > fre.start]
    fde = match.fde
    end = nxt[0] if nxt else (fde.block_size if fde.pc_type is F.PCType.MASK else fde.size)
    return fre.start, end


def describe_match(match: "Match", index: SFrameIndex, symbol: Optional[Tuple[str, int]] = None,
                   values: Optional[List[Tuple[str, int]]] = None) -> List[str]:
    """Lines describing what covers match.pc: function, FDE, FRE and rules (and their values if given).

    `symbol` is (name, offset) of the function; `values` an optional list of (what, value) pairs.
    """
    abi = abimod.info(index.abi)
    fde = match.fde
    h = index.header
    name = "??" if not symbol else symbol[0] if not symbol[1] else "%s+%d" % symbol
    lines = ["Function: %s at %#x, size %d bytes (FDE %d)" % (name, fde.start, fde.size, fde.index),
             "FDE: " + ", ".join(fde_attributes(fde, h))]
    if match.fre is None:
        lines.append("FRE: none (the function has no FREs: outermost frame)")
    else:
        fres = index.fres(fde)
        lo, hi = fre_range(match, fres)
        k = fres.index(match.fre)
        if fde.pc_type is F.PCType.MASK:
            where = "offsets %#x..%#x of each %d-byte block" % (lo, hi, fde.block_size)
        else:
            where = "%#x..%#x" % (fde.start + lo, fde.start + hi)
        lines.append("FRE %d of %d: %s, %d data word%s of %d byte%s" % (
            k, len(fres), where, match.fre.count, "" if match.fre.count == 1 else "s",
            match.fre.word_size, "" if match.fre.word_size == 1 else "s"))
    lines.append("Rules:")
    lines.extend("  " + r for r in match.rules.describe(abi))
    if values:
        lines.append("Values:")
        lines.extend("  %s = %#x" % (what, v) for what, v in values)
    return lines


def section_summary(module: "Module") -> str:
    """'Section: ...' line of a module with SFrame (addresses as loaded)."""
    assert module.index is not None
    h = module.index.header
    return "Section: %s at %#x, %s, %d FDEs, %d FREs" % (
        module.section_name, module.section_addr or 0, section_line(h), h.num_fdes, h.num_fres)
