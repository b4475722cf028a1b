"""Just enough of the x86-64 instruction encoding to walk a function's code one instruction at a
time and recognise the few instructions the save-slot analysis needs.

The analysis must know where every instruction starts (a byte before an FRE boundary is a `push`
only if an instruction starts there), so `decode` measures every 64-bit-mode instruction:
legacy prefixes, REX, the one-, two- and three-byte opcode maps, VEX, EVEX and ModRM/SIB
addressing.  What it cannot measure (an invalid opcode in 64-bit mode, XOP, 3DNow!) it refuses
with None: the analysis then says "unknown" rather than guess where the next instruction starts.

Besides the length, it classifies the instruction (`Kind`): push and pop of a register, a store
of a register to memory, `mov %rsp, %rbp`, a direct branch (with its target) or anything else,
and says which general registers it may write (`writes`, an over-approximation: where an opcode
is not known to leave an operand alone, that operand counts as written).
"""

import enum
from typing import Dict, List, NamedTuple, Optional, Tuple


class Kind(enum.Enum):
    OTHER = 0
    PUSH = 1          # push %reg (reg: 0-15)
    POP = 2           # pop %reg
    STORE = 3         # mov %reg, mem (reg: the 64-bit register stored)
    MOV_FP_SP = 4     # mov %rsp, %rbp
    BRANCH = 5        # direct jmp/jcc/loop/call: target is set
    PUSH_OTHER = 6    # push of an immediate or of memory (or a 16-bit push)
    JUMP_INDIRECT = 7  # jmp *reg / jmp *mem


class Insn(NamedTuple):
    addr: int
    length: int
    kind: Kind
    reg: int = -1               # register number for PUSH/POP/STORE (rax=0 ... r15=15, hardware order)
    target: Optional[int] = None  # BRANCH
    sp_write: bool = True       # OTHER: may write %rsp or %rbp (False only when proved not to)
    transfer: bool = False      # call, jmp, ret, ud2, hlt: the next instruction's stack need not follow
    quiet: bool = False         # a no-op (nop, pause, endbr64 and the other hint nops): writes nothing
    writes: Tuple[int, ...] = ()  # general registers it may write (hardware numbers), over-approximated


# Hardware register number (ModRM, opcode low bits, REX) -> DWARF number (the x86-64 psABI's).
DWARF_OF_HW = (0, 2, 1, 3, 7, 6, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15)

_PREFIXES = frozenset((0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3))

# One-byte map.  M: has ModRM.  Immediate: 'b' 1 byte, 'w' 2, 'z' 4 (2 with 0x66), 'v' 4/2/8
# (B8-BF: 8 with REX.W), 'a' moffs (8 bytes, 4 with 0x67), 'e' enter (2+1), 'g' group 3 (F6/F7:
# an immediate only for /0 and /1), 'x' invalid in 64-bit mode.
_ONE = {}


def _fill(table, opcodes, spec):
    for op in opcodes:
        table[op] = spec


_ALU = [b + k for b in range(0x00, 0x40, 8) for k in range(6)]
for _op in _ALU:
    _ONE[_op] = ("M", "") if _op & 7 < 4 else ("", "b" if _op & 7 == 4 else "z")
_fill(_ONE, (0x06, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27, 0x2F, 0x37, 0x3F, 0x60, 0x61, 0x82, 0x9A,
             0xCE, 0xD4, 0xD5, 0xD6, 0xEA), ("x", ""))
_fill(_ONE, range(0x50, 0x60), ("", ""))
_ONE[0x63] = ("M", "")
_ONE[0x68] = ("", "z")
_ONE[0x69] = ("M", "z")
_ONE[0x6A] = ("", "b")
_ONE[0x6B] = ("M", "b")
_fill(_ONE, range(0x6C, 0x70), ("", ""))
_fill(_ONE, range(0x70, 0x80), ("", "b"))
_ONE[0x80] = ("M", "b")
_ONE[0x81] = ("M", "z")
_ONE[0x83] = ("M", "b")
_fill(_ONE, range(0x84, 0x90), ("M", ""))
_fill(_ONE, range(0x90, 0xA0), ("", ""))
_ONE[0x9A] = ("x", "")
_fill(_ONE, range(0xA0, 0xA4), ("", "a"))
_fill(_ONE, range(0xA4, 0xB0), ("", ""))
_ONE[0xA8] = ("", "b")
_ONE[0xA9] = ("", "z")
_fill(_ONE, range(0xB0, 0xB8), ("", "b"))
_fill(_ONE, range(0xB8, 0xC0), ("", "v"))
_fill(_ONE, (0xC0, 0xC1, 0xC6), ("M", "b"))
_ONE[0xC7] = ("M", "z")
_fill(_ONE, (0xC2, 0xCA), ("", "w"))
_fill(_ONE, (0xC3, 0xC9, 0xCB, 0xCC, 0xCF, 0xD7, 0xF1, 0xF4, 0xF5) + tuple(range(0xEC, 0xF0))
      + tuple(range(0xF8, 0xFE)), ("", ""))
