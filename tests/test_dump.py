"""core.report.dump against the real `readelf --sframe`, byte for byte.

References:
  * V2 and V3: binutils 2.47's readelf, in the sid root (it refuses V1 sections);
  * V1: the host's binutils 2.40 readelf; its header layout is older (no "CFA fixed ... offset"
    lines), so for V1 everything from "Function Index" on (function lines, column titles, rows)
    must be equal, and the header equal but for those lines.

What is compared:
  * every program of the corpus (tests/fixtures/*.c built by every toolchain and variant:
    V1 host, V2 trixie, V3 sid x86-64 / AArch64 (pac-ret, b-key) / s390x), with its library;
  * small assembler sources with CFI shapes the C fixtures do not produce (signal frames,
    undefined RA, DRAP, registers holding RA/FP, B-key signing), assembled by each toolchain;
  * synthetic sections of every shape (core.sframe.encode.build), wrapped into minimal ELF files and
    read by the same readelf builds, and random well-formed sections (fixed seeds);
  * the FREs readelf cannot print (it aborts, or repeats the previous row) and malformed or
    mutated sections: dump raises SFrameError, the decoder's own when the decoder rejects them;
  * speed: a 50,000-function section against sid's readelf.
"""

import random
import struct

import pytest
from helpers import synthetic, toolchains
from helpers.readelf import assert_v1_matches, readelf_many, rows, split_index

from sframekit.core.errors import SFrameError
from sframekit.core.report.dump import dump, dump_file
from sframekit.core.sframe import format as F
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.encode import Func, Row, build

AMD64, A64LE, A64BE, S390X = (F.ABI.AMD64_ENDIAN_LITTLE, F.ABI.AARCH64_ENDIAN_LITTLE,
                              F.ABI.AARCH64_ENDIAN_BIG, F.ABI.S390X_ENDIAN_BIG)
ABIS = (AMD64, A64LE, A64BE, S390X)
ABI_NAMES = {AMD64: "amd64", A64LE: "a64le", A64BE: "a64be", S390X: "s390x"}
SP, FP = F.BaseReg.SP, F.BaseReg.FP
FLEX, MASK = F.FDEType.FLEX, F.PCType.MASK
SECTION_ADDR = 0x2000

# ---------------------------------------------------------------------------------------------
# Helpers: ELF wrapping, running readelf in batches


_E_MACHINE = {AMD64: 62, A64LE: 183, A64BE: 183, S390X: 22}
SHT_GNU_SFRAME = 0x6FFFFFF4


