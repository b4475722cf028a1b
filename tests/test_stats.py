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

import collections
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
    """Every real program of every toolchain and its objects (in an archive), copied into one
    tree: ({program path: toolchain}, {archive path: toolchain})."""
    root = tmp_path_factory.mktemp("stats-corpus")
    programs, archives = {}, {}
    for tc in T.TOOLCHAINS:
        for name in RP.PROGRAMS:
            dest = root / tc / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(RP.build(tc, name), dest)
            programs[dest] = tc
            shutil.copy(RP.objects(tc, name), root / tc / ("lib%s.a" % name))
            archives[root / tc / ("lib%s.a" % name)] = tc
    return root, programs, archives


def _readelf_members(tc, archive):
    """{`File:` name: (section sizes, (FDEs, FREs))} of an archive's members, by readelf -S and
    --sframe (the host's 2.40 for V1, 2.47 in the sid root for the others)."""
    which = "host" if tc == "host" else "sid"
    text = T.run_in(which, ["readelf", "-SW", "--sframe", str(archive)], binds=[archive.parent], check=True).stdout
    out = {}
    for name, body in re.findall(r"^File: ([^\n]*)\n(.*?)(?=^File: |\Z)", text, re.M | re.S):
        sizes = {}
        for m in re.finditer(r"^\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s", body, re.M):
            if m.group(2) != "NOBITS":
                sizes.setdefault(m.group(1), int(m.group(3), 16))
        fdes, fres = re.search(r"Num FDEs: (\d+)", body), re.search(r"Num FREs: (\d+)", body)
        out[name] = (sizes, (int(fdes.group(1)), int(fres.group(1))) if fdes and fres else None)
    return out


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
    """Every program and object of the corpus, all toolchains, as one tree."""
    root, programs, archives = corpus_tree
    got = sframe("stats", root, "--json", "-j", "2")
    assert got.returncode == 0 and not got.stderr, got.stderr
    doc = json.loads(got.stdout)
    by_name = {f["name"]: f for f in doc["files"]}
    members = {a: _readelf_members(tc, a) for a, tc in archives.items()}
    assert set(by_name) == {str(p) for p in programs} | {n for m in members.values() for n, v in m.items() if v[1]}
    for listed in members.values():
        for name, (sizes, counts) in listed.items():
            if counts is None:          # (an object without functions: no .sframe, or an empty one)
                assert name not in by_name or by_name[name]["fdes"] == 0
                continue
            f = by_name[name]
            assert f["kind"] == "object" and (f["fdes"], f["fres"]) == counts, name
            for sec in (".sframe", ".eh_frame", ".debug_frame"):
                assert f["sizes"][sec] == sizes.get(sec, 0), (name, sec)
            assert sum(f["parts"].values()) <= f["sizes"][".sframe"] < sum(f["parts"].values()) + 8, name
    version_of = {"host": 1, "trixie": 2}
    want = collections.Counter()
    for f in doc["files"]:
        tc = f["name"][len(str(root)) + 1:].split("/")[0]
        assert f["version"] == version_of.get(tc, 3), f["name"]
        want[str(f["version"])] += 1
    assert doc["versions"] == dict(want)
    assert sorted(doc["other_version"]) == sorted(f["name"] for f in doc["files"] if f["version"] != 3)
    checked = set()
    for path, tc in programs.items():
        f = by_name[str(path)]
        sizes = _readelf_sections(path)
        for name in (".sframe", ".eh_frame", ".eh_frame_hdr", ".debug_frame"):
            assert f["sizes"][name] == sizes.get(name, 0), (path, name)
        assert (f["fdes"], f["fres"]) == _readelf_counts(tc, path), path
        assert sum(f["parts"].values()) == f["sizes"][".sframe"], (path, f["parts"])
        assert sum(f["fres_by_width"].values()) == f["fres"] and sum(f["fres_per_fde"].values()) == f["fdes"]
        cfi, code = _readelf_cfi(path)                 # (every architecture: readelf's CFI is generic)
        assert f["cfi_functions"] == len(cfi), path
        assert f["cfi_bytes"] == _union_in(cfi, code), path
        assert f["code_bytes"] == sum(size for _a, size in code), path
        checked.add(tc)
        assert f["version"] == 1 or f["what_if"][str(f["version"])] == f["sizes"][".sframe"], f
        assert all(g["reason"] for g in f["gaps"])
    assert checked == set(T.TOOLCHAINS), checked
    # The mixed corpus: the ABIs found, the others named.
    abis = collections.Counter(f["abi"] for f in doc["files"])
    assert doc["abis"] == dict(abis) and set(abis) == {"amd64", "aarch64", "s390x"}
    assert len(doc["other_abi"]) == abis["aarch64"] + abis["s390x"]
    text = sframe("stats", root, "-j", "2").stdout
    assert sum(line.startswith(str(root)) for line in text.splitlines()) == len(doc["files"]), text[-3000:]
    assert "  versions: %s\n" % ", ".join("V%s in %d" % kv for kv in sorted(want.items())) in text


def test_rebuilt_in_its_own_version_is_the_section(corpus_tree, objects):
    """The layout of gas and ld (V1 2.40, V2 2.44, V3 2.47) is the encoder's: the rows laid out
    again are the same bytes, for every real program and every fixture object (`ld -r`'s too,
    whose FDEs stay in its inputs' order), but for the zeros s390x's assembler pads the section with."""
    _root, programs, _archives = corpus_tree
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
    empty = tmp_path / "empty"
    empty.mkdir()
    none = sframe("stats", empty, objects["host"][0].parent / "nonexistent.o")
    assert none.returncode == 1 and none.stdout == "total: no file with SFrame\n" and none.stderr == \
        "sframe: %s: No such file or directory\n" % (objects["host"][0].parent / "nonexistent.o"), none
    got = sframe("stats", tree, "--json")
    assert got.returncode == 1, got.stderr
    assert got.stderr == "sframe: %s: malformed SFrame section at byte offset 0x2: unknown version 9 (known: 1, 2, 3)\n" \
        % bad, got.stderr
    doc = json.loads(got.stdout)
    assert doc["versions"] == {"3": len(v3) + 1, "2": 2}, doc["versions"]
    assert sorted(doc["other_version"]) == sorted([str(tree / "old.o"), "%s(%s)" % (tree / "lib.a", planted.name)])
    text = sframe("stats", tree).stdout
    assert "    differs from most: %s(%s) (V2)\n" % (tree / "lib.a", planted.name) in text, text


def test_why_a_function_has_no_fde(corpus):
    """gas 2.40 writes no SFrame FDE for a function that realigns its stack through a DRAP register
    (tests/fixtures/realign.c): the reason, from its CFI; and the C runtime's `_start`."""
    build = corpus.get("host", "realign", "O2-nofp")
    got = sframe("stats", build.path, "--json")
    gaps = {g["name"]: g["reason"] for g in json.loads(got.stdout)["files"][0]["gaps"]}
    assert gaps.get("realigned_drap", "").startswith("its CFA is a DWARF expression (stack realignment through a DRAP"), gaps
    assert gaps.get("_start", "").startswith("C runtime startup code"), gaps