_ONE[0xC8] = ("", "e")
_ONE[0xCD] = ("", "b")
_fill(_ONE, (0xD0, 0xD1, 0xD2, 0xD3) + tuple(range(0xD8, 0xE0)) + (0xFE, 0xFF), ("M", ""))
_fill(_ONE, range(0xE0, 0xE8), ("", "b"))
_fill(_ONE, (0xE8, 0xE9), ("", "z32"))
_ONE[0xEB] = ("", "b")
_fill(_ONE, (0xF6, 0xF7), ("M", "g"))

# Two-byte map (0F xx).  Everything not listed has a ModRM byte and no immediate.
_TWO_NONE = frozenset((0x05, 0x06, 0x07, 0x08, 0x09, 0x0B, 0x0E, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x37,
                       0x77, 0xA0, 0xA1, 0xA2, 0xA8, 0xA9, 0xAA) + tuple(range(0xC8, 0xD0)))
_TWO_IMM8 = frozenset((0x70, 0x71, 0x72, 0x73, 0xA4, 0xAC, 0xBA, 0xC2, 0xC4, 0xC5, 0xC6))
_TWO_BAD = frozenset((0x04, 0x0A, 0x0C, 0x0F, 0x24, 0x25, 0x26, 0x27, 0x36, 0x39, 0x3B, 0x3C, 0x3D, 0x3E, 0x3F))
# VEX/EVEX map 1 opcodes with an imm8 (map 3 always has one, map 2 never).
_VEX1_IMM8 = frozenset((0x70, 0x71, 0x72, 0x73, 0xC2, 0xC4, 0xC5, 0xC6))


def _modrm_len(code, pos, addr32):
    """Bytes taken by ModRM + SIB + displacement starting at pos, and the ModRM byte itself."""
    modrm = code[pos]
    mod, rm = modrm >> 6, modrm & 7
    n = 1
    if mod == 3:
        return n, modrm
    if rm == 4:
        sib = code[pos + 1]
        n += 1
        if mod == 0 and sib & 7 == 5:
            n += 4
    elif mod == 0 and rm == 5:
        n += 4
    if mod == 1:
        n += 1
    elif mod == 2:
        n += 4
    return n, modrm


def decode(code: bytes, pos: int, addr: int) -> Optional[Insn]:
    """The instruction at code[pos:] (loaded at addr), or None if it cannot be measured."""
    try:
        return _decode(code, pos, addr)
    except IndexError:        # runs off the end of the bytes given
        return None


def decode_all(code: bytes, start: int, size: int) -> Tuple[List[Insn], int]:
    """The instructions of code[:size] (loaded at `start`), one after another, and where the
    decoding stopped: `size`, or past it (the last runs over), or less (one cannot be measured)."""
    out: List[Insn] = []
    try:
        pos = _run(code, 0, start, size, out)
    except IndexError:        # runs off the end of the bytes given: stopped where that one starts
        pos = out[-1].addr + out[-1].length - start if out else 0
    return out, pos


