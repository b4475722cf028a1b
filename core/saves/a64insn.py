"""Just enough of the AArch64 (A64) instruction set for the save-slot analysis (core.saves.analysis).

Every A64 instruction is one 32-bit little-endian word (also in big-endian processes), so walking
a function needs no measuring; what matters is recognising, conservatively, what each word does
to the analysis: stores and loads of registers relative to SP or the frame pointer (STP/LDP,
STR/LDR in their offset, pre- and post-indexed forms), every way SP can change, and the control
flow (branches, calls, returns).  Anything not recognised is an ordinary instruction that neither
saves a register nor moves SP; every encoding that can write SP is recognised as doing so, and an
unknown word of the branch group counts as a jump that may go anywhere.
"""

from typing import Dict, List, Optional, Tuple

from . import jumptables
from .flow import Flow, Op

SP, FP = 31, 29


def _sext(value, bits):
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def decode(word: int, addr: int) -> Op:
    """The Op of one instruction word at addr."""
    op = _branch(word, addr)
    if op is None:
        if (word >> 27) & 7 == 0b101 and (word >> 25) & 1 == 0:
            op = _pair(word, addr)
        elif (word >> 27) & 7 == 0b111 and (word >> 25) & 1 == 0:
            op = _single(word, addr)
        elif _other_sp_writeback(word):
            op = Op(addr, 4, sp=None)
        else:
            op = _data(word, addr)
    writes = _writes(word)
    return op._replace(writes=writes) if writes else op


def _other_sp_writeback(word):
    """Loads and stores outside the pair and single-register forms that write their base back,
    with SP as the base: SIMD structure loads/stores (post-index), memory-tag stores, LDRAA/LDRAB."""
    if (word >> 5) & 31 != SP:
        return False
    return (word & 0xBF800000 in (0x0C800000, 0x0D800000)              # LD1/ST1... post-index
            or word >> 24 == 0xD9 and (word >> 10) & 1                 # STG, STZG, ST2G, STZ2G pre/post-index
            or word & 0xFF200C00 == 0xF8200C00)                        # LDRAA/LDRAB with writeback


V = 64          # DWARF number of v0: v8-v15 (72-79) hold the callee-saved d8-d15


def _vectors(first, count=4):
    """DWARF numbers of `count` vector registers from `first` on, wrapping at v31 (a structure load's
    list; over-approximated to four where the count is not decoded)."""
    return tuple(V + (first + k) % 32 for k in range(count))


def _writes(word):
    """The registers an instruction may write besides the loads Op.loads places: general registers
    (0-30) and vector registers (DWARF 64-95, v0-v31: any write of a SIMD&FP, SVE or SME register
    changes the d register it holds)."""
    rd = word & 31
    op0 = (word >> 25) & 0xF
    out: Tuple[int, ...] = ()
    if op0 in (0b1000, 0b1001, 0b0101, 0b1101):
        out = (rd,)                                 # data processing (immediate, register)
    elif op0 == 0b0010:                             # SVE: a general, predicate or vector (Z) register, or a
        out = (rd,) + _vectors(rd & ~3, 8)          # list of up to four from Zd (Zd's group of four and the next)
    elif op0 == 0b0000:                             # SME, SME2: lists with a stride, opcode bits in Rd: any
        out = (rd,) + _vectors(0, 32)
    elif op0 in (0b0111, 0b1111):                   # SIMD and floating point: a vector register, except
        if word & 0x5F200000 == 0x1E000000 or word & 0x5F20FC00 == 0x1E200000:
            out = _conversion(word, rd)             # conversions between floating point and integers, FMOV
        elif word & 0xBFE08400 == 0x0E000400 and (word >> 11) & 0xF in (5, 7):
            out = (rd,)                             # SMOV/UMOV (not INS: op, bit 29, set)
        elif word & 0xFF20FC00 != 0x1E202000 and word & 0xFF200C00 != 0x1E200400:
            out = (V + rd,)                         # (FCMP, FCMPE, FCCMP, FCCMPE write the flags only)
    elif op0 & 0b0101 == 0b0100:                    # loads and stores
        if word & 0x3F000000 == 0x1C000000:
            out = (V + rd,)                         # LDR (literal) of a SIMD&FP register
        elif (word >> 26) & 1 and (word >> 27) & 7 not in (0b101, 0b111):
            out = _vectors(rd)                      # of SIMD&FP registers, other than the pair and single
            #                                         forms (Op.loads): structures, LDAPUR, ...
        elif word & 0x3F000000 == 0x08000000:
            out = (rd, (word >> 16) & 31, (word >> 10) & 31)   # exclusives and CAS: Rt, Rs, Rt2
        elif word & 0x3B000000 == 0x18000000 and not (word >> 26) & 1:
            out = (rd,)                             # LDR (literal)
        elif (word >> 27) & 7 == 0b111 and (word >> 24) & 3 == 0 and (word >> 21) & 1 and not (word >> 10) & 3:
            out = (rd,) if not (word >> 26) & 1 else ()        # atomics (LDADD, SWP, ...)
        elif word & 0xFF200400 == 0xF8200400:
            out = (rd,)                             # LDRAA/LDRAB
    elif op0 in (0b1010, 0b1011) and word & 0xFFF00000 in (0xD5300000, 0xD5280000):
        out = (rd,)                                 # MRS, SYSL
    elif word & 0xFFFFF0FF == 0xD503407F or word & 0xFFFFFFE0 == 0xD51B4240:
        out = _vectors(0, 32)                       # SMSTART/SMSTOP, MSR SVCR: the Z registers are zeroed
    return tuple(r for r in out if r != 31)


