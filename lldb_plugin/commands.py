"""The `sframe` command container for LLDB: translation between LLDB's API and core/.

What LLDB provides (modules and their load addresses, registers, memory, symbols, expression
evaluation) is read here; indexes, unwinding and all printed text come from core/ (core.adapter,
core.report.describe, core.report.dump, core.unwind.unwinder).  Every command reports problems with result.SetError and
one line of text, never a traceback.
"""

import os
import re
import shlex

import lldb

from ..core.arch import abi as abimod
from ..core.errors import ElfError, SFrameError
from ..core.report.dump import dump_file
from ..core.report.text import (
    frame_line,
    info_lines,
    lookup_lines,
    registers_line,
    saves_lines,
    stop_line,
    values_lines,
    where_text,
)
from ..core.sframe.format import MASK64
from ..core.unwind.modules import NotCovered, finder, locate
from ..core.unwind.tracker import LoadedModule, ModuleTracker, file_identity
from ..core.unwind.unwinder import DEFAULT_DEPTH_LIMIT, frame_from_registers, frame_rows, lookup_address, rule_values, walk

INVALID = lldb.LLDB_INVALID_ADDRESS

# One tracker for the plugin: it follows whichever target a command runs on.
_TRACKER = ModuleTracker()


class UserError(Exception):
    """A problem to report to the user in one line."""


# ---------------------------------------------------------------------------------------------
# Reading LLDB


def _live(process):
    """True if the process (or core file) has registers and memory to read."""
    if process is None or not process.IsValid():
        return False
    return process.GetState() in (lldb.eStateStopped, lldb.eStateCrashed, lldb.eStateSuspended)


def _address_value(sbaddr, target):
    """Load address of an SBAddress, or its file address when nothing is loaded (no process)."""
    if not sbaddr.IsValid():
        return None
    a = sbaddr.GetLoadAddress(target)
    if a == INVALID:
        a = sbaddr.GetFileAddress()
    return None if a == INVALID else a


def _loaded_modules(target):
    """LoadedModule records for the target's modules that may have SFrame."""
    live = _live(target.GetProcess())
    out = []
    for i in range(target.GetNumModules()):
        m = target.GetModuleAtIndex(i)
        fs = m.GetFileSpec()
        path = fs.fullpath
        if not path or not os.path.isfile(path):
            continue
        sec = m.FindSection(".sframe")
        if sec.IsValid():
            load, file_addr = sec.GetLoadAddress(target), sec.GetFileAddress()
        elif m.FindSection(".text").IsValid():
            continue                   # LLDB sees its sections, and none is .sframe
        else:                          # no section headers: let core.elf.image look for PT_GNU_SFRAME
            hdr = m.GetObjectFileHeaderAddress()
            load, file_addr = hdr.GetLoadAddress(target), hdr.GetFileAddress()
        if load == INVALID or file_addr == INVALID:
            if live:
                continue               # known to the target but not loaded in the process
            bias = 0                   # no process: addresses are the file's own
        else:
            bias = load - file_addr
        out.append(LoadedModule(file_identity(path, m.GetUUIDString()), path, bias, fs.GetFilename() or path))
    return out


def _sync(target):
    _TRACKER.sync(_loaded_modules(target))


# LLDB's architecture names (the first part of the target triple) -> the core ABI.
_LLDB_ARCHES = {
    "x86_64": abimod.AMD64, "amd64": abimod.AMD64, "x86_64h": abimod.AMD64,
    "aarch64": abimod.AARCH64_LE, "arm64": abimod.AARCH64_LE,
    "aarch64_be": abimod.AARCH64_BE, "arm64_be": abimod.AARCH64_BE,
    "s390x": abimod.S390X, "systemz": abimod.S390X,
}


