"""ELF notes: the records of SHT_NOTE sections and PT_NOTE segments, and the GNU build ID they
carry (what separate debug files are found by, under .build-id/xx/rest.debug)."""

import os
import struct
from typing import Iterator, Optional, Tuple

from ..errors import ElfError
from .image import SHF_ALLOC, section_data

SHT_NOTE = 7
NT_GNU_BUILD_ID = 3
_NOTE_HEADER = "III"        # namesz, descsz, type


def _align4(n):
    return (n + 3) & ~3


def iter_notes(data: bytes, order: str, where: str) -> Iterator[Tuple[str, int, bytes]]:
    """(name, type, desc) for each note in a note section's or PT_NOTE segment's bytes."""
    off = 0
    end = len(data)
    while off + 12 <= end:
        namesz, descsz, ntype = struct.unpack_from(order + _NOTE_HEADER, data, off)
        name_at = off + 12
        desc_at = name_at + _align4(namesz)
        if desc_at + descsz > end:
            raise ElfError("%s: truncated note at offset %#x of the note segment" % (where, off))
        name = data[name_at:name_at + namesz].rstrip(b"\0").decode("ascii", "replace")
        yield name, ntype, data[desc_at:desc_at + descsz]
        off = desc_at + _align4(descsz)


def build_id_in(data: bytes, order: str, where: str) -> Optional[bytes]:
    """The GNU build ID among a note section's notes, or None."""
    for name, ntype, desc in iter_notes(data, order, where):
        if name == "GNU" and ntype == NT_GNU_BUILD_ID:
            return desc
    return None


def debug_file_path(root: str, build_id: bytes) -> str:
    """Where GDB, LLDB and elfutils look for the separate debug file of a build ID under root
    (a debug-file directory such as /usr/lib/debug)."""
    h = build_id.hex()
    return os.path.join(root, ".build-id", h[:2], h[2:] + ".debug")


def build_id_of(elf, sections, where: str, allocated: bool = False) -> Optional[bytes]:
    """The build ID in the notes of an ELF file pyelftools opened (`sections`: its headers, as
    core.elf.image.section_headers reads them), or None; `allocated`: in loaded notes only."""
    order = "<" if elf.little_endian else ">"
    found = None
    for sec in sections:
        if sec.type == SHT_NOTE and (sec.flags & SHF_ALLOC or not allocated):
            found = build_id_in(section_data(elf, sec), order, where) or found
    return found


def file_build_id(path: str) -> Optional[bytes]:
    """The build ID of an ELF file from its PT_NOTE segments, or None where it has none or
    cannot be read."""
    from .image import PT_NOTE, file_segments
    got = file_segments(path, PT_NOTE, 1 << 16)
    if got is None:
        return None
    order, notes = got
    try:
        for data in notes:
            found = build_id_in(data, order, path)
            if found is not None:
                return found
    except ElfError:
        return None
    return None