def _conversion(word, rd):
    """What a conversion between floating point and integers writes: a general register (FCVT*
    to an integer, FMOV to general, FJCVTZS) or a vector register (SCVTF/UCVTF and FMOV from
    general); both where its (rmode, opcode) is neither of those (FEAT_FPRCVT's forms between
    SIMD&FP registers, and the fixed-point class, bit 21 clear)."""
    rmode, opcode = (word >> 19) & 3, (word >> 16) & 7
    if (word >> 21) & 1:
        if opcode in (0, 1) or opcode in (4, 5) and rmode == 0 or opcode == 6 and rmode in (0, 1):
            return (rd,)
        if opcode in (2, 3) and rmode == 0 or opcode == 7 and rmode in (0, 1):
            return (V + rd,)
    return (rd, V + rd)


def _branch(word, addr):
    if word & 0xFC000000 == 0x14000000:                       # B
        return Op(addr, 4, Flow.JUMP, target=addr + 4 * _sext(word & 0x3FFFFFF, 26))
    if word & 0xFC000000 == 0x94000000:                       # BL
        return Op(addr, 4, Flow.CALL, target=addr + 4 * _sext(word & 0x3FFFFFF, 26))
    if word & 0xFF000000 == 0x54000000 or word & 0x7E000000 == 0x34000000:    # B.cond, BC.cond, CBZ/CBNZ
        return Op(addr, 4, Flow.BRANCH, target=addr + 4 * _sext((word >> 5) & 0x7FFFF, 19))
    if word & 0x7E000000 == 0x36000000:                       # TBZ/TBNZ
        return Op(addr, 4, Flow.BRANCH, target=addr + 4 * _sext((word >> 5) & 0x3FFF, 14))
    if word & 0xFE000000 == 0xD6000000:                       # branch to register
        opc = (word >> 21) & 0xF
        if opc in (0b0001, 0b1001):
            return Op(addr, 4, Flow.CALL)                     # BLR, BLRAAZ, BLRAA, BLRAB
        if opc in (0b0000, 0b1000):
            return Op(addr, 4, Flow.INDIRECT)                 # BR, BRAA...: a jump table or a tail call
        if opc in (0b0010, 0b0100, 0b0101):
            return Op(addr, 4, Flow.STOP, returns=True)       # RET (RETAA, RETAB), ERET, DRPS
        return Op(addr, 4, Flow.INDIRECT_OR_NEXT)
    if word & 0xFFE0001F == 0xD4200000 or word >> 16 == 0:    # BRK, UDF
        return Op(addr, 4, Flow.STOP)
    if (word >> 26) & 7 == 0b101 and word & 0xFFC00000 != 0xD5000000 and word & 0xFF000000 != 0xD4000000:
        # Another branch of this group (a newer extension's): it may go anywhere, or on.
        return Op(addr, 4, Flow.INDIRECT_OR_NEXT)
    return None


