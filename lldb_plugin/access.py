"""What the LLDB commands read from LLDB: the target's modules and their load addresses, frames'
registers, memory, symbols, and addresses typed by the user.  Translation only: indexes,
unwinding and printed text come from core/."""

import os
import re

import lldb

from ..core.arch import abi as abimod
from ..core.report.frames import where_text
from ..core.sframe.format import MASK64
from ..core.unwind.modules import LoadedCfi
from ..core.unwind.tracker import LoadedModule, ModuleTracker, file_identity
from ..core.unwind.unwinder import frame_from_registers, lookup_address

INVALID = lldb.LLDB_INVALID_ADDRESS

# One tracker for the plugin: it follows whichever target a command runs on.
TRACKER = ModuleTracker()


class UserError(Exception):
    """A problem to report to the user in one line."""


def has_state(process):
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


def loaded_modules(target):
    """LoadedModule records for the target's modules that may have SFrame."""
    live = has_state(target.GetProcess())
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


def sync(target):
    TRACKER.sync(loaded_modules(target))


# LLDB's architecture names (the first part of the target triple) -> the core ABI.
_LLDB_ARCHES = {
    "x86_64": abimod.AMD64, "amd64": abimod.AMD64, "x86_64h": abimod.AMD64,
    "aarch64": abimod.AARCH64_LE, "arm64": abimod.AARCH64_LE,
    "aarch64_be": abimod.AARCH64_BE, "arm64_be": abimod.AARCH64_BE,
    "s390x": abimod.S390X, "systemz": abimod.S390X,
}


def abi_of(target):
    arch = (target.GetTriple() or "").split("-", 1)[0].lower()
    if arch in _LLDB_ARCHES:
        return _LLDB_ARCHES[arch]
    for m in TRACKER.modules.with_sframe():
        return abimod.info(m.index.abi)
    raise UserError("target architecture %r is not one SFrame describes (x86-64, AArch64, s390x)" % arch)


def register_value(frame, names):
    """The bits of the first of `names` the frame has, as an unsigned integer: its bytes, as a
    floating-point register's value converted to an integer would lose them (AArch64's d8 holding
    6.75 gives 6, s390x's f8 the same)."""
    for name in names:
        v = frame.FindRegister(name)
        if v is not None and v.IsValid():
            err = lldb.SBError()
            data = v.GetData()
            size = data.GetByteSize() if data is not None and data.IsValid() else 0
            if 0 < size <= 8:
                raw = data.ReadRawData(err, 0, size)
                if err.Success() and raw is not None and len(raw) == size:
                    return int.from_bytes(raw, "big" if data.GetByteOrder() == lldb.eByteOrderBig else "little")
                err = lldb.SBError()
            x = v.GetValueAsUnsigned(err, 0)
            if err.Success():
                return x
    return None


def _regnames(abi, num):
    """LLDB's names for a DWARF register: its aliases first (AArch64 fp, lr), then the DWARF name."""
    return abi.aliases.get(num, ()) + (abi.regname(num),)


def frame_state(frame, abi, full):
    """core.unwind.unwinder.Frame from an LLDB frame; `full`: every register it has is valid (frame 0)."""
    pc = frame.GetPC()
    if pc == INVALID:
        raise UserError("frame #%d has no PC" % frame.GetFrameID())

    def read(num):
        if num not in abi.regnames or not abi.is_register(num):
            return None
        if num in (abi.sp, abi.fp):
            # SBFrame's own SP and FP (LLDB's generic ones: the ABI's), without the value object
            # FindRegister makes: LLDB 23's first one at a stop costs 50 ms.
            got = frame.GetSP() if num == abi.sp else frame.GetFP()
            if got != INVALID:
                return got
        return register_value(frame, _regnames(abi, num))
    state = frame_from_registers(abi, pc, read, full=full, level=frame.GetFrameID())
    if state.sp is None:
        raise UserError("frame #%d has no stack pointer" % frame.GetFrameID())
    return state


def memory_reader(process):
    def read(addr, size):
        err = lldb.SBError()
        data = process.ReadMemory(addr, size, err)
        if err.Fail() or data is None:
            return None
        return data
    return read


def owner_of(target):
    """owner(addr) for core.unwind.modules.locate: the path of the module LLDB says holds addr, or None."""
    live = has_state(target.GetProcess())

    def owner(addr):
        a = target.ResolveLoadAddress(addr) if live else target.ResolveFileAddress(addr)
        if not a.IsValid() or not a.GetModule().IsValid():
            return None
        return a.GetModule().GetFileSpec().fullpath
    return owner


def place_of(target):
    """place(addr) for core.unwind.modules.LoadedCfi: (path, load bias) of the module LLDB says
    holds addr (any module, with SFrame or not), or None."""
    live = has_state(target.GetProcess())

    def place(addr):
        a = target.ResolveLoadAddress(addr) if live else target.ResolveFileAddress(addr)
        m = a.GetModule() if a.IsValid() else None
        if m is None or not m.IsValid():
            return None
        path = m.GetFileSpec().fullpath
        if not path or not os.path.isfile(path):
            return None
        hdr = m.GetObjectFileHeaderAddress()
        load, file_addr = hdr.GetLoadAddress(target), hdr.GetFileAddress()
        return path, (load - file_addr if live and INVALID not in (load, file_addr) else 0)
    return place


_CFI = {}      # SFrame ABI -> core.unwind.modules.LoadedCfi (the files' CFI, read once)


def loaded_cfi(abi):
    """The LoadedCfi of an ABI (one per ABI: its register numbers)."""
    cfi = _CFI.get(abi.sframe_abi)
    if cfi is None:
        cfi = _CFI[abi.sframe_abi] = LoadedCfi(abi)
    return cfi


def symbol_at(target, addr):
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


def symbolizer(target):
    """symbolize(addr) -> (symbol name, offset) through LLDB's symbols (core.saves.analysis' `symbolize`)."""
    def symbolize(addr):
        _mod, name, start = symbol_at(target, addr)
        return None if name is None or start is None else (name, addr - start)
    return symbolize


def where_of(target, pc, return_address=False):
    """'module`symbol + off' for a PC; a return address is symbolized by the call before it."""
    modname, name, start = symbol_at(target, lookup_address(pc, return_address))
    return where_text(modname, name, pc - start if start is not None else 0)


def symbol_namer(target):
    def name(pc):
        return symbol_at(target, pc)[1]
    return name


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
        v = frame.GetPC() if name == "pc" else register_value(frame, (name,))
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