def wrap_elf(data, addr, abi):
    """A minimal 64-bit ELF file (no segments) whose only section is .sframe at addr."""
    big = abi in (A64BE, S390X)
    e = ">" if big else "<"
    names = b"\0.sframe\0.shstrtab\0"
    off_data = 64
    off_names = off_data + len(data)
    off_sh = (off_names + len(names) + 7) & ~7
    ident = b"\x7fELF" + bytes([2, 2 if big else 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack(e + "HHIQQQIHHHHHH", 2, _E_MACHINE[abi], 1, 0, 0, off_sh, 0,
                               64, 56, 0, 64, 3, 2)
    shdrs = (bytes(64)
             + struct.pack(e + "IIQQQQIIQQ", 1, SHT_GNU_SFRAME, 2, addr, off_data, len(data), 0, 0, 8, 0)
             + struct.pack(e + "IIQQQQIIQQ", 9, 3, 0, 0, off_names, len(names), 0, 0, 1, 0))
    body = ehdr + data + names
    return body + bytes(off_sh - len(body)) + shdrs


# ---------------------------------------------------------------------------------------------
# The corpus: every fixture program, every toolchain


@pytest.fixture(scope="session")
def corpus_readelf(corpus, tmp_path_factory):
    """path -> readelf output, for every corpus executable and library (V1 by the host's readelf,
    V2/V3 by sid's), in two batches."""
    work = tmp_path_factory.mktemp("dump-corpus")
    by_ref = {"host": [], "sid": []}
    for b in corpus:
        for p in (b.path, b.lib):
            if p is not None:
                by_ref["host" if b.version == 1 else "sid"].append(p)
    out = {}
    for which, paths in by_ref.items():
        paths = sorted(set(paths))
        for p, r in zip(paths, readelf_many(which, paths, work / which)):
            out[p] = r
    return out


@pytest.mark.parametrize("key", toolchains.corpus_plan(), ids="-".join)
def test_corpus_matches_readelf(key, corpus, corpus_readelf):
    b = corpus.get(*key)
    for path in filter(None, (b.path, b.lib)):
        out, err, rc = corpus_readelf[path]
        assert rc == 0, err
        ours = dump_file(path)
        assert "    Version: SFRAME_VERSION_%d\n" % b.version in ours
        if b.version == 1:
            assert_v1_matches(ours, out)
        else:
            assert ours == out


def test_corpus_covers_the_printed_shapes(corpus):
    """The corpus really exercises the shapes the printer has special cases for."""
    text = {b.key: dump_file(b.path) for b in corpus}
    joined = {tc: "".join(t for k, t in text.items() if k[0] == tc) for tc in toolchains.TOOLCHAINS}
    assert "STARTPC[m]" in joined["host"] and "STARTPC[m]" in joined["trixie"] and "STARTPC[m]" in joined["sid"]
    assert 'attr = "F"' in joined["sid"] and "(fp+0)" in joined["sid"] and " U " in joined["sid"]
    assert "CFA fixed RA offset: -8" in joined["sid"] and "  f  " in joined["trixie"]
    assert "[s]" in joined["sid-aarch64"] and "pauth = B key" in joined["sid-aarch64"]
    assert "sp+160" in joined["sid-s390x"] and " c-48 " in joined["sid-s390x"]
    assert "fp+" in joined["host"] and "fp+" in joined["sid-aarch64"]
    big = text[("sid", "bigfunc", "O2-nofp")]
    assert any(int(l.split()[0], 16) - 0x10000 > 0 for l in rows(big)), "4-byte FRE starts expected"


# ---------------------------------------------------------------------------------------------
# Assembler sources: CFI shapes the C fixtures do not make, from the real assemblers

ASM = {
    "x86_64": r"""
	.text
	.globl sig
	.type sig, @function
sig:
	.cfi_startproc
	.cfi_signal_frame
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	popq %rbp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size sig, .-sig
	.globl outer
	.type outer, @function
outer:
	.cfi_startproc
	.cfi_undefined %rip
	xorl %ebp, %ebp
	call sig
	hlt
	.cfi_endproc
	.size outer, .-outer
	.globl outer2
	.type outer2, @function
outer2:
	.cfi_startproc
	nop
	.cfi_undefined %rip
	call sig
	hlt
	.cfi_endproc
	.size outer2, .-outer2
	.globl drap
	.type drap, @function
drap:
	.cfi_startproc
	leaq 8(%rsp), %r10
	.cfi_def_cfa %r10, 0
	andq $-64, %rsp
	pushq -8(%r10)
	pushq %rbp
	.cfi_escape 0x10,0x6,0x2,0x76,0
	movq %rsp, %rbp
	pushq %r10
	.cfi_escape 0xf,0x3,0x76,0x78,0x6
	nop
	popq %r10
	.cfi_def_cfa %r10, 0
	popq %rbp
	leaq -8(%r10), %rsp
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_endproc
	.size drap, .-drap
	.globl regs
	.type regs, @function
regs:
	.cfi_startproc
	movq %rsp, %rax
	.cfi_def_cfa_register %rax
	nop
	.cfi_register %rbp, %rbx
	nop
	.cfi_def_cfa_register %rsp
	ret
	.cfi_endproc
	.size regs, .-regs
	.globl big
	.type big, @function
big:
	.cfi_startproc
	subq $100000, %rsp
	.cfi_def_cfa_offset 100008
	.skip 300, 0x90
	addq $100000, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size big, .-big
""",
    "aarch64": r"""
	.text
	.globl sig
	.type sig, %function
sig:
	.cfi_startproc
	.cfi_signal_frame
	.cfi_b_key_frame
	pacibsp
	.cfi_negate_ra_state
	stp x29, x30, [sp, -16]!
	.cfi_def_cfa_offset 16
	.cfi_offset 29, -16
	.cfi_offset 30, -8
	mov x29, sp
	.cfi_def_cfa_register 29
	ldp x29, x30, [sp], 16
	.cfi_def_cfa 31, 0
	.cfi_restore 29
	.cfi_restore 30
	autibsp
	.cfi_negate_ra_state
	ret
	.cfi_endproc
	.size sig, .-sig
	.globl outer
	.type outer, %function
outer:
	.cfi_startproc
	.cfi_undefined x30
	bl sig
	brk 0
	.cfi_endproc
	.size outer, .-outer
	.globl paca
	.type paca, %function
paca:
	.cfi_startproc
	paciasp
	.cfi_negate_ra_state
	stp x29, x30, [sp, -32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	ldp x29, x30, [sp], 32
	.cfi_restore 29
	.cfi_restore 30
	.cfi_def_cfa_offset 0
	autiasp
	.cfi_negate_ra_state
	ret
	.cfi_endproc
	.size paca, .-paca
""",
    "s390x": r"""
	.text
	.globl leaf
	.type leaf, @function
leaf:
	.cfi_startproc
	ldgr %f0, %r14
	.cfi_register 14, 16
	ldgr %f2, %r11
	.cfi_register 11, 17
	lgdr %r11, %f2
	.cfi_restore 11
	lgdr %r14, %f0
	.cfi_restore 14
	br %r14
	.cfi_endproc
	.size leaf, .-leaf
	.globl outer
	.type outer, @function
outer:
	.cfi_startproc
	.cfi_undefined 14
	brasl %r14, leaf
	.cfi_endproc
	.size outer, .-outer
	.globl fponly
	.type fponly, @function
fponly:
	.cfi_startproc
	stmg %r11, %r15, 88(%r15)
	.cfi_offset 11, -72
	aghi %r15, -160
	.cfi_def_cfa_offset 320
	lmg %r11, %r15, 248(%r15)
	.cfi_restore 11
	.cfi_def_cfa_offset 160
	br %r14
	.cfi_endproc
	.size fponly, .-fponly
""",
}

# (toolchain, expected version, tokens the dump must contain)
ASM_BUILDS = [
    ("host", 1, ["STARTPC[m]", "c-16"]),
    ("trixie", 2, ["STARTPC[m]", "c-16      f   "]),
    ("sid", 3, ['attr = "S"', "RA undefined", 'attr = "F"', "r10+0", "(fp-8)", "r0+8", "r3+0", "sp+100008"]),
    ("sid-aarch64", 3, ['attr = "S", pauth = B key', "RA undefined", "c-8[s]", "u[s]", "c-24[s]"]),
    ("sid-s390x", 3, ['attr = "F"', "r16+0", "r17+0", "RA undefined", " U "]),
]


@pytest.fixture(scope="session")
def asm_builds(roots, tmp_path_factory):
    """toolchain -> (shared object, readelf output) for the assembler sources."""
    work = tmp_path_factory.mktemp("dump-asm")
    out = {}
    for name, _, _ in ASM_BUILDS:
        tc = toolchains.toolchain(name)
        d = work / name
        d.mkdir()
        (d / "shapes.s").write_text(ASM[tc.arch])
        toolchains.run_in(tc, ["sh", "-c", "%s --gsframe -o shapes.o shapes.s && %s -shared -o shapes.so shapes.o"
                               % (tc.tool("as"), tc.tool("ld"))], cwd=d, check=True)
        ref = "host" if tc.sframe_version == 1 else "sid"
        out[name] = (d / "shapes.so", readelf_many(ref, [d / "shapes.so"], d / "readelf")[0])
    return out


@pytest.mark.parametrize("name,version,tokens", ASM_BUILDS, ids=[b[0] for b in ASM_BUILDS])
def test_assembler_shapes_match_readelf(name, version, tokens, asm_builds):
    path, (out, err, rc) = asm_builds[name]
    assert rc == 0, err
    ours = dump_file(path)
    assert "    Version: SFRAME_VERSION_%d\n" % version in ours
    for t in tokens:
        assert t in ours
    if version == 1:
        assert_v1_matches(ours, out)
    else:
        assert ours == out


# ---------------------------------------------------------------------------------------------
# Synthetic sections compared with sid's readelf (V2, V3)


def c(reg, deref=False, regp=True):
    """A flex control word: DWARF register `reg` (regp) or the CFA as base, dereferenced or not."""
    return reg << 3 | int(deref) << 1 | int(regp)


def default_rows():
    """Default-FDE rows: every count of data words, zero and odd words, both bases, mangled RA."""
    return [Row(0, (8,)), Row(1, (16, -24)), Row(2, (16, -24, -32)), Row(3, (16, 0)), Row(4, (16, 0, -32)),
            Row(5, (16, -24, 0)), Row(6, (16, 1, 3)), Row(7, (16, 0, 3)), Row(8, (16, 3, 0)),
            Row(9, (16, 2, 5), base=FP), Row(10, (-20,)), Row(11, ()), Row(12, (), mangled=True),
            Row(13, (8, 1, 2, 3)), Row(14, (8, 1, 2, 3, 4, 5)), Row(15, (24, -8, -16), mangled=True),
            Row(16, (24, 0, -16), mangled=True), Row(17, (24,), mangled=True), Row(18, (0, -7, -9)),
            Row(19, (300, -300, -30000)), Row(20, (-100000, 100000, -1), base=FP)]


def flex_rows(sp, fp):
    """Flex rows: register/CFA bases, dereferences, RA padding, missing words, odd control bits."""
    words = [
        (c(sp), 8), (c(fp), 16), (c(10), 0), (c(fp, True), -40), (c(sp, True), 8), (c(31), 1),
        (c(sp), 8, 0), (c(sp), 8, c(0, True, False), -8), (c(sp), 8, 4, -8), (c(sp), 8, c(16), 0),
        (c(sp), 8, c(16, True), 4), (c(sp), 8, 0, c(fp, True), 0), (c(sp), 8, 0, c(0, True, False), -16),
        (c(sp), 8, c(0, True, False), -8, c(0, True, False), -16), (c(sp), 8, c(0, True, False), -8, 0),
        (c(sp), 8, c(3), 5, c(4, True), -7), (c(31), 1, c(7, True), 1, c(29, True), 1), (c(sp), 8, 0x20, 5),
        # a control word without its offset word, padding pairs, leftovers
        (c(sp), 8, c(0, True, False)), (c(sp), 8, c(30)), (c(sp), 8, 0, c(fp, True)), (c(sp), 8, 0, 0),
        (c(sp), 8, 0, 0, 5), (c(sp), 8, 0, c(fp, True), 4, 9), (c(sp), 8, c(0, True, False), -8, c(fp, True)),
        (c(sp), 8, c(0, True, False), -8, 0, 0), (c(sp), 8, c(0, True, False), -8, 0, 5),
        # CFA without a register, dereferenced without a register, register 0
        (2, 8), (0, 8), (3, 8), (c(sp, True), 100000, c(0, True, False), -8, c(fp, True), -16),
        (),
    ]
    return [Row(i, w, mangled=bool(i % 3 == 1)) for i, w in enumerate(words)]


_SP_FP = {AMD64: (7, 6), A64LE: (31, 29), A64BE: (31, 29), S390X: (15, 11)}


def sid_shapes():
    """(id, section bytes, abi) for every shape compared with binutils 2.47."""
    out = []

    def add(name, version, abi, funcs, **kw):
        out.append(("v%d-%s-%s" % (version, ABI_NAMES[abi], name),
                    build(version, abi, funcs, section_addr=SECTION_ADDR, **kw), abi))

    for version in (2, 3):
        for abi in ABIS:
            for ffp, fra in ((0, 0), (-16, 0), (0, -8), (-16, -8), (16, 8)):
                add("default-fp%d-ra%d" % (ffp, fra), version, abi, [Func(0x1000, 0x40, default_rows())],
                    fixed_fp=ffp, fixed_ra=fra)
            add("fdes", version, abi, [
                Func(0x1000, 0x40, [Row(0, (8,)), Row(11, (16,))], pc_type=MASK, rep_size=16),
                Func(0x1040, 0x20, [], pc_type=MASK, rep_size=16),
                Func(0x1060, 0x20, []),
                Func(0x1080, 0x20, [Row(0, (8,))], signal=True),
                Func(0x10A0, 0x20, [Row(0, (8,))], pauth_key=F.PAuthKey.B),
                Func(0x10C0, 0x20, [Row(0, (8,))], signal=True, pauth_key=F.PAuthKey.B),
                Func(0x10E0, 0x20000, [Row(0, (8,)), Row(0x1FFFF, (16,)), Row(0x20000, (8,))]),
                Func(0x30000, 0x300, [Row(0, (8,)), Row(0x2FF, (16,))]),
                Func(0x31000, 0x10, [Row(0, (8,)), Row(1, (16,))], fre_type=F.FREType.ADDR4),
                Func(0x31010, 0x10, [Row(0, (8,), word_size=4), Row(1, (16, -8, -16), word_size=2)]),
            ])
            for flags in (0, 1, 4, 5) + ((2, 3, 6, 7) if version == 2 else ()):
                add("flags%d" % flags, version, abi, [Func(0x1000, 0x20, [Row(0, (8,))])], flags=flags)
            add("unsorted-absolute", version, abi, [Func(0x1000, 0x20, [Row(0, (8,))]),
                                                    Func(0x800, 0x20, [Row(0, (8,))])], flags=0, sort=False)
            if abi in (AMD64, A64LE):     # see test_big_endian_with_aux_header_like_little_endian_twin
                add("aux", version, abi, [Func(0x1000, 0x20, [Row(0, (8,))])], auxhdr=b"\x01\x02\x03\x04\x05")
            add("empty", version, abi, [])
            add("high-and-wrapped", version, abi, [Func(-0x10000, 0x20, [Row(0, (8,)), Row(0x1F, (16,))]),
                                                   Func(0x7FFFF000, 0x20, [Row(0, (8,))])], flags=5)
            add("wide-columns", version, abi, [Func(0x1000, 0x20, [
                Row(0, (-2147483648,)), Row(1, (2147483647, -2147483648)),
                Row(2, (-2147483648, -2147483648, -2147483648)), Row(3, (8, -2147483648, -214748364), mangled=True),
                Row(4, (-5, 100000), base=FP), Row(5, (8, -21474836), mangled=True), Row(6, (8, -2147483, -2147483))])])
        # V2 s390x: odd FP/RA words are DWARF register numbers
        add("regnums", version, S390X, [Func(0x1000, 0x40, [
            Row(0, (8, -3, -5)), Row(1, (8, 33, 65), mangled=True), Row(2, (8, 1000001, 127)),
            Row(3, (8, 0, 5), mangled=True), Row(4, (8, 5), mangled=True), Row(5, (8, 7, 0))])])
        add("regnums-fixed-ra", version, S390X, [Func(0x1000, 0x40, [Row(0, (8, 3)), Row(1, (8, 4))])], fixed_ra=-8)
    for abi in ABIS:
        sp, fp = _SP_FP[abi]
        for ffp, fra in ((0, 0), (-16, 0), (0, -8), (-16, -8)):
            add("flex-fp%d-ra%d" % (ffp, fra), 3, abi, [
                Func(0x1000, 0x40, flex_rows(sp, fp), fde_type=FLEX),
                Func(0x1040, 0x40, flex_rows(7, 6)[:8], fde_type=FLEX, signal=True, pauth_key=F.PAuthKey.B),
                Func(0x1080, 0x20, [], fde_type=FLEX),
                Func(0x10A0, 0x20, [Row(0, (c(sp), 8)), Row(4, (c(sp), 16))], fde_type=FLEX, pc_type=MASK, rep_size=8),
                Func(0x10C0, 0x20, [Row(0, (c(sp), 1000, 0, c(fp, True), 1000)),
                                    Row(1, (c(sp), 8, 0, c(fp, True), -16), word_size=4)], fde_type=FLEX)],
                fixed_fp=ffp, fixed_ra=fra)
    for i, data in enumerate(synthetic.sections()):
        if data[2] != 1:
            abi = F.ABI(data[4])
            out.append(("tests-synthetic-%d-v%d-%s" % (i, data[2], ABI_NAMES[abi]), data, abi))
    return out


SID_SHAPES = sid_shapes()


@pytest.fixture(scope="session")
def sid_shape_readelf(roots, tmp_path_factory):
    work = tmp_path_factory.mktemp("dump-shapes")
    paths = []
    for i, (name, data, abi) in enumerate(SID_SHAPES):
        p = work / ("%03d-%s.elf" % (i, name))
        p.write_bytes(wrap_elf(data, SECTION_ADDR, abi))
        paths.append(p)
    return dict(zip((s[0] for s in SID_SHAPES), readelf_many("sid", paths, work / "readelf")))


@pytest.mark.parametrize("name,data,abi", SID_SHAPES, ids=[s[0] for s in SID_SHAPES])
def test_synthetic_shape_matches_sid_readelf(name, data, abi, sid_shape_readelf):
    out, err, rc = sid_shape_readelf[name]
    assert rc == 0 and err == "", err
    assert dump(data, SECTION_ADDR) == out


def test_big_endian_with_aux_header_like_little_endian_twin(tmp_path, roots):
    """libsframe 2.47 refuses every foreign-endian section with an auxiliary header ("Buffer does
    not contain SFrame data"), so big-endian ones are checked against their little-endian twin,
    whose dump is compared with readelf above."""
    funcs = [Func(0x1000, 0x20, [Row(0, (8,)), Row(4, (16, -8, -16), mangled=True)], pauth_key=F.PAuthKey.B)]
    for version in (2, 3):
        be = build(version, A64BE, funcs, section_addr=SECTION_ADDR, auxhdr=b"\x01\x02\x03\x04\x05")
        le = build(version, A64LE, funcs, section_addr=SECTION_ADDR, auxhdr=b"\x01\x02\x03\x04\x05")
        assert dump(be, SECTION_ADDR) == dump(le, SECTION_ADDR)
        p = tmp_path / ("v%d.elf" % version)
        p.write_bytes(wrap_elf(be, SECTION_ADDR, A64BE))
        out, err, rc = readelf_many("sid", [p], tmp_path / ("r%d" % version))[0]
        assert rc == 1 and "SFrame decode failure" in err
        q = tmp_path / ("le%d.elf" % version)
        q.write_bytes(wrap_elf(le, SECTION_ADDR, A64LE))
        assert readelf_many("sid", [q], tmp_path / ("q%d" % version))[0][0] == dump(le, SECTION_ADDR)


def test_section_name_and_address_are_used():
    data = build(3, AMD64, [Func(0x5000, 0x20, [Row(0, (8,))])], section_addr=0x9000)
    text = dump(data, 0x9000, name=".sframe.alt")
    assert text.startswith("Contents of the SFrame section .sframe.alt:\n")
    assert "pc = 0x5000, size = 32 bytes" in text
    # The same bytes loaded elsewhere move every PC-relative start with them.
    assert "pc = 0x6000," in dump(data, 0xA000) and "    0000000000006000  sp+8 " in dump(data, 0xA000)


# ---------------------------------------------------------------------------------------------
# Synthetic V1 sections compared with the host's readelf (binutils 2.40)


def v1_rows():
    """Rows gas 2.40 could write: 1 to 3 data words (2.40's readelf misprints the others)."""
    return [Row(0, (8,)), Row(1, (16, -24)), Row(2, (16, -24, -32)), Row(3, (16, 0)), Row(4, (16, 0, -32)),
            Row(5, (16, -24, 0)), Row(6, (16, 1, 3), mangled=True), Row(9, (16, 2, 5), base=FP),
            Row(10, (-20,)), Row(14, (2147483647, -2147483648)), Row(15, (-2147483648, 2147483647, -2147483648)),
            Row(16, (24, -8), mangled=True), Row(17, (300, -3000, -30000))]


def v1_shapes():
    out = []
    for abi in ABIS:
        for ffp, fra in ((0, 0), (-16, 0), (0, -8), (-16, -8)):
            funcs = [Func(0x1000, 0x20, v1_rows(), pauth_key=F.PAuthKey.B),
                     Func(0x1020, 0x20, v1_rows()[:3], pc_type=MASK, fre_type=F.FREType.ADDR4),
                     Func(0x1040, 0x20, []),
                     Func(0x1060, 0x20000, [Row(0, (8,)), Row(0x1FFFF, (16,))])]
            out.append(("v1-%s-fp%d-ra%d" % (ABI_NAMES[abi], ffp, fra),
                        build(1, abi, funcs, section_addr=SECTION_ADDR, fixed_fp=ffp, fixed_ra=fra), abi))
        for flags in (0, 1, 2):
            out.append(("v1-%s-flags%d" % (ABI_NAMES[abi], flags),
                        build(1, abi, [Func(0x1000, 0x20, [Row(0, (8,))])], section_addr=SECTION_ADDR, flags=flags), abi))
        out.append(("v1-%s-empty" % ABI_NAMES[abi], build(1, abi, [], section_addr=SECTION_ADDR), abi))
    return out


V1_SHAPES = v1_shapes()


@pytest.fixture(scope="session")
def v1_shape_readelf(tmp_path_factory):
    work = tmp_path_factory.mktemp("dump-v1")
    paths = []
    for name, data, abi in V1_SHAPES:
        p = work / (name + ".elf")
        p.write_bytes(wrap_elf(data, SECTION_ADDR, abi))
        paths.append(p)
    return dict(zip((s[0] for s in V1_SHAPES), readelf_many("host", paths, work / "readelf")))


@pytest.mark.parametrize("name,data,abi", V1_SHAPES, ids=[s[0] for s in V1_SHAPES])
def test_synthetic_v1_matches_host_readelf(name, data, abi, v1_shape_readelf):
    out, err, rc = v1_shape_readelf[name]
    assert rc == 0 and err == "", err
    assert_v1_matches(dump(data, SECTION_ADDR), out)


def test_v1_uses_the_247_header_layout():
    data = build(1, AMD64, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, (16, -16))])], section_addr=SECTION_ADDR,
                 fixed_fp=-16, flags=3)
    text = dump(data, SECTION_ADDR)
    assert ("    Version: SFRAME_VERSION_1\n"
            "    Flags: SFRAME_F_FDE_SORTED,\n"
            "           SFRAME_F_FRAME_POINTER\n"
            "    CFA fixed FP offset: -16\n"
            "    CFA fixed RA offset: -8\n") in text
    # ...with 2.40's rows: neither fixed offset is shown in the columns.
    assert rows(text) == ["    0000000000001000  sp+8      u         u            ",
                          "    0000000000001001  sp+16     u         u            "]
    # ...and the 2.47 function line: the info byte's bit 7 shows as attr "S" (2.40 shows nothing).
    sig = build(1, AMD64, [Func(0x1000, 0x20, [Row(0, (8,))], signal=True)], section_addr=SECTION_ADDR)
    assert 'func idx [0]: pc = 0x1000, size = 32 bytes, attr = "S"\n' in dump(sig, SECTION_ADDR)


