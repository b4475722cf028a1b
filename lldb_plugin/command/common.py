"""What the LLDB commands share: the command class LLDB calls (errors as one line through
result.SetError, never a traceback) and the option parser."""

import shlex

import lldb

from ...core.errors import ElfError, SFrameError
from ..access import UserError


def parse_options(command, spec, usage):
    """(options, other words) from the raw argument string.

    spec maps each spelling (-c, --count) to (key, converter), converter None for a flag.  Values
    follow as the next word, or joined: -c5, --count=5.
    """
    try:
        words = shlex.split(command or "")
    except ValueError as exc:
        raise UserError("%s (%s)" % (exc, usage)) from None
    opts, rest = {}, []
    it = iter(words)
    for w in it:
        if w == "--":
            rest.extend(it)
            break
        if not w.startswith("-") or w == "-":
            rest.append(w)
            continue
        if w.startswith("--"):
            name, eq, joined = w.partition("=")
        else:
            name, joined = w[:2], w[2:]
            eq = "=" if joined else ""
        if name not in spec:
            raise UserError("unknown option %s (%s)" % (w, usage))
        key, conv = spec[name]
        if conv is None:
            if eq:
                raise UserError("option %s takes no value (%s)" % (name, usage))
            opts[key] = True
            continue
        val = joined if eq else next(it, None)
        if val is None:
            raise UserError("option %s needs a value (%s)" % (name, usage))
        try:
            opts[key] = conv(val)
        except ValueError:
            raise UserError("bad value %r for %s (%s)" % (val, name, usage)) from None
    return opts, rest


def positive_count(text):
    n = int(text, 0)
    if n <= 0:
        raise ValueError(text)
    return n


class Command:
    short = ""
    long = ""

    def __init__(self, debugger, internal_dict):
        """LLDB's signature for command classes; each call gets its debugger through exe_ctx."""

    def get_short_help(self):
        return self.short

    def get_long_help(self):
        return self.long

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
