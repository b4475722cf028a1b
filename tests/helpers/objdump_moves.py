"""Where a function moves callee-saved registers to and from the stack, read from binutils' objdump
text: a truth for tests/test_saves.py that shares nothing with the analysis under test (which
decodes machine code itself, core.saves.*insn).

`Function(insns, targets)` holds a function's instructions as objdump prints them.  Asked at an
instruction, `moved_before` walks back along the straight line that reaches it (stopping where
another path can join: a branch target, or after an instruction that never falls through) and
says whether the register was stored to (or loaded from) a given CFA-relative slot there, and not
written since (the slot is compared where the DWARF CFA rule at the move is based on the register
the move addresses; elsewhere, a push or pop while the CFA is FP-based, the move itself counts).  A slot's CFA offset comes from the DWARF CFA rule at the storing instruction
(`cfa_at(addr)` -> (register name, offset) or None), so the only input besides objdump is readelf.
"""

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from . import toolchains as T

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*?)\s*$")
_COMMENT = re.compile(r"\s+(?://|#\s).*$")      # AArch64's "// ...", x86's "# 4040 <sym>" (not "#16")


@dataclass(frozen=True)
class Insn:
    addr: int
    mnemonic: str
    operands: str


def disassemble(toolchain: str, path) -> Dict[int, Insn]:
    """{address: Insn} of every instruction objdump finds in the executable sections."""
    tc = T.toolchain(toolchain)
    proc = T.run_in(tc, [tc.tool("objdump"), "-d", "--no-show-raw-insn", "-w", str(path)], binds=[path.parent],
                    check=True)
    out = {}
    for line in proc.stdout.splitlines():
        m = _LINE.match(line)
        if m:
            mnemonic = m.group(2)
            if mnemonic.startswith("(bad)") or mnemonic == "...":
                continue
            operands = _COMMENT.sub("", m.group(3)).split("<")[0].strip()
            out[int(m.group(1), 16)] = Insn(int(m.group(1), 16), mnemonic, operands)
    return out


# -- per ISA: what one instruction stores, loads and writes ----------------------------------------
# A move is (register name as readelf names it, base register, byte offset from the base as it is
# before the instruction).

def _num(text: str) -> int:
    text = text.strip().lstrip("#$")
    return int(text, 0)


class X86:
    """AT&T syntax (x86-64)."""
    sp = "rsp"
    never_falls_through = re.compile(r"^(ret|jmp|ud2|hlt)")
    branch = re.compile(r"^(j\w+|call)")
    _mem = re.compile(r"^(-?0x[0-9a-f]+|-?\d+)?\(%(\w+)\)$")

    def moves(self, i: Insn):
        """(stores, loads) as lists of (reg, base, offset)."""
        ops = [o.strip() for o in re.split(r",(?![^(]*\))", i.operands)] if i.operands else []
        m = i.mnemonic
        if m == "push" and ops and ops[0].startswith("%"):
            return [(ops[0][1:], "rsp", -8)], []
        if m == "pop" and ops and ops[0].startswith("%"):
            return [], [(ops[0][1:], "rsp", 0)]
        if m == "mov" and len(ops) == 2:
            src, dst = ops
            md = self._mem.match(dst)
            if src.startswith("%r") and md:
                return [(src[1:], md.group(2), int(md.group(1) or "0", 0))], []
            ms = self._mem.match(src)
            if dst.startswith("%r") and ms:
                return [], [(dst[1:], ms.group(2), int(ms.group(1) or "0", 0))]
        return [], []

    def writes(self, i: Insn, reg: str) -> bool:
        """Might the instruction write `reg` (any width of it)?  Its last operand in AT&T syntax,
        and the few instructions that write a callee-saved register implicitly."""
        names = {"rbx": ("rbx", "ebx", "bx", "bl", "bh"), "rbp": ("rbp", "ebp", "bp", "bpl")}.get(
            reg, (reg, reg + "d", reg + "w", reg + "b"))
        m = i.mnemonic
        if m == "cpuid":
            return reg == "rbx"
        if m.startswith("leave"):
            return reg == "rbp"
        ops = [o.strip() for o in re.split(r",(?![^(]*\))", i.operands)] if i.operands else []
        if not ops:
            return False
        if m.startswith(("xchg", "xadd", "cmpxchg")):
            return any(o.lstrip("%") in names for o in ops)
        if m.startswith(("cmp", "test", "push", "bt", "j", "call", "nop", "prefetch")):
            return False
        return ops[-1].lstrip("%") in names