def test_v1_without_data_words_prints_ra_undefined(tmp_path):
    """2.40's readelf prints garbage for an FRE without data words (its error value as CFA
    offset); dump prints it as 2.47 does for V2/V3."""
    data = build(1, AMD64, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, ())])], section_addr=SECTION_ADDR)
    p = tmp_path / "v1-undef.elf"
    p.write_bytes(wrap_elf(data, SECTION_ADDR, AMD64))
    out, _, rc = readelf_many("host", [p], tmp_path / "r")[0]
    assert rc == 0 and rows(out)[1] == "    0000000000001001  sp+-1     u         u            "
    assert rows(dump(data, SECTION_ADDR))[1] == "    0000000000001001  RA undefined"


# ---------------------------------------------------------------------------------------------
# Random well-formed sections (deterministic seeds) against both readelf builds


_VALUES = (0, 1, -1, 2, 3, 5, 7, 8, -8, 16, -16, 127, -128, 255, 1000, -1000, 32767, -32768, 65535,
           100000, -2147483648, 2147483647)


def _word(rng):
    return rng.choice(_VALUES) if rng.random() < 0.7 else rng.randint(-2 ** 31, 2 ** 31 - 1)


def _ctrl(rng):
    r = rng.random()
    if r < 0.2:
        return 0
    if r < 0.3:
        return rng.randint(0, 255)
    return rng.choice((0, 3, 6, 7, 10, 11, 15, 16, 17, 29, 30, 31, 40, 255)) << 3 | rng.randint(0, 3)


