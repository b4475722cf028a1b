"""Side files of DWARF CFI (core.elf.sidefile) kept in the user's cache, one per copy of a program
build, checked before each use.

Layout, under the cache directory (the user's alone: mode 0700, files 0600):

    copies/BUILDID/SHAPE.debug   the side file of one copy of a build
    copies/BUILDID/SHAPE.json    what it was made from, its size and SHA-256 (or why none is needed)
    copies/BUILDID/SHAPE.lock, .progress, .failed
                                 the background job writing it (core.elf.sidework)
    stack/BUILDID-SHAPE-PID-N.debug  a debugger's side file of the functions on its stacks, until
                                 the entry is there (`partial`)
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
import itertools
import os
import struct
from typing import TYPE_CHECKING, Collection, NamedTuple, Optional, Tuple, Union

from ..dwarf.coverage import ALL_COVERED
from ..errors import CfiError, ElfError, NoSFrameError, SFrameError
from .cachedir import CacheError, cache_dir, private_dir
from .image import SHF_ALLOC, load_elf, section_data, section_headers
from .notes import build_id_of, debug_file_path

if TYPE_CHECKING:
    from ..dwarf.writer import Progress

NO_SFRAME = "it has no SFrame section"
COVERED = ALL_COVERED
_META_VERSION = 2


class Made(NamedTuple):
    """A program's side file (None when it needs none or cannot have one) and why."""
    path: Optional[str]
    why: str
    written: bool = False        # written now, not found in the cache
    sframe: bool = True          # False: the program has no usable SFrame (nothing to say of it)
    redone: str = ""             # the cache entry was bad and was written again: why


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


def copy_of(program: str, debug_file: Optional[str]) -> _Copy:
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


def file_digest(path: str) -> Tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def check(path: str, meta: dict, copy: _Copy) -> Optional[str]:
    """Why the side file at `path` cannot serve `copy` (None: it can): not the file recorded
    (truncated, altered), not ELF, no `.debug_frame` whose entries chain, another build ID, other
    addresses."""
    try:
        size, digest = file_digest(path)
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
    broken = _unchained(frame, ">" if big else "<")
    return "its .debug_frame does not parse: %s" % broken if broken else None


def _unchained(frame: bytes, e: str) -> Optional[str]:
    """Why the entries of a `.debug_frame` do not follow one another from its start to its end,
    each FDE pointing at a CIE (None: they do).  The file's digest says it is the one written; this
    says that what was written can be read, at a cost per entry, not per instruction (a whole
    parse of a large program's took longer than the rest of a session's first stop)."""
    word, wide = struct.Struct(e + "I").unpack_from, struct.Struct(e + "Q").unpack_from
    cies, fdes = set(), []
    at, end = 0, len(frame)
    while at < end:
        if at + 4 > end:
            return "an entry at %#x runs past its end" % at
        (length,) = word(frame, at)
        size, id_at = 4, at + 4
        if length == 0xFFFFFFFF:
            if at + 12 > end:
                return "an entry at %#x runs past its end" % at
            (length,) = wide(frame, at + 4)
            size, id_at = 12, at + 12
        stop = at + size + length
        if length and (stop > end or length < (8 if size == 12 else 4)):
            return "the entry at %#x runs past its end" % at
        if length:
            (cie,) = wide(frame, id_at) if size == 12 else word(frame, id_at)
            if cie == (0xFFFFFFFFFFFFFFFF if size == 12 else 0xFFFFFFFF):
                cies.add(at)
            else:
                fdes.append((at, cie))
        at = stop
    stray = next(((at, cie) for at, cie in fdes if cie not in cies), None)
    return "the FDE at %#x points at no CIE (%#x)" % stray if stray else None


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


class _Place(NamedTuple):
    """Where one copy's side file is kept in the cache."""
    directory: str
    copy: _Copy
    entry: str               # copies/BUILDID/SHAPE.debug
    meta: str                # copies/BUILDID/SHAPE.json

    def beside(self, suffix: str) -> str:
        """A file of this entry's own (its lock, its progress), named SHAPE + suffix."""
        return self.entry[:-len(".debug")] + suffix


