"""Relocatable files (`.o`, `ld -r` output) from every toolchain: their FDE start fields are
completed by relocations (core.elf.reloc), as binutils 2.47's readelf completes them.

  * V3 objects (sid; x86-64, AArch64, s390x; `-ffunction-sections`; `ld -r`): `sframe dump`
    equals readelf 2.47 byte for byte.
  * V2 objects (trixie, binutils 2.44): the section has no FDE_FUNC_START_PCREL flag, yet gas
    relocates the start fields PC-relatively.  readelf 2.47 applies the relocation and then reads
    the field from the section start, so each of its `pc` values is ours minus the field's offset
    in the section (mod 2^64); readelf 2.44 applies none and prints 0 for every function.  We
    print the function's offset in its section, as for V3; everything else is readelf 2.47's.
  * V1 objects (host, binutils 2.40): as V2; readelf 2.40 applies no relocation either: rows
    compared with the function starts taken off.
  * Every FDE of every object starts at a function symbol and has its size (the ground truth
    for the addresses), the relocated section round-trips through the encoder, and bad
    relocations are one-line errors.
"""

import re
import shutil
import struct

import pytest
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.objects import STALE_RELOCATIONS, usable
from helpers.readelf import assert_v1_matches, readelf, rows

from sframekit.core.elf.image import ElfImage
from sframekit.core.errors import ElfError
from sframekit.core.report.dump import dump_file
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.encode import encode


def field_offsets(path):
    """Offset of each FDE start field within the section."""
    h = Section(ElfImage(path).sframe.data).header
    return [h.size + h.fdeoff + i * h.fde_size for i in range(h.num_fdes)]


@pytest.mark.parametrize("tc", ("sid", "sid-aarch64", "sid-s390x"))
def test_v3_objects_dump_as_readelf(objects, tc):
    ref = readelf("sid", objects[tc])
    starts = set()
    for path in objects[tc]:
        assert Section(ElfImage(path).sframe.data).version == 3
        ours = dump_file(path)
        assert ours == ref[path], path
        starts.update(re.findall(r"pc = (0x[0-9a-f]+),", ours))
    assert len(starts) > 3, "the relocated starts are not all 0"


def test_v2_objects_against_both_readelfs(objects):
    paths = usable(objects["trixie"])
    new, old = readelf("sid", paths), readelf("trixie", paths)
    m64 = (1 << 64) - 1
    for path in paths:
        ours = dump_file(path)
        assert "SFRAME_F_FDE_FUNC_START_PCREL" not in ours
        offsets = iter(field_offsets(path))

        def as_247(match, offsets=offsets):   # readelf 2.47: the PC-relative relocation read from the section start
            return "pc = %#x," % ((int(match.group(1), 16) - next(offsets)) & m64)
        expect = re.sub(r"pc = (0x[0-9a-f]+),", as_247, ours)
        # The rows: their start addresses move with their function's start.
        got_rows, want_rows = rows(new[path]), rows(expect)
        assert len(got_rows) == len(want_rows)
        assert [r[20:] for r in got_rows] == [r[20:] for r in want_rows]
        assert re.sub(r"(?m)^    [0-9a-f]{16}  ", "", new[path]) == re.sub(r"(?m)^    [0-9a-f]{16}  ", "", expect), path
        assert check_zero_based(ours, old[path]) > 0, path


def check_zero_based(ours, theirs):
    """readelf 2.40/2.44 apply no relocation: every function at 0.  Ours, with the function
    starts taken off, must equal theirs; returns the number of functions."""
    starts = [int(x, 16) for x in re.findall(r"pc = (0x[0-9a-f]+),", ours)]
    assert all(x == "0x0" for x in re.findall(r"pc = (0x[0-9a-f]+),", theirs))
    out, i = [], -1
    for line in ours.split("\n"):
        if line.startswith("    func idx ["):
            i += 1
            line = re.sub(r"pc = 0x[0-9a-f]+,", "pc = 0x0,", line)
        elif re.match(r"^    [0-9a-f]{16}  ", line) and "[m]" not in line:
            line = "    %016x%s" % (int(line[4:20], 16) - starts[i], line[20:])
        out.append(line)
    rebased = "\n".join(out)
    if "SFRAME_VERSION_1" in ours:
        assert_v1_matches(rebased, theirs)
    else:
        assert rebased == theirs
    return len(starts)