def _random_rows(rng, size, flex, version):
    out = []
    limit = size + 1 if version > 1 else size     # 2.40's readelf asserts on an FRE at the function's end
    for st in sorted(rng.sample(range(limit), min(limit, rng.randint(0, 6)))):
        if version == 1:
            w = [_word(rng) for _ in range(rng.randint(1, 3))]
        elif flex:
            n = rng.choice((0, 2, 2, 3, 4, 4, 5, 6, 6))
            w = [_ctrl(rng) if i in (0, 2) or (i in (3, 4) and rng.random() < 0.4) else _word(rng) for i in range(n)]
        else:
            w = [_word(rng) for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 3, 4, 6)))]
        ws = rng.choice((None, None, 1, 2, 4))
        if ws:
            lim = 1 << (8 * ws - 1)
            w = [x if -lim <= x < 2 * lim else x % lim for x in w]
        out.append(Row(st, tuple(w), base=rng.choice((SP, FP)), mangled=rng.random() < 0.3, word_size=ws))
    return out


def random_section(rng, version):
    abi = rng.choice(ABIS)
    funcs = []
    a = rng.choice((0x1000, -0x100000, 0x7F000000))
    for _ in range(rng.randint(0, 6)):
        size = rng.choice((1, 16, 64, 300, 70000))
        flex = version == 3 and rng.random() < 0.4
        mask = rng.random() < 0.15
        funcs.append(Func(a, size, _random_rows(rng, size, flex, version), fde_type=FLEX if flex else F.FDEType.DEFAULT,
                          pc_type=MASK if mask else F.PCType.INC, rep_size=rng.choice((1, 16, 255)) if mask else 0,
                          signal=version > 1 and rng.random() < 0.2, pauth_key=rng.randint(0, 1)))
        a += size + rng.choice((0, 0, 16))
    kw = dict(fixed_fp=rng.choice((0, 0, -16, 1, 5, -128, 127)), fixed_ra=rng.choice((0, 0, -8, 8, 3, -128)),
              flags=rng.choice((None, 0, 1) + {1: (2, 3), 2: (2, 3, 4, 5, 6, 7), 3: (4, 5)}[version]))
    if abi in (AMD64, A64LE) and rng.random() < 0.2:
        kw["auxhdr"] = bytes(rng.randint(1, 8))
    return build(version, abi, funcs, section_addr=SECTION_ADDR, **kw), abi


