"""Side files of DWARF CFI (core.elf.sidefile) kept in the user's cache, one per copy of a program
build, checked before each use.

Layout, under the cache directory (the user's alone: mode 0700, files 0600):

    copies/BUILDID/SHAPE.debug   the side file of one copy of a build
    copies/BUILDID/SHAPE.json    what it was made from, its size and SHA-256 (or why none is needed)
    .build-id/xx/rest.debug      a link to the copy's side file used last: where debuggers look a
                                 separate debug file up by build ID (LLDB's debug-file search path)

A build ID is shared by every copy of a build, whatever was stripped from it (`strip -s`,
`--strip-debug`, `.eh_frame` removed): the side file carries the copy's symbols and covers what
its own CFI does not, so each copy has its own, keyed by SHAPE, a digest of the copy's ELF header
and section headers (what was stripped shows there).  Before an entry is used it is checked:
complete and unaltered (its size and digest as recorded), parseable (ELF headers and
`.debug_frame`), the program's build ID, and its sections at the program's addresses; a bad one is
written again and `Made.why` says why.  A copy whose build needs no side file (no SFrame, or its
own CFI covers every SFrame function) is recorded as such and not examined again.
"""

import hashlib
import json
import os
import stat
from typing import List, NamedTuple, Optional, Tuple

from ..dwarf.coverage import ALL_COVERED
from ..errors import ElfError, NoSFrameError, SFrameError
from . import sidefile
from .image import SHF_ALLOC, load_elf, section_data, section_headers
from .notes import build_id_of, debug_file_path

NO_SFRAME = "it has no SFrame section"
COVERED = ALL_COVERED
_META_VERSION = 2


