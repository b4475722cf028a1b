"""Symbols as GDB knows them (its minimal symbols, from `info symbol`), for the commands and the
unwinder: the save-slot analysis asks whether an FDE starts a function (core.saves.analysis)."""

import re

import gdb

INFO_SYMBOL_RE = re.compile(r"^(.+?)(?: \+ (\d+))? in section (\S+)(?: of (.+))?$")


def symbol_at(addr):
    """(name, offset) of the symbol GDB knows at addr, or None."""
    try:
        text = gdb.execute("info symbol %#x" % addr, to_string=True).strip().splitlines()
    except gdb.error:
        return None
    m = INFO_SYMBOL_RE.match(text[0]) if text else None
    if not m:
        return None
    return m.group(1), int(m.group(2) or 0)