# How many of the fixed-seed random sections the dump refuses (what readelf cannot print either).
REFUSED_V23 = 0
REFUSED_V1 = 0


def _random_batch(seed, versions, count, refused):
    """`count` random sections our dump prints, with the dump.  The ones it refuses (only what
    readelf cannot print either, see UNPRINTABLE) are set aside, and there must be exactly
    `refused` of them: the seed is fixed, so a dump that refused more (or fewer) would show."""
    rng = random.Random(seed)
    out = []
    set_aside = 0
    while len(out) < count:
        data, abi = random_section(rng, rng.choice(versions))
        try:
            out.append((data, abi, dump(data, SECTION_ADDR)))
        except SFrameError as exc:
            assert "readelf" in str(exc), exc
            set_aside += 1
    assert set_aside == refused, "%d random sections refused by the dump, %d expected" % (set_aside, refused)
    return out


def test_random_sections_match_sid_readelf(roots, tmp_path):
    batch = _random_batch(20260101, (2, 3, 3), 400, refused=REFUSED_V23)
    paths = []
    for i, (data, abi, _) in enumerate(batch):
        p = tmp_path / ("rnd%03d.elf" % i)
        p.write_bytes(wrap_elf(data, SECTION_ADDR, abi))
        paths.append(p)
    results = readelf_many("sid", paths, tmp_path / "readelf")
    mismatches = [(p.name, data.hex()) for p, (data, _, ours), (out, _, _) in zip(paths, batch, results) if ours != out]
    assert mismatches == []
    assert sum("RA undefined" in t for _, _, t in batch) > 50 and sum('attr = "F"' in t for _, _, t in batch) > 50


