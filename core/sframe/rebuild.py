"""A section's rows written again in another version: "how big would V3 be for this program?"

The rows of a decoded section (each FDE's FREs: start, data words, CFA base, mangled RA) are laid
out anew by the encoder (`encode.build`) as a linker lays them out: FDEs sorted by start, the
FRE data in the order it had (a linker's inputs' order), the start fields PC-relative (V2, V3;
in the section's own version, its own flags), the widths of FRE starts and data words as they
were.  Rebuilding a section in its own version gives its
bytes back where its producer laid it out the same way (tests/test_stats.py checks gas's and ld's).

A row keeps its meaning across versions only where the data words mean the same: a default FDE
in V1, V2 and V3.  A V3 flex FDE has no V1/V2 form, nor does a V2 s390x FRE whose FP or RA word
names a register (an odd word); such functions are counted, not guessed.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import format as F
from .decode import Section
from .encode import Func, Row, build


@dataclass
class Rebuilt:
    """A section written again: its bytes (None where no function could be), and the functions
    left out because the version has no form for them."""
    version: int
    data: Optional[bytes]
    left_out: int

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else 0


def _v2_register_word(abi: F.ABI, version: int, words: tuple) -> bool:
    """A V2 s390x FRE whose FP or RA word is odd: it names a DWARF register (no other version's form)."""
    return version == 2 and abi is F.ABI.S390X_ENDIAN_BIG and any(w & 1 for w in words[1:3])


def funcs_of(section: Section, version: int) -> Tuple[List[Func], int, List[int]]:
    """The section's functions as the encoder's descriptions for `version` (in the FDEs' order),
    how many of them that version cannot hold, and the indexes of the FDEs kept."""
    h = section.header
    out, left, kept = [], 0, []
    for fde in section.fdes():
        fres = section.fres(fde)
        flex = h.version == 3 and fde.fde_type is F.FDEType.FLEX
        if (flex and version < 3) or any(_v2_register_word(h.abi, h.version, fre.words) for fre in fres) \
                and version != h.version or version == 3 and len(fres) > 0xFFFF:   # (V3 counts FREs in 16 bits)
            left += 1
            continue
        kept.append(fde.index)
        rows = [Row(fre.start, fre.words, fre.base_reg, fre.mangled_ra, fre.word_size) for fre in fres]
        out.append(Func(fde.start, fde.size, rows, fde.pc_type, fde.rep_size,
                        fde.fde_type if version == 3 else F.FDEType.DEFAULT,
                        fde.signal if version == 3 else False, fde.pauth_key, fde.fre_type))
    return out, left, kept


def rebuild(section: Section, version: int, section_addr: int = 0) -> Rebuilt:
    """The section's rows as a `version` section, laid out as binutils lays one out."""
    h = section.header
    funcs, left, kept_list = funcs_of(section, version)
    kept = set(kept_list)
    if not funcs and left:
        return Rebuilt(version, None, left)
    if version == h.version:
        flags = h.flags                  # (its producer's: V2 before binutils 2.45 has no PC-relative starts)
    else:
        flags = int(F.Flag.FDE_SORTED) | (int(F.Flag.FDE_FUNC_START_PCREL) if version >= 2 else 0)
        if version < 3:
            flags |= h.flags & int(F.Flag.FRAME_POINTER)
    # The FDEs sorted (in its own version, only where the section says they are: `ld -r` keeps
    # its inputs' order); the FRE data in the order it had.
    offsets = [f.fre_off for f in section.fdes() if f.index in kept]
    data = build(version, int(h.abi), funcs, section_addr=section_addr, flags=flags,
                 fixed_fp=h.cfa_fixed_fp_offset, fixed_ra=h.cfa_fixed_ra_offset,
                 sort=version != h.version or bool(h.flags & F.Flag.FDE_SORTED),
                 fre_order=sorted(range(len(funcs)), key=lambda k: offsets[k]))
    return Rebuilt(version, data, left)