class Ahead:
    """Functions' instructions measured before their own analysis (the never-returns search
    decodes the callees, a .cold part its parent), kept until that analysis takes them: so each
    function's code is measured once, whoever asks first.  At most LIMIT bytes of code are kept,
    with their instructions (then all are forgotten, and measured again where asked); a larger
    function is not kept.  Also, apart (`keep`, `claim`), a .cold part's parent's decoding for the
    data flow (core.saves.flow_analyser), any ISA's: LATER bytes of such code at most, the first
    ones kept, the others not.  (A function's instructions take about 50 times its code's size in
    memory, its decoding for the data flow about 90.)  Where [lo, hi) is given (a writer's part of
    the functions), only for the functions starting there: the others' turns are not to come
    here."""

    LIMIT = 1 << 20
    LATER = 1 << 19

    def __init__(self, lo: Optional[int] = None, hi: Optional[int] = None) -> None:
        self._kept: Dict[int, Tuple[bytes, List[Insn], int]] = {}
        self._count = 0       # bytes of code kept
        self._later: Dict[int, Tuple[object, int, object]] = {}    # start -> (key, code bytes, decoding)
        self._later_count = 0
        self._lo, self._hi = lo, hi

    def _turn_comes(self, start: int) -> bool:
        return (self._lo is None or self._lo <= start) and (self._hi is None or start < self._hi)

    def get(self, code: bytes, start: int) -> Tuple[List[Insn], int]:
        """decode_all(code, start, len(code)), kept (for later questions and the function's own
        turn) where it starts in [lo, hi)."""
        kept = self._kept.get(start)
        if kept is not None and kept[0] == code:
            return kept[1], kept[2]
        insns, pos = decode_all(code, start, len(code))
        if len(code) > self.LIMIT or not self._turn_comes(start):
            return insns, pos
        if self._count + len(code) > self.LIMIT:
            self._kept.clear()
            self._count = 0
        old = self._kept.pop(start, None)
        if old is not None:
            self._count -= len(old[0])
        self._kept[start] = (code, insns, pos)
        self._count += len(code)
        return insns, pos

    def take(self, code: bytes, start: int, size: int) -> Tuple[List[Insn], int]:
        """decode_all(code, start, size), kept ones given up (the function's own turn: its last)."""
        kept = self._kept.pop(start, None)
        if kept is not None:
            self._count -= len(kept[0])
            if kept[0] == code and size == len(code):
                return kept[1], kept[2]
        return decode_all(code, start, size)

    def keep(self, start: int, key: object, size: int, decoding: object) -> None:
        """A decoding of the function at `start` (`size` bytes of code) made before its own
        analysis, kept under `key` for it (beyond LATER bytes of such code: not kept)."""
        if start not in self._later and self._later_count + size <= self.LATER and self._turn_comes(start):
            self._later[start] = (key, size, decoding)
            self._later_count += size

    def claim(self, start: int, key: object) -> Optional[object]:
        """What `keep` kept for the function at `start` under `key`, given up; else None."""
        got = self._later.get(start)
        if got is None or got[0] != key:
            return None
        self._forget_later(start)
        return got[2]

    def _forget_later(self, start: int) -> None:
        later = self._later.pop(start, None)
        if later is not None:
            self._later_count -= later[1]

    def done(self, start: int) -> None:
        """The analysis of the function at `start` is over: nothing is kept for it."""
        if self._later:
            self._forget_later(start)
        kept = self._kept.pop(start, None)
        if kept is not None:
            self._count -= len(kept[0])


def ahead_of(index) -> Optional[Ahead]:
    """The SFrame index's Ahead, where its user keeps one (core.saves.analysis.table and
    .writing: a side file's writer, which asks of every function in turn); None: nothing is kept
    (a debugger's questions of a few functions would keep callees whose own turn never comes)."""
    return getattr(index, "ahead", None)


def _prefixes(code, pos):
    """(position of the opcode, operand size 16?, address size 32?, REX byte or 0, F2/F3 seen)."""
    start = pos
    opsize16 = addr32 = False
    rep = 0
    while code[pos] in _PREFIXES:
        if code[pos] == 0x66:
            opsize16 = True
        elif code[pos] == 0x67:
            addr32 = True
        elif code[pos] in (0xF2, 0xF3):
            rep = code[pos]
        pos += 1
        if pos - start > 14:
            raise IndexError("too many prefixes")     # no instruction is longer than 15 bytes
    rex = 0
    if 0x40 <= code[pos] <= 0x4F:
        rex = code[pos]
        pos += 1
    return pos, opsize16, addr32, rex, rep


def _imm_size(imm, op, modrm, opsize16, rex_w, addr32):
    """Bytes of immediate (or moffs / relative offset) after the ModRM part."""
    word = 2 if opsize16 and not rex_w else 4
    if imm == "g":
        return (1 if op == 0xF6 else word) if (modrm >> 3) & 7 in (0, 1) else 0
    if imm == "":
        return 0
    if imm == "b":
        return 1
    if imm == "z":
        return word
    return {"w": 2, "z32": 4, "v": 8 if rex_w else word, "a": 4 if addr32 else 8, "e": 3}[imm]


def _decode(code, pos, addr):
    """The instruction at code[pos:] (loaded at addr), or None if it cannot be measured; IndexError
    where it runs past the end of the bytes."""
    out: List[Insn] = []
    _run(code, pos, addr - pos, pos + 1, out)
    return out[0] if out else None