def _abi(target):
    arch = (target.GetTriple() or "").split("-", 1)[0].lower()
    if arch in _LLDB_ARCHES:
        return _LLDB_ARCHES[arch]
    for m in _TRACKER.modules.with_sframe():
        return abimod.info(m.index.abi)
    raise UserError("target architecture %r is not one SFrame describes (x86-64, AArch64, s390x)" % arch)




def _register(frame, names):
    for name in names:
        v = frame.FindRegister(name)
        if v is not None and v.IsValid():
            err = lldb.SBError()
            x = v.GetValueAsUnsigned(err, 0)
            if err.Success():
                return x
    return None


def _regnames(abi, num):
    """LLDB's names for a DWARF register: its aliases first (AArch64 fp, lr), then the DWARF name."""
    return abi.aliases.get(num, ()) + (abi.regname(num),)


def _frame_state(frame, abi, full):
    """core.unwind.unwinder.Frame from an LLDB frame; `full`: every register it has is valid (frame 0)."""
    pc = frame.GetPC()
    if pc == INVALID:
        raise UserError("frame #%d has no PC" % frame.GetFrameID())

    def read(num):
        if num not in abi.regnames or not abi.is_register(num):
            return None
        value = _register(frame, _regnames(abi, num))
        if value is None and num == abi.sp:
            sp = frame.GetSP()
            value = None if sp == INVALID else sp
        return value
    state = frame_from_registers(abi, pc, read, full=full, level=frame.GetFrameID())
    if state.sp is None:
        raise UserError("frame #%d has no stack pointer" % frame.GetFrameID())
    return state


def _reader(process):
    def read(addr, size):
        err = lldb.SBError()
        data = process.ReadMemory(addr, size, err)
        if err.Fail() or data is None:
            return None
        return data
    return read


def _owner(target):
    """owner(addr) for core.unwind.modules.locate: the path of the module LLDB says holds addr, or None."""
    live = _live(target.GetProcess())

    def owner(addr):
        a = target.ResolveLoadAddress(addr) if live else target.ResolveFileAddress(addr)
        if not a.IsValid() or not a.GetModule().IsValid():
            return None
        return a.GetModule().GetFileSpec().fullpath
    return owner


def _symbol_at(target, addr):
    """(module name, symbol name, symbol start) for an address; parts may be None."""
    a = target.ResolveLoadAddress(addr)
    if not a.IsValid() or not a.GetModule().IsValid():
        a = target.ResolveFileAddress(addr)       # no process: file addresses
    if not a.IsValid():
        return None, None, None
    mod = a.GetModule()
    modname = mod.GetFileSpec().GetFilename() if mod.IsValid() else None
    sym = a.GetSymbol()
    if not sym.IsValid():
        return modname, None, None
    return modname, sym.GetName(), _address_value(sym.GetStartAddress(), target)


def _symbolizer(target):
    """symbolize(addr) -> (symbol name, offset) through LLDB's symbols (core.saves.analysis' `symbolize`)."""
    def symbolize(addr):
        _mod, name, start = _symbol_at(target, addr)
        return None if name is None or start is None else (name, addr - start)
    return symbolize


def _where(target, pc, return_address=False):
    """'module`symbol + off' for a PC; a return address is symbolized by the call before it."""
    modname, name, start = _symbol_at(target, lookup_address(pc, return_address))
    return where_text(modname, name, pc - start if start is not None else 0)


def _symbol_name(target):
    def name(pc):
        return _symbol_at(target, pc)[1]
    return name


# ---------------------------------------------------------------------------------------------
# Addresses typed by the user

_SYMBOL_RE = re.compile(r"([A-Za-z_.][\w.@$]*)\s*(?:([+-])\s*(0[xX][0-9a-fA-F]+|\d+))?")
_REGISTER_RE = re.compile(r"\$(\w+)\s*(?:([+-])\s*(0[xX][0-9a-fA-F]+|\d+))?")


def _offset(sign, text):
    if not sign:
        return 0
    n = int(text, 0)
    return -n if sign == "-" else n


