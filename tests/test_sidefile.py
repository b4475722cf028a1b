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
import subprocess
from pathlib import Path

import pytest
import toolchains as T
from test_gdb import STOPS, Out, Qemu, run_gdb

from sframekit.core.arch import abi as abimod
from sframekit.core.elf import sidefile
from sframekit.core.elf.image import ElfImage
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
def test_cfi_says_what_sframe_says(corpus, tmp_path, toolchain):
    import objdump_moves as OM
    tc = T.toolchain(toolchain)
    paths = set()
    for b in corpus.select(toolchain=toolchain):
        paths.add(b.noeh)
        if b.noeh_lib is not None:
            paths.add(b.noeh_lib)
    checked = fdes = 0
    for k, path in enumerate(sorted(paths)):
        out = tmp_path / ("%d.debug" % k)
        made = sidefile.write(str(path), str(out))
        assert made.build_id is not None and made.functions > 0 and made.skipped == 0, made
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
        names = {n: abi.regname(n) for n in abi.callee_saved + (abi.sp, abi.fp)}
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


def _regs(out, label):
    got = {}
    for line in out.splitlines():
        if line.startswith("REGS %s " % label):
            level, *pairs = line.split()[2:]
            got[int(level)] = dict(p.split("=", 1) for p in pairs)
    return got


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

        def placed(value, kind):
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
        want, have = _regs(out, "dwarf"), _regs(out, "side")
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
