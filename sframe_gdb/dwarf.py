"""GDB's own DWARF unwinders: whether they are enabled, and turning them on and off.

GDB 13-15 have `maint set/show dwarf unwinders`; GDB 16 and later `maint frame-unwinder
enable/disable -name dwarf2` and `maint info frame-unwinders`.
"""

import gdb


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


# The commands that turn GDB's DWARF unwinders on or off: (prefix, name).  GDB 13-16 have the
# first, GDB 17 and later the other two.
SWITCHES = (("maintenance set dwarf", "unwinders"),
            ("maintenance frame-unwinder", "enable"), ("maintenance frame-unwinder", "disable"))


def watch(body):
    """Make GDB run the command `body` after each command that turns its DWARF unwinders on or
    off, from a script as at the prompt: a user-defined post-hook on each (GDB announces no such
    change otherwise).  True when every such command this GDB has is hooked; False when one is
    not, because the user has a hook of their own there (it is kept) or GDB refused ours."""
    hooked = False
    for prefix, name in SWITCHES:
        try:
            gdb.execute("help %s %s" % (prefix, name), to_string=True)
        except gdb.error:
            continue                      # not a command of this GDB
        hook = "%s hookpost-%s" % (prefix, name)
        try:
            old = gdb.execute("show user %s" % hook, to_string=True)
        except gdb.error:
            old = None
        if old is not None and body not in old:
            return False
        if old is None:
            try:
                gdb.execute("define %s\n%s\nend" % (hook, body), to_string=True)
            except gdb.error:
                return False
        hooked = True
    return hooked
