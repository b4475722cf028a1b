"""Side files for whole trees: `sframe cfi PATH... --build-id-dir DIR`, the tree a debuginfod
server (or a debugger's debug-file directory) serves to every client on a machine or a network.

Any number of files and directories; directories are walked (symbolic links followed only where
they stay inside the directory given; each file once, whatever links lead to it).  Each ELF
program or shared library with SFrame gets DIR/.build-id/xx/rest.debug, written once per build:

- copies of one build (its build ID) share the entry: it is written from the copy with the least
  CFI of its own (the one that needs the most of it), and where the copies' CFI differs, for every
  function (any copy a client holds is then covered);
- an entry written before is left alone while it is up to date: its record
  (DIR/.sframe-cfi/BUILDID.json) names the same copy, options and tool version, and the file
  passes the cache's check (core.elf.sidecache.check: the bytes recorded, it parses, the build
  ID, the sections at the program's addresses);
- a file at the entry's place that this command did not write (a real debug file) is left alone;
- the builds are written in parallel, one per process, largest first.

Unreadable or malformed inputs are one line each and the walk goes on; files that are not ELF
programs or libraries (scripts, data, objects, cores) are passed over.
"""

import enum
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .. import __version__
from ..errors import ElfError, NoSFrameError, SFrameError
from ..parallel import file_pool
from . import sidecache, sidefile, walk
from .debugfile import separate_debug_file
from .image import SHT_NOBITS, load_elf, section_headers
from .notes import build_id_of, debug_file_path

RECORDS = ".sframe-cfi"     # under DIR: one record per entry written
_RECORD_VERSION = 1
_PROGRAM_TYPES = ("ET_EXEC", "ET_DYN")
_CFI_SECTIONS = (".eh_frame", ".debug_frame")
SHF_EXECINSTR = 0x4


class Outcome(enum.Enum):
    WRITTEN = "written"
    UP_TO_DATE = "up to date"
    NOT_NEEDED = "not needed"          # the program's own CFI covers every function SFrame has
    SAME_BUILD = "same build"          # another copy of the build has the entry
    LEFT_ALONE = "left alone"          # a file this command did not write is at the entry's place
    NO_SFRAME = "no SFrame"            # an ELF program or library without an SFrame section
    FAILED = "failed"


@dataclass
class Result:
    """What became of one input file."""
    path: str
    outcome: Outcome
    why: str = ""                      # FAILED: the error; SAME_BUILD: the copy written; else a note
    build_id: Optional[str] = None
    entry: Optional[str] = None
    functions: int = 0
    fdes: int = 0
    code_bytes: int = 0                # its executable sections' bytes
    seconds: float = 0.0
    debug_file: Optional[str] = None
    skipped: int = 0                   # functions left to the program's own CFI
    dynsym: bool = False               # the side file's symbols are the program's .dynsym (no .symtab)
    entry_failed: bool = False         # FAILED at the entry (DIR), not at reading this copy

    def json(self) -> dict:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        return out


@dataclass
class _Copy:
    """An ELF program or library with SFrame, as the walk found it."""
    path: str
    build_id: bytes
    cfi_bytes: int        # its own .eh_frame and .debug_frame
    symtab: bool
    size: int
    code_bytes: int


@dataclass
class _Job:
    """One build: its copies, the one to write from first (the others in turn, where it fails)."""
    copies: List[_Copy]
    all_functions: bool