def _pair(word, addr):
    """Load/store register pair: STP/LDP (X and SIMD&FP registers), STNP/LDNP."""
    opc, vector, index, load = word >> 30, (word >> 26) & 1, (word >> 23) & 3, (word >> 22) & 1
    rt, rn, rt2 = word & 31, (word >> 5) & 31, (word >> 10) & 31
    if vector:
        scale = {0: 4, 1: 8, 2: 16}.get(opc)
        regs = (64 + rt, 64 + rt2)                  # D registers: the callee-saved halves (d8-d15)
    else:
        scale = {0: 4, 1: 4 if load else 16, 2: 8}.get(opc)    # opc 1: LDPSW, STGP (tag granules)
        regs = (rt, rt2)
    if scale is None:
        return Op(addr, 4)
    imm = _sext((word >> 15) & 0x7F, 7) * scale
    off = 0 if index == 1 else imm                 # post-index: the address is the old base
    delta = imm if index in (1, 3) else 0          # pre/post-index write the base back
    if scale != 8:
        off = None                                 # not a whole 8-byte register: not a save it can place
    return _memory(addr, rn, regs, off, scale, load, delta)


def _single(word, addr):
    """Load/store register (unsigned offset, unscaled, pre- and post-indexed, register offset)."""
    size, vector, kind, opc = word >> 30, (word >> 26) & 1, (word >> 24) & 3, (word >> 22) & 3
    rt, rn = word & 31, (word >> 5) & 31
    eight = size == 3 and opc in (0, 1)            # STR/LDR of a whole X or D register
    regs = (64 + rt,) if vector else (rt,)
    load = 1 if not vector and opc >= 2 else opc & 1   # opc 2/3 of X forms: prefetch, sign-extending loads
    if kind == 1:                                  # unsigned 12-bit offset
        off = ((word >> 10) & 0xFFF) * (1 << (size if not vector or opc < 2 else 4))
        return _memory(addr, rn, regs, off if eight else None, 8, load, 0)
    if kind != 0:
        return Op(addr, 4)
    if (word >> 21) & 1:                           # register offset: an address the analysis cannot place
        return _memory(addr, rn, regs, None, 8, load, 0)
    imm, idx = _sext((word >> 12) & 0x1FF, 9), (word >> 10) & 3
    off = {1: 0, 3: imm}.get(idx, imm)             # post-index: the old base; pre-index and unscaled: base + imm
    return _memory(addr, rn, regs, off if eight else None, 8, load, imm if idx in (1, 3) else 0)


def _memory(addr, rn, regs, off, size, load, delta):
    """An Op for a load or store of `regs` at [rn + off] (off None: not a whole register at a
    constant offset), with rn += delta."""
    sp = delta if rn == SP else 0
    places = tuple((r, rn, None if off is None else off + k * size) for k, r in enumerate(regs))
    if load:
        return Op(addr, 4, loads=places, sp=sp)
    return Op(addr, 4, stores=places, sp=sp)


def _data(word, addr):
    """Data processing: the ways to write SP, and x29 = SP + imm."""
    rd, rn = word & 31, (word >> 5) & 31
    if (word >> 23) & 0x3F == 0b100010 and not (word >> 29) & 1:       # ADD/SUB (immediate), not ADDS/SUBS
        imm = ((word >> 10) & 0xFFF) << (12 if (word >> 22) & 1 else 0)
        if (word >> 30) & 1:
            imm = -imm
        if not word >> 31:                                            # 32-bit: writes WSP, not SP
            return Op(addr, 4, sp=None) if rd == SP else Op(addr, 4)
        if rd == SP:
            if rn == SP:
                return Op(addr, 4, sp=imm)
            if rn == FP:
                return Op(addr, 4, sp=None, sp_from_fp=imm)
            return Op(addr, 4, sp=None)
        if rd == FP and rn == SP:
            return Op(addr, 4, fp_from_sp=imm)
        return Op(addr, 4)
    if rd == SP and (_extended_add(word) or _logical_imm(word) or (word >> 23) & 0x3F == 0b100011
                     or word & 0xFFA0F000 in (0x04205000, 0x04605000) or word & 0x3FE0E000 == 0x1A002000):
        # ADD/SUB (extended register), AND/ORR/EOR #imm, ADDG/SUBG, ADDVL/ADDPL/ADDSVL/ADDSPL, ADDPT/SUBPT
        return Op(addr, 4, sp=None)
    return Op(addr, 4)


