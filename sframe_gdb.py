"""Load the SFrame unwinder into GDB:  (gdb) source /path/to/sframe_gdb.py

Works from any directory, by absolute or relative path.  Puts this checkout on GDB's Python path,
checks that pyelftools can be imported by GDB's own Python, and installs the unwinder and the
commands (`info sframe`, `sframe verify`, `set sframe`, `set debug sframe`).  Sourcing it again
does nothing more.  On a missing dependency it prints one line saying how to install it.
"""


def _sframe_gdb_load(script):
    import os
    import sys

    import gdb

    here = os.path.dirname(os.path.abspath(script))
    if here not in sys.path:
        sys.path.insert(0, here)
    pyver = "%d.%d" % sys.version_info[:2]
    try:
        import elftools  # noqa: F401  (pyelftools: ELF sections and symbols)
    except ImportError:
        gdb.write("sframe-gdb: not loaded: GDB's Python %s cannot import pyelftools; install it with "
                  "'apt-get install python3-pyelftools' (or 'python%s -m pip install pyelftools').\n"
                  % (pyver, pyver), gdb.STDERR)
        return
    if sys.version_info < (3, 7):
        gdb.write("sframe-gdb: not loaded: GDB's Python %s is too old (3.7 or later is needed).\n" % pyver,
                  gdb.STDERR)
        return
    try:
        import sframe_gdb
        plugin, new = sframe_gdb.install()
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


try:
    _sframe_gdb_load(__file__)
finally:
    del _sframe_gdb_load