def cache_dir() -> str:
    """$SFRAME_CFI_CACHE, else $SFRAME_CACHE/cfi, else $XDG_CACHE_HOME/sframe-gdb/cfi, else
    ~/.cache/sframe-gdb/cfi."""
    if os.environ.get("SFRAME_CFI_CACHE"):
        return os.environ["SFRAME_CFI_CACHE"]
    base = os.environ.get("SFRAME_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "sframe-gdb")
    return os.path.join(base, "cfi")


class Made(NamedTuple):
    """A program's side file (None when it needs none or cannot have one) and why."""
    path: Optional[str]
    why: str
    written: bool = False        # written now, not found in the cache
    sframe: bool = True          # False: the program has no usable SFrame (nothing to say of it)
    redone: str = ""             # the cache entry was bad and was written again: why


class CacheError(Exception):
    """The cache cannot be used (one line: where, and why)."""


def private_dir(path: str) -> str:
    """`path`, created if missing, as a directory only its owner, this user, can enter: a
    directory another user owns is refused, a shared one made private."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise CacheError("cannot create the side-file cache %s: %s" % (path, exc.strerror)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError("the side-file cache %s is not a directory" % path)
    if st.st_uid != os.getuid():
        raise CacheError("the side-file cache %s belongs to another user (uid %d): not used" % (path, st.st_uid))
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise CacheError("cannot make the side-file cache %s private: %s" % (path, exc.strerror)) from None
    return path


class _Copy(NamedTuple):
    """What identifies one copy of a program: its build ID and the digest of its headers."""
    build_id: bytes
    shape: str
    sections: Tuple[Tuple[str, int, int], ...]     # (name, address, size) of its allocated sections


def _build_id_and_layout(elf, path: str):
    """(build ID or None, (name, address, size) of the allocated sections, section headers) of an
    ELF file pyelftools opened."""
    sections = section_headers(elf)
    build_id = build_id_of(elf, sections, path, allocated=True)
    alloc = tuple((s.name, s.addr, s.size) for s in sections if s.flags & SHF_ALLOC and s.number)
    return build_id, alloc, sections


def _copy_of(program: str, debug_file: Optional[str]) -> _Copy:
    def load(elf, fh) -> _Copy:
        build_id, alloc, sections = _build_id_and_layout(elf, program)
        if build_id is None:
            raise ElfError("%s has no build ID (link it with -Wl,--build-id): a side file is found by it" % program)
        digest = hashlib.sha256()
        fh.seek(0)
        digest.update(fh.read(64 if elf.elfclass == 64 else 52))
        for sec in sections:
            digest.update(repr(tuple(sec)).encode())
        if debug_file is not None:
            digest.update(b"debug file:" + os.path.realpath(debug_file).encode())
            st = os.stat(debug_file)
            digest.update(b"%d %d" % (st.st_size, st.st_mtime_ns))
        return _Copy(build_id, digest.hexdigest()[:20], alloc)
    return load_elf(program, load, "its headers")


def _file_digest(path: str) -> Tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def check(path: str, meta: dict, copy: _Copy) -> Optional[str]:
    """Why the side file at `path` cannot serve `copy` (None: it can): not the file recorded
    (truncated, altered), not ELF, no `.debug_frame` that parses, another build ID, other
    addresses."""
    from ..dwarf.coverage import DEBUG_FRAME, CfiIndex, CfiSection
    try:
        size, digest = _file_digest(path)
    except OSError as exc:
        return "cannot read it: %s" % exc.strerror
    recorded = meta.get("size")
    if not isinstance(recorded, int) or size != recorded or digest != meta.get("sha256"):
        return "it is not the file written (%d bytes, %r recorded, or other bytes)" % (size, recorded)

    def load(elf, _fh):
        bid, alloc, sections = _build_id_and_layout(elf, path)
        frame = next((section_data(elf, sec) for sec in sections if sec.name == ".debug_frame"), None)
        return bid, frame, alloc, not elf.little_endian, 8 if elf.elfclass == 64 else 4
    try:
        bid, frame, alloc, big, size = load_elf(path, load, "its headers")
    except (ElfError, OSError) as exc:
        return "it does not parse: %s" % exc
    if bid != copy.build_id:
        return "its build ID is %s, the program's %s" % (bid.hex() if bid else "none", copy.build_id.hex())
    if not set(copy.sections) <= set(alloc):
        return "its sections are not at the program's addresses"
    if not frame:
        return "it has no .debug_frame"
    problems: List[str] = []
    cfi = CfiIndex(lambda: [CfiSection(DEBUG_FRAME, frame, 0, big_endian=big, addr_size=size)], problems.append)
    cfi.find(0)
    if problems:
        return "its .debug_frame does not parse: %s" % problems[0]
    return None


def _link_as_search_entry(entry: str, directory: str, build_id: bytes) -> None:
    """Point the build ID's search-path entry at this copy's side file (a hard link: LLDB finds it
    by build ID when it creates a module; the plugin checks that it is the module's own copy)."""
    target = search_entry(directory, build_id)
    try:
        if os.path.exists(target) and os.path.samefile(target, entry):
            return
        private_dir(os.path.dirname(os.path.dirname(target)))
        private_dir(os.path.dirname(target))
        tmp = "%s.tmp%d" % (target, os.getpid())
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.link(entry, tmp)
        os.replace(tmp, target)
    except (OSError, CacheError):
        pass          # (the search-path entry is a convenience: the plugin attaches the file itself)


def search_entry(directory: str, build_id: bytes) -> str:
    """Where debuggers look the side file of a build up by build ID in the cache."""
    return debug_file_path(directory, build_id)


def side_file(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Made:
    """The side file of this copy of `program`, from the cache (checked) or written into it now.
    `debug_file`: the program's own separate debug file, whose debug information and symbols the
    side file carries too."""
    try:
        directory = private_dir(directory or cache_dir())
    except CacheError as exc:
        return Made(None, str(exc))
    try:
        copy = _copy_of(program, debug_file)
    except (ElfError, OSError) as exc:
        return Made(None, str(exc) if isinstance(exc, ElfError) else "%s: %s" % (program, exc.strerror))
    bid = copy.build_id.hex()
    try:
        where = private_dir(os.path.join(private_dir(os.path.join(directory, "copies")), bid))
    except CacheError as exc:
        return Made(None, str(exc))
    entry = os.path.join(where, copy.shape + ".debug")
    meta_path = os.path.join(where, copy.shape + ".json")
    redone = ""
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
        if not isinstance(meta, dict) or meta.get("version") != _META_VERSION:
            raise ValueError("a record of another version")
    except FileNotFoundError:
        meta = None
    except (OSError, ValueError) as exc:
        meta, redone = None, "its record cannot be read (%s)" % exc
    if meta is not None:
        why = meta.get("why")
        if why and isinstance(why, str):
            return Made(None, why, sframe=why != NO_SFRAME)
        redone = check(entry, meta, copy) or ""
        if not redone:
            _link_as_search_entry(entry, directory, copy.build_id)
            return Made(entry, "cached")
    note = ""
    try:
        made = sidefile.write(program, entry, debug_file=debug_file)
        if made.functions == 0:
            os.unlink(entry)
            note = COVERED
    except NoSFrameError:
        note = NO_SFRAME
    except SFrameError as exc:
        return Made(None, str(exc), sframe=False)
    except ElfError as exc:
        return Made(None, str(exc))
    except OSError as exc:
        return Made(None, "cannot write the side file into the cache %s: %s" % (directory, exc.strerror))
    record = {"version": _META_VERSION, "program": os.path.realpath(program), "why": note}
    try:
        if not note:
            record["size"], record["sha256"] = _file_digest(entry)
        sidefile.write_private(meta_path, json.dumps(record, indent=1).encode())
    except OSError as exc:
        return Made(None, "cannot write the side file into the cache %s: %s" % (directory, exc.strerror))
    if note:
        return Made(None, note, sframe=note != NO_SFRAME)
    _link_as_search_entry(entry, directory, copy.build_id)
    return Made(entry, "written", True, redone=redone)


def is_entry_of(path: str, made: Made) -> bool:
    """Is `path` (a module's symbol file) this copy's side file (the entry, or a link to it)?"""
    try:
        return made.path is not None and os.path.samefile(path, made.path)
    except OSError:
        return False

