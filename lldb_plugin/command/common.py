"""What the LLDB commands share: the command class LLDB calls (errors as one line through
result.SetError, never a traceback) and parsing by argparse (core.cli.options)."""

import shlex

import lldb

from ...core.errors import ElfError, SFrameError, UsageError
from ..access import UserError


def parse(parser, command):
    """The command's words parsed by its argparse parser (core.cli.options.CommandParser): a usage
    error or a quoting error is a UserError (one line)."""
    try:
        return parser.parse_args(shlex.split(command or ""))
    except ValueError as exc:              # (shlex: an unclosed quote)
        raise UserError("%s (usage: %s)" % (exc, parser.format_usage().strip()[len("usage: "):])) from None
    except UsageError as exc:
        raise UserError(str(exc)) from None


class built_once:
    """A class attribute made by `make()` when it is first read (a command's argparse parser:
    building every command's at the import was a fiftieth of a second of LLDB's first stop)."""

    def __init__(self, make):
        self.make = make

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner):
        value = self.make()
        setattr(owner, self.name, value)
        return value


class Command:
    short = ""
    long = ""
    parser = None        # a CommandParser: its help is the long help's head

    def __init__(self, debugger, internal_dict):
        """LLDB's signature for command classes; each call gets its debugger through exe_ctx."""

    def get_short_help(self):
        return self.short

    def get_long_help(self):
        if self.parser is None:
            return self.long
        return self.parser.format_help() + ("\n" + self.long if self.long else "")

    def __call__(self, debugger, command, exe_ctx, result):
        try:
            lines = self.run(debugger, command, exe_ctx)
        except UserError as exc:
            result.SetError("sframe: %s" % exc)
            return
        except (ElfError, SFrameError) as exc:
            result.SetError("sframe: %s" % exc)
            return
        except Exception as exc:       # never a traceback in the user's session
            result.SetError("sframe: internal error: %s: %s" % (type(exc).__name__, exc))
            return
        text = "\n".join(lines)
        if text:
            if hasattr(result, "Print"):      # keeps trailing spaces (dump rows have them)
                result.Print(text + "\n")
            else:
                result.AppendMessage(text)
        result.SetStatus(lldb.eReturnStatusSuccessFinishResult)

    @staticmethod
    def _target(exe_ctx, debugger):
        target = exe_ctx.GetTarget()
        if target is None or not target.IsValid():
            target = debugger.GetSelectedTarget()
        if target is None or not target.IsValid():
            raise UserError("no target: load a program or a core file first (target create)")
        return target