class A64:
    """AArch64."""
    sp = "sp"
    never_falls_through = re.compile(r"^(ret|b|br|brk|udf)$")
    branch = re.compile(r"^(b|b\.\w+|bl|cbz|cbnz|tbz|tbnz)$")
    _pair = re.compile(r"^(\w+), (\w+), \[(\w+)(?:, #(-?\d+|-?0x[0-9a-f]+))?\](!?)(?:, #(-?\d+|-?0x[0-9a-f]+))?$")
    _one = re.compile(r"^(\w+), \[(\w+)(?:, #(-?\d+|-?0x[0-9a-f]+))?\](!?)(?:, #(-?\d+|-?0x[0-9a-f]+))?$")

    @staticmethod
    def _name(r: str) -> Optional[str]:
        if re.fullmatch(r"x(\d+)", r):
            return r
        if r == "lr":
            return "x30"
        if re.fullmatch(r"d(\d+)", r):
            return r       # the callee-saved halves of v8-v15 (q registers: whole, not a d slot)
        return None        # w and s registers (half), q registers, xzr

    def moves(self, i: Insn):
        m = i.mnemonic
        stores: List[tuple] = []
        loads: List[tuple] = []
        target = stores if m in ("stp", "str", "stur") else loads if m in ("ldp", "ldr", "ldur") else None
        if target is None:
            return stores, loads
        mp = self._pair.match(i.operands) if m in ("stp", "ldp") else None
        mo = self._one.match(i.operands) if mp is None else None
        if mp:
            regs, base, off, _pre, post = (mp.group(1), mp.group(2)), mp.group(3), mp.group(4), mp.group(5), mp.group(6)
        elif mo:
            regs, base, off, _pre, post = (mo.group(1),), mo.group(2), mo.group(3), mo.group(4), mo.group(5)
        else:
            return stores, loads
        at = 0 if post else _num(off) if off else 0
        width = 8
        for k, r in enumerate(regs):
            name = self._name(r)
            if name is not None:
                target.append((name, base, at + k * width))
        return stores, loads

    def writes(self, i: Insn, reg: str) -> bool:
        """The first operand is the destination of nearly every A64 instruction (of a load pair:
        the first two); stores, compares, branches and calls write no callee-saved register."""
        m = i.mnemonic
        if m in ("b", "br", "bl", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz") or m.startswith((
                "b.", "st", "cmp", "cmn", "tst", "ccmp", "ccmn", "fcmp", "nop", "prfm", "dmb", "dsb", "isb", "hint",
                "pac", "aut", "bti", "xpac")):
            return False
        ops = [o.strip() for o in i.operands.split(",")]
        dests = ops[:2] if m in ("ldp", "ldpsw", "ldnp", "ldaxp", "ldxp") else ops[:1]
        if reg.startswith("d"):        # any view of the vector register, or a list holding it
            n = reg[1:]
            return any(re.fullmatch(r"[bhsdq]%s|[vz]%s(\.\w+)?(\[\d+\])?" % (n, n), d) or d.startswith("{")
                       for d in dests) or m.startswith(("ld1", "ld2", "ld3", "ld4"))
        return any(re.fullmatch(r"[xw]%s" % reg[1:], d) for d in dests)


