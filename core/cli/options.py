"""One vocabulary for the options of the `sframe` command, LLDB's `sframe` commands and GDB's
`sframe verify` (docs/cli.md, "One vocabulary"): each idea spelt and explained once here, and a
parser that raises instead of exiting, for the debuggers (their errors become result.SetError
and gdb.GdbError, their help is argparse's)."""

from __future__ import annotations

import argparse
from typing import NoReturn, Optional

from ..errors import UsageError  # noqa: F401  (its home: lldb_plugin.command.common needs it without argparse)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser for a debugger command: a usage error raises UsageError (one line: what
    is wrong, and the usage), never SystemExit.  No -h: the debugger's `help` shows format_help()."""

    def __init__(self, prog: str, description: Optional[str] = None, **kw):
        super().__init__(prog=prog, description=description, add_help=False, allow_abbrev=False, **kw)

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split()[1:])     # (argparse wraps a long usage: one line)
        raise UsageError("%s (usage: %s)" % (message, usage))

    def exit(self, status: int = 0, message: Optional[str] = None) -> NoReturn:
        raise UsageError(message or self.format_help())


def _whole(text: str, least: int) -> int:
    try:
        n = int(text, 0)                 # (decimal or 0x...)
    except ValueError:
        try:
            n = int(text)                # (a decimal with leading zeros: 08)
        except ValueError:
            n = least - 1
    if n < least:
        raise argparse.ArgumentTypeError("%r is not a whole number of at least %d" % (text, least))
    return n


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    return _whole(text, 1)


def not_negative(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    return _whole(text, 0)


def add_count(p: argparse.ArgumentParser, default: Optional[int] = None, what: str = "frames",
              old: tuple = ()) -> None:
    """The frame limit: -c N / --count N (`old`: earlier spellings, still taken, not shown)."""
    p.add_argument("-c", "--count", dest="count", type=positive, default=default, metavar="N",
                   help="at most N %s%s" % (what, "" if default is None else " (default %d)" % default))
    if old:
        p.add_argument(*old, dest="count", type=positive, help=argparse.SUPPRESS)


def add_fp_fallback(p: argparse.ArgumentParser, old: tuple = ()) -> None:
    """The frame-pointer fallback: -f / --fp-fallback."""
    p.add_argument("-f", "--fp-fallback", dest="fp_fallback", action="store_true",
                   help="where no SFrame or CFI covers a PC, go on by the frame-pointer chain, only through "
                   "functions whose code proves a frame record (push/mov or stp x29, x30)")
    if old:
        p.add_argument(*old, dest="fp_fallback", action="store_true", help=argparse.SUPPRESS)


def add_registers(p: argparse.ArgumentParser, help_text: str) -> None:
    """The callee-saved registers shown: -r / --registers."""
    p.add_argument("-r", "--registers", dest="registers", action="store_true", help=help_text)


def add_eh_frame(p: argparse.ArgumentParser, short: bool = False) -> None:
    """DWARF CFI where no SFrame covers a PC: --eh-frame (default) / --no-eh-frame (-n)."""
    names = ("-n", "--no-eh-frame") if short else ("--no-eh-frame",)
    p.add_argument(*names, dest="eh_frame", action="store_false",
                   help="stop where no SFrame covers the PC, instead of going on by the module's DWARF CFI "
                   "(.eh_frame, .debug_frame; such frames are marked [DWARF CFI]): SFrame's coverage alone")
    if not short:
        p.add_argument("--eh-frame", dest="eh_frame", action="store_true",
                       help="go on by the module's DWARF CFI where no SFrame covers a PC (the default)")
    p.set_defaults(eh_frame=True)


def add_threads(p: argparse.ArgumentParser, what: str) -> None:
    """The threads: -t N / --thread N (one, by its number), -a / --all-threads."""
    p.add_argument("-t", "--thread", dest="thread", type=positive, metavar="N",
                   help="thread N only (%s)" % what)
    p.add_argument("-a", "--all-threads", dest="all_threads", action="store_true", help="every thread")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