def test_random_v1_sections_match_host_readelf(tmp_path):
    batch = _random_batch(20230101, (1,), 200, refused=REFUSED_V1)
    paths = []
    for i, (data, abi, _) in enumerate(batch):
        p = tmp_path / ("rnd%03d.elf" % i)
        p.write_bytes(wrap_elf(data, SECTION_ADDR, abi))
        paths.append(p)
    results = readelf_many("host", paths, tmp_path / "readelf")
    mismatches = [p.name for p, (_, _, ours), (out, _, _) in zip(paths, batch, results)
                  if split_index(ours)[1] != split_index(out)[1]]
    assert mismatches == []


# ---------------------------------------------------------------------------------------------
# What readelf cannot print, and malformed sections: SFrameError


UNPRINTABLE = [
    # (id, version, abi, funcs, readelf that shows the failure, how it fails)
    ("flex-one-word", 3, AMD64, [Func(0x1000, 0x20, [Row(0, (c(7), 8)), Row(1, (c(7),))], fde_type=FLEX)], "sid", "abort"),
    ("flex-one-word-first", 3, A64LE, [Func(0x1000, 0x20, [Row(0, (c(31),))], fde_type=FLEX)], "sid", "abort"),
    ("flex-7-words", 3, AMD64, [Func(0x1000, 0x20, [Row(0, (c(7), 8)), Row(1, (c(7), 8, 2, -8, 2, -16, 0))],
                                     fde_type=FLEX)], "sid", "repeat"),
    ("v3-default-7-words", 3, A64LE, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, tuple(range(7)))])], "sid", "repeat"),
    ("v3-default-15-words", 3, S390X, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, tuple(range(15)))])], "sid", "repeat"),
    ("v2-default-7-words", 2, AMD64, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, tuple(range(7)))])], "sid", "repeat"),
    ("v1-4-words", 1, AMD64, [Func(0x1000, 0x20, [Row(0, (8,)), Row(1, (16, 1, 2, 3))])], "host", "repeat"),
]


