"""A program's own separate debug file (a `-dbgsym` package's, `objcopy --only-keep-debug`'s),
found as GDB finds it: by build ID under a debug-file directory, then by `.gnu_debuglink` (name and
CRC-32) beside the program, in its `.debug` folder, or under a debug-file directory.

A side file takes the place of that file in a debugger (core.elf.sidefile), so it carries the
debug information and symbols found here: the debugger unwinds through SFrame and still shows
variables and lines.
"""

import os
import struct
import zlib
from typing import Optional, Sequence

from .image import load_elf, section_data, section_headers
from .notes import build_id_of, debug_file_path

DEBUG_DIRS = ("/usr/lib/debug",)


def _links(program: str):
    """(build ID or None, (debuglink name, CRC-32) or None) of a program."""
    def load(elf, _fh):
        order = "<" if elf.little_endian else ">"
        sections = section_headers(elf)
        bid, link = build_id_of(elf, sections, program), None
        for sec in sections:
            if sec.name == ".gnu_debuglink":
                data = section_data(elf, sec)
                end = data.find(b"\0")
                at = (end + 4) & ~3
                if end > 0 and at + 4 <= len(data):
                    link = (data[:end].decode("utf-8", "replace"), struct.unpack_from(order + "I", data, at)[0])
        return bid, link
    return load_elf(program, load, "its notes")


def _crc(path: str) -> Optional[int]:
    crc = 0
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                crc = zlib.crc32(block, crc)
    except OSError:
        return None
    return crc


def separate_debug_file(program: str, dirs: Sequence[str] = DEBUG_DIRS, skip: Optional[str] = None) -> Optional[str]:
    """The path of the program's separate debug file, or None (none found, or only files under
    `skip`, such as a cache of side files)."""
    try:
        bid, link = _links(program)
    except Exception:        # not an ELF file we can read: no debug file to find
        return None
    real = os.path.realpath(program)

    def usable(path: str) -> bool:
        full = os.path.realpath(path)
        return os.path.isfile(full) and full != real and not (skip and full.startswith(os.path.realpath(skip) + os.sep))
    if bid is not None:
        for d in dirs:
            path = debug_file_path(d, bid)
            if usable(path):
                return path
    if link is not None and bid is not None:
        # (only a file of the same build: a side file is matched to the program by its build ID)
        name, crc = link
        here = os.path.dirname(real)
        for path in [os.path.join(here, name), os.path.join(here, ".debug", name)] + \
                [os.path.join(d + here, name) for d in dirs]:
            if usable(path) and _crc(path) == crc and _build_id(path) == bid:
                return path
    return None


def _build_id(path: str) -> Optional[bytes]:
    try:
        return _links(path)[0]
    except Exception:        # not an ELF file we can read
        return None