def _run(code, pos, base, stop, out):
    """Measure the instructions of code[pos:] (code[k] loaded at base + k) one after another while
    they start before `stop`, appending each to `out`; gives where it stopped (`stop` or past
    it, or the start of one that cannot be measured); IndexError where one runs past the end of
    the bytes.  An instruction without a legacy prefix whose one-byte opcode _FAST measures (most
    of them) is measured here, without the general path's calls (_general: the others)."""
    append = out.append
    while pos < stop:
        addr = base + pos
        first = code[pos]
        if 0x40 <= first <= 0x4F:
            rex, p = first, pos + 1
        else:
            rex, p = 0, pos
        op = code[p]
        fast = _FAST[op]
        if fast is None:          # (a legacy prefix too: no _FAST entry, and it is not 0F)
            if op == 0x0F:        # (the two-byte map without a legacy prefix: _general's way, shorter)
                ins = _decode_0f(code, pos, p + 1, addr, False, rex, 0)
            else:
                ins = _general(code, pos, addr)
            if ins is None:
                return pos
            append(ins)
            pos += ins[1]
            continue
        p += 1
        modrm = -1
        if fast[0]:               # (_modrm_len, written out: most instructions come this way)
            modrm = code[p]
            p += 1
            mod = modrm >> 6
            if mod != 3:
                rm = modrm & 7
                if rm == 4:
                    p += 5 if mod == 0 and code[p] & 7 == 5 else 1      # SIB (and its disp32)
                elif mod == 0 and rm == 5:
                    p += 4                                               # RIP-relative disp32
                if mod == 1:
                    p += 1
                elif mod == 2:
                    p += 4
        end = p + fast[2 if rex & 8 else 1]
        code[end - 1]             # the whole instruction must be present
        if op not in _RELATIVE:   # (_one_byte's look-up of the shape, written out)
            shape = _SHAPES.get(op | (modrm + 1) << 8 | rex << 17)      # (_shape_key, no 0x66)
            if shape is not None:
                append(_new(Insn, (addr, end - pos) + shape))
                pos = end
                continue
        else:
            tail = _BRANCH_TAIL[op]
            if tail is not None:  # (_classify's relative branch, written out)
                append(_new(Insn, (addr, end - pos, _BRANCH, -1,
                                   base + end + int.from_bytes(code[p:end], "little", signed=True)) + tail))
                pos = end
                continue
        append(_one_byte(code, addr, end - pos, op, modrm, rex, False, p, end))
        pos = end
    return pos


def _general(code, pos, addr):
    """The instruction at code[pos:] (loaded at addr), or None if it cannot be measured: any
    prefixes, maps and encodings."""
    start = pos
    first = code[pos]
    if first in _PREFIXES:
        pos, opsize16, addr32, rex, rep = _prefixes(code, pos)
    else:                         # (most instructions: no legacy prefix, at most a REX)
        opsize16 = addr32 = False
        rex = rep = 0
        if 0x40 <= first <= 0x4F:
            rex = first
            pos += 1
    op = code[pos]
    pos += 1
    if op == 0x0F:
        return _decode_0f(code, start, pos, addr, addr32, rex, opsize16 or rep)
    if op in (0xC4, 0xC5, 0x62):
        return _decode_vex(code, start, pos, addr, op, addr32)
    if op == 0x8F and (code[pos] >> 3) & 7:
        return None               # XOP
    spec = _ONE.get(op)
    if spec is None or spec[0] == "x":
        return None
    has_modrm, imm = spec
    modrm = -1
    if has_modrm:
        n, modrm = _modrm_len(code, pos, addr32)
        pos += n
    end = pos + (_imm_size(imm, op, modrm, opsize16, rex & 8, addr32) if imm else 0)
    code[end - 1]                 # the whole instruction must be present
    return _one_byte(code, addr, end - start, op, modrm, rex, opsize16, pos, end)


def _one_byte(code, addr, length, op, modrm, rex, opsize16, pos, end):
    """The Insn of a measured one-byte-map instruction (`pos`: where its immediate starts, `end`:
    where it ends).  A relative branch's is its own; anything else is classified by its opcode,
    ModRM, REX and operand size alone: once."""
    if op in _RELATIVE:
        return _classify(code, addr, length, op, modrm, rex, opsize16, pos, end)
    key = _shape_key(op, modrm, rex, opsize16)
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= 65536:
            _SHAPES.clear()
        shape = _SHAPES[key] = _classify(code, 0, 0, op, modrm, rex, opsize16, pos, end)[2:]
    return _new(Insn, (addr, length) + shape)


def _fast_entry(op: int):
    """_FAST's entry for a one-byte opcode: (has ModRM, immediate bytes without REX.W, with it),
    for an instruction without a legacy prefix; None where _general measures it (another map,
    VEX, EVEX, XOP's 8F, an invalid opcode, an immediate that depends on the ModRM byte)."""
    spec = _ONE.get(op)
    if spec is None or spec[0] == "x" or op == 0x8F or spec[1] == "g":
        return None               # (0F, VEX and EVEX are not in _ONE; 8F may be XOP's: _general tells)
    has_modrm, imm = spec
    return (bool(has_modrm), _imm_size(imm, op, 0, False, 0, False) if imm else 0,
            _imm_size(imm, op, 0, False, 8, False) if imm else 0)


