"""Load the SFrame unwinder into GDB:  (gdb) source /path/to/sframe_gdb.py

Works from any directory, by absolute or relative path.  Imports this checkout as the package
`sframekit` (its installed name: nothing named `core` is put on GDB's Python path), checks that
pyelftools can be imported by GDB's own Python, and installs the unwinder and the commands
(`info sframe`, `sframe verify`, `set sframe`, `set debug sframe`).  Sourcing it again does
nothing more.  On a missing dependency it prints one line saying how to install it.
"""


def _sframe_gdb_load():
    import os
    import runpy
    import sys

    # This file's own path: its code's, not `__file__`, which a Python script that runs
    # `gdb.execute("source .../sframe_gdb.py")` leaves naming itself (GDB's globals are shared).
    script = sys._getframe(0).f_code.co_filename
    loader = os.path.join(os.path.dirname(os.path.abspath(script)), "sframe_gdb", "load.py")
    runpy.run_path(loader, run_name="__main__")


try:
    _sframe_gdb_load()
finally:
    del _sframe_gdb_load
