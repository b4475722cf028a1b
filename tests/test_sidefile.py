"""SFrame written out as DWARF CFI in a side file (core.dwarf.writer, core.elf.sidefile): read by
independent tools and used by real debuggers that know nothing of SFrame.

* The CFI says what SFrame says: for every fixture build of every toolchain (x86-64 V1/V2/V3,
  AArch64, s390x; executables and libraries), binutils' readelf and LLVM's llvm-dwarfdump read the
  side file without a complaint, and at every instruction (objdump's) readelf's rows are SFrame's
  rules and the save-slot analysis' answers.
* GDB 13 and 18, without the plugin, on programs stripped of their debug information and CFI, with
  the side file found by build ID: at every stop the GDB tests use, the frames (PC and CFA) of
  GDB's DWARF unwinding of the unstripped program, and every callee-saved register the side file
  gives equal to DWARF's (natively, and under qemu-user for AArch64 and s390x).
"""

import bisect
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers import shipped
from helpers import toolchains as T
from helpers.gdb import STOPS, Out, Qemu, gcore, run_gdb
from helpers.lldb import STOPS as LLDB_STOPS
from helpers.lldb import run_lldb
from helpers.readelf import frames_column

from sframekit.core.arch import abi as abimod
from sframekit.core.dwarf import ehframe, writer
from sframekit.core.elf import sidefile
from sframekit.core.elf.image import ElfImage
from sframekit.core.errors import CfiError
from sframekit.core.saves import analysis as saves
from sframekit.core.sframe import format as F
from sframekit.core.sframe.index import SFrameIndex
from sframekit.core.sframe.rules import RuleKind

TOOLCHAINS = ["host", "trixie", "sid", "sid-aarch64", "sid-s390x"]


