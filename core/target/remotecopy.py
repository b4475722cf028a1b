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

from ..elf.notes import file_build_id
from ..elf.sidecache import CacheError, cache_root, private_dir

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


def local_copy(name: str, build_id: Optional[bytes], fetch: Callable[[str, str], None]) -> Copy:
    """A local file for the target's file `name` (its path on the target): the same path here
    when its build ID is `build_id`, else the cache's copy, else one made by fetch(name, dest)
    (which raises on failure).  Never a file whose build ID differs from the one given."""
    if build_id and os.path.isfile(name) and file_build_id(name) == build_id:
        return Copy(name, "local file (the target's build ID)")
    if not build_id:
        return _fetched_for_now(name, fetch)
    hexid = build_id.hex()
    try:
        base = private_dir(copies_dir(), _WHAT)      # (each level private: makedirs modes the leaf alone)
        where = private_dir(os.path.join(private_dir(os.path.join(base, hexid[:2]), _WHAT), hexid[2:]), _WHAT)
    except CacheError as exc:
        return Copy(None, str(exc))
    path = os.path.join(where, os.path.basename(name) or "file")
    if os.path.isfile(path) and file_build_id(path) == build_id:
        return Copy(path, "remote file, copied to %s before" % path)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        fetch(name, tmp)
        got = file_build_id(tmp)
        if got != build_id:
            return Copy(None, "the copy of %s has build ID %s, not %s" % (name, got.hex() if got else "none", hexid))
        os.replace(tmp, path)
    except Exception as exc:       # (the debugger's error: the transfer failed)
        return Copy(None, "cannot copy %s from the target: %s" % (name, str(exc).strip() or type(exc).__name__))
    finally:
        _unlink(tmp)
    return Copy(path, "remote file, copied to %s" % path)


_session_dir: Optional[str] = None


def _fetched_for_now(name: str, fetch: Callable[[str, str], None]) -> Copy:
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
    except Exception as exc:
        _unlink(path)
        return Copy(None, "cannot copy %s from the target: %s" % (name, str(exc).strip() or type(exc).__name__))
    return Copy(path, "remote file without a build ID, copied to %s for this session" % path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