def _find_symbol(target, name):
    code = (lldb.eSymbolTypeCode, lldb.eSymbolTypeResolver, lldb.eSymbolTypeTrampoline)
    found = []
    contexts = target.FindSymbols(name)
    for i in range(contexts.GetSize()):
        sym = contexts.GetContextAtIndex(i).GetSymbol()
        if sym.IsValid() and sym.GetType() in code:
            a = _address_value(sym.GetStartAddress(), target)
            if a is not None and a not in found:
                found.append(a)
    return found[0] if found else None


def resolve_address(text, target, frame):
    """A load address from a number, $register[+off], symbol[+off] or an expression LLDB evaluates."""
    t = text.strip()
    if not t:
        raise UserError("an address is needed: a number, $register, symbol[+offset] or an expression")
    try:
        return int(t, 0) & MASK64
    except ValueError:
        pass
    m = _REGISTER_RE.fullmatch(t)
    if m and frame is not None and frame.IsValid():
        name = m.group(1)
        v = frame.GetPC() if name == "pc" else _register(frame, (name,))
        if v is not None and v != INVALID:
            return (v + _offset(m.group(2), m.group(3))) & MASK64
    m = _SYMBOL_RE.fullmatch(t)
    if m:
        a = _find_symbol(target, m.group(1))
        if a is not None:
            return (a + _offset(m.group(2), m.group(3))) & MASK64
    if frame is not None and frame.IsValid():
        v = frame.EvaluateExpression(t)
    else:
        v = target.EvaluateExpression(t)
    err = v.GetError()
    if not v.IsValid() or err.Fail():
        msg = (err.GetCString() or "not a number, register, symbol or expression").strip().splitlines()
        msg = [line for line in msg if line.strip()]
        raise UserError("cannot evaluate %r: %s" % (t, msg[-1] if len(msg) == 1 else " ".join(msg[:2])))
    verr = lldb.SBError()
    addr = v.GetValueAsUnsigned(verr, 0)
    if verr.Fail():
        raise UserError("%r does not give an address: %s" % (t, verr.GetCString()))
    return addr & MASK64


# ---------------------------------------------------------------------------------------------
# Option parsing


def _parse(command, spec, usage):
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


def _count(text):
    n = int(text, 0)
    if n <= 0:
        raise ValueError(text)
    return n


# ---------------------------------------------------------------------------------------------
# Commands


class _Command:
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


class LookupCommand(_Command):
    short = "Show the SFrame FDE, FRE and recovery rules covering an address."
    long = """Syntax: sframe lookup ADDR

ADDR is a load address (0x..., decimal), $pc or another $register, symbol[+offset], or any
expression LLDB can evaluate.  Prints the module, the SFrame section, the function (FDE), the
row in effect (FRE), the CFA/RA/FP rules in words and where the caller's callee-saved registers
are (from the function's code): the lines of GDB's `info sframe ADDR`, and of `sframe lookup
--registers FILE ADDR` with load addresses.  When ADDR is the PC of the selected frame of a live
process or a core file, the values the rules give there (CFA, RA, FP, the caller's callee-saved
registers) follow.
"""

    def run(self, debugger, command, exe_ctx):
        target = self._target(exe_ctx, debugger)
        frame = exe_ctx.GetFrame()
        process = target.GetProcess()
        if not _live(process):
            frame = None
        addr = resolve_address(command, target, frame)
        _sync(target)
        try:
            module, match = locate(_TRACKER.modules, addr, _owner(target))
        except NotCovered as exc:
            raise UserError(str(exc)) from None
        symbol = module.image.symbolize(match.fde.start, module.load_bias)
        if symbol is None:
            _, name, start = _symbol_at(target, match.fde.start)
            if name:
                symbol = (name, match.fde.start - start)
        extra = []
        selected = frame is not None and frame.IsValid() and frame.GetPC() == addr
        # A caller's frame is looked up at its return address - 1, inside the call (as GDB does).
        at = lookup_address(addr, selected and frame.GetFrameID() > 0)
        image, bias = module.image, module.load_bias

        def read_code(start, size):
            return image.file_bytes(start - bias, size) if image is not None else None
        extra += saves_lines(module.index, module.index.lookup(at) or match, read_code, addr, _symbolizer(target))
        if selected:
            abi = _abi(target)
            topmost = frame.GetFrameID() == 0
            state = _frame_state(frame, abi, topmost)
            extra += values_lines(frame.GetFrameID(), rule_values(state, abi=abi, read=_reader(process),
                                                                  find=_TRACKER.find, topmost=topmost,
                                                                  callee_saved=True, symbolize=_symbolizer(target)))
        return lookup_lines(addr, module, match, symbol, extra)