class S390:
    """s390x (z/Architecture)."""
    sp = "r15"
    never_falls_through = re.compile(r"^(br|j|b|jg)$")
    branch = re.compile(r"^(j\w*|b\w*|brasl|bras)$")
    _multi = re.compile(r"^%(r\d+),%(r\d+),(-?\d+)\(%(r\d+)\)$")
    _one = re.compile(r"^%([rf]\d+),(-?\d+)\(%(r\d+)\)$")

    def moves(self, i: Insn):
        m = i.mnemonic
        if m in ("stmg", "lmg"):
            mm = self._multi.match(i.operands)
            if not mm:
                return [], []
            lo, hi, off, base = int(mm.group(1)[1:]), int(mm.group(2)[1:]), int(mm.group(3)), mm.group(4)
            regs = [("r%d" % r, base, off + 8 * k) for k, r in enumerate(range(lo, hi + 1))] if lo <= hi else []
            return (regs, []) if m == "stmg" else ([], regs)
        if m in ("stg", "std", "lg", "ld"):
            mo = self._one.match(i.operands)
            if not mo:
                return [], []
            move = [(mo.group(1), mo.group(3), int(mo.group(2)))]
            return (move, []) if m in ("stg", "std") else ([], move)
        return [], []

    def writes(self, i: Insn, reg: str) -> bool:
        """The first operand is the destination of most s390x instructions; stores, compares and
        branches write none (but branch on count decrements its register, and calls write r14)."""
        m = i.mnemonic
        first = i.operands.split(",")[0].strip()
        if m.startswith(("brct", "bct")):
            return first == "%" + reg
        if m in ("brasl", "bras", "basr"):
            return reg == "r14"
        if m.startswith(("st", "j", "b", "nop", "tm")) or m.startswith("c") and not m.startswith(("cs", "cds", "cvb")):
            return False
        if m in ("lmg", "lm"):
            mm = re.match(r"^%r(\d+),%r(\d+)", i.operands)
            return bool(mm) and reg.startswith("r") and int(mm.group(1)) <= int(reg[1:]) <= int(mm.group(2))
        return first == "%" + reg


ISAS = {"x86_64": X86(), "aarch64": A64(), "s390x": S390()}


class Function:
    """One function's instructions (in address order), for straight-line questions."""

    def __init__(self, isa, insns: Sequence[Insn], cfa_at: Callable[[int], Optional[Tuple[str, int]]]):
        self.isa = isa
        self.insns = list(insns)
        self.cfa_at = cfa_at
        self.pos = {i.addr: k for k, i in enumerate(self.insns)}
        self.targets: Set[int] = set()
        lo = self.insns[0].addr if self.insns else 0
        hi = self.insns[-1].addr if self.insns else 0
        for i in self.insns:
            if isa.branch.match(i.mnemonic) or isa.never_falls_through.match(i.mnemonic):
                for word in re.findall(r"\b([0-9a-f]+)\b", i.operands):
                    a = int(word, 16)
                    if lo <= a <= hi and a in self.pos:
                        self.targets.add(a)

    _NOPS = re.compile(r"^(nop\w*|cs|ds|data16|int3|udf)$")

    def padding(self, pc: int) -> bool:
        """Is the instruction at pc alignment padding: a no-op that no path reaches (it follows an
        instruction that never falls through, or other padding, and nothing branches to it)?"""
        k = self.pos.get(pc)
        while k is not None and k > 0:
            i = self.insns[k]
            if i.addr in self.targets or not (self._NOPS.match(i.mnemonic) or
                                              i.mnemonic == "xchg" and i.operands == "%ax,%ax"):
                return False
            k -= 1
            if self.isa.never_falls_through.match(self.insns[k].mnemonic):
                return True
        return False

    def _slot(self, insn: Insn, base: str, off: int) -> Optional[int]:
        """The CFA offset of base + off at insn (by the DWARF CFA rule there), or None."""
        cfa = self.cfa_at(insn.addr)
        if cfa is None or cfa[0] != base:
            return None
        return off - cfa[1]

    def moved_before(self, pc: int, reg: str, slot: Optional[int], kind: str) -> bool:
        """Did the straight line reaching pc (pc itself excluded) store (kind 'store') reg to the
        CFA-relative slot (None: to any place), or load (kind 'load') reg from it, with no write
        of reg after that?"""
        k = self.pos.get(pc)
        if k is None:
            return False
        while k > 0:
            if self.insns[k].addr in self.targets:
                return False               # another path joins here
            k -= 1
            i = self.insns[k]
            if self.isa.never_falls_through.match(i.mnemonic):
                return False
            stores, loads = self.isa.moves(i)
            for r, base, off in (stores if kind == "store" else loads):
                if r == reg:
                    # The slot is compared where the CFA rule there is based on the same register;
                    # where it is not (a push or pop while the CFA is FP-based), the move counts.
                    at = self._slot(i, base, off)
                    return slot is None or at is None or at == slot
            if kind == "load" or kind == "store":
                if any(r == reg for r, _b, _o in loads) or self.isa.writes(i, reg) and not any(
                        r == reg for r, _b, _o in stores):
                    return False           # written (or loaded from elsewhere) after any move we seek
        return False
