"""GDB's own DWARF unwinders: whether they are enabled, and turning them on and off.

GDB 13-15 have `maint set/show dwarf unwinders`; GDB 16 and later `maint frame-unwinder
enable/disable -name dwarf2` and `maint info frame-unwinders`.
"""

import gdb

from . import hooks


def enabled():
    """True/False: are GDB's DWARF unwinders on; None if GDB does not say."""
    try:
        text = gdb.execute("maint show dwarf unwinders", to_string=True)
        return " on" in text
    except gdb.error:
        pass
    try:
        text = gdb.execute("maint info frame-unwinders", to_string=True)
    except gdb.error:
        return None
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 3 and cols[0] == "dwarf2" and cols[1].endswith("_FRAME"):
            return cols[-1] == "Y"
    return None


def set_enabled(on):
    try:
        gdb.execute("maint set dwarf unwinders %s" % ("on" if on else "off"), to_string=True)
        return
    except gdb.error:
        pass
    gdb.execute("maint frame-unwinder %s -name dwarf2" % ("enable" if on else "disable"), to_string=True)


# The commands that turn GDB's DWARF unwinders on or off: GDB 13-16 have the first, GDB 17 and
# later the other two.
SWITCHES = ("maintenance set dwarf unwinders", "maintenance frame-unwinder enable", "maintenance frame-unwinder disable")


def watch(body):
    """Make GDB run the command `body` after each command that turns its DWARF unwinders on or
    off (see hooks).  The commands hooked when every such command this GDB has is, else False."""
    present = [c for c in SWITCHES if hooks.subcommands(c)]
    return bool(present) and all([hooks.hook(c, body) for c in present]) and present