_FAST = [None if op in _PREFIXES else _fast_entry(op) for op in range(256)]   # (a prefix: _general's)

# One-byte opcodes whose Insn depends on more than the opcode, ModRM, REX and operand size: the
# relative branches (their target) and C7 (xbegin's).
_RELATIVE = frozenset((0xE8, 0xE9, 0xEB, 0xC7) + tuple(range(0x70, 0x80)) + tuple(range(0xE0, 0xE4)))
_SHAPES: dict = {}     # _shape_key(op, modrm, rex, operand size 16) -> the Insn's fields after addr and length


def _shape_key(op: int, modrm: int, rex: int, opsize16: bool) -> int:
    """_SHAPES' key: the opcode, ModRM (or -1), REX (or 0) and the 0x66 prefix in one int (an
    int hashes sooner than a tuple, and _run looks one up for most instructions)."""
    return op | (modrm + 1) << 8 | rex << 17 | opsize16 << 25
# A relative branch's Insn fields after its target (sp_write, transfer, quiet, writes), by opcode
# (None: C7, whose Insn is xbegin's only for one ModRM byte).
_BRANCH = Kind.BRANCH
_BRANCH_TAIL = {op: None if op == 0xC7 else (True, op in (0xE8, 0xE9, 0xEB), False, ()) for op in _RELATIVE}
_new = tuple.__new__   # (an Insn from its fields' tuple without the NamedTuple's Python-level __new__)


def _classify(code, addr, length, op, modrm, rex, opsize16, pos, end):
    """The Insn of a measured one-byte-map instruction."""
    rex_w, rex_r, rex_b = rex & 8, (rex >> 2) & 1, rex & 1
    reg = ((modrm >> 3) & 7) | rex_r << 3
    rm = (modrm & 7) | rex_b << 3
    if 0x50 <= op <= 0x5F and not opsize16:
        return Insn(addr, length, Kind.PUSH if op < 0x58 else Kind.POP, (op & 7) | rex_b << 3)
    if op in (0x68, 0x6A) or 0x50 <= op <= 0x57 or op == 0xFF and reg & 7 == 6:
        return Insn(addr, length, Kind.PUSH_OTHER)
    if op == 0x89 and rex_w and not opsize16:
        if modrm >> 6 != 3:
            return Insn(addr, length, Kind.STORE, reg)
        if reg == 4 and rm == 5:
            return Insn(addr, length, Kind.MOV_FP_SP)
    if op == 0x8B and rex_w and modrm >> 6 == 3 and reg == 5 and rm == 4:
        return Insn(addr, length, Kind.MOV_FP_SP)
    if op == 0x8F and modrm >> 6 == 3:
        return Insn(addr, length, Kind.POP, rm)
    if op in (0xE8, 0xE9) or 0x70 <= op <= 0x7F or op == 0xEB or 0xE0 <= op <= 0xE3:
        rel = int.from_bytes(code[pos:end], "little", signed=True)
        return Insn(addr, length, Kind.BRANCH, target=addr + length + rel, transfer=op in (0xE8, 0xE9, 0xEB))
    if op == 0xFF and reg & 7 in (4, 5):
        return Insn(addr, length, Kind.JUMP_INDIRECT, transfer=True)
    if op == 0x90 and not rex_b:
        return Insn(addr, length, Kind.OTHER, sp_write=False, quiet=True)     # nop, pause
    if op == 0xC7 and modrm == 0xF8:                      # xbegin: on abort, execution goes to the target
        rel = int.from_bytes(code[pos:end], "little", signed=True)
        return Insn(addr, length, Kind.BRANCH, target=addr + length + rel)
    transfer = op in (0xC2, 0xC3, 0xCA, 0xCB, 0xCF, 0xF4) or op == 0xFF and reg & 7 in (2, 3)
    return Insn(addr, length, Kind.OTHER, sp_write=_may_write_frame_regs(op, modrm, rex_r, rex_b), transfer=transfer,
                writes=_one_byte_writes(op, modrm, rex))


# One-byte opcodes whose operands are bytes: without REX, register numbers 4-7 are ah, ch, dh, bh.
_BYTE_OPS = frozenset(tuple(b + k for b in range(0x00, 0x40, 8) for k in (0, 2)) + (
    0x86, 0x88, 0x8A, 0xC6, 0xC0, 0xD0, 0xD2, 0xF6, 0xFE, 0x80) + tuple(range(0xB0, 0xB8)))
