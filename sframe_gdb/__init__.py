"""GDB adapter of sframe-gdb: an SFrame frame unwinder and the `info sframe`, `sframe verify`,
`set sframe` and `set debug sframe` commands.

Load it in GDB with `source /path/to/sframe_gdb.py` (the file next to this package) or, for an
installed copy, the line `sframe gdbinit` prints; both run `load.py`, which calls `install()`.
Everything here only translates between GDB and the debugger-free `core` package.
"""


def install():
    """Install into the running GDB; returns (plugin, newly_installed)."""
    from .plugin import install as _install
    return _install()
