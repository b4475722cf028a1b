"""Load the SFrame unwinder into GDB from an installed copy:  (gdb) source .../sframekit/sframe_gdb/load.py

`sframe gdbinit` prints that line for the copy it belongs to; in a checkout, `source sframe_gdb.py`
at the root does the same.  The package is imported under its installed name `sframekit` (the
directory above this one), so no generic top-level name such as `core` is claimed in GDB's Python.
GDB's own Python may be another interpreter than the one the copy was installed with: the copy's
site directory is appended to its path, after GDB's own, so that pyelftools can come from there too.
"""

import os
import sys
import types

MIN_PYTHON = (3, 9)


def register(root):
    """Make the directory `root` importable as the package `sframekit` (the first one registered wins)."""
    pkg = types.ModuleType("sframekit")
    pkg.__path__ = [root]
    return sys.modules.setdefault("sframekit", pkg)


def load():
    """Check GDB's Python, then install the unwinder and commands; one line of output either way."""
    import gdb

    pyver = "%d.%d" % sys.version_info[:2]
    if sys.version_info < MIN_PYTHON:
        gdb.write("sframe-gdb: not loaded: GDB's Python %s is too old (%d.%d or later is needed).\n"
                  % ((pyver,) + MIN_PYTHON), gdb.STDERR)
        return
    try:
        import elftools  # noqa: F401  (pyelftools: ELF sections and symbols; the rest imported as needed)
    except ImportError:
        gdb.write("sframe-gdb: not loaded: GDB's Python %s cannot import pyelftools; install it with "
                  "'apt-get install python3-pyelftools' (or 'python%s -m pip install pyelftools').\n"
                  % (pyver, pyver), gdb.STDERR)
        return
    try:
        from sframekit.sframe_gdb import install
        _plugin, new = install()
    except ImportError as exc:
        gdb.write("sframe-gdb: not loaded: %s\n" % exc, gdb.STDERR)
        return
    except Exception as exc:            # one line, never a traceback
        gdb.write("sframe-gdb: not loaded: %s: %s\n" % (type(exc).__name__, exc), gdb.STDERR)
        return
    if new:
        gdb.write("sframe-gdb: SFrame unwinder installed ('info sframe', 'sframe verify', 'set sframe off').\n")
    else:
        gdb.write("sframe-gdb: already loaded.\n")


def _own_path():
    """This file's path: its code's (a nested `source` from Python leaves `__file__` naming the
    outer script), or `__file__` where the code has no real file name."""
    name = sys._getframe(0).f_code.co_filename
    return name if os.path.isfile(name) else __file__


if __name__ == "__main__":             # sourced by GDB
    _pkgdir = os.path.dirname(os.path.dirname(os.path.abspath(_own_path())))
    _site = os.path.dirname(_pkgdir)
    if os.path.basename(_pkgdir) == "sframekit" and _site not in sys.path:
        sys.path.append(_site)
    register(_pkgdir)
    load()
