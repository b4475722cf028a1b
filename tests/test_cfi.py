"""core.dwarf.coverage (which addresses DWARF CFI covers) and core.unwind.policy (which unwinder takes a frame).

The reference for coverage is pyelftools' own CFI decoder, on every real binary of the corpus
(little- and big-endian, x86-64, AArch64, s390x) and on programs whose CFI is in .debug_frame;
both the .eh_frame_hdr search table and the full scan must find every FDE it decodes.
"""

import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import toolchains as T

from sframekit.core.dwarf.coverage import DEBUG_FRAME, EH_FRAME, CfiIndex, CfiRange, CfiSection
from sframekit.core.elf.image import ElfImage
from sframekit.core.errors import CfiError
from sframekit.core.unwind.modules import ModuleSet
from sframekit.core.unwind.policy import Choice, Mode, choose

_FDE_LINE = re.compile(r"^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ FDE cie=[0-9a-f]+ pc=([0-9a-f]+)\.\.([0-9a-f]+)$", re.M)


def reference_fdes(path):
    """[(section name, FDE offset, lo, hi)] of every FDE with a non-empty range, as binutils'
    readelf decodes them (any target's ELF file: readelf is not tied to one)."""
    text = subprocess.run(["readelf", "--debug-dump=frames", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, check=True).stdout
    out = []
    for part in re.split(r"^Contents of the (\S+) section:$", text, flags=re.M)[1:]:
        if part.startswith("."):
            name = part
            continue
        out += [(name, int(o, 16), int(lo, 16), int(hi, 16)) for o, lo, hi in _FDE_LINE.findall(part)
                if int(hi, 16) > int(lo, 16)]
    return out


def scanning(sections):
    """The same sections without their .eh_frame_hdr (so the FDE headers are scanned in full)."""
    return [CfiSection(s.name, s.r.data, s.address, bias=s.bias(), big_endian=s.r.big, addr_size=s.addr_size)
            for s in sections]


def check_coverage(path, bias=0):
    ref = reference_fdes(path)
    assert ref, path
    tables = ElfImage(path).cfi_sections(bias)
    for sections in (tables, scanning(tables)):
        by_name = {s.name: s for s in sections}
        for name, off, lo, hi in ref:
            sec = by_name[name]
            for pc in (lo, (lo + hi) // 2, hi - 1):
                got = sec.find(pc + bias)
                assert got == CfiRange(name, lo + bias, hi + bias, off), (path, name, hex(pc), got)
    return len(ref)


def test_every_fde_of_the_corpus_is_found(corpus):
    checked = 0
    for b in corpus:
        for path in filter(None, (b.path, b.lib)):
            checked += check_coverage(path)
    assert checked > 1000, checked


def test_coverage_moves_with_the_load_bias(corpus):
    for tc in ("host", "sid", "sid-s390x", "sid-aarch64"):
        check_coverage(corpus.get(tc, "frames", "O2-nofp").path, bias=0x7F0000000000)


@pytest.mark.parametrize("tc", ["host", "sid"])
def test_debug_frame_only_functions(roots, tmp_path, tc):
    """-fno-asynchronous-unwind-tables: the program's own CFI is in .debug_frame, .eh_frame has crt's."""
    exe = T.build(tc, "frames", tmp_path, ("-O2", "-fomit-frame-pointer", "-fno-asynchronous-unwind-tables"))
    ref = reference_fdes(exe)
    assert any(r[0] == DEBUG_FRAME for r in ref), ref
    check_coverage(exe)
    img = ElfImage(exe)
    stop = img.resolve("stop_here")
    ms = ModuleSet()
    m = ms.add("exe", str(exe))
    ms.find(stop)                       # loads the module
    got = ms.cfi_find(m, stop)
    assert got is not None and got.section == DEBUG_FRAME and got.lo == stop, got
    assert ms.cfi_find(m, 0x10) is None


def test_stripped_copy_has_no_coverage(corpus):
    b = corpus.get("sid", "frames", "O2-nofp")
    assert ElfImage(b.noeh).cfi_sections() == []
    ms = ModuleSet()
    m = ms.add("noeh", str(b.noeh))
    stop = ElfImage(b.noeh).resolve("stop_here")
    assert ms.find(stop) is not None and ms.cfi_find(m, stop) is None


# -- malformed input --------------------------------------------------------------------------------

def _eh(data, hdr=None, **kw):
    return CfiSection(EH_FRAME, data, 0x1000, hdr=hdr, hdr_address=0x800, **kw)


def cie(aug=b"zR", enc=0x1B, version=1):
    body = struct.pack("<I", 0) + bytes([version]) + aug + b"\0" + b"\x01\x78\x10"
    if aug.startswith(b"z"):
        body += b"\x01" + bytes([enc])
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<I", len(body)) + body


def fde(cie_at, at, lo, size):
    """An FDE at section offset `at` whose CIE is at `cie_at`, with PC-relative sdata4 start."""
    field = 0x1000 + at + 8
    body = struct.pack("<Iii", at + 4 - cie_at, lo - field, size)
    return struct.pack("<I", len(body)) + body


def section_with(ranges):
    data = bytearray(cie())
    offsets = []
    for lo, size in ranges:
        offsets.append(len(data))
        data += fde(0, len(data), lo, size)
    return bytes(data + b"\0\0\0\0"), offsets


def hdr_for(ranges, offsets):
    rows = sorted(zip((lo for lo, _ in ranges), offsets))
    out = bytes([1, 0x1B, 0x03, 0x3B]) + struct.pack("<iI", 0x1000 - 0x804, len(rows))
    for lo, off in rows:
        out += struct.pack("<ii", lo - 0x800, 0x1000 + off - 0x800)
    return out


def test_hand_built_section_with_and_without_table():
    ranges = [(0x5000, 0x10), (0x5010, 0x30), (0x6000, 0x8)]
    data, offsets = section_with(ranges)
    for sec in (_eh(data), _eh(data, hdr_for(ranges, offsets))):
        assert sec.find(0x5000) == CfiRange(EH_FRAME, 0x5000, 0x5010, offsets[0])
        assert sec.find(0x503F).lo == 0x5010
        assert sec.find(0x5040) is None and sec.find(0x4FFF) is None and sec.find(0x6008) is None
        assert str(sec.find(0x6000)) == ".eh_frame FDE at offset %#x covers 0x6000-0x6008" % offsets[2]


@pytest.mark.parametrize("data,hdr,offset,rule", [
    (b"\x10\0\0\0\0\0", None, 0, "entry length 0x10 runs past the end"),
    (cie()[:-2], None, 0, "runs past the end"),
    (cie(version=7) + fde(0, 0x14, 0x5000, 8), None, 0x8, "CIE version 7 is not 1, 3 or 4"),
    (cie() + struct.pack("<III", 8, 0x100, 0), None, 0x18, "CIE pointer 0x100 leads outside the section"),
    (cie() + struct.pack("<III", 8, 4, 0), None, 0x14, "not a CIE"),
    (cie(enc=0x0E) + fde(0, 0x14, 0x5000, 8), None, 0x1C, "unknown pointer encoding 0xe"),
    (cie(enc=0x9B) + fde(0, 0x14, 0x5000, 8), None, 0x1C, "indirect pointer"),
    (cie(aug=b"xyz") + fde(0, 0x10, 0x5000, 8), None, 0, "cannot be parsed without a 'z'"),
    (section_with([(0x5000, 8)])[0], bytes([2, 0x1B, 3, 0x3B]), 0, "version 2 is not 1"),
    (section_with([(0x5000, 8)])[0], bytes([1, 0x1B, 3, 0x3B]) + struct.pack("<iI", 0, 1000), 8,
     "search table of 1000 entries runs past the end"),
    (section_with([(0x5000, 8)])[0], bytes([1, 0x1B, 3, 0x3B]) + struct.pack("<iIii", 0, 1, 0x4000, 0x9000), 16,
     "search table entry 0 points outside .eh_frame"),
])
def test_malformed_sections_name_offset_and_rule(data, hdr, offset, rule):
    sec = _eh(data, hdr)
    with pytest.raises(CfiError) as err:
        sec.find(0x5004)
    assert err.value.offset == offset and rule in err.value.rule, err.value
    assert str(err.value).startswith("malformed .eh_frame%s section at byte offset %#x: "
                                     % ("_hdr" if hdr and "table" in rule or hdr and "version" in rule else "", offset))


def test_a_malformed_section_counts_as_no_cfi_and_is_logged_once():
    good, _ = section_with([(0x5000, 8)])
    logged = []
    idx = CfiIndex(lambda: [_eh(b"\x10\0\0\0\0\0"), CfiSection(DEBUG_FRAME, b"", 0), _eh(good)], logged.append)
    assert idx.find(0x5004).lo == 0x5000
    assert idx.find(0x9000) is None
    assert len(logged) == 1 and "malformed .eh_frame section at byte offset 0x0" in logged[0], logged
    assert idx.errors == [logged[0].split(";")[0]]


def test_mutated_real_sections_raise_only_cfi_error(corpus):
    rng = random.Random(1)
    seeds = []
    for tc in ("host", "sid", "sid-s390x"):
        img = ElfImage(corpus.get(tc, "frames", "O2-nofp").path)
        seeds += [s for s in img.cfi_sections() if s.name == EH_FRAME]
    cases = 0
    for _ in range(1500):
        s = rng.choice(seeds)
        data = bytearray(s.r.data)
        hdr = bytearray(s._hdr[0]) if s._hdr and rng.random() < 0.5 else None
        target = hdr if hdr is not None and rng.random() < 0.5 else data
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(target))
            target[i] = rng.randrange(256)
        if rng.random() < 0.2:
            del data[rng.randrange(len(data)):]
        sec = CfiSection(EH_FRAME, bytes(data), s.address, big_endian=s.r.big,
                         hdr=bytes(hdr) if hdr is not None else None, hdr_address=0x1000)
        for pc in (s.address - 0x1000, s.address + rng.randrange(-0x2000, 0x2000), 0, 2**64 - 1):
            try:
                got = sec.find(pc & (2**64 - 1))
            except CfiError:
                continue
            assert got is None or got.lo <= pc < got.hi
            cases += 1
    assert cases > 500


# -- the policy ---------------------------------------------------------------------------------------

def test_choose():
    rng = CfiRange(EH_FRAME, 0x10, 0x20, 0)
    asked = []

    def cfi():
        asked.append(1)
        return rng
    assert choose(Mode.OFF, True, cfi) == Choice(False, "SFrame unwinding is off")
    assert choose(Mode.ALWAYS, True, cfi).sframe
    assert choose(Mode.AUTO, False, cfi) == Choice(True, "mode auto: GDB's DWARF unwinders are disabled")
    assert asked == [], "the CFI is looked up only when the answer depends on it"
    assert choose(Mode.AUTO, True, cfi) == Choice(False, "mode auto: DWARF CFI covers it", rng)
    assert choose(Mode.AUTO, None, cfi).sframe is False, "unknown DWARF state: assume it runs"
    assert choose(Mode.AUTO, True, lambda: None) == Choice(True, "mode auto: no DWARF CFI covers it")
    assert choose(Mode.AUTO, False, cfi, debugger="LLDB").reason == "mode auto: LLDB's DWARF unwinders are disabled"
    assert Mode.names() == ["auto", "always", "off"]


_FIRST_ROW = """
import sys, types
pkg = types.ModuleType("sframekit"); pkg.__path__ = [%(repo)r]; sys.modules["sframekit"] = pkg
from sframekit.core.arch.abi import AMD64
from sframekit.core.dwarf.rows import CfiRows
from sframekit.core.elf.image import ElfImage
row = CfiRows(ElfImage(%(libc)r).cfi_sections(0), AMD64).row(%(pc)d)
print("row", row is not None and row.cfa is not None)
print("before", "pdb" in sys.modules, "asyncio" in sys.modules)
import pdb
print("after", pdb.Pdb.__name__, type(sys.modules["pdb"]).__name__)
"""


@pytest.mark.parametrize("root", [None, "lldb23"])
def test_the_first_cfi_row_imports_no_pdb(root):
    """The first CFI row a walk asks for (LLDB's first stop unwinding the C library) imports
    pyelftools' decoder with `pdb` deferred (core.pyelftools): Python 3.14's `pdb` imports
    `asyncio`, a tenth of a second of that stop.  Then the user's `import pdb` is the real one.
    In the host's Python 3.11 and in LLDB 23's 3.14 (its root's C library)."""
    libc = T.run_in("host", ["python3", "-c", "import os; print(os.path.realpath('/lib/x86_64-linux-gnu/libc.so.6'))"],
                    root=root, check=True).stdout.strip()
    seen = (T.root_path(root) if root else Path("/")) / libc.lstrip("/")
    text = subprocess.run(["readelf", "--debug-dump=frames", str(seen)], stdout=subprocess.PIPE, text=True).stdout
    lo = next(int(m.group(2), 16) for m in _FDE_LINE.finditer(text) if int(m.group(3), 16) > int(m.group(2), 16))
    code = _FIRST_ROW % {"repo": str(T.REPO), "libc": libc, "pc": lo}
    python = "python3" if root else sys.executable      # (the host's: the one with pyelftools)
    out = T.run_in("host", [python, "-c", code], root=root, check=True).stdout.split("\n")
    assert out[:3] == ["row True", "before False False", "after Pdb module"], out