_RM_DEST = frozenset((0x88, 0x89, 0x8C, 0x8F, 0xC6, 0xC7, 0xC0, 0xC1, 0xD0, 0xD1, 0xD2, 0xD3)
                     + tuple(b + k for b in range(0x00, 0x38, 8) for k in (0, 1)))
_REG_DEST = frozenset((0x8A, 0x8B, 0x8D, 0x63, 0x69, 0x6B) + tuple(b + k for b in range(0x00, 0x38, 8) for k in (2, 3)))
_NO_DEST = frozenset((0x38, 0x39, 0x3A, 0x3B, 0x84, 0x85, 0x8E, 0x62) + tuple(range(0xD8, 0xE0)))


def _one_byte_writes(op, modrm, rex):
    """The general registers a one-byte-map instruction may write (hardware numbers)."""
    rex_r, rex_b = (rex >> 2) & 1, rex & 1
    out = []
    if modrm < 0:
        if 0xB0 <= op <= 0xBF or 0x91 <= op <= 0x97 or 0x58 <= op <= 0x5F or op == 0x90 and rex_b:
            out.append((op & 7) | rex_b << 3)
        elif op in (0xC8, 0xC9):
            out.append(5)                                  # enter, leave: %rbp
        elif op in _IMPLICIT_WRITES:
            out += _IMPLICIT_WRITES[op]
    else:
        reg = ((modrm >> 3) & 7) | rex_r << 3
        rm = (modrm & 7) | rex_b << 3 if modrm >> 6 == 3 else None
        sub = (modrm >> 3) & 7
        if op in _NO_DEST:
            pass
        elif op in _RM_DEST or op in (0x80, 0x81, 0x83) and sub != 7 or op in (0xF6, 0xF7) and sub in (2, 3) \
                or op in (0xFE, 0xFF) and sub in (0, 1):
            out.append(rm)
        elif op in _REG_DEST:
            out.append(reg)
        elif op in (0xF6, 0xF7) and sub >= 4:
            out += [0, 2]                                  # mul, imul, div, idiv: rax, rdx
        elif op in (0x80, 0x81, 0x83, 0xF6, 0xF7, 0xFE, 0xFF):
            pass                                           # cmp, test, call/jmp/push
        else:
            out += [reg, rm]                               # anything else: either operand may be written
    return _with_byte_aliases(out, rex == 0 and op in _BYTE_OPS)


# One-byte opcodes without ModRM that write general registers their encoding does not name:
# add/or/adc/sbb/and/sub/xor on %al/%eax, cbw/cwde/cdqe, lahf, xlat, in: %rax; cwd/cdq/cqo: %rdx;
# the string instructions: %rsi, %rdi, %rcx (rep) and %rax (lods).
_IMPLICIT_WRITES = {**{b + k: (0,) for b in range(0x00, 0x38, 8) for k in (4, 5)},
                    0x98: (0,), 0x9F: (0,), 0xD7: (0,), 0xE4: (0,), 0xE5: (0,), 0xEC: (0,), 0xED: (0,), 0x99: (2,),
                    **{op: (0, 1, 6, 7) for op in (0xA4, 0xA5, 0xA6, 0xA7, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF)}}


def _with_byte_aliases(regs, byte_regs):
    """Drop Nones; without REX a byte register 4-7 is ah-bh, the second byte of rax-rbx."""
    out = [r for r in regs if r is not None]
    if byte_regs:
        out += [r - 4 for r in out if 4 <= r <= 7]
    return tuple(out)


# One-byte opcodes without ModRM that leave %rsp and %rbp alone (besides the B8+r and 90+r cases).
_NO_FRAME_WRITE_ONE = frozenset((0x90, 0x98, 0x99, 0xA8, 0xA9, 0xCC, 0xF5, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD)
                       + tuple(b + 4 for b in range(0x00, 0x40, 8)) + tuple(b + 5 for b in range(0x00, 0x40, 8)))