def _extended_add(word):
    return (word >> 24) & 0x1F == 0b01011 and (word >> 21) & 1 and not (word >> 29) & 1


def _logical_imm(word):
    return (word >> 23) & 0x3F == 0b100100 and (word >> 29) & 3 != 3


def words(code: bytes, start: int, read=None, kept=(), sp_at=None, big_endian=False, elsewhere=None) -> Optional[list]:
    """The Ops of a function's code (little-endian words), or None if its size is not whole words.
    With `read(addr, size)` (the program's data), a `br` through a jump table goes to its targets
    (core.saves.jumptables; `kept`: the registers a call preserves, `sp_at`: SFrame's CFA - SP,
    `elsewhere`: where a case outside this code may be)."""
    if len(code) % 4:
        return None
    raw = [int.from_bytes(code[k:k + 4], "little") for k in range(0, len(code), 4)]
    out = [decode(w, start + 4 * k) for k, w in enumerate(raw)]
    if read is not None:
        found: list = []

        def all_defs():                 # (one scan of the function for every table, and the spills)
            if not found:
                found.append(_constant_defs_all(raw, out))
            return found[0]
        tables = jump_tables(raw, out, all_defs)
        spills = (31, 29, all_defs()) if tables else None
        for k, targets in jumptables.resolve(out, tables, read, kept, sp_at or (lambda addr: None),
                                             big_endian, elsewhere, spills).items():
            out[k] = out[k]._replace(targets=targets)
    return out


# -- jump tables (core.saves.jumptables) -----------------------------------------------------------


def jump_tables(words: List[int], out: List[Op], all_defs=None) -> Dict[int, jumptables.Table]:
    """{index of a `br`: its jumptables.Table} for GCC's two shapes of jump table:

        adrp/add xB, table (or adr xB)              adrp/add xB, table
        ldrb|ldrh|ldr wE, [xB, wI, uxtw #s]         ldr xT, [xB, xI, lsl #3]
        adr  xA, anchor                             br  xT
        add  xT, xA, wE, sxtb|sxth|sxtw #2
        br   xT

    a `switch` (entries: words from the anchor, the count from the bound check when it is there)
    and a table of label addresses (GCC's computed goto; absolute addresses, which the reader
    gives as the loader leaves them).  Other instructions may stand in between, writing none of
    the registers the shape uses.  `all_defs()`: _constant_defs_all of the function, if known."""
    all_defs = all_defs or (lambda: _constant_defs_all(words, out))
    found: Dict[int, jumptables.Table] = {}
    defs_of: Dict[int, Dict[int, int]] = {}
    for k, op in enumerate(out):
        w = words[k]
        if op.flow is not Flow.INDIRECT or w & 0xFFFFFC1F != 0xD61F0000:
            continue
        x = (w >> 5) & 31
        a = jumptables.last_write(out, k, (x,))
        if a is None:
            continue
        wa = words[a]
        load = _register_load(wa)
        if load is not None and load[0] == x and load[3] == 3:
            _rt, base, _index, _size, signed = load
            defs = defs_of.setdefault(base, _defs_of(all_defs(), base))
            found[k] = jumptables.Table(a, base, defs, 8, False, absolute=True)
            continue
        if wa & 0xFFE00000 != 0x8B200000 or wa & 31 != x:          # ADD (extended register), 64-bit
            continue
        rn, rm, option, shift = (wa >> 5) & 31, (wa >> 16) & 31, (wa >> 13) & 7, (wa >> 10) & 7
        if option not in (0, 1, 2, 4, 5, 6) or shift > 4:
            continue
        i_adr, i_load = jumptables.last_write(out, a, (rn,)), jumptables.last_write(out, a, (rm,))
        if i_adr is None or i_load is None or i_adr == i_load:
            continue
        anchor = _adr(words[i_adr], out[i_adr].addr)
        load = _register_load(words[i_load])
        if anchor is None or anchor[0] != rn or load is None or load[0] != rm or load[3] == 3:
            continue
        _rt, base, index, size, signed = load
        defs = defs_of.setdefault(base, _defs_of(all_defs(), base))
        found[k] = jumptables.Table(i_load, base, defs, 1 << size, signed or option >= 4, anchor=anchor[1],
                                    shift=shift, entries=_bound(words, out, i_load, index), since=min(i_adr, i_load))
    return found


