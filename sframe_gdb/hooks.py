"""User-defined hooks on GDB commands: how the plugin hears of changes GDB announces no event for
(GDB's DWARF unwinders switched, the registers replaced by `record goto`, `tfind`, `restart`).

A hook runs from a script as at the prompt, and through `gdb.execute`.  One the user defined is
kept: the caller then learns that the command is not watched, and falls back to asking each time.
"""

import gdb


def subcommands(name):
    """`name` and the commands under it (`record goto` -> record goto, record goto begin, record
    goto end), as `help` lists them; () if this GDB has no such command."""
    try:
        text = gdb.execute("help %s" % name, to_string=True)
    except gdb.error:
        return ()
    found = [name]
    listing = False
    for line in text.splitlines():
        if line.startswith("List of ") and line.rstrip().endswith(" subcommands:"):
            listing = True
        elif listing and line.startswith(name + " "):
            # "record goto begin, record goto start -- Go to ...": the first name, not its aliases
            found.append(line.split(" --", 1)[0].split(",", 1)[0].strip())
    return tuple(found)


def _where(command, post):
    words = command.split()
    return ("%s %s-%s" % (" ".join(words[:-1]), "hookpost" if post else "hook", words[-1])).strip()


def _defined(where):
    """The text of the user-defined command `where`, or None."""
    try:
        return gdb.execute("show user %s" % where, to_string=True)
    except gdb.error:
        return None


def hook(command, body, post=True):
    """Make GDB run the command `body` after (`post`) or before each `command` (its full name, a
    command of this GDB: see subcommands).  True when the hook is ours (defined now or earlier);
    False when the user has a hook of their own there (it is kept), or GDB refused ours."""
    where = _where(command, post)
    old = _defined(where)
    if old is not None:
        return body in old
    try:
        gdb.execute("define %s\n%s\nend" % (where, body), to_string=True)
    except gdb.error:
        return False
    return True


def still_ours(commands, body, post=True):
    """Are the hooks `hook` set on `commands` still ours (a hook the user defines later replaces
    it, GDB asking "Redefine command?")?  One `show user` for all of them."""
    text = _defined("")
    if text is None:
        return False
    return all('User command "%s":\n  %s\n' % (_where(c, post), body) in text for c in commands)
