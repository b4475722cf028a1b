"""A local copy of a file the debugger reads from its target (GDB's `target:` files), kept by build ID.

A remote target's files (gdbserver on a board, qemu-user's gdbstub) are not on this machine, and
a file of the same name here (this machine's C library) is another build.  The copy is taken once
through the debugger (`fetch`), checked by the build ID the debugger reported, and kept in the
cache by that build ID: the next session, and the next copy of the same build, take it from
there.  A file without a build ID is copied for this process only.
"""

import atexit
import os
import shutil
import tempfile
from typing import Callable, NamedTuple, Optional

from ..elf.cachedir import CacheError, cache_root, private_dir
from ..elf.notes import file_build_id

TARGET_PREFIX = "target:"
_WHAT = "cache of copies of the target's files"


class Copy(NamedTuple):
    """Where a module's file was found: `path` (None: nowhere) and how, said to the user."""
    path: Optional[str]
    source: str


def remote_name(name: str) -> Optional[str]:
    """The target's path of a debugger's `target:` file name, or None for a local name."""
    return name[len(TARGET_PREFIX):] if name.startswith(TARGET_PREFIX) else None


def copies_dir() -> str:
    return os.path.join(cache_root(), "remote")


def local_copy(name: str, build_id: Optional[bytes], fetch: Callable[[str, str], None],
               same: Callable[[str], bool] = lambda path: True) -> Copy:
    """A local file for the target's file `name` (its path on the target): the same path here
    when its build ID is `build_id`, else the cache's copy, else one made by fetch(name, dest)
    (which raises on failure).  Never a file whose build ID differs from the one given, nor one
    `same(path)` refuses (the caller's check that it is the file loaded: its SFrame as in memory)."""
    if not name.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return Copy(None, "the target's file name %r is not one to copy" % name)
    if build_id and os.path.isfile(name) and file_build_id(name) == build_id and same(name):
        return Copy(name, "local file (the target's build ID)")
    if not build_id:
        return _fetched_for_now(name, fetch, same)
    hexid = build_id.hex()
    try:
        base = private_dir(copies_dir(), _WHAT)      # (each level private: makedirs modes the leaf alone)
        where = private_dir(os.path.join(private_dir(os.path.join(base, hexid[:2]), _WHAT), hexid[2:]), _WHAT)
    except CacheError as exc:
        return Copy(None, str(exc))
    path = os.path.join(where, os.path.basename(name) or "file")
    if os.path.isfile(path) and file_build_id(path) == build_id and same(path):
        return Copy(path, "remote file, copied to %s before" % path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".copy-", dir=where)
        os.close(fd)
        fetch(name, tmp)
        got = file_build_id(tmp)
        if got != build_id:
            return Copy(None, "the copy of %s has build ID %s, not %s" % (name, got.hex() if got else "none", hexid))
        if not same(tmp):
            return Copy(None, "the copy of %s is not the file loaded (its SFrame section differs from memory's)" % name)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        tmp = None
    except Exception as exc:       # (the debugger's error: the transfer failed)
        return Copy(None, "cannot copy %s from the target: %s" % (name, str(exc).strip() or type(exc).__name__))
    finally:
        if tmp is not None:
            _unlink(tmp)
    return Copy(path, "remote file, copied to %s" % path)


_session_dir: Optional[str] = None


def _fetched_for_now(name: str, fetch: Callable[[str, str], None], same: Callable[[str], bool]) -> Copy:
    global _session_dir
    try:
        if _session_dir is None:
            base = private_dir(copies_dir(), _WHAT)
            _session_dir = tempfile.mkdtemp(prefix="session-", dir=base)
            atexit.register(shutil.rmtree, _session_dir, True)
        fd, path = tempfile.mkstemp(prefix=os.path.basename(name) + ".", dir=_session_dir)
        os.close(fd)
    except Exception as exc:
        return Copy(None, "cannot copy %s from the target: %s" % (name, exc))
    try:
        fetch(name, path)
        if not same(path):
            _unlink(path)
            return Copy(None, "the copy of %s is not the file loaded (its SFrame section differs from memory's)"
                        % name)
    except Exception as exc:
        _unlink(path)
        return Copy(None, "cannot copy %s from the target: %s" % (name, str(exc).strip() or type(exc).__name__))
    return Copy(path, "remote file without a build ID, copied to %s for this session" % path)


def sframe_as_loaded(path: str, loaded: bytes) -> bool:
    """Does the ELF file at `path` hold the SFrame section `loaded` (read from the target's
    memory) in its PT_GNU_SFRAME segment?  What says a copy is the file the target runs."""
    from ..elf.image import PT_GNU_SFRAME, file_segments
    got = file_segments(path, PT_GNU_SFRAME, len(loaded))
    return bool(loaded) and got is not None and loaded in got[1]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
