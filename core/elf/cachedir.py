"""Where the plugin keeps what it makes (side files, copies of remote files): the user's cache,
private to them.  Apart from core.elf.sidecache, which reads ELF files: a debugger's plugin sets
its search path up at import, where nothing else of the cache is needed yet."""

import os
import stat


def cache_dir() -> str:
    """$SFRAME_CFI_CACHE, else $SFRAME_CACHE/cfi, else $XDG_CACHE_HOME/sframe-gdb/cfi, else
    ~/.cache/sframe-gdb/cfi."""
    if os.environ.get("SFRAME_CFI_CACHE"):
        return os.environ["SFRAME_CFI_CACHE"]
    return os.path.join(cache_root(), "cfi")


def cache_root() -> str:
    """$SFRAME_CACHE, else $XDG_CACHE_HOME/sframe-gdb, else ~/.cache/sframe-gdb: where the
    plugin keeps what it makes or copies."""
    return os.environ.get("SFRAME_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "sframe-gdb")


class CacheError(Exception):
    """The cache cannot be used (one line: where, and why)."""


def private_dir(path: str, what: str = "side-file cache") -> str:
    """`path`, created if missing, as a directory only its owner, this user, can enter: a
    directory another user owns is refused, a shared one made private.  `what`: the cache, as
    errors name it."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise CacheError("cannot create the %s %s: %s" % (what, path, exc.strerror)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError("the %s %s is not a directory" % (what, path))
    if st.st_uid != os.getuid():
        raise CacheError("the %s %s belongs to another user (uid %d): not used" % (what, path, st.st_uid))
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as exc:
            raise CacheError("cannot make the %s %s private: %s" % (what, path, exc.strerror)) from None
    return path
