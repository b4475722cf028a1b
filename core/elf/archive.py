"""Archives (`ar`): the members of a static library, as readelf lists them.

A toolchain engineer's inputs are whole libraries: `readelf --sframe lib.a` prints each member
as `File: lib.a(a.o)`, and a thin archive's (`ar T`: the members stay where they are, the
archive names them) as `File: thin.a[a.o]`.  The format (System V / GNU): the magic `!<arch>\n`
or `!<thin>\n`, then members, each a 60-byte header (name, date, uid, gid, mode, size in
decimal, "`\n") and its bytes, padded to an even offset.  Special members: `/` and `/SYM64/`
(the symbol index), `//` (the names longer than 15 bytes, each ended by "/\n"; a member named
`/N` has the name at offset N there); a BSD name `#1/N` is stored in the member's first N bytes.
A thin archive stores the bytes of its index and names only; a member's name is its path,
relative to the archive's folder.
"""

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from ..errors import ElfError

MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
_HEADER = 60
_FMAG = b"`\n"


class ArchiveError(ElfError):
    """A malformed archive: the byte offset and what is wrong there."""

    def __init__(self, path: str, offset: int, what: str):
        super().__init__("%s: malformed archive at byte offset %#x: %s" % (path, offset, what))
        self.offset = offset


@dataclass
class Member:
    """One member: its name, how readelf names it (`lib.a(a.o)`, `thin.a[a.o]`), and its bytes
    (an archive's own) or the path of its file (a thin archive's)."""
    name: str
    display: str
    data: Optional[bytes] = None
    path: Optional[str] = None

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        with open(self.path, "rb") as fh:
            return fh.read()


def is_archive(path: str) -> bool:
    """Does the file start as an archive (thin or not)?  False where it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) in (MAGIC, THIN_MAGIC)
    except OSError:
        return False


def members(path: str) -> Iterator[Member]:
    """The archive's members in order (the symbol index and the long-name table left out).
    ArchiveError where the archive is malformed, after the members before the fault."""
    with open(path, "rb") as fh:
        data = fh.read()
    thin = data[:8] == THIN_MAGIC
    if data[:8] not in (MAGIC, THIN_MAGIC):
        raise ArchiveError(path, 0, "no archive magic (!<arch> or !<thin>)")
    names = b""
    at = 8
    while at < len(data):
        if data[at:at + 1] == b"\n" and at % 2:
            at += 1                                   # (the padding after an odd-sized member)
            continue
        if at + _HEADER > len(data):
            raise ArchiveError(path, at, "a member header runs past the end of the file (%d bytes left, %d needed)"
                               % (len(data) - at, _HEADER))
        head = data[at:at + _HEADER]
        if head[58:60] != _FMAG:
            raise ArchiveError(path, at + 58, "a member header does not end with the bytes 60 0a")
        raw_name = head[:16].decode("latin-1").rstrip(" ")
        size_text = head[48:58].decode("latin-1").strip()
        if not _decimal(size_text):
            raise ArchiveError(path, at + 48, "a member's size is not a decimal number (%r)" % size_text)
        size = int(size_text)
        body = at + _HEADER
        special = raw_name in _SPECIAL
        stored = size if (not thin or special) else 0
        if body + stored > len(data):
            raise ArchiveError(path, at + 48, "the member's %d bytes run past the end of the file" % size)
        content = data[body:body + stored]
        nxt = body + stored
        nxt += nxt % 2
        if raw_name == "//":
            names = content
        elif raw_name in ("/", "/SYM64/") or raw_name.startswith("__.SYMDEF"):
            pass
        else:
            name = _name(path, at, raw_name, names)
            if raw_name.startswith("#1/"):               # BSD: the name is the first bytes
                k = int(raw_name[3:])
                if k > len(content):
                    raise ArchiveError(path, at, "a BSD member name of %d bytes in a member of %d" % (k, len(content)))
                name, content = content[:k].rstrip(b"\0").decode("utf-8", "replace"), content[k:]
                if name in _SPECIAL or name.startswith("__.SYMDEF"):
                    at = nxt
                    continue                             # (llvm-ar's BSD symbol table)
            if thin:
                where = name if os.path.isabs(name) else os.path.join(os.path.dirname(path), name)
                yield Member(name, "%s[%s]" % (path, name), path=where)
            else:
                yield Member(name, "%s(%s)" % (path, name), data=content)
        at = nxt


_SPECIAL = ("/", "/SYM64/", "//", "__.SYMDEF", "__.SYMDEF SORTED", "__.SYMDEF_64")


def _decimal(text: str) -> bool:
    """ASCII digits only (str.isdigit takes "²", which int() refuses)."""
    return bool(text) and text.isascii() and text.isdigit()


def _name(path: str, at: int, raw: str, names: bytes) -> str:
    """A member's name from its header (GNU `name/`, `/N` into the long-name table, BSD `#1/N`)."""
    if raw.startswith("#1/"):
        if not _decimal(raw[3:]):
            raise ArchiveError(path, at, "a BSD member name %r without a length" % raw)
        return raw
    digits = raw[1:].split(" ", 1)[0].rstrip("/")      # (a thin archive's may end in "/" after the spaces)
    if raw.startswith("/") and _decimal(digits):
        k = int(digits)
        if k >= len(names):
            raise ArchiveError(path, at, "a member name at offset %d of a long-name table of %d bytes" % (k, len(names)))
        end = names.find(b"\n", k)
        text = names[k:end if end >= 0 else len(names)].decode("utf-8", "replace")
        return text[:-1] if text.endswith("/") else text
    return raw[:-1] if raw.endswith("/") else raw


@dataclass
class Input:
    """One ELF input of a command that takes files and archives: how readelf names it, the path
    to read it at (an archive's member: a copy in a temporary folder), or why it cannot be read."""
    display: str
    path: Optional[str]
    error: Optional[str] = None
    member: bool = False


@contextlib.contextmanager
def inputs(paths: Sequence[str]) -> Iterator[Iterator[Input]]:
    """The inputs `paths` name, in order: each file, each member of each archive (a malformed
    archive: its members up to the fault, then the error).  Members are copied out one at a time
    and removed when the next is taken."""
    with tempfile.TemporaryDirectory(prefix="sframe-ar-") as tmp:
        def each() -> Iterator[Input]:
            for path in paths:
                if not is_archive(path):
                    yield Input(path, path)
                    continue
                try:
                    for k, m in enumerate(members(path)):
                        copy = os.path.join(tmp, "member-%d" % k)
                        try:
                            with open(copy, "wb") as fh:
                                fh.write(m.read())
                        except OSError as exc:
                            yield Input(m.display, None, "%s: %s" % (m.display, exc.strerror or exc), True)
                            continue
                        yield Input(m.display, copy, member=True)
                        os.unlink(copy)
                except ArchiveError as exc:
                    yield Input(path, None, str(exc))
                except OSError as exc:
                    yield Input(path, None, "%s: %s" % (path, exc.strerror or exc))
        yield each()