@pytest.mark.parametrize("name,version,abi,funcs,ref,how", UNPRINTABLE, ids=[u[0] for u in UNPRINTABLE])
def test_unprintable_fres_raise(name, version, abi, funcs, ref, how, tmp_path, roots):
    data = build(version, abi, funcs, section_addr=SECTION_ADDR)
    Section(data, SECTION_ADDR).check_all()          # the decoder accepts it...
    with pytest.raises(SFrameError):                 # ...but there is nothing right to print
        dump(data, SECTION_ADDR)
    p = tmp_path / (name + ".elf")
    p.write_bytes(wrap_elf(data, SECTION_ADDR, abi))
    out, err, rc = readelf_many(ref, [p], tmp_path / "r")[0]
    if how == "abort":
        assert rc != 0 and "Assertion" in err
    else:   # libsframe refuses the FRE; readelf prints the previous one again
        r = rows(out)
        assert rc == 0 and len(r) == 2 and r[0] == r[1]


def _good():
    return build(3, AMD64, [Func(0x1000, 0x40, [Row(0, (8,)), Row(4, (16, -16))]),
                            Func(0x1040, 0x20, [Row(0, (8,))])], section_addr=SECTION_ADDR)


def _patch(data, off, fmt, value):
    b = bytearray(data)
    struct.pack_into("<" + fmt, b, off, value)
    return bytes(b)


