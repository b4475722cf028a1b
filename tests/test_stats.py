"""`sframe stats` (core.checks.stats) against independent tools, on the real programs of every
toolchain as one tree and on the fixtures' objects and archives.

* section sizes against `readelf -S`; FDE and FRE counts against `readelf --sframe`'s header
  (binutils 2.47 for V2 and V3, the host's 2.40 for V1); the CFI's functions and the code bytes
  they cover against the FDE ranges `readelf --debug-frame` prints;
* where the bytes go adds up to the section's size, FRE by FRE;
* every section rebuilt in its own version (core.sframe.rebuild) is the section its toolchain
  wrote, byte for byte;
* a V2 object planted among V3 objects, alone and inside an archive, is named; a malformed input
  is one line and the rest goes on (exit status 1).
"""

import json
import re
import shutil
import subprocess

import pytest
from helpers import realprogs as RP
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.objects import usable

from sframekit.core.elf.image import ElfImage
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.rebuild import rebuild


@pytest.fixture(scope="module")
def corpus_tree(roots, tmp_path_factory):
    """Every real program of every toolchain, linked into one tree: {path in the tree: toolchain}."""
    root = tmp_path_factory.mktemp("stats-corpus")
    out = {}
    for tc in T.TOOLCHAINS:
        for name in RP.PROGRAMS:
            exe = RP.build(tc, name)
            dest = root / tc / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(exe, dest)
            out[dest] = tc
    return root, out


def _readelf_sections(path):
    text = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True).stdout
    out = {}
    for m in re.finditer(r"^\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s", text, re.M):
        if m.group(2) != "NOBITS":
            out.setdefault(m.group(1), int(m.group(3), 16))
    return out


def _readelf_counts(tc, path):
    which = "host" if tc == "host" else "sid"
    text = T.run_in(which, ["readelf", "--sframe", str(path)], binds=[path.parent], check=True).stdout
    return (int(re.search(r"Num FDEs: (\d+)", text).group(1)), int(re.search(r"Num FREs: (\d+)", text).group(1)))


def _readelf_cfi(path):
    """[(lo, hi)] of the CFI FDEs readelf prints (.eh_frame and .debug_frame), and the executable
    sections [(address, size)]."""
    text = subprocess.run(["readelf", "--debug-dump=frames", str(path)], capture_output=True, text=True).stdout
    fdes = sorted({(int(a, 16), int(b, 16)) for a, b in re.findall(r" FDE cie=\S+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", text)})
    head = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True, check=True).stdout
    code = [(int(m.group(1), 16), int(m.group(2), 16)) for m in re.finditer(
        r"^\s*\[\s*\d+\]\s+\S+\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+\S*X\S*\s", head, re.M)]
    return [f for f in fdes if f[1] > f[0]], code


def _union_in(ranges, code):
    cut = sorted((max(a, lo), min(b, lo + size)) for a, b in ranges for lo, size in code if a < lo + size and lo < b)
    total, end = 0, -1
    for a, b in cut:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def test_the_corpus_as_one_tree(corpus_tree):
    root, programs = corpus_tree
    got = sframe("stats", root, "--json", "-j", "2")
    assert got.returncode == 0 and not got.stderr, got.stderr
    doc = json.loads(got.stdout)
    by_name = {f["name"]: f for f in doc["files"]}
    assert set(by_name) == {str(p) for p in programs}
    for path, tc in programs.items():
        f = by_name[str(path)]
        sizes = _readelf_sections(path)
        for name in (".sframe", ".eh_frame", ".eh_frame_hdr", ".debug_frame"):
            assert f["sizes"][name] == sizes.get(name, 0), (path, name)
        assert (f["fdes"], f["fres"]) == _readelf_counts(tc, path), path
        assert sum(f["parts"].values()) == f["sizes"][".sframe"], (path, f["parts"])
        assert sum(f["fres_by_width"].values()) == f["fres"] and sum(f["fres_per_fde"].values()) == f["fdes"]
        if tc in ("host", "trixie", "sid"):         # (the host's readelf reads x86-64 CFI only)
            cfi, code = _readelf_cfi(path)
            assert f["cfi_functions"] == len(cfi), path
            assert f["cfi_bytes"] == _union_in(cfi, code), path
            assert f["code_bytes"] == sum(size for _a, size in code), path
        assert f["version"] == 1 or f["what_if"][str(f["version"])] == f["sizes"][".sframe"], f
        assert all(g["reason"] for g in f["gaps"])
    # The mixed corpus: the versions and ABIs found, the others named.
    assert doc["versions"] == {"1": 4, "2": 4, "3": 12} and len(doc["other_version"]) == 8
    assert doc["abis"] == {"amd64": 12, "aarch64": 4, "s390x": 4} and len(doc["other_abi"]) == 8
    text = sframe("stats", root, "-j", "2").stdout
    assert sum(line.startswith(str(root)) for line in text.splitlines()) == len(programs), text
    assert "  versions: V1 in 4, V2 in 4, V3 in 12\n" in text


def test_rebuilt_in_its_own_version_is_the_section(corpus_tree, objects):
    """The layout of gas and ld (V1 2.40, V2 2.44, V3 2.47) is the encoder's: the rows laid out
    again are the same bytes, for every real program and every fixture object (`ld -r`'s too,
    whose FDEs stay in its inputs' order), but for the zeros s390x's assembler pads the section with."""
    _root, programs = corpus_tree
    files = list(programs) + [p for tc in T.TOOLCHAINS for p in usable(objects[tc])]
    for path in files:
        img = ElfImage(str(path))
        sf = img.sframe
        section = Section(sf.data, sf.address)
        again = rebuild(section, section.header.version, sf.address)
        # (s390x's assembler pads the section to 8 bytes with zeros after the FREs)
        assert again.data == sf.data[:again.size] and not any(sf.data[again.size:]) and again.left_out == 0, path
        assert again.size == len(sf.data) or "s390x" in path.name, path


def test_a_v2_object_among_v3_ones_is_named(objects, tmp_path):
    v3 = usable(objects["sid"])
    planted = objects["trixie"][0]
    tree = tmp_path / "tree"
    tree.mkdir()
    for p in v3:
        shutil.copy(p, tree / p.name)
    shutil.copy(planted, tree / "old.o")
    subprocess.run(["ar", "rc", str(tree / "lib.a"), str(v3[0]), str(planted)], check=True)
    bad = tree / "broken.o"
    data = bytearray(v3[1].read_bytes())
    data[ElfImage(str(v3[1])).sframe.file_offset + 2] = 9
    bad.write_bytes(bytes(data))
    got = sframe("stats", tree, "--json")
    assert got.returncode == 1, got.stderr
    assert got.stderr == "sframe: %s: malformed SFrame section at byte offset 0x2: unknown version 9 (known: 1, 2, 3)\n" \
        % bad, got.stderr
    doc = json.loads(got.stdout)
    assert doc["versions"] == {"3": len(v3) + 1, "2": 2}, doc["versions"]
    assert sorted(doc["other_version"]) == sorted([str(tree / "old.o"), "%s(%s)" % (tree / "lib.a", planted.name)])
    text = sframe("stats", tree).stdout
    assert "    differs from most: %s(%s) (V2)\n" % (tree / "lib.a", planted.name) in text, text
