"""Side files of DWARF CFI (core.elf.sidefile) kept in the user's cache, one per program build,
where debuggers look for separate debug files: CACHE/.build-id/xx/rest.debug.

A side file is written the first time a program needs one and kept: the next session finds it at
once (and LLDB finds it by itself for a module without debug information, through
`target.debug-file-search-paths`).  A stamp beside it records the program it was made from (path,
size, modification time, inode): a rebuilt program with the same build ID is written again.  A
program that needs none (no SFrame, or its own CFI covers every function SFrame does) gets a
stamp saying why, so it is not examined again either.
"""

import os
from typing import NamedTuple, Optional

from ..errors import ElfError, NoSFrameError, SFrameError
from . import sidefile

NO_SFRAME = "it has no SFrame section"


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


def _identity(program: str) -> str:
    st = os.stat(program)
    return "%s %d %d %d\n" % (os.path.realpath(program), st.st_size, st.st_mtime_ns, st.st_ino)


def side_file(program: str, directory: Optional[str] = None) -> Made:
    """The side file of `program`, from the cache or written into it now."""
    directory = directory or cache_dir()
    try:
        target = sidefile.build_id_path(directory, program)
    except ElfError as exc:
        return Made(None, str(exc))
    stamp = target + ".stamp"
    try:
        ident = _identity(program)
    except OSError as exc:
        return Made(None, "%s: %s" % (program, exc.strerror))
    try:
        with open(stamp) as fh:
            recorded = fh.read()
    except OSError:
        recorded = ""
    first, _, why = recorded.partition("\n")
    if first + "\n" == ident:
        if why.strip():
            return Made(None, why.strip(), sframe=why.strip() != NO_SFRAME)
        if os.path.isfile(target):
            return Made(target, "cached")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    note = ""
    try:
        made = sidefile.write(program, target)
        if made.functions == 0:
            os.unlink(target)
            note = "its own DWARF CFI covers every function its SFrame does"
    except NoSFrameError:
        note = NO_SFRAME
    except SFrameError as exc:
        return Made(None, str(exc), sframe=False)
    except ElfError as exc:
        return Made(None, str(exc))
    tmp = "%s.tmp%d" % (stamp, os.getpid())
    with open(tmp, "w") as fh:
        fh.write(ident + note)
    os.replace(tmp, stamp)
    return Made(None, note, sframe=note != NO_SFRAME) if note else Made(target, "written", True)