class BacktraceCommand(_Command):
    short = "Backtrace of a thread unwound with SFrame (not with LLDB's unwinder)."
    long = """Syntax: sframe backtrace [-c COUNT] [-t THREAD] [-f] [-r]
        sframe bt ...

Unwinds the selected thread (or thread #THREAD, LLDB's index as `thread list` shows it) from its
selected frame with the SFrame sections of the loaded modules, reading registers and memory
through LLDB; works on live processes and core files.  Each line gives the frame like `bt`, how
it was found in [brackets] (registers: the starting frame; sframe; frame pointer; signal frame)
and its CFA, with the FDE that gave it.  The last line says why the unwind stopped.

  -c COUNT   print at most COUNT frames
  -t THREAD  unwind thread #THREAD instead of the selected one (from its selected frame)
  -f         follow the frame-pointer chain through code without SFrame
  -r         print each frame's callee-saved registers: in callers, those the function's own
             code proves saved or unchanged (the rest <not saved>)
"""
    usage = "sframe backtrace [-c COUNT] [-t THREAD] [-f] [-r]"
    spec = {"-c": ("count", _count), "--count": ("count", _count),
            "-t": ("thread", _count), "--thread": ("thread", _count),
            "-f": ("fp", None), "--frame-pointer": ("fp", None),
            "-r": ("registers", None), "--registers": ("registers", None)}

    def run(self, debugger, command, exe_ctx):
        opts, rest = _parse(command, self.spec, self.usage)
        if rest:
            raise UserError("unexpected argument %r (%s)" % (rest[0], self.usage))
        target = self._target(exe_ctx, debugger)
        process = target.GetProcess()
        if not _live(process):
            raise UserError("no stopped process or core file to unwind (run, attach or target create --core)")
        if "thread" in opts:
            thread = process.GetThreadByIndexID(opts["thread"])
            if not thread.IsValid():
                raise UserError("no thread #%d (thread list shows them)" % opts["thread"])
            frame = thread.GetSelectedFrame()
        else:
            thread = exe_ctx.GetThread()
            if not thread.IsValid():
                thread = process.GetSelectedThread()
            frame = exe_ctx.GetFrame() if exe_ctx.GetThread().IsValid() else thread.GetSelectedFrame()
        if not thread.IsValid():
            raise UserError("no thread to unwind")
        if frame is None or not frame.IsValid():
            frame = thread.GetFrameAtIndex(0)
        _sync(target)
        abi = _abi(target)
        topmost = frame.GetFrameID() == 0
        initial = _frame_state(frame, abi, topmost)
        count = opts.get("count")
        limit = count + 1 if count else DEFAULT_DEPTH_LIMIT
        items = walk(initial, topmost=topmost, abi=abi, read=_reader(process),
                     find=finder(_TRACKER.modules, _owner(target)),
                     limit=limit, fp_fallback=bool(opts.get("fp")), symbol=_symbol_name(target),
                     callee_saved=bool(opts.get("registers")), symbolize=_symbolizer(target))
        rows, stop = frame_rows(items)
        lines = [self._header(thread, frame, abi)]
        selected = thread.GetSelectedFrame().GetFrameID()
        start = initial.level
        shown = rows[:count] if count else rows
        for fr, cfa, own, _trampoline in shown:
            lines.append(frame_line(fr.level, fr, cfa, _where(target, fr.pc, fr.level > start and not fr.interrupted),
                                    selected=fr.level == selected, own_match=own,
                                    initial_how="registers" if topmost else "LLDB's registers of frame #%d" % start))
            if opts.get("registers"):
                lines.append(registers_line(abi, fr))
        if count and len(rows) > count:
            lines.append("  (more frames not shown: -c %d)" % count)
        elif stop is not None:
            where = None
            if stop.pc is not None:
                last = rows[-1][0] if rows else None
                ret = last is not None and last.pc == stop.pc and last.level > start and not last.interrupted
                where = _where(target, stop.pc, ret)
            lines.append(stop_line(stop, where))
        return lines

    @staticmethod
    def _header(thread, frame, abi):
        name = thread.GetName()
        reason = thread.GetStopDescription(256)
        text = "* thread #%d" % thread.GetIndexID()
        if name:
            text += ", name = '%s'" % name
        if reason:
            text += ", stop reason = %s" % reason
        return text + "  (SFrame unwind from frame #%d, %s)" % (frame.GetFrameID(), abi.name)