@dataclass
class Summary:
    directory: str
    results: List[Result]
    seconds: float
    processes: int

    def count(self, outcome: Outcome) -> int:
        return sum(r.outcome is outcome for r in self.results)

    @property
    def failed(self) -> int:
        return self.count(Outcome.FAILED)

    def line(self) -> str:
        def n(k: int, one: str, many: str) -> str:
            return "%d %s" % (k, one if k == 1 else many)
        parts = [n(self.count(Outcome.WRITTEN), "side file written", "side files written"),
                 "%d up to date" % self.count(Outcome.UP_TO_DATE)]
        if self.count(Outcome.NOT_NEEDED):
            parts.append("%d not needed (their own CFI covers every function)" % self.count(Outcome.NOT_NEEDED))
        if self.count(Outcome.SAME_BUILD):
            parts.append(n(self.count(Outcome.SAME_BUILD), "copy of a build that another copy stands for",
                           "copies of builds that other copies stand for"))
        parts.append(n(self.count(Outcome.NO_SFRAME), "ELF file without SFrame", "ELF files without SFrame"))
        if self.count(Outcome.LEFT_ALONE):
            parts.append("%d left alone (another's file at the entry's place)" % self.count(Outcome.LEFT_ALONE))
        if self.failed:
            parts.append("%d failed" % self.failed)
        return "%s: %s (%.1f s, %s)" % (self.directory, ", ".join(parts), self.seconds,
                                        n(self.processes, "process", "processes"))

    def json(self) -> dict:
        return {"directory": self.directory, "seconds": round(self.seconds, 3), "processes": self.processes,
                "counts": {o.value: self.count(o) for o in Outcome},
                "files": [r.json() for r in self.results]}


def _look(found: Tuple[str, bool]):
    """A _Copy, a Result (no SFrame, or failed), or None (not an ELF program or library, under a
    directory given: passed over; a file given that is not is a failure)."""
    path, given = found
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return Result(path, Outcome.FAILED, "not an ELF file") if given else None
    except FileNotFoundError:
        return Result(path, Outcome.FAILED, "no such file") if given else None    # (gone during the walk)
    except OSError as exc:
        return Result(path, Outcome.FAILED, "cannot read it: %s" % (exc.strerror or exc))

    def load(elf, fh):
        if elf["e_type"] not in _PROGRAM_TYPES:
            return Result(path, Outcome.FAILED, "an ELF file of type %s, not a program or a shared library: no "
                          "debugger looks a side file up for it" % elf["e_type"]) if given else None
        sections = section_headers(elf)
        sframe = any(s.name == ".sframe" and s.type != SHT_NOBITS and s.size for s in sections)
        code = sum(s.size for s in sections if s.flags & SHF_EXECINSTR and s.type != SHT_NOBITS)
        if not sframe:
            return Result(path, Outcome.NO_SFRAME, code_bytes=code)
        build_id = build_id_of(elf, sections, path, allocated=True)
        if build_id is None:
            return Result(path, Outcome.FAILED, "it has no build ID (link it with -Wl,--build-id): a side file "
                          "under a debug-file directory is found by it; write it with -o and load it by hand "
                          "instead", code_bytes=code)
        return _Copy(path, build_id, sum(s.size for s in sections if s.name in _CFI_SECTIONS and s.type != SHT_NOBITS),
                     any(s.name == ".symtab" for s in sections), os.path.getsize(path), code)
    try:
        return load_elf(path, load, "its headers")
    except (ElfError, OSError) as exc:
        return Result(path, Outcome.FAILED, _text(exc, path))


def _text(exc: BaseException, path: str) -> str:
    """An error's text without the path it starts with (each line names the file itself); an
    OSError about another file (the directory written into) names that one."""
    if isinstance(exc, OSError):
        text = exc.strerror or str(exc)
        return text if not exc.filename or exc.filename == path else "%s: %s" % (exc.filename, text)
    text = str(exc)
    return text[len(path) + 2:] if text.startswith(path + ": ") else text


def _jobs(copies: List[_Copy], all_functions: bool) -> List[_Job]:
    """One job per build, the copy with the least CFI of its own first."""
    builds: Dict[bytes, List[_Copy]] = {}
    for c in copies:
        builds.setdefault(c.build_id, []).append(c)
    jobs = [_Job(sorted(group, key=lambda c: (c.cfi_bytes, not c.symtab, -c.size, c.path)),
                 all_functions or len({c.cfi_bytes for c in group}) > 1) for group in builds.values()]
    jobs.sort(key=lambda j: -j.copies[0].size)      # (the largest first: the processes end together)
    return jobs