def test_v1_objects_against_readelf_240(objects):
    paths = usable(objects["host"])
    old = readelf("host", paths)
    for path in paths:
        assert Section(ElfImage(path).sframe.data).version == 1
        assert check_zero_based(dump_file(path), old[path]) > 0, path


@pytest.mark.parametrize("tc", T.TOOLCHAINS)
def test_every_fde_starts_at_its_function(objects, tc):
    """The ground truth: each FDE (not PLT) begins at a function symbol of its size, in both
    placements (readelf's, every section at 0; GDB's, one after another)."""
    for path in usable(objects[tc]):
        for readelf_layout in (False, True):
            img = ElfImage(path, readelf_layout=readelf_layout)
            syms = {(a, size): name for a, size, name in img._symtab()}
            sec = Section(img.sframe.data, img.sframe.address)
            fdes = list(sec.fdes())
            assert fdes
            for fde in fdes:
                if not readelf_layout:
                    assert (fde.start, fde.size) in syms, (path, hex(fde.start), fde.size)
                    assert img.placement(fde.start).split("+")[0].startswith(".text")
                else:
                    assert fde.start in {a for a, _ in syms}, (path, hex(fde.start))
            # The relocated section round-trips through the encoder, byte for byte (s390x gas
            # pads the section with zeros to 8 bytes).
            out = encode(sec.header, sec.check_all())
            data = img.sframe.data
            assert data[:len(out)] == out and len(data) - len(out) < 8 and not data[len(out):].strip(b"\0"), path


def test_stale_relocations_of_old_ld_r_are_an_error(objects):
    from elftools.elf.elffile import ELFFile
    for name in sorted(STALE_RELOCATIONS):
        path = [p for p in objects[name.split("-")[0]] if p.name == name][0]
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            offsets = [r["r_offset"] for r in elf.get_section_by_name(".rela.sframe").iter_relocations()]
            raw = elf.get_section_by_name(".sframe").data()
        h = Section(raw).header
        table_end = h.size + h.fdeoff + h.num_fdes * h.fde_size
        past = [o for o in offsets if o >= table_end]
        assert past and len(offsets) == h.num_fdes, (name, offsets, table_end)
        with pytest.raises(ElfError, match=re.escape("relocation R_X86_64_PC32 at offset %#x is not on an FDE start "
                                                     "field" % past[0])):
            ElfImage(path)


def test_lookup_in_an_object_names_the_section(objects):
    path = [p for p in objects["sid"] if p.name == "sid-frames-fs.o"][0]
    img = ElfImage(path)
    main = img.resolve("main")
    code, out, err = sframe("lookup", path, "main+1")
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0] == "Address: %#x in %s (.text.startup.main+0x1; relocatable file: sections placed one after " \
        "another from 0, as GDB places them)" % (main + 1, path) or \
        lines[0] == "Address: %#x in %s (.text.main+0x1; relocatable file: sections placed one after another " \
        "from 0, as GDB places them)" % (main + 1, path), lines[0]
    assert lines[2].startswith("Function: main at %#x" % main), lines


def _patched_relocation(src, dst, field, value):
    """A copy of an object whose first .rela.sframe entry has r_info's type (field "type") or
    r_offset (field "offset") replaced."""
    from elftools.elf.elffile import ELFFile
    shutil.copy(src, dst)
    with open(src, "rb") as fh:
        rela = ELFFile(fh).get_section_by_name(".rela.sframe")
        off = rela["sh_offset"]
    data = bytearray(dst.read_bytes())
    if field == "type":
        struct.pack_into("<I", data, off + 8, value)         # low half of r_info (x86-64, little-endian)
    else:
        struct.pack_into("<Q", data, off, value)
    dst.write_bytes(bytes(data))