class InfoCommand(_Command):
    short = "List the loaded modules that have SFrame sections."
    long = """Syntax: sframe info

For each loaded module with an SFrame section: its path, the section's load address, SFrame
version, flags and ABI, the numbers of FDEs and FREs, the range of functions covered and the
load bias.  Modules whose section cannot be read are listed with the reason.
"""

    def run(self, debugger, command, exe_ctx):
        if command and command.strip():
            raise UserError("sframe info takes no arguments")
        target = self._target(exe_ctx, debugger)
        _sync(target)
        live = _live(target.GetProcess())
        lines = ["Target %s (%s), %d modules%s" % (
            target.GetExecutable().fullpath or "?", target.GetTriple() or "?", target.GetNumModules(),
            "" if live else "; no process: file addresses")]
        return lines + info_lines(list(_TRACKER.modules))


class DumpCommand(_Command):
    short = "Print a loaded module's SFrame section like readelf --sframe."
    long = """Syntax: sframe dump [MODULE]

MODULE is a loaded module's file name or path (default: the executable).  Prints the section
exactly as `sframe dump FILE` (binutils 2.47's readelf --sframe format), at the file's own
addresses.
"""

    def run(self, debugger, command, exe_ctx):
        try:
            words = shlex.split(command or "")
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if len(words) > 1:
            raise UserError("sframe dump takes one module name")
        target = self._target(exe_ctx, debugger)
        path = self._module_path(target, words[0] if words else None)
        text = dump_file(path)
        return [text[:-1] if text.endswith("\n") else text]

    @staticmethod
    def _module_path(target, name):
        mods = [target.GetModuleAtIndex(i) for i in range(target.GetNumModules())]
        if name is None:
            exe = target.GetExecutable().fullpath
            if not exe:
                raise UserError("the target has no executable: name a module")
            return exe
        exact = [m for m in mods if m.GetFileSpec().fullpath == name]
        base = [m for m in mods if m.GetFileSpec().GetFilename() == os.path.basename(name)]
        pick = exact or base
        if not pick:
            known = ", ".join(sorted({m.GetFileSpec().GetFilename() for m in mods if m.GetFileSpec().GetFilename()}))
            raise UserError("no loaded module %r (loaded: %s)" % (name, known or "none"))
        if len(pick) > 1 and not exact:
            raise UserError("%r names %d modules: give the full path" % (name, len(pick)))
        path = pick[0].GetFileSpec().fullpath
        if not path or not os.path.isfile(path):
            raise UserError("module %s has no local file to read" % name)
        return path