def _register_load(w: int):
    """(Rt, Rn, Rm, log2 size, signed) of LDR/LDRB/LDRH/LDRSB/LDRSH/LDRSW (register offset) whose
    index is scaled by the size, else None."""
    if w & 0x3B200C00 != 0x38200800 or (w >> 26) & 1:
        return None
    size, opc, option, scaled = w >> 30, (w >> 22) & 3, (w >> 13) & 7, (w >> 12) & 1
    if opc == 0 or option not in (2, 3, 6, 7) or (size and not scaled) or (size == 3 and opc != 1):
        return None
    return w & 31, (w >> 5) & 31, (w >> 16) & 31, size, opc >= 2


def _adr(w: int, addr: int) -> Optional[Tuple[int, int]]:
    """(Rd, address) of ADR, else None."""
    if w & 0x9F000000 != 0x10000000:
        return None
    return w & 31, addr + _sext(((w >> 5) & 0x7FFFF) << 2 | (w >> 29) & 3, 21)


def _defs_of(all_defs: Dict[int, Tuple[int, int]], reg: int) -> Dict[int, int]:
    """{index: address} of those of `all_defs` that put an address in `reg`."""
    return {i: addr for i, (r, addr) in all_defs.items() if r == reg}


def _constant_defs_all(words: List[int], out: List[Op]) -> Dict[int, Tuple[int, int]]:
    """{index: (register, address)} of the instructions that put an address in a register:
    `adr`, or `add #imm` on a register an `adrp` just set (its page)."""
    defs = {}
    for i, w in enumerate(words):
        got = _adr(w, out[i].addr)
        if got is not None and got[0] != 31:
            defs[i] = got
        elif w & 0xFF800000 == 0x91000000 and w & 31 != 31:                   # ADD (immediate), 64-bit
            reg = w & 31
            src = (w >> 5) & 31
            j = jumptables.last_write(out, i, (src,))
            page = words[j] if j is not None else 0
            if j is not None and page & 0x9F000000 == 0x90000000 and page & 31 == src:
                base = (out[j].addr & ~0xFFF) + (_sext(((page >> 5) & 0x7FFFF) << 2 | (page >> 29) & 3, 21) << 12)
                defs[i] = (reg, base + (((w >> 10) & 0xFFF) << (12 if (w >> 22) & 1 else 0)))
    return defs


def _bound(words: List[int], out: List[Op], i_load: int, index: int) -> Optional[int]:
    """The table's entries where the bound check on `index` is plain: `cmp wI, #n` then `b.hi`
    or `b.hs` away just before the load, or `b.ls`/`b.lo` to it (or to the straight line of code
    into it that leaves wI alone); None where it is not found."""
    def cmp_imm(j):
        w = words[j] if 0 <= j else 0
        if w & 0x7F80001F == 0x7100001F and (w >> 5) & 31 == index:     # SUBS wzr/xzr, wI/xI, #imm
            return ((w >> 10) & 0xFFF) << (12 if (w >> 22) & 1 else 0)
        return None
    run = {out[i_load].addr}              # the straight line into the load: where b.ls may go
    for j in range(i_load - 1, max(i_load - 1 - jumptables.WINDOW, -1), -1):
        w = words[j]
        if w & 0xFF000010 == 0x54000000 and w & 0xF in (2, 8):               # b.hs / b.hi away
            n = cmp_imm(j - 1)
            return None if n is None else n + (1 if w & 0xF == 8 else 0)
        if out[j].flow is not Flow.NEXT or index in out[j].writes or any(ld[0] == index for ld in out[j].loads):
            break
        run.add(out[j].addr)
    for j, op in enumerate(out):
        w = words[j]
        if op.target in run and w & 0xFF000010 == 0x54000000 and w & 0xF in (3, 9):   # b.lo / b.ls to it
            n = cmp_imm(j - 1)
            if n is not None:
                return n + (1 if w & 0xF == 9 else 0)
    return None