def _readelf_rows(text):
    """{FDE start: [(pc, {column: text})]} from `readelf --debug-dump=frames-interp` (CFA included)."""
    tables, rows, cols = {}, None, None
    for line in text.splitlines():
        m = re.search(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", line)
        if m:
            rows = tables.setdefault(int(m.group(1), 16), [])
            cols = None
            continue
        if "ZERO terminator" in line or re.match(r"[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ CIE\b", line):
            rows = None                           # (a CIE, .eh_frame's end: no FDE's rows)
            continue
        words = re.sub(r"\b(r\d+) \(\w+\)", r"\1", line).split()    # "r17 (f2)": one column
        if rows is None or not words:
            continue
        if words[0] == "LOC":
            cols = words[1:]
        elif cols is not None and re.fullmatch(r"[0-9a-f]{8,16}", words[0]):
            rows.append((int(words[0], 16), dict(zip(cols, words[1:]))))
    return tables


def _off(n):
    return "%+d" % n


def _expected(abi, rules, where, names):
    """{readelf column: text} SFrame's rules and the analysis say at one instruction."""
    out = {}
    if rules.cfa is None:
        out["ra"] = "u"
        return out
    cfa = rules.cfa
    out["CFA"] = "exp" if cfa.deref else "%s%s" % (abi.regname(cfa.reg), _off(cfa.offset))

    def column(rule):
        k = rule.kind
        if k in (RuleKind.AT_CFA, RuleKind.FIXED):
            return "c" + _off(rule.offset)
        if k is RuleKind.CFA_PLUS:
            return "v" + _off(rule.offset)
        if k is RuleKind.UNCHANGED:
            return "s"
        if k is RuleKind.UNDEFINED:
            return "u"
        if rule.deref:
            return "exp"
        return "r%d" % rule.reg if rule.offset == 0 else "vexp"
    out["ra"] = column(rules.ra)
    out[names[abi.fp]] = column(rules.fp)
    if abi.sp_val_offset:
        out[names[abi.sp]] = "v" + _off(abi.sp_val_offset)
    for reg, save in where.items():
        if save.kind is saves.SaveKind.SAVED:
            out[names[reg]] = "exp" if save.base is not None else "c" + _off(save.offset)
        else:
            out[names[reg]] = "s" if save.kind is saves.SaveKind.UNCHANGED else "u"
    return out


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_cfi_says_what_sframe_says(corpus, tmp_path, monkeypatch, toolchain):
    from helpers import objdump_moves as OM
    paths = set()
    for b in corpus.select(toolchain=toolchain):
        paths.add(b.noeh)
        if b.noeh_lib is not None:
            paths.add(b.noeh_lib)
    checked = fdes = 0
    for k, path in enumerate(sorted(paths)):
        out = tmp_path / ("%d.debug" % k)
        made = sidefile.write(str(path), str(out), workers=1)
        assert made.build_id is not None and made.functions > 0 and made.skipped == 0, made
        # The same file where the functions are shared among three processes (core.parallel).
        with monkeypatch.context() as m:
            m.setattr(writer.parallel, "workers", lambda units, per_worker, limit=None: 3)
            shared = sidefile.write(str(path), str(tmp_path / "shared.debug"))
        assert (tmp_path / "shared.debug").read_bytes() == out.read_bytes(), path
        assert (shared.functions, shared.fdes) == (made.functions, made.fdes)
        # Two readers that share nothing with us, or with each other.
        r = subprocess.run(["readelf", "--debug-dump=frames-interp", str(out)], capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr and "Warning" not in r.stdout, (path, r.stderr)
        d = T.run_in("sid", ["llvm-dwarfdump-23", "--debug-frame", str(out)], binds=[tmp_path])
        assert d.returncode == 0 and not d.stderr.strip() and not re.search(r"(?i)\b(error|warning)\b", d.stdout), \
            (path, d.stderr[-2000:], d.stdout[-2000:])
        assert d.stdout.count(" FDE cie=") == made.fdes, (path, made)
        tables = _readelf_rows(r.stdout)
        image = ElfImage(str(path))
        index = SFrameIndex(image.sframe.data, image.sframe.address)
        abi = abimod.info(index.abi)
        names = {n: frames_column(abi, n) for n in abi.callee_saved + (abi.sp, abi.fp)}
        insns = OM.disassemble(toolchain, path)
        starts = sorted(insns)
        for fde in index.section.fdes():
            block = fde.block_size if fde.pc_type is F.PCType.MASK and fde.block_size else fde.size
            rows = tables.get(fde.start)
            assert rows, "%s: no DWARF FDE at %#x" % (path, fde.start)
            fdes += 1
            pcs = [p for p, _cols in rows]
            lo = bisect.bisect_left(starts, fde.start)
            for pc in starts[lo:bisect.bisect_left(starts, fde.start + block)]:
                m = index.lookup(pc)
                if m is None:
                    continue
                want = _expected(abi, m.rules, saves.at(abi, index, m, image.file_bytes, image.symbolize), names)
                got = rows[bisect.bisect_right(pcs, pc) - 1][1]
                for col, text in want.items():
                    assert got.get(col) == text, "%s %#x %s: side file %s, SFrame and the analysis %s" % (
                        path, pc, col, got.get(col), text)
                    checked += 1
    print("%s: %d side files, %d FDEs, %d (instruction, column) places equal to SFrame and the analysis"
          % (toolchain, len(paths), fdes, checked))
    assert checked > 10000


@pytest.mark.parametrize("toolchain", TOOLCHAINS)
def test_eh_frame_says_what_debug_frame_says(corpus, tmp_path, toolchain):
    """The side file's rows as `.eh_frame` (core.dwarf.ehframe: LLDB 23's first side file): readelf
    and llvm-dwarfdump read it without a complaint, and readelf's rows of every FDE are those of
    the `.debug_frame` form, callee-saved registers included, in either byte order."""
    paths = sorted({b.noeh for b in corpus.select(toolchain=toolchain)})
    fdes = 0
    for k, path in enumerate(paths):
        rows = []
        for form in ("debug", "eh"):
            out = tmp_path / ("%d.%s" % (k, form))
            sidefile.write(str(path), str(out), workers=1, eh_frame=form == "eh")
            r = subprocess.run(["readelf", "--debug-dump=frames-interp", str(out)], capture_output=True, text=True)
            assert r.returncode == 0 and not r.stderr and "Warning" not in r.stdout, (path, form, r.stderr)
            assert ("Contents of the .eh_frame section" in r.stdout) == (form == "eh"), (path, form)
            rows.append(_readelf_rows(r.stdout))
        assert rows[0] == rows[1] and len(rows[0]) > 3, path
        fdes += len(rows[0])
        d = T.run_in("sid", ["llvm-dwarfdump-23", "--eh-frame", str(tmp_path / ("%d.eh" % k))], binds=[tmp_path])
        assert d.returncode == 0 and not d.stderr.strip() and not re.search(r"(?i)\b(error|warning)\b", d.stdout), \
            (path, d.stderr[-2000:], d.stdout[-2000:])
        assert d.stdout.count(" FDE cie=") == len(rows[0]), path
    print("%s: %d programs, %d FDEs with the same rows in both forms" % (toolchain, len(paths), fdes))


@pytest.mark.parametrize("toolchain", ["host", "sid-s390x"])
def test_empty_unit_describes_nothing(corpus, tmp_path, toolchain):
    """LLDB 23's file of the stacks' functions carries a compile unit that describes nothing
    (core.dwarf.emptyunit) where it has no debug information: readelf and llvm-dwarfdump --verify
    read it without a complaint in either byte order, one unit, no attributes, an empty line
    program; where the program has debug information (the fixtures are built with -g), that is
    the file's only, as without the unit (also compressed the GNU way, as `.zdebug_info`)."""
    b = corpus.select(toolchain=toolchain)[0]
    objcopy = T.toolchain(toolchain).tool("objcopy")
    bare, gnu = tmp_path / "bare", tmp_path / "gnu"
    T.run_in(toolchain, [objcopy, "--strip-debug", str(b.noeh), str(bare)], check=True)
    T.run_in(toolchain, [objcopy, "--compress-debug-sections=zlib-gnu", str(b.noeh), str(gnu)], binds=[tmp_path],
             check=True)
    assert ".zdebug_info" in subprocess.run(["readelf", "-SW", str(gnu)], capture_output=True, text=True).stdout
    for program, units in ((bare, 1), (b.noeh, None), (gnu, None)):
        out = tmp_path / (program.name + ".eh")
        sidefile.write(str(program), str(out), callee_saved=False, eh_frame=True, empty_unit=True)
        r = subprocess.run(["readelf", "--debug-dump=info,abbrev,rawline", str(out)], capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr and "Warning" not in r.stdout, (program, r.stderr)
        if units is None:
            plain = tmp_path / (program.name + ".plain")
            sidefile.write(str(program), str(plain), callee_saved=False, eh_frame=True)
            assert out.read_bytes() == plain.read_bytes(), program
            continue
        assert r.stdout.count("Compilation Unit @") == 1 and "DW_TAG_compile_unit" in r.stdout, r.stdout
        assert not re.search(r"^\s+<\w+>\s+DW_AT_", r.stdout, re.M), r.stdout      # no attributes
        assert "Opcode Base:                 13" in r.stdout and "No Line Number Statements" in r.stdout, r.stdout
        d = T.run_in("sid", ["llvm-dwarfdump-23", "--verify", str(out)], binds=[tmp_path])
        assert d.returncode == 0 and "No errors." in d.stdout, (d.stdout[-2000:], d.stderr[-2000:])
        plain = tmp_path / "bare.plain"
        sidefile.write(str(bare), str(plain), callee_saved=False, eh_frame=True)
        r = subprocess.run(["readelf", "-S", str(plain)], capture_output=True, text=True, check=True)
        assert ".debug_info" not in r.stdout


def test_eh_frame_rewrite_refuses_what_it_cannot_read():
    """A `.debug_frame` the rewrite cannot take: CfiError naming the offset, nothing else."""
    cie = struct.pack("<IIB", 12, 0xFFFFFFFF, 3) + b"\0" + bytes([1, 0x78, 16]) + b"\0\0\0"
    fde = struct.pack("<IIQQ", 20, 0, 0x1000, 0x10)
    good = ehframe.from_debug_frame(cie + fde, False)
    assert good.endswith(b"\0" * 4) and struct.unpack_from("<I", good, 4)[0] == 0     # a CIE, id 0
    cases = {
        "runs past the section": cie + fde[:-3],
        "64-bit DWARF": struct.pack("<IQ", 0xFFFFFFFF, 0) + cie,
        "not a CIE": cie + struct.pack("<IIQQ", 20, 0x40, 0x1000, 0x10),
        "augmentation": struct.pack("<IIB", 14, 0xFFFFFFFF, 3) + b"zP\0" + bytes([1, 0x78, 16]) + b"\0\0\0",
        "inside its address range": cie + struct.pack("<IIQ", 12, 0, 0x1000),
        "segment selector size": struct.pack("<IIB", 14, 0xFFFFFFFF, 4) + b"\0" + bytes([4, 0, 1, 0x78, 16])
        + b"\0\0\0" + struct.pack("<IIQQ", 20, 0, 0x1000, 0x10),         # (a version 4 CIE, 4-byte addresses)
    }
    for what, data in cases.items():
        with pytest.raises(CfiError, match=r"at byte offset 0x[0-9a-f]+: .*%s" % what):
            ehframe.from_debug_frame(data, False)
        for cut in range(len(data)):          # (every prefix: an error or a section, never another exception)
            try:
                ehframe.from_debug_frame(data[:cut], False)
            except CfiError:
                pass


# -- GDB, without the plugin ------------------------------------------------------------------------

def _stripped(build, work):
    """Copies of the program (and its library) without debug information or CFI, and the same
    unstripped, at paths of equal length; and the debug-file directory holding their side files."""
    tc = T.toolchain(build.toolchain)
    dirs = {"orig": work / "orig", "strp": work / "strp"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    files = [build.path] + ([build.lib] if build.lib is not None else [])
    debug = work / "debug"
    for f in files:
        shutil.copy2(f, dirs["orig"] / f.name)
        T.run_in(tc, [tc.tool("objcopy"), "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr",
                      str(f), str(dirs["strp"] / f.name)], binds=[work, f.parent], check=True)
        s = str(dirs["strp"] / f.name)
        target = sidefile.build_id_path(str(debug), s)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        sidefile.write(s, target)
    return dirs["orig"] / build.path.name, dirs["strp"] / build.path.name, debug


def _gdb_session(exe, orig, fixture, regs, debug, qemu=None, sysroot=None):
    """One process, two unwinders: the stripped program with its side file (found by build ID),
    then the unstripped program's symbols and CFI in its place (`symbol-file`) at the same stop,
    so that both see the very same stack (two runs may place it apart: qemu-user, realignment).
    `orig` None: the stripped program alone (the caller runs the unstripped one apart)."""
    lines = ["set startup-with-shell off"] + (["set debug-file-directory %s" % debug] if debug else []) + \
        ["file %s" % exe]
    if sysroot:
        lines += ["set sysroot %s" % sysroot, "set solib-search-path %s" % exe.parent]
    lines.append("break %s" % STOPS[fixture][0])
    if qemu is not None:
        lines += ["target remote :%d" % qemu.port, "continue"]
    else:
        lines.append("run %s" % " ".join(STOPS[fixture][1]))
    dump = ["frames-dump %s", "regs-dump %%s %s" % " ".join(regs)]
    label = "side" if debug else "dwarf"
    lines += [d % label for d in dump]
    lines += ["python print('OBJFILES', [o.filename for o in gdb.objfiles()])"]
    if orig is not None:
        lines += ["symbol-file %s" % orig, "maint flush register-cache"] + [d % "dwarf" for d in dump]
        lines += ["python print('OBJFILES', [o.filename for o in gdb.objfiles()])"]
    return lines + ["kill"]


def _exe_bias(out, image, frames):
    """The program's load bias, from `main`'s frame: its PC less the symbol's link-time address."""
    for f in frames:
        if f.name == "main":
            sym = image.resolve("main")
            off = int(f.where.rpartition("+")[2] or 0)
            return f.pc - off - sym
    return 0


def _lib_bias(out, lib):
    """A library's load bias, from its frame `lib_stop_here` (the dlopen fixture's stop)."""
    m = re.search(r"^FRAME \w+ \d+ (0x[0-9a-f]+) \S+ \d lib_stop_here lib_stop_here\+(\d+)$", out, re.M)
    return int(m.group(1), 16) - int(m.group(2)) - lib.resolve("lib_stop_here") if m else 0


GDB_CASES = [("gdb13", "host"), ("gdb13", "trixie"), ("gdb18", "sid"), ("multiarch", "sid-aarch64"),
             ("multiarch", "sid-s390x")]


@pytest.mark.parametrize("gdb,toolchain", GDB_CASES, ids=["%s-%s" % c for c in GDB_CASES])
def test_gdb_unwinds_with_the_side_file(corpus, tmp_path, gdb, toolchain):
    tc = T.toolchain(toolchain)
    abi = abimod.info({"x86_64": F.ABI.AMD64_ENDIAN_LITTLE, "aarch64": F.ABI.AARCH64_ENDIAN_LITTLE,
                       "s390x": F.ABI.S390X_ENDIAN_BIG}[tc.arch])
    regs = [abi.regname(r) for r in abi.callee_saved]
    equal = unknown = frames = 0
    for fixture in sorted(STOPS):
        build = corpus.get(toolchain, fixture, "O2-nofp")
        orig, strp, debug = _stripped(build, tmp_path / fixture)
        # A library's symbols cannot be swapped in one process: there, two runs (natively the
        # same stack: the library fixture realigns nothing).
        runs = [(strp, orig, debug)] if build.lib is None else [(strp, None, debug), (orig, None, None)]
        text = ""
        for exe, swap, dbg in runs:
            q = Qemu(toolchain, exe, STOPS[fixture][1]) if tc.qemu else None
            try:
                text += run_gdb(gdb, _gdb_session(exe, swap, fixture, regs, dbg, q, tc.sysroot), tmp_path)
            finally:
                if q is not None:
                    q.close()
        out = Out(text)
        ref, got = out.frames("dwarf"), out.frames("side")
        objfiles = re.findall(r"^OBJFILES (.*)$", out, re.M)
        # GDB read the side file, then only the unstripped program.
        assert "Traceback" not in out and len(objfiles) == 2 and str(debug) in objfiles[0] and \
            str(debug) not in objfiles[1] and str(orig) in objfiles[1], out[-3000:]
        # Two qemu-user runs may place the stack apart: there, stack addresses from frame 0's CFA.
        shift = {"dwarf": 0, "side": 0}
        if len(runs) == 2 and tc.qemu and ref and got:
            shift = {"dwarf": ref[0].cfa, "side": got[0].cfa}

        def placed(value, kind, shift=shift):
            base = shift[kind]
            return value - base if base and value is not None and abs(value - base) < 1 << 24 else value
        image = ElfImage(str(strp))
        index = SFrameIndex(image.sframe.data, image.sframe.address)
        lib = ElfImage(str(strp.parent / build.lib.name)) if build.lib is not None else None
        covered = len(ref)
        for k, f in enumerate(ref):
            # A function without SFrame (V1/V2 write none for a DRAP-realigned one) has no rows in
            # the side file either: GDB guesses there, and the frames from it on are not compared.
            in_lib = lib is not None and lib.function_at(f.pc - _lib_bias(out, lib)) is not None
            if not in_lib and index.lookup(f.pc - (1 if k else 0) - _exe_bias(out, image, ref)) is None \
                    and image.function_at(f.pc - _exe_bias(out, image, ref)) is not None:
                covered = k + 1
                break
        # (the first frame without SFrame: its PC, which its callee's rows give, but not its CFA)
        cfas = covered if covered == len(ref) else covered - 1
        assert [(f.pc, placed(f.cfa, "side") if k < cfas else None) for k, f in enumerate(got[:covered])] == \
            [(f.pc, placed(f.cfa, "dwarf") if k < cfas else None) for k, f in enumerate(ref[:covered])], \
            "%s: frames with the side file\n%s\nDWARF of the unstripped program\n%s" % (fixture, got, ref)
        want, have = out.regs("dwarf"), out.regs("side")
        for level in range(1, cfas):
            for name in regs:
                w, h = want[level].get(name, "-"), have[level].get(name, "-")
                if w == "-":
                    continue
                if h == "-":
                    unknown += 1
                else:
                    h, w = ("%#x" % placed(int(v, 16), kind) if v.startswith("0x") else v
                            for v, kind in ((h, "side"), (w, "dwarf")))
                    assert h == w, "%s frame #%d %s: %s with the side file, %s with DWARF" % (fixture, level, name, h, w)
                    equal += 1
        frames += covered
    print("%s %s: %d frames as DWARF's; callee-saved registers: %d equal, %d unknown, 0 different"
          % (gdb, toolchain, frames, equal, unknown))
    assert frames > 30 and equal > 0


# -- LLDB's own bt, after `command script import lldb_plugin` ----------------------------------------

LLDB_FIXTURES = ("frames", "realign", "recurse", "threads", "dlopen")
_BT_FRAME = re.compile(r"^\s*\*?\s*frame #(\d+): (0x[0-9a-f]+) ([^`\s]+)`([\w.$@]+)")


def _lldb_frames(text):
    """[(pc, module, function)] of LLDB's `bt` lines (symbol offsets and arguments left out; the
    tail-call frames LLDB makes from debug information, "[artificial]", too)."""
    out = []
    for line in text.splitlines():
        m = _BT_FRAME.match(line)
        if m and not line.rstrip().endswith("[artificial]"):
            out.append((int(m.group(2), 16), m.group(3), m.group(4)))
    return out


def _lldb_threads(text):
    """[(stopped here?, frames)] per thread of LLDB's `bt` or `thread backtrace all`."""
    parts = re.split(r"^(\s*\*?\s*)thread #\d+", text, flags=re.M)
    return [("*" in parts[i], _lldb_frames(parts[i + 1])) for i in range(1, len(parts) - 1, 2)]


def _same_stacks(got_text, want_text):
    """Whether two runs' stacks are equal, PC and function, thread by thread: the thread stopped at
    the breakpoint always; another one where it stopped in the same function in both runs (a thread
    that runs on while the other reaches the breakpoint stops wherever it happens to be)."""
    got, want = _lldb_threads(got_text), _lldb_threads(want_text)
    if len(got) != len(want) or not got:
        return False
    for (stopped, g), (_s, w) in zip(got, want):
        pairs_g, pairs_w = [(pc, fn) for pc, _m, fn in g], [(pc, fn) for pc, _m, fn in w]
        if stopped or (g and w and g[0][2] == w[0][2]):
            if pairs_g != pairs_w:
                return False
    return True



def _lldb_stop(exe, fixture, tag, extra=()):
    return (["target create %s" % exe, "breakpoint set -n %s" % LLDB_STOPS[fixture], "process launch",
             "script print('@@ %s')" % tag, "thread backtrace all" if fixture == "threads" else "bt"]
            + list(extra) + ["script print('@@ end-%s')" % tag, "process kill", "target delete"])


@pytest.mark.parametrize("lldb", [16, 19, 21, 23])
def test_lldb_bt_through_the_side_file(corpus, tmp_path, monkeypatch, lldb):
    """Programs stripped of debug information and CFI, in LLDB after the plugin's import: LLDB's
    own bt (every thread's) equals its bt of the unstripped program, PC and function, DRAP-realigned
    frames, a dlopen'ed library and _start (once) included; a core file of the stripped program
    too; the unstripped program, whose CFI covers its functions, is left alone."""
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    # (LLDB 16 runs on this machine: programs of its toolchain; 19 in the trixie root, 21 and 23 in
    # the sid roots.)
    toolchain = {16: "host", 19: "trixie"}.get(lldb, "sid")
    # (gas before 2.46 writes no FDE for a DRAP-realigned function: nothing to unwind it by)
    fixtures = [fx for fx in LLDB_FIXTURES if toolchain == "sid" or fx != "realign"]
    lines, programs = [], {}
    for fixture in fixtures:
        build = corpus.get(toolchain, fixture, "O2-nofp")
        orig, strp, _debug = _stripped(build, tmp_path / fixture)
        programs[fixture] = strp
        lines += _lldb_stop(orig, fixture, "orig-" + fixture) + _lldb_stop(strp, fixture, "strp-" + fixture)
    # A core of the stripped program (GDB writes it), opened after its side file is in the cache.
    core = tmp_path / "frames.core"
    gcore(toolchain, programs["frames"], core, binds=[tmp_path])
    lines += ["target create %s --core %s" % (programs["frames"], core), "script print('@@ core')", "bt",
              "script print('@@ end-core')", "target create %s" % corpus.get(toolchain, "frames", "O2-nofp").path,
              "script print('@@ info')", "sframe info --wait", "script print('@@ end-info')"]
    s = run_lldb(lldb, lines, tmp_path, "side%d" % lldb)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "internal error" not in out, out[-4000:]
    blocks = shipped.blocks(s.stdout)
    for fixture in fixtures:
        want, got = _lldb_frames(blocks["orig-" + fixture]), _lldb_frames(blocks["strp-" + fixture])
        assert len(want) >= 3 and _same_stacks(blocks["strp-" + fixture], blocks["orig-" + fixture]), \
            "LLDB %d %s: bt of the stripped program\n%s\nof the unstripped one\n%s" % (
                lldb, fixture, blocks["strp-" + fixture], blocks["orig-" + fixture])
        assert sum(fn == "_start" for _pc, _m, fn in got) <= 1, blocks["strp-" + fixture]
    # (the core was written under GDB: the program's frames are the live run's)
    core_bt = [(pc, fn) for pc, m, fn in _lldb_frames(blocks["core"]) if m == "frames"]
    live_bt = [(pc, fn) for pc, m, fn in _lldb_frames(blocks["strp-frames"]) if m == "frames"]
    assert len(core_bt) >= 5 and core_bt == live_bt, blocks["core"]
    info = blocks["info"]
    assert re.search(r"frames: not attached: its own DWARF CFI covers every function its SFrame does", info), info
    written = len(list((tmp_path / "cfi").rglob("*.debug")))
    assert written >= len(fixtures), written


def _many_functions_c(leaves):
    """C source: a chain of 30 calls down to stop_here, and `leaves` functions besides (the bulk
    of a program's code, as in a real one: what the side file's writer shares among processes)."""
    out = ["volatile int sink;\n__attribute__((noinline)) void stop_here(int x) { sink = x; }\n",
           "__attribute__((noinline)) int c0(int x) { stop_here(x); return x + sink; }\n"]
    out += ["__attribute__((noinline)) int c%d(int x) { return c%d(x + 1) * 3 + sink; }\n" % (i, i - 1)
            for i in range(1, 30)]
    out += ["int g%d(int x) { return (x * %d + (x >> 3)) ^ %d; }\n" % (i, i, i * 7) for i in range(leaves)]
    out.append("int main(int argc, char **argv) { return c29(argc) & 1; }\n")
    return "".join(out)


@pytest.mark.parametrize("lldb", [16, 23])
def test_lldb_side_file_written_by_several_processes(tmp_path, monkeypatch, lldb):
    """A program large enough that the plugin, inside LLDB, shares its side file's analysis
    among forked processes (core.parallel): LLDB's own bt through it equals its bt of the
    unstripped program, nothing is printed but LLDB's own, and the file is the one a single
    process writes, byte for byte."""

    from sframekit.core import parallel
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    (tmp_path / "many.c").write_text(_many_functions_c(12000))
    tc = "host" if lldb == 16 else "sid"
    orig, strp = tmp_path / "orig" / "many", tmp_path / "strp" / "many"
    orig.parent.mkdir()
    strp.parent.mkdir()
    T.run_in(tc, ["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), str(tmp_path / "many.c")],
             binds=[tmp_path], check=True)
    T.run_in(tc, ["objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(orig), str(strp)], binds=[tmp_path],
             check=True)
    image = ElfImage(str(strp))
    lo, hi = SFrameIndex(image.sframe.data, image.sframe.address).text_range()
    assert parallel.workers(hi - lo, writer.CODE_PER_WORKER) >= 2, "one process only: %d bytes of code, %d cores" % (
        hi - lo, len(__import__("os").sched_getaffinity(0)))
    lines = []
    for tag, exe in (("orig", orig), ("strp", strp)):
        lines += ["target create %s" % exe, "breakpoint set -n stop_here", "process launch",
                  "script print('@@ %s')" % tag, "bt", "script print('@@ end-%s')" % tag, "sframe info --wait",
                  "process kill"]
    s = run_lldb(lldb, lines, tmp_path, "many%d" % lldb)
    out = s.stdout + s.stderr
    assert s.returncode == 0 and "Traceback" not in out and "Warning" not in out and "fork" not in out, out[-4000:]
    blocks = shipped.blocks(s.stdout)
    want, got = _lldb_frames(blocks["orig"]), _lldb_frames(blocks["strp"])
    assert len(want) >= 32 and [(pc, fn) for pc, _m, fn in got] == [(pc, fn) for pc, _m, fn in want], blocks["strp"]
    cached = list((tmp_path / "cfi" / "copies").glob("*/*.debug"))
    assert len(cached) == 1, cached
    sidefile.write(str(strp), str(tmp_path / "one.debug"), workers=1)
    assert cached[0].read_bytes() == (tmp_path / "one.debug").read_bytes()


def test_lldb23_frame_variable_and_finish_with_debug_information(corpus, tmp_path, monkeypatch):
    """LLDB 23 takes a side file for a program with debug information too (it carries the
    program's DWARF): `frame variable` in an outer frame and `finish` from frame 0 as with the
    program's own CFI."""
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    b = corpus.get("sid", "frames", "O2-nofp")
    lines = []
    for tag, exe in (("orig", b.path), ("noeh", b.noeh)):
        # (the side file with registers attached before LLDB works out the frames above the stop's)
        lines += ["target create %s" % exe, "breakpoint set -n %s" % LLDB_STOPS["frames"], "process launch",
                  "sframe info --wait", "script print('@@ %s')" % tag, "bt", "up 2", "frame variable",
                  "frame select 0", "finish", "bt 2", "script print('@@ end-%s')" % tag, "process kill", "target delete"]
    s = run_lldb(23, lines, tmp_path, "side23g")
    assert s.returncode == 0 and "@@ end-noeh" in s.stdout, (s.returncode, s.stdout[-5000:], s.stderr[-3000:])
    blocks = shipped.blocks(s.stdout)
    orig, noeh = blocks["orig"], blocks["noeh"]
    assert "(int) x = 5" in orig and "(int) x = 5" in noeh, noeh
    strip = lambda text: re.sub(r"(Process|process) \d+|frames`|/noeh/|script print\('@@ end-\w+'\)", "", text)  # noqa: E731
    assert strip(noeh.split("frame select 0", 1)[1]) == strip(orig.split("frame select 0", 1)[1]), (orig, noeh)


# -- elfutils ---------------------------------------------------------------------------------------

WAITER_C = r"""
#include <unistd.h>
volatile int sink;
__attribute__((noinline)) void inner(int n) { char b[64]; b[n & 7] = n; sink = b[3]; for (;;) { pause(); sink++; } }
__attribute__((noinline)) void middle(int n) { long x[4] = {n, n + 1, n + 2, n + 3}; inner(n + (int)x[2]); sink++; }
__attribute__((noinline)) void outer(int n) { middle(n * 2); sink += n; }
int main(int argc, char **argv) { outer(argc); return sink; }
"""
_EU_FRAME = re.compile(r"^#(\d+)\s+(0x[0-9a-f]+)\s*(\S*)\s+-\s+(\S+)$", re.M)


def _eu_frames(text, program):
    """[(module, program frame's symbol or None)] of `eu-stack -m` (libc names vary with the
    debug-info path: only the program's own are compared)."""
    frames = [(mod.rpartition("/")[2], sym) for _n, _pc, sym, mod in _EU_FRAME.findall(text)]
    return [(mod, sym if mod == program else None) for mod, sym in frames]


def test_eu_stack_with_the_side_file(tmp_path):
    """eu-stack --debuginfo-path on a running process and on a core of a program stripped of its
    CFI: the frames of eu-stack on the unstripped program (without it, eu-stack stops at frame 1)."""
    import time
    (tmp_path / "w.c").write_text(WAITER_C)
    for d in ("orig", "strp"):
        (tmp_path / d).mkdir()
    orig, strp = tmp_path / "orig" / "waiter", tmp_path / "strp" / "waiter"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-o", str(orig), str(tmp_path / "w.c")],
                   check=True)
    subprocess.run(["objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", str(orig), str(strp)],
                   check=True)
    debug = tmp_path / "debug"
    target = Path(sidefile.build_id_path(str(debug), str(strp)))
    target.parent.mkdir(parents=True)
    sidefile.write(str(strp), str(target))
    procs = [subprocess.Popen([str(p)]) for p in (orig, strp)]
    try:
        time.sleep(0.3)
        texts = {}
        for name, proc, extra in (("orig", procs[0], []), ("side", procs[1], ["--debuginfo-path=%s" % debug]),
                                  ("none", procs[1], [])):
            texts[name] = subprocess.run(["eu-stack", "-m", "-p", str(proc.pid)] + extra, capture_output=True,
                                         text=True).stdout
        for name, proc in (("orig", procs[0]), ("side", procs[1])):
            core = tmp_path / ("%s.core" % name)
            subprocess.run(["gdb", "-nx", "-batch", "-p", str(proc.pid), "-ex", "gcore %s" % core],
                           capture_output=True, check=True)
            exe = orig if name == "orig" else strp
            extra = ["--debuginfo-path=%s" % debug] if name == "side" else []
            texts[name + "-core"] = subprocess.run(["eu-stack", "-m", "--core=%s" % core, "-e", str(exe)] + extra,
                                                   capture_output=True, text=True).stdout
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    want = _eu_frames(texts["orig"], "waiter")
    assert [m for m, _s in want[:6]] == ["libc.so.6"] + ["waiter"] * 4 + ["libc.so.6"], texts["orig"]
    assert [s for _m, s in want[1:5]] == ["inner", "middle", "outer", "main"], texts["orig"]
    assert _eu_frames(texts["side"], "waiter") == want, (texts["side"], texts["orig"])
    assert len(_eu_frames(texts["none"], "waiter")) < len(want), texts["none"]     # the side file is what helps
    assert _eu_frames(texts["side-core"], "waiter") == _eu_frames(texts["orig-core"], "waiter") == want, \
        (texts["side-core"], texts["orig-core"])