def test_bad_relocations_are_one_line_errors(objects, tmp_path):
    src = objects["sid"][0]
    cases = [("type", 99, "relocation type 99 at offset %#x is not supported (supported: R_X86_64_64, "
                           "R_X86_64_PC32, R_X86_64_32, R_X86_64_32S, R_X86_64_PC64)" % field_offsets(src)[0]),
             ("type", 2, "relocation R_X86_64_PC32 at offset %#x is 4 bytes wide; the FDE start field is 8"
              % field_offsets(src)[0]),
             ("offset", 3, "relocation R_X86_64_PC64 at offset 0x3 is not on an FDE start field"),
             ("offset", field_offsets(src)[1], "two relocations complete the FDE start field at offset %#x"
              % field_offsets(src)[1])]
    for i, (field, value, msg) in enumerate(cases):
        bad = tmp_path / ("bad%d.o" % i)
        _patched_relocation(src, bad, field, value)
        with pytest.raises(ElfError, match=re.escape(msg)):
            ElfImage(bad)
        code, out, err = sframe("dump", bad)
        assert code != 0 and out == "" and err == "sframe: %s: .sframe: %s\n" % (bad, msg), err



# -- in the debuggers ---------------------------------------------------------------------------------

def _debugger_objects(objects):
    return [p for tc in ("sid", "trixie", "host") for p in objects[tc] if p.name.endswith(("-frames-fs.o", "-recurse.o"))]


@pytest.mark.parametrize("gdb", ("gdb13", "gdb18"))
def test_gdb_reads_an_object_file(objects, tmp_path, gdb):
    """`gdb x.o`: GDB places the sections one after another; `info sframe` finds each function
    where GDB has its symbol (the section read from the file, relocated, not GDB's unrelocated
    view of it)."""
    from helpers.gdb import PLUGIN, run_gdb
    paths = _debugger_objects(objects)
    lines = ["source %s" % PLUGIN]
    for i, path in enumerate(paths):
        lines += ["file %s" % path, "mark %d" % i, "info address main", "info sframe main+1", "info sframe"]
    out = run_gdb(gdb, lines, tmp_path)
    assert "Traceback" not in out and "error" not in out.lower(), out
    for i, path in enumerate(paths):
        block = out.between(str(i), str(i + 1) if i + 1 < len(paths) else None)
        addr = int(re.search(r'Symbol "main" is (?:a function )?at (?:address )?(0x[0-9a-f]+)', block).group(1), 16)
        assert "Address: %#x in %s" % (addr + 1, path) in block, block
        assert re.search(r"^Function: main at %#x, size \d+ bytes \(FDE \d+\)$" % addr, block, re.M), block


@pytest.mark.parametrize("lldb", (16, 21))
def test_lldb_reads_an_object_file(objects, tmp_path, lldb):
    from helpers.lldb import run_lldb
    paths = _debugger_objects(objects)
    lines = []
    for i, path in enumerate(paths):
        lines += ["target create %s" % path, "probe run img%d image lookup -n main" % i,
                  "probe run sf%d sframe lookup main+1" % i]
    s = run_lldb(lldb, lines, tmp_path, "objects%d" % lldb)
    assert "Traceback" not in s.stdout + s.stderr
    for i, path in enumerate(paths):
        addr = int(re.search(r"\[(0x[0-9a-f]+)\]", s.block("img%d" % i).text).group(1), 16)
        sf = s.block("sf%d" % i)
        assert not sf.err and sf.out[0] == "Address: %#x in %s" % (addr + 1, path), (sf.out, sf.err)
        assert re.match(r"^Function: main at %#x, size \d+ bytes \(FDE \d+\)$" % addr, sf.out[2]), sf.out


def test_check_runs_on_objects(objects):
    """`sframe check` on every object file: the CFI relocated and placed like the SFrame section
    (core.elf.reloc.apply_all); its findings are the executables' (test_check.KNOWN), and the old
    `ld -r` outputs are refused for their stale relocations (exit 2)."""
    from helpers.cli import KNOWN, findings, run_check
    checked = 0
    for tc, paths in sorted(objects.items()):
        for path in paths:
            if path.name in STALE_RELOCATIONS:
                code, out, err = run_check(path)
                assert code == 2 and out == "" and "is not on an FDE start field" in err, err
                continue
            doc = findings(path, inroot=tc == "sid-aarch64")
            assert doc["functions"] > 0 and doc["ranges"].get("agree", 0) > 0, path
            for f in doc["findings"]:
                key = (f["kind"], f["function"], f["what"], f["sframe"], f["cfi"])
                assert (tc,) + key in KNOWN or ("*",) + key in KNOWN, "%s: unexplained finding %r" % (path, f)
            checked += 1
    assert checked == sum(len(p) for p in objects.values()) - len(STALE_RELOCATIONS)