def _may_write_frame_regs(op, modrm, rex_r, rex_b):
    """Could this one-byte-map instruction write %rsp or %rbp?  Conservative: any ModRM operand
    naming either register counts, except where the opcode only reads its operands."""
    if modrm < 0:
        if 0xB0 <= op <= 0xBF:
            return (op & 7) | rex_b << 3 in (4, 5) and op >= 0xB8
        if 0x91 <= op <= 0x97:
            return (op & 7) | rex_b << 3 in (4, 5)
        return op not in _NO_FRAME_WRITE_ONE
    reg = ((modrm >> 3) & 7) | rex_r << 3
    rm = (modrm & 7) | rex_b << 3 if modrm >> 6 == 3 else -1
    if op in (0x38, 0x39, 0x3A, 0x3B, 0x84, 0x85):       # cmp, test: read only
        return False
    if op in (0x88, 0x89) or op in (0x80, 0x81, 0x83, 0xC6, 0xC7, 0xC0, 0xC1, 0xD0, 0xD1, 0xD2, 0xD3, 0xF6, 0xF7,
                                     0xFE, 0xFF) or op in (0x00, 0x01, 0x08, 0x09, 0x10, 0x11, 0x18, 0x19, 0x20,
                                                           0x21, 0x28, 0x29, 0x30, 0x31):
        if op in (0x80, 0x81, 0x83) and (modrm >> 3) & 7 == 7:
            return False                                   # cmp imm
        if op in (0xF6, 0xF7) and (modrm >> 3) & 7 in (0, 1):
            return False                                   # test imm
        if op == 0xFF and (modrm >> 3) & 7 >= 2:
            return True                                    # indirect call or jump
        return rm in (4, 5)                                # destination: the r/m operand
    if op in (0x8A, 0x8B, 0x8D, 0x63, 0x02, 0x03, 0x0A, 0x0B, 0x12, 0x13, 0x1A, 0x1B, 0x22, 0x23, 0x2A, 0x2B,
              0x32, 0x33, 0x69, 0x6B):
        return reg in (4, 5)                               # destination: the reg operand
    return reg in (4, 5) or rm in (4, 5)


def _decode_0f(code, start, pos, addr, addr32, rex, prefixed):
    op = code[pos]
    pos += 1
    if op in _TWO_BAD:
        return None
    modrm, op3 = -1, -1
    if op == 0x38 or op == 0x3A:
        op3 = code[pos]
        pos += 1                  # the opcode in the three-byte map
        n, modrm = _modrm_len(code, pos, addr32)
        end = pos + n + (1 if op == 0x3A else 0)
    elif op in _TWO_NONE:
        end = pos
    elif 0x80 <= op <= 0x8F:      # jcc rel32
        end = pos + 4
        code[end - 1]
        rel = int.from_bytes(code[pos:end], "little", signed=True)
        return Insn(addr, end - start, Kind.BRANCH, target=addr + end - start + rel)
    else:
        n, modrm = _modrm_len(code, pos, addr32)
        end = pos + n + (1 if op in _TWO_IMM8 else 0)
        if op == 0x78 and prefixed:
            end += 2              # SSE4a extrq/insertq with two immediates (without a prefix: vmread)
    code[end - 1]
    key = (op, op3, modrm, rex)
    shape = _SHAPES_0F.get(key)
    if shape is None:
        if len(_SHAPES_0F) >= 65536:
            _SHAPES_0F.clear()
        shape = _SHAPES_0F[key] = _classify_0f(op, op3, modrm, rex)[2:]
    return _new(Insn, (addr, end - start) + shape)


_SHAPES_0F: dict = {}     # (op, three-byte op or -1, modrm or -1, rex) -> the Insn's fields after addr and length


def _classify_0f(op, op3, modrm, rex):
    """The Insn (at 0, of length 0) of a measured 0F-map instruction other than jcc rel32: what it
    is depends on its opcodes, ModRM and REX alone."""
    addr = length = 0
    kind = Kind.PUSH_OTHER if op in (0xA0, 0xA8) else Kind.OTHER
    if op == 0x0B:
        return Insn(addr, length, kind, transfer=True)      # ud2
    if op in (0x18, 0x1C, 0x1D, 0x1F) or op == 0x1E and modrm in (0xFA, 0xFB):
        return Insn(addr, length, kind, sp_write=False, quiet=True)     # nop r/m, prefetch, endbr64
    writes = _two_byte_writes(op, op3, modrm, rex)
    if 0x10 <= op <= 0x17 or 0x28 <= op <= 0x2F or 0x50 <= op <= 0x7F or 0xD0 <= op:
        # The SSE/MMX moves and arithmetic: their operands are vector registers
        # or memory (never a general register destination), except movd/movq to a register
        # (0F 7E) and pmovmskb (0F D7), pextrw (0F C5) which write one.
        if op not in (0x7E, 0xD7, 0x50):
            return Insn(addr, length, kind, sp_write=False, writes=writes)
    return Insn(addr, length, kind, writes=writes)


# 0F-map opcodes whose destination is a vector register (or memory, or nothing), never a general one.
_TWO_VECTOR = frozenset(tuple(range(0x10, 0x18)) + tuple(range(0x28, 0x2C)) + (0x2E, 0x2F, 0x0D, 0x77, 0xC2, 0xC3,
                        0xC4, 0xC6, 0xA0, 0xA1, 0xA8, 0xA9, 0x0B, 0xA3) + tuple(range(0x51, 0x7E)) + (0x7F,)
                        + tuple(r for r in range(0xD0, 0x100) if r != 0xD7) + tuple(range(0x90, 0xA0)))