class ProviderCommand(_Command):
    short = "Control the SFrame frame provider for LLDB's own bt (LLDB 22 and later): on, off, status."
    long = """Syntax: sframe provider on|off|status

LLDB 22 added scripted frame providers: a Python class that gives the frames of LLDB's own `bt`,
`frame select`, `up`/`down`, `frame variable` and `finish`.  Where this LLDB has them and they
work, `sframe provider on` would register one that unwinds with SFrame.  `status` says whether
this LLDB has them, whether they can be used here and why not, and whether one is registered.

On LLDB 16 to 21 there are no frame providers; on LLDB 22 and 23 a provider that gives a scripted
frame (one with its own registers, which every frame unwound with SFrame needs) anywhere but at
the top of the stack makes LLDB crash or hang, so the provider is not registered there (the README
has a reproduction).  `sframe bt` unwinds with SFrame in every version.
"""

    def run(self, debugger, command, exe_ctx):
        words = (command or "").split()
        if len(words) != 1 or words[0] not in ("on", "off", "status"):
            raise UserError("usage: sframe provider on|off|status")
        usable, why = provider_support()
        if words[0] == "status":
            return ["%s: %s" % (lldb.SBDebugger.GetVersionString().splitlines()[0],
                                "frame providers usable" if usable else why),
                    "SFrame frame provider: not registered (use 'sframe bt')"]
        if words[0] == "on" and not usable:
            raise UserError("the frame provider is not registered: %s" % why)
        return ["SFrame frame provider: not registered (use 'sframe bt')"]


# LLDB versions whose frame providers cannot give a scripted frame below the top of the stack:
# a provider that does (LLDB asks for the next frame after it) crashes LLDB 22.1.8 and 23.1.4
# with a segmentation fault, or hangs 23.1.4 (README, "LLDB's own bt").
_PROVIDERS_BROKEN = (22, 23)


def _lldb_version():
    m = re.search(r"lldb version (\d+)\.(\d+)\.(\d+)", lldb.SBDebugger.GetVersionString() or "")
    return tuple(int(x) for x in m.groups()) if m else None


def provider_support():
    """(usable, why not): can a scripted frame provider give LLDB's own bt SFrame's frames here?"""
    version = _lldb_version()
    name = "LLDB %s" % ".".join(map(str, version)) if version else "this LLDB"
    if not hasattr(lldb.SBTarget, "RegisterScriptedFrameProvider"):
        return False, "%s has no scripted frame providers (LLDB 22 and later have them)" % name
    if version is None or version[0] in _PROVIDERS_BROKEN:
        return False, ("%s crashes or hangs when a frame provider gives a scripted frame below the top of "
                       "the stack, which every frame SFrame unwinds needs" % name)
    return False, "%s is newer than the versions tried (22, 23): the provider is not built for it yet" % name


# ---------------------------------------------------------------------------------------------
# Registration

_SUBCOMMANDS = (("lookup", "LookupCommand"), ("backtrace", "BacktraceCommand"), ("bt", "BacktraceCommand"),
                ("info", "InfoCommand"), ("dump", "DumpCommand"), ("provider", "ProviderCommand"))


def register(debugger, modname):
    """Add the `sframe` container and its commands (again, if the plugin is imported again)."""
    ci = debugger.GetCommandInterpreter()
    failures = []

    def run(cmd):
        res = lldb.SBCommandReturnObject()
        ci.HandleCommand(cmd, res)
        if not res.Succeeded():
            failures.append("%s: %s" % (cmd, (res.GetError() or "").strip()))

    run('command container add -o -h "SFrame stack-trace information (.sframe): '
        'lookup, backtrace, info, dump, provider." sframe')
    for name, cls in _SUBCOMMANDS:
        run("command script add -o -c %s.%s sframe %s" % (modname, cls, name))
    if failures:
        print("sframe: could not add the commands: " + "; ".join(failures))
    _TRACKER.clear()