class _Writer:
    """Writes one build's entry (in a pool's process: everything it needs is in itself)."""

    def __init__(self, directory: str, registers: bool, debug_file: Optional[str], find_debug_file: bool,
                 workers: int = 1):
        self.directory = directory
        self.workers = workers
        self.registers = registers
        self.debug_file = debug_file
        self.find_debug_file = find_debug_file

    def __call__(self, job: _Job) -> List[Result]:
        """The results of the build's copies: one written (or up to date, or not needed) from the
        first copy that can be, the copies before it failed, those after it the same build."""
        out = []
        for k, c in enumerate(job.copies):
            start = time.monotonic()
            got = Result(c.path, Outcome.FAILED, build_id=c.build_id.hex(), code_bytes=c.code_bytes)
            try:
                got = self._write(c, job.all_functions, got)
            except _EntryError as exc:
                got.why, got.entry_failed = str(exc), True       # (about the entry: no other copy helps)
            except (ElfError, SFrameError, OSError) as exc:
                got.why = _text(exc, c.path)
            except Exception as exc:       # (a defect of ours: said, and the walk goes on)
                got.why = "internal error: %s: %s" % (type(exc).__name__, exc)
            got.seconds = time.monotonic() - start
            out.append(got)
            if got.outcome is not Outcome.FAILED or got.entry_failed:
                out += [Result(o.path, Outcome.SAME_BUILD, c.path, o.build_id.hex(), code_bytes=o.code_bytes)
                        for o in job.copies[k + 1:]]
                break
        return out

    def _write(self, c: _Copy, all_functions: bool, got: Result) -> Result:
        entry = debug_file_path(self.directory, c.build_id)
        record_path = os.path.join(self.directory, RECORDS, c.build_id.hex() + ".json")
        record = _record(record_path)
        debug = self.debug_file
        if debug is None and self.find_debug_file:
            debug = separate_debug_file(c.path, skip=self.directory)
            kept = record.get("debug_file") if record else None
            if debug is None and isinstance(kept, str) and os.path.isfile(kept):
                debug = kept           # (given once with --debug-file: the entry keeps carrying it)
        # Every function, once so written (copies whose CFI differs, seen now or by an earlier run:
        # the entry must serve the one with the least).
        every = all_functions or bool(record and (record.get("all") is True
                                                  or record.get("cfi_bytes", c.cfi_bytes) != c.cfi_bytes))
        copy = sidecache.copy_of(c.path, debug)
        wanted = {"version": _RECORD_VERSION, "tool": __version__, "program": os.path.realpath(c.path),
                  "shape": copy.shape, "all": every, "registers": self.registers,
                  "debug_file": os.path.realpath(debug) if debug else None, "cfi_bytes": c.cfi_bytes}
        got.entry, got.debug_file = entry, debug
        if record is not None and all(record.get(k) == v for k, v in wanted.items()):
            if record.get("why") and not os.path.lexists(entry):
                got.outcome, got.why, got.entry = Outcome.NOT_NEEDED, record["why"], None
                return got
            if not record.get("why") and sidecache.check(entry, record, copy) is None:
                got.outcome = Outcome.UP_TO_DATE
                got.functions, got.fdes = record.get("functions", 0), record.get("fdes", 0)
                got.skipped, got.dynsym = record.get("skipped", 0), record.get("dynsym", False)
                return got
        if os.path.lexists(entry) and not _written_here(entry, record):
            got.outcome = Outcome.LEFT_ALONE
            got.why = "%s is there and this command did not write it (a real debug file?): left alone" % entry
            return got
        tmp = os.path.join(self.directory, RECORDS, "tmp", "%s.%d.debug" % (c.build_id.hex(), os.getpid()))
        try:
            os.makedirs(os.path.dirname(entry), exist_ok=True)
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
        except OSError as exc:
            raise _EntryError("cannot write into %s: %s" % (exc.filename or self.directory, exc.strerror)) from None
        try:
            made = sidefile.write(c.path, tmp, callee_saved=self.registers, all_functions=every,
                                  workers=self.workers, debug_file=debug)
        except NoSFrameError as exc:
            got.why = _text(exc, c.path)
            return got
        got.functions, got.fdes, got.skipped, got.dynsym = made.functions, made.fdes, made.skipped, \
            made.symtab_from_dynsym
        try:
            if made.functions == 0:
                os.unlink(tmp)
                wanted["why"] = sidecache.COVERED
                got.outcome, got.why, got.entry = Outcome.NOT_NEEDED, sidecache.COVERED, None
            else:
                _public(tmp)
                wanted["size"], wanted["sha256"] = sidecache.file_digest(tmp)
                wanted.update(functions=made.functions, fdes=made.fdes, skipped=made.skipped,
                              dynsym=made.symtab_from_dynsym)
                got.outcome = Outcome.WRITTEN
            # The record first, then the entry: an entry in place always has its record (one
            # interrupted in between is written again: the record's digest is not the file's).
            sidefile.write_private(record_path, json.dumps(wanted, indent=1).encode())
            _public(record_path)
            if made.functions == 0:
                if os.path.lexists(entry):
                    os.unlink(entry)             # (ours: _written_here said so)
            else:
                os.replace(tmp, entry)
        except OSError as exc:
            raise _EntryError("cannot write into %s: %s" % (exc.filename or self.directory, exc.strerror)) from None
        return got