def place(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Union[_Place, Made]:
    """Where this copy of `program` has its side file in the cache (created, private), or why it
    cannot have one (a Made)."""
    try:
        directory = private_dir(directory or cache_dir())
    except CacheError as exc:
        return Made(None, str(exc))
    try:
        copy = copy_of(program, debug_file)
    except (ElfError, OSError) as exc:
        return Made(None, str(exc) if isinstance(exc, ElfError) else "%s: %s" % (program, exc.strerror))
    try:
        where = private_dir(os.path.join(private_dir(os.path.join(directory, "copies")), copy.build_id.hex()))
    except CacheError as exc:
        return Made(None, str(exc))
    return _Place(directory, copy, os.path.join(where, copy.shape + ".debug"), os.path.join(where, copy.shape + ".json"))


def _lookup(at: _Place) -> Tuple[Optional[Made], str]:
    """(the cache's answer for this copy, None where it has none; why a bad entry must be written
    again, "" where there is none)."""
    try:
        with open(at.meta) as fh:
            import json  # (here: a first stop with an empty cache reads no record)
            meta = json.load(fh)
        if not isinstance(meta, dict) or meta.get("version") != _META_VERSION:
            raise ValueError("a record of another version")
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:
        return None, "its record cannot be read (%s)" % exc
    why = meta.get("why")
    if why and isinstance(why, str):
        return Made(None, why, sframe=why != NO_SFRAME), ""
    redone = check(at.entry, meta, at.copy) or ""
    if redone:
        return None, redone
    _link_as_search_entry(at.entry, at.directory, at.copy.build_id)
    return Made(at.entry, "cached"), ""


def cached(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None) -> Optional[Made]:
    """The side file of this copy of `program` where the cache has a good one (or knows why it
    needs none, or why it cannot have one); None where it must be written."""
    at = place(program, directory, debug_file)
    return at if isinstance(at, Made) else _lookup(at)[0]


def side_file(program: str, directory: Optional[str] = None, debug_file: Optional[str] = None,
              progress: Optional["Progress"] = None) -> Made:
    """The side file of this copy of `program`, from the cache (checked) or written into it now.
    `debug_file`: the program's own separate debug file, whose debug information and symbols the
    side file carries too.  `progress`: told how far the analysis is, where it is written."""
    at = place(program, directory, debug_file)
    if isinstance(at, Made):
        return at
    got, redone = _lookup(at)
    if got is not None:
        return got
    note = ""
    from . import sidefile  # (the writer: not imported where only the cache is read)
    try:
        made = sidefile.write(program, at.entry, debug_file=debug_file, progress=progress)
        if made.functions == 0:
            os.unlink(at.entry)
            note = COVERED
    except NoSFrameError:
        note = NO_SFRAME
    except SFrameError as exc:
        return Made(None, str(exc), sframe=False)
    except (ElfError, CfiError) as exc:
        return Made(None, str(exc))
    except OSError as exc:
        return Made(None, "cannot write the side file into the cache %s: %s" % (at.directory, exc.strerror))
    record = {"version": _META_VERSION, "program": os.path.realpath(program), "why": note}
    try:
        if not note:
            record["size"], record["sha256"] = file_digest(at.entry)
        import json
        sidefile.write_private(at.meta, json.dumps(record, indent=1).encode())
    except OSError as exc:
        return Made(None, "cannot write the side file into the cache %s: %s" % (at.directory, exc.strerror))
    if note:
        return Made(None, note, sframe=note != NO_SFRAME)
    _link_as_search_entry(at.entry, at.directory, at.copy.build_id)
    return Made(at.entry, "written", True, redone=redone)


_STACK_FILES = itertools.count()


def partial(program: str, starts: Optional[Collection[int]], directory: Optional[str] = None,
            debug_file: Optional[str] = None, eh_frame: bool = False, empty_unit: bool = False,
            symbols: bool = False) -> Made:
    """A side file of CFA, RA and FP rows only (every callee-saved register undefined: never
    wrong), of the functions that start at `starts` (link-time addresses) alone: what a debugger
    needs to unwind the stacks of one stop, made in time proportional to them; of every function
    where `starts` is None.  Not an entry of the cache but this process's own file under stack/, a
    new one at each call (a debugger that has read a file by a name may read it again); those of
    processes that have ended are removed.  `eh_frame`: the rows as `.eh_frame`; `empty_unit`: with
    a compile unit that describes nothing (sidefile.write).  Without the program's `.symtab` (LLDB,
    the one debugger that takes these files, keeps the program's own where a side file has none),
    but where `symbols` (LLDB 16 to 21's, added after the program itself: lldb_plugin.sidefiles
    ._program_symbols)."""
    at = place(program, directory, debug_file)
    if isinstance(at, Made):
        return at
    try:
        where = private_dir(os.path.join(at.directory, "stack"))
    except CacheError as exc:
        return Made(None, str(exc))
    _remove_stale(where)
    from . import sidefile
    path = os.path.join(where, "%s-%s-%d-%d%s.debug" % (at.copy.build_id.hex(), at.copy.shape, os.getpid(),
                                                         next(_STACK_FILES), ".eh" if eh_frame else ""))
    try:
        sidefile.write(program, path, callee_saved=False, debug_file=debug_file, only=starts, eh_frame=eh_frame,
                        gaps=True, empty_unit=empty_unit, symbols=symbols)
    except NoSFrameError:
        return Made(None, NO_SFRAME, sframe=False)
    except SFrameError as exc:
        return Made(None, str(exc), sframe=False)
    except (ElfError, CfiError) as exc:
        return Made(None, str(exc))
    except OSError as exc:
        return Made(None, "cannot write the side file into the cache %s: %s" % (where, exc.strerror))
    return Made(path, "CFA, RA and FP", True)


def is_eh(path: str) -> bool:
    """Is `path` a file `partial` made as `.eh_frame`?"""
    return is_partial(path) and path.endswith((".eh.debug", ".eh.debug.again"))


def is_partial(path: str) -> bool:
    """Is `path` a file `partial` made?"""
    return os.path.basename(os.path.dirname(path)) == "stack" and path.endswith((".debug", ".debug.again"))


def discard(path: str) -> None:
    """Remove a file `partial` made (and a link to it beside it), once it is replaced."""
    for name in (path, path + ".again"):
        try:
            os.unlink(name)
        except OSError:
            pass


def _remove_stale(where: str) -> None:
    """Remove the files under stack/ of processes that have ended."""
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or not parts[2].isdigit() or alive(int(parts[2])):
            continue
        try:
            os.unlink(os.path.join(where, name))
        except OSError:
            pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def is_entry_of(path: str, made: Made) -> bool:
    """Is `path` (a module's symbol file) this copy's side file (the entry, or a link to it)?"""
    try:
        return made.path is not None and os.path.samefile(path, made.path)
    except OSError:
        return False

