"""The files under paths a command is given: `sframe cfi --build-id-dir` and `sframe stats` walk
whole trees.  Each regular file once (by device and inode, whatever links lead to it); under a
directory given, symbolic links followed only to files inside it, and only its own file system
(as `find -xdev`: a walk of / stays out of /proc and /sys); a file named on the command line taken
as it is.  Files that vanish during the walk are passed over; what cannot be walked is said."""

import os
import stat
from typing import Iterator, List, Optional, Sequence, Tuple


def files(paths: Sequence[str]) -> Iterator[Tuple[str, Optional[str], bool]]:
    """(path, None, given) for each regular file under `paths`, once each (by device and inode),
    and (path, why, given) for each that cannot be walked; `given`: named in `paths` itself.  A
    file given is taken as it is; under a directory given, a symbolic link is followed only where
    it leads to a file inside that directory, and never into another directory."""
    seen = set()

    def once(path: str, st: os.stat_result) -> bool:
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return False
        seen.add(key)
        return True
    for top in paths:
        try:
            st = os.stat(top)
        except OSError as exc:
            yield top, exc.strerror or str(exc), True
            continue
        if not os.path.isdir(top):
            if not stat.S_ISREG(st.st_mode):
                yield top, "not a regular file", True
            elif once(top, st):
                yield top, None, True
            continue
        inside = os.path.join(os.path.realpath(top), "")
        device = st.st_dev
        problems: List[OSError] = []
        for folder, dirs, files in os.walk(top, onerror=problems.append):
            while problems:
                bad = problems.pop()
                yield bad.filename or folder, bad.strerror or str(bad), False
            # (not into other file systems, as find -xdev: a walk of / stays out of /proc and /sys)
            dirs[:] = sorted(d for d in dirs if _same_device(os.path.join(folder, d), device))
            for name in sorted(files):
                path = os.path.join(folder, name)
                try:
                    if os.path.islink(path) and not os.path.realpath(path).startswith(inside):
                        continue              # (out of the tree)
                    st = os.stat(path)
                except FileNotFoundError:
                    continue                  # (a dangling link, or gone since the folder was listed)
                except OSError as exc:
                    yield path, exc.strerror or str(exc), False
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_dev == device and once(path, st):
                    yield path, None, False
        while problems:
            bad = problems.pop()
            yield bad.filename or top, bad.strerror or str(bad), False


def _same_device(path: str, device: int) -> bool:
    try:
        return os.lstat(path).st_dev == device
    except OSError:
        return False


def split(paths: Sequence[str]) -> Tuple[List[Tuple[str, bool]], List[Tuple[str, str]]]:
    """`files(paths)` as ([(path, given)] to look at, [(path, why)] that could not be walked)."""
    found: List[Tuple[str, bool]] = []
    bad: List[Tuple[str, str]] = []
    for path, why, given in files(paths):
        if why is None:
            found.append((path, given))
        else:
            bad.append((path, why))
    return found, bad