class _EntryError(Exception):
    """The entry cannot be written (the directory): the same for every copy of the build."""


def _written_here(entry: str, record: Optional[dict]) -> bool:
    """Is the file at the entry's place one this command wrote (its record says it wrote one
    there; a damaged one is written again, as the cache's are)?  No record, or a record of a build
    that needed none: another's file."""
    return record is not None and isinstance(record.get("sha256"), str)


def _record(path: str) -> Optional[dict]:
    try:
        with open(path) as fh:
            got = json.load(fh)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _public(path: str) -> None:
    """Readable by all, as the umask allows: a server of the tree may run as another user."""
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(path, 0o644 & ~mask)


def _remove_leftovers(directory: str) -> None:
    """Remove what interrupted writers left (RECORDS/tmp/BUILDID.PID.debug and its .tmpPID, of
    processes of this machine that have ended)."""
    folder = os.path.join(directory, RECORDS, "tmp")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pids = [p for p in name.replace(".tmp", ".").split(".") if p.isdigit()]
        if pids and not any(sidecache.alive(int(p)) for p in pids):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


def run(paths: Sequence[str], directory: str, *, all_functions: bool = False, registers: bool = True,
        processes: int = 1, debug_file: Optional[str] = None, find_debug_file: bool = True,
        progress: Optional[Callable[[str, int, int, str], None]] = None) -> Summary:
    """Write the side files of every ELF program and library with SFrame under `paths` into
    `directory` (its `.build-id` layout) in `processes` processes.  `progress(stage, done, total,
    path)` is called as each file is looked at ("looked at") and each build is written
    ("written")."""
    start = time.monotonic()
    try:
        for folder in (os.path.join(directory, ".build-id"), os.path.join(directory, RECORDS, "tmp")):
            os.makedirs(folder, exist_ok=True)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied", folder)
    except OSError as exc:
        raise ElfError("cannot write into %s: %s" % (exc.filename or directory, exc.strerror or exc)) from None
    found, bad = walk.split(paths)
    results = [Result(path, Outcome.FAILED, why) for path, why in bad]
    _remove_leftovers(directory)
    pool = file_pool(processes, len(found))
    copies: List[_Copy] = []
    jobs: List[_Job] = []
    try:
        looked = pool.imap(_look, found, chunksize=8) if pool else map(_look, found)
        for k, got in enumerate(looked):
            if progress:
                progress("looked at", k + 1, len(found), found[k][0])
            if isinstance(got, _Copy):
                copies.append(got)
            elif got is not None:
                results.append(got)
        jobs = _jobs(copies, all_functions)
        writer = _Writer(directory, registers, debug_file, find_debug_file, processes if len(jobs) == 1 else 1)
        written = pool.imap_unordered(writer, jobs) if pool and len(jobs) > 1 else map(writer, jobs)
        for k, got in enumerate(written):
            if progress:
                progress("written", k + 1, len(jobs), got[0].path)
            results += got
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        _remove_leftovers(directory)
    order = {p: k for k, (p, _given) in enumerate(found)}
    results.sort(key=lambda r: (order.get(r.path, -1), r.path))
    return Summary(directory, results, time.monotonic() - start, processes if pool else 1)