_HDR = F.HEADER_SIZE
_FRE0 = _HDR + 2 * 16          # first function's attribute record
MALFORMED = [
    # (id, bytes, what the decoder's error must say)
    ("empty", b"", "shorter than the 28-byte SFrame header"),
    ("short-header", _good()[:20], "shorter than the 28-byte SFrame header"),
    ("bad-magic", _patch(_good(), 0, "H", 0xDEE3), "bad magic"),
    ("version-4", _patch(_good(), 2, "B", 4), "unknown version 4"),
    ("unknown-flag", _patch(_good(), 3, "B", 0x85), "unknown flag bits 0x80"),
    ("unknown-abi", _patch(_good(), 4, "B", 9), "unknown ABI"),
    ("truncated-fres", _good()[:-3], "runs past the end of the section"),
    ("num-fres-too-big", _patch(_good(), 12, "I", 4), "the header says num_fres 4"),
    ("num-fres-too-small", _patch(_good(), 12, "I", 2), "more FREs than the header's num_fres 2"),
    ("attr-beyond-fre-len", _patch(_good(), _HDR + 16 + 12, "I", 0x40), "attribute record"),
    ("bad-fde-type", _patch(_good(), _FRE0 + 3, "B", 5), "unknown FDE type 5"),
    ("bad-fre-type", _patch(_good(), _FRE0 + 2, "B", 3), "invalid FRE type 3"),
    ("mask-without-rep-size", _patch(_good(), _FRE0 + 2, "B", 0x10), "repetition block size 0"),
    ("fre-count-too-big", _patch(_good(), _FRE0, "H", 50), "50 FREs cannot fit"),
    ("fre-start-beyond-size", _patch(_good(), _FRE0 + 5 + 3, "B", 0x41), "beyond the function size"),
    ("fre-starts-decrease", _patch(_good(), _FRE0 + 5 + 3, "B", 0), "does not increase"),
    ("bad-word-size", _patch(_good(), _FRE0 + 5 + 1, "B", 0x62), "invalid data-word size code 3"),
    ("bad-word-size-no-words", _patch(_good(), _FRE0 + 5 + 1, "B", 0x60), "invalid data-word size code 3"),
    ("unsorted-but-flagged", build(3, AMD64, [Func(0x1000, 0x20, [Row(0, (8,))]), Func(0x800, 0x20, [Row(0, (8,))])],
                                   section_addr=SECTION_ADDR, sort=False), "flagged sorted"),
]


@pytest.mark.parametrize("name,data,why", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_sections_raise_the_decoders_error(name, data, why):
    with pytest.raises(SFrameError) as exc:
        dump(data, SECTION_ADDR)
    assert why in exc.value.rule


def test_mutated_sections_raise_exactly_the_decoders_errors():
    """On 5,000 mutated sections: dump raises the decoder's own error whenever the decoder rejects
    the section, and otherwise only for FREs readelf cannot print; never anything else."""
    from helpers import fuzzing
    rng = random.Random(7)
    seeds = synthetic.sections()
    counts = {"printed": 0, "decoder": 0, "unprintable": 0}
    for _ in range(5000):
        data = rng.choice(seeds)
        for _ in range(rng.randint(1, 4)):
            data = fuzzing.mutate(data, rng)
        try:
            Section(data, SECTION_ADDR).check_all()
            expected = None
        except SFrameError as exc:
            expected = exc.rule
        try:
            dump(data, SECTION_ADDR)
            counts["printed"] += 1
            assert expected is None
        except SFrameError as exc:
            if expected is None:
                assert "readelf" in exc.rule
                counts["unprintable"] += 1
            else:
                assert exc.rule == expected
                counts["decoder"] += 1
    assert min(counts.values()) > 0, counts


def test_good_section_of_the_malformed_tests_dumps():
    assert len(rows(dump(_good(), SECTION_ADDR))) == 3


# ---------------------------------------------------------------------------------------------
# Scale: a 50,000-function section against sid's readelf


def big_section():
    """50,000 functions of every kind (V3, AMD64), about 125,000 FREs."""
    funcs = []
    addr = 0x10000
    for i in range(50000):
        k = i % 10
        size = 70000 if i % 5000 == 7 else (16, 40, 100, 200, 400)[i % 5]
        if k == 9:
            funcs.append(Func(addr, size, [Row(0, (c(7), 8)), Row(1, (c(10), 0)), Row(2, (c(6, True), -8, 0, c(6, True), 0))],
                              fde_type=FLEX))
        elif k == 8:
            funcs.append(Func(addr, size, [Row(0, (8,)), Row(6, (16,))], pc_type=MASK, rep_size=16))
        else:
            rows_ = [Row(0, (8,)), Row(1, (16, -16)), Row(4, (16 + i % 7 * 8, -16), base=FP), Row(size - 1, (8, -16))]
            funcs.append(Func(addr, size, rows_[:1 + i % 4], signal=(i % 97 == 0)))
        addr += size
    return build(3, AMD64, funcs, section_addr=0x400000)


def test_dump_of_50000_functions_equals_readelf(tmp_path, roots):
    """Every kind of function at scale; the speed of the same dump is measured in bench/bench_codec.py."""
    data = big_section()
    p = tmp_path / "big.elf"
    p.write_bytes(wrap_elf(data, 0x400000, AMD64))
    ref = toolchains.run_in("sid", ["readelf", "--sframe", str(p)], cwd=tmp_path, check=True).stdout
    text = dump(data, 0x400000)
    assert text == ref
    assert len(rows(text)) > 100000