def _two_byte_writes(op, op3, modrm, rex):
    """The general registers a 0F-map instruction may write (hardware numbers)."""
    rex_r, rex_b = (rex >> 2) & 1, rex & 1
    reg = ((modrm >> 3) & 7) | rex_r << 3 if modrm >= 0 else None
    rm = (modrm & 7) | rex_b << 3 if modrm >= 0 and modrm >> 6 == 3 else None
    if op == 0xA2:
        return (0, 1, 2, 3)                                # cpuid: eax, ecx, edx and ebx
    if op in (0x05, 0x07):
        return (0, 1, 11)                                  # syscall, sysret: rax, rcx, r11
    if op in (0x30, 0x31, 0x32, 0x33, 0x01):
        return _with_byte_aliases([0, 1, 2, reg, rm], False)   # rdmsr, rdtsc(p), rdpmc, group 7 (smsw ...)
    if 0xC8 <= op <= 0xCF:
        return ((op & 7) | rex_b << 3,)                    # bswap
    if 0x90 <= op <= 0x9F:
        return _with_byte_aliases([rm], rex == 0)          # setcc r/m8
    if op == 0x38:
        return _with_byte_aliases([reg, rm], False) if 0xF0 <= op3 <= 0xF7 else ()
    if op == 0x3A:
        return _with_byte_aliases([rm], False) if 0x14 <= op3 <= 0x17 else ()
    if op in _TWO_VECTOR:
        return ()
    if op == 0x7E:
        return _with_byte_aliases([rm], False)             # movd/movq r/m, mm/xmm: the reg field is not a GPR
    if op in (0x2C, 0x2D, 0x50, 0xD7, 0xC5):
        return _with_byte_aliases([reg], False)            # cvt(t)sd2si ..., movmskp*, pmovmskb, pextrw: from a vector
    if op == 0xBA:
        return _with_byte_aliases([rm], False)             # bt, bts, btr, btc $imm: the reg field extends the opcode
    if op == 0xC7:
        sub = (modrm >> 3) & 7 if modrm >= 0 else -1
        return (0, 2) if sub == 1 else _with_byte_aliases([rm], False) if sub in (6, 7) else ()   # cmpxchg8b, rdrand
    if op == 0xAE:
        return _with_byte_aliases([rm], False)             # fences and memory forms; rdfsbase and the like
    return _with_byte_aliases([reg, rm], op in (0xB0, 0xC0) and rex == 0)


def _decode_vex(code, start, pos, addr, op, addr32):
    p0 = code[pos]
    if op == 0xC5:
        vvvv = ~(p0 >> 3) & 0xF
        rbar, bbar = p0 >> 7, 1
        pos += 1
        mmap = 1
    elif op == 0xC4:
        mmap = p0 & 0x1F
        vvvv = ~(code[pos + 1] >> 3) & 0xF
        rbar, bbar = p0 >> 7, (p0 >> 5) & 1
        pos += 2
    else:                         # EVEX
        mmap = p0 & 0x7
        vvvv = ~(code[pos + 1] >> 3) & 0xF
        rbar, bbar = p0 >> 7, (p0 >> 5) & 1
        pos += 3
    if mmap not in (1, 2, 3, 5, 6):
        return None
    opc = code[pos]
    pos += 1
    modrm = -1
    if mmap == 1 and opc == 0x77:
        end = pos                 # vzeroupper / vzeroall
    else:
        n, modrm = _modrm_len(code, pos, addr32)
        end = pos + n + (1 if mmap == 3 or (mmap == 1 and opc in _VEX1_IMM8) else 0)
    code[end - 1]
    reg = ((modrm >> 3) & 7) | (1 - rbar) << 3 if modrm >= 0 else None
    rm = (modrm & 7) | (1 - bbar) << 3 if modrm >= 0 and modrm >> 6 == 3 else None
    writes: list = []
    if mmap in (1, 5, 6) and opc in (0x2C, 0x2D, 0x50, 0xC5, 0xD7, 0x93, 0x78, 0x79, 0x7E):
        writes = [reg, rm]        # conversions to an integer, mask and element moves to a general register
    elif mmap == 2 and 0xF0 <= opc <= 0xF7:
        writes = [reg, rm, vvvv]  # BMI: andn, bzhi, pdep, pext, mulx, bextr, shlx ...; blsr etc. write vvvv
    elif mmap == 3 and (0x14 <= opc <= 0x17 or opc == 0xF0):
        writes = [reg, rm]        # vpextr*, vextractps, rorx
    return Insn(addr, end - start, Kind.OTHER, writes=_with_byte_aliases(writes, False))
