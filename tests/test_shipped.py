"""Binaries as they ship: one program (tests/fixtures/shipped.c) cut the ways distributions and
users ship it, each without `.eh_frame`, against the same shape that keeps it.

Shapes: `strip -s` (no `.symtab`) PIE and non-PIE, `--strip-debug`, `-g`.  The reference is GDB's
own DWARF backtrace of the copy that keeps `.eh_frame` (no plugin), stopped at the same place
(copies of one build at paths of equal length).  Consumers of the copy without it:

* GDB with the plugin (13 on the host's V1 build, 16 on trixie's V2, 18 on sid's V3);
* GDB without the plugin, through the side file `sframe cfi --build-id-dir` writes (found by build ID
  under `set debug-file-directory DIR:/usr/lib/debug`; not for `-g`, whose own debug information
  GDB takes instead, as docs/cli.md says);
* `sframe backtrace` of a core GDB wrote at that stop;
* elfutils' eu-stack on that core through the side file (the host's V1 build).

Every one gives the reference's frames and nothing past the program's entry point: with `strip -s`
nothing names `_start`, which has no SFrame (crt1.o is not assembled with `--gsframe`), and only
the ELF header's entry point says the walk ends there (core.elf.entry).
"""

import json
import os
import re
import shutil
import stat as st
import subprocess
import tempfile
from pathlib import Path

import pytest
from helpers import shipped as S
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.gdb import PLUGIN, Qemu, live_frames, run_gdb, twin_copies
from helpers.lldb import run_lldb

REPO = Path(__file__).resolve().parent.parent
CLI = REPO / "scripts" / "sframe"
PLUGIN_LLDB = REPO / "lldb_plugin"
CASES = [("gdb13", "host"), ("gdb16", "trixie"), ("gdb18", "sid"), ("multiarch", "sid-aarch64"),
         ("multiarch", "sid-s390x")]


def _debug_dirs(work, shape):
    """GDB's `set debug-file-directory` for a shape: its build-ID directory where it has one."""
    return ["set debug-file-directory %s:/usr/lib/debug" % (work / "debugdir")] if shape == "buildid" else []


@pytest.fixture(scope="module")
def shipped(roots, tmp_path_factory):
    """{toolchain: work directory} with every shape built (under /tmp, seen inside the roots)."""
    return {toolchain: S.build(toolchain, tmp_path_factory.mktemp("shipped-" + toolchain), S.SHAPES)
            for _gdb, toolchain in CASES}


def _cli_frames(toolchain, core, prog, work):
    """`sframe backtrace CORE --json` run in the toolchain's root (its C library): the PCs."""
    proc = T.run_in(toolchain, ["/usr/bin/python3", str(CLI), "backtrace", str(core), "--exe", str(prog), "--json"],
                    cwd=work, check=True)
    doc = json.loads(proc.stdout)
    return [f["pc"] for f in doc["threads"][0]["frames"]], proc.stdout


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
@pytest.mark.parametrize("shape", S.SHAPES)
def test_shipped_shapes_unwind_as_dwarf(shipped, gdb, toolchain, shape):
    work = shipped[toolchain] / shape
    ref, noeh = work / "ref" / "prog", work / "noeh" / "prog"
    tc = T.toolchain(toolchain)
    core = None if tc.cross else work / "core"         # (qemu-user's gdbstub writes no core)
    dirs = _debug_dirs(work, shape)
    out = S.run_sessions(gdb, tc, work, (ref, "ref", {"before": dirs}),
                        (noeh, "plugin", {"core": core, "before": dirs, "plugin": True}))
    want = S.pcs(out.frames("ref"), relocated=tc.cross)
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    got = S.pcs(out.frames("plugin"), relocated=tc.cross)
    assert got == want, "%s %s %s: GDB with the plugin\n%s\nDWARF of the copy with .eh_frame\n%s" % (
        gdb, toolchain, shape, S.hex_pcs(got), S.hex_pcs(want))

    # (the stack's own frames: GDB's tail-call frames left out)
    stack = S.pcs(out.frames("ref"), S.tailcalls(out, "ref"))
    if core is not None:
        cli, text = _cli_frames(toolchain, core, noeh, work)
        assert cli == stack, "sframe backtrace of the core\n%s\nDWARF\n%s" % (text, [hex(p) for p in stack])

    if shape == "g":
        return
    side = work / "side"
    target = noeh.parent / "libship.so" if shape in S.LIBRARY_SHAPES else noeh
    made = T.run_in(toolchain, ["/usr/bin/python3", str(CLI), "cfi", str(target), "--build-id-dir", str(side)]
                    + (["--debug-file", str(work / "prog.debug")] if shape == "buildid" else []), cwd=work, check=True)
    if shape in ("debuglink", "buildid"):
        assert "with the debug information of %s" % (work / ("noeh" if shape == "debuglink" else ".") / "prog.debug") \
            in made.stdout.replace("/./", "/"), made.stdout
    dirs = "%s:%s/debugdir:/usr/lib/debug" % (side, work)
    out = S.run_sessions(gdb, tc, work, (noeh, "side", {"before": ["set debug-file-directory %s" % dirs]}))
    got = S.pcs(out.frames("side"), relocated=tc.cross)
    assert got == want, "%s %s %s: GDB through the side file, no plugin\n%s\nDWARF\n%s" % (
        gdb, toolchain, shape, S.hex_pcs(got), S.hex_pcs(want))
    if shape in ("debuglink", "buildid"):
        # (the side file carries the debug file's contents: GDB still names the functions and shows
        # their arguments)
        assert "descend" in {f.name for f in out.frames("side")}, out.frames("side")
    if toolchain == "host":
        eu = subprocess.run(["eu-stack", "--core", str(core), "--executable", str(noeh), "--debuginfo-path", dirs],
                            capture_output=True, text=True, timeout=120)
        frames = [int(m.group(1), 16) for m in re.finditer(r"^#\d+\s+(0x[0-9a-f]+)", eu.stdout, re.M)]
        assert frames == stack, "eu-stack through the side file\n%s%s\nDWARF\n%s" % (
            eu.stdout, eu.stderr, [hex(p) for p in stack])


def test_entry_code_of_every_toolchain_is_found(shipped):
    """core.elf.entry, on the `strip -s` builds: the entry code's extent ends right after its last
    call (the trap after it included), equal to `_start`'s symbol in the build that keeps it."""
    from sframekit.core.arch import abi as abimod
    from sframekit.core.elf import entry as entrymod
    from sframekit.core.elf.image import ElfImage
    for _gdb, toolchain in CASES:
        for shape in ("strip-s", "strip-s-nopie"):
            work = shipped[toolchain]
            stripped = work / shape / "noeh" / "prog"
            read = entrymod.file_reader(str(stripped))
            entry = entrymod.program_entry(read)
            image = ElfImage(str(work / ("build-" + shape)))
            start = image.function_at(image.entry)
            assert entry == image.entry and start is not None and start[2] == "_start"
            abi = {"x86_64": abimod.AMD64, "aarch64": abimod.AARCH64_LE, "s390x": abimod.S390X}[T.toolchain(toolchain).arch]
            got = entrymod.entry_extent(abi, entry, entrymod.code_reader(read))
            # (s390x's `_start` has a symbol of size 0: it ends where the next function begins)
            end = start[0] + start[1] if start[1] else min(a for a, _n, _name in image._symtab() if a > entry)
            # (the rest, at most alignment padding)
            assert got is not None and got[0] == entry and end - 32 <= got[1] <= end, (toolchain, shape, got, start, end)
    # A shared library (libc asks for an interpreter and has an entry point) is no program.
    assert entrymod.program_entry(entrymod.file_reader("/lib/x86_64-linux-gnu/libc.so.6")) is None


# -- LLDB: its own bt through the side file, and `sframe bt` ---------------------------------------

# (the last: every module's side file with registers written behind, none at once however small:
# LLDB 23's first stop through the stacks' functions as .eh_frame, on every shape)
LLDB_CASES = [(16, "host", False), (19, "trixie", False), (21, "sid", False), (23, "sid", False), (23, "sid", True)]


@pytest.mark.parametrize("lldb,toolchain,behind", LLDB_CASES,
                         ids=["lldb%d-%s%s" % (c[0], c[1], "-behind" if c[2] else "") for c in LLDB_CASES])
def test_shipped_shapes_in_lldb(shipped, tmp_path, monkeypatch, lldb, toolchain, behind):
    """LLDB's own bt after the plugin's import, on each shape without `.eh_frame`, equals its bt of
    the same shape with it (PCs; `_start` at most once), and so does `sframe bt`; where an LLDB
    cannot take a side file (LLDB 16 to 22 and a program with debug information), `sframe info`
    says why.  The shapes are copies of one build (one build ID: `strip -s`, `--strip-debug`, `-g`),
    debugged one after the other in one session, then again in another session in the other order
    (the cache kept): each gets its own side file.  Where LLDB unwound the module at the first stop
    before the side file (written then) was attached, `sframe info` says so, and the next session
    is right.  Last, the plugin imported after the target is created (LLDB 16 takes a side file
    added to a module without symbols only when added twice)."""
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi"))
    if behind:
        monkeypatch.setenv("SFRAME_LLDB_AT_ONCE", "0")
    work = shipped[toolchain]
    first = ("strip-s", "strip-debug", "g", "strip-s-nopie", "lib-linked", "lib-dlopen", "debuglink")
    second = ("strip-s-nopie", "strip-debug", "strip-s")
    sessions = []
    for k, order in enumerate((first, second)):
        lines = []
        for shape in order:
            lines += S.lldb_stop(work / shape / "ref" / "prog", shape, [("ref", S.OWN)])
            lines += S.lldb_stop(work / shape / "noeh" / "prog", shape,
                                [("own", "bt\n" + S.OWN), ("sbt", "sframe bt"), ("info", "sframe info --wait")])
        sessions.append((order, run_lldb(lldb, lines, tmp_path, "shipped%d-%d" % (lldb, k))))
    late = ["target create %s" % (work / "strip-s" / "noeh" / "prog"), "command script import %s" % PLUGIN_LLDB,
            "breakpoint set -n getppid", "process launch", "script print('@@ own-late')", "bt", S.OWN,
            "script print('@@ info-late')", "sframe info --wait", "script print('@@ end')", "process kill"]
    monkeypatch.setenv("SFRAME_CFI_CACHE", str(tmp_path / "cfi-late"))
    sessions.append((("late",), run_lldb(lldb, late, tmp_path, "shipped%d-late" % lldb, preamble=False)))
    for k, (order, s) in enumerate(sessions):
        out = s.stdout + s.stderr
        assert s.returncode == 0 and "Traceback" not in out and "internal error" not in out, out[-4000:]
        blocks = S.blocks(s.stdout)
        for shape in order:
            if shape == "late":
                want = S.own_pcs(S.blocks(sessions[0][1].stdout)["ref-strip-s"])
                assert S.own_pcs(blocks["own-late"]) == want, "LLDB %d, imported late\n%s\nwant\n%s" % (
                    lldb, blocks["own-late"], [hex(p) for p in want])
                assert "prog: attached (" in blocks["info-late"], blocks["info-late"]
                continue
            want = S.own_pcs(blocks["ref-" + shape])
            assert len(want) > 20, blocks["ref-" + shape]
            sbt = S.lldb_pcs(blocks["sbt-" + shape])
            assert sbt == want, "LLDB %d %s: sframe bt\n%s\nLLDB's bt with .eh_frame\n%s" % (
                lldb, shape, blocks["sbt-" + shape], blocks["ref-" + shape])
            info = blocks["info-" + shape]
            if shape in ("g", "debuglink") and lldb < 23:
                # (-g: debug information in the program; debuglink: in its separate debug file)
                assert "prog: not attached: LLDB %d drops a module's load addresses" % lldb in info, info
                continue
            module = "libship.so" if shape in S.LIBRARY_SHAPES else "prog"
            if behind and "%s: attached, CFA, RA and FP only" % module in info:
                # (another copy of the build had its entry written, which LLDB found by build ID
                # as it made the module: that copy's .debug_frame is the module's for the session)
                assert shape != order[0] or k > 0, info
            else:
                assert "%s: attached (" % module in info, info
            if shape in S.LIBRARY_SHAPES:
                assert "prog: not attached: its own DWARF CFI covers every function its SFrame does" in info, info
            own = blocks["own-" + shape]
            if k == 0 and "but LLDB %d worked out how to unwind %s before it was there" % (lldb, module) in info:
                # (LLDB unwound the module at the first stop, before the plugin could attach the side
                # file it writes then: said so; the next session takes it as it loads the module)
                assert S.own_pcs(own) != want, info
                print("LLDB %d %s: unwound by LLDB before its side file, said so; right in the next session"
                      % (lldb, shape))
                continue
            assert S.own_pcs(own) == want and own.count("`_start") <= 1, \
                "LLDB %d %s: its own bt after the import\n%s\nits bt with .eh_frame\n%s" % (
                    lldb, shape, own, blocks["ref-" + shape])
    # Each copy of the build got its own side file (the `-g` one only where LLDB takes it).
    # (and the library's, one copy of one build in both library shapes; LLDB 23 the debuglink
    # copy's, which carries its debug file's contents)
    copies = list((tmp_path / "cfi" / "copies").glob("*/*.debug"))
    assert len(copies) == (6 if lldb >= 23 else 4), copies
    if lldb >= 23:
        out = sessions[0][1].stdout
        assert re.search(r"(?s)@@ own-debuglink.*descend\(n=", out), "LLDB 23: no arguments through the side file"


# -- the side-file cache --------------------------------------------------------------------------

def test_cache_entries_are_checked_and_private(shipped, tmp_path):
    """core.elf.sidecache: copies of one build (`strip -s`, `--strip-debug`: one build ID) each get
    their own entry, in either order; a truncated, a corrupted, a forged (another build's side file
    in its place) entry and an unreadable record are written again, saying why; the cache is the
    user's alone (0700 directories, 0600 files); a cache that cannot be written is one line."""
    from sframekit.core.elf import sidecache
    work = shipped["host"]
    a, b = str(work / "strip-s" / "noeh" / "prog"), str(work / "strip-debug" / "noeh" / "prog")
    other = str(work / "strip-s-nopie" / "noeh" / "prog")          # another build
    cache = tmp_path / "cfi"
    made = {}
    for prog in (b, a, b, a):
        got = sidecache.side_file(prog, str(cache))
        assert got.path is not None and not got.redone, got
        made.setdefault(prog, got.path)
        assert got.path == made[prog]
    assert made[a] != made[b] and open(made[a], "rb").read() != open(made[b], "rb").read()
    # The search-path entry is the copy's attached last; each entry is checked before it is used.
    assert sidecache.is_entry_of(sidecache.search_entry(str(cache), _build_id(a)), sidecache.side_file(a, str(cache)))
    assert sidecache.side_file(a, str(cache)).why == "cached"

    def spoil(how):
        path = made[a]
        data = open(path, "rb").read()
        if how == "truncated":
            data = data[:len(data) // 2]
        elif how == "corrupted":
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        elif how == "forged":
            data = open(sidecache.side_file(other, str(cache)).path, "rb").read()
        os.unlink(path)
        with open(path, "wb") as fh:
            fh.write(data)
    for how in ("truncated", "corrupted", "forged"):
        spoil(how)
        got = sidecache.side_file(a, str(cache))
        assert got.written and "not the file written" in got.redone, (how, got)
        assert sidecache.side_file(a, str(cache)).why == "cached"
    # A forged entry whose record was forged too: its build ID and layout give it away.
    meta = made[a][:-len(".debug")] + ".json"
    forged = sidecache.side_file(other, str(cache)).path
    os.unlink(made[a])
    os.link(forged, made[a])
    size, digest = sidecache.file_digest(forged)
    text = open(meta).read().replace('"sha256"', '"was"')
    record = json.loads(text)
    record.update(size=size, sha256=digest)
    open(meta, "w").write(json.dumps(record))
    got = sidecache.side_file(a, str(cache))
    assert got.written and "build ID" in got.redone, got
    open(meta, "w").write("{not json")
    got = sidecache.side_file(a, str(cache))
    assert got.written and "record cannot be read" in got.redone, got
    # Modes: the user's alone.
    for root, dirs, files in os.walk(cache):
        for d in dirs:
            assert st.S_IMODE(os.stat(os.path.join(root, d)).st_mode) == 0o700, os.path.join(root, d)
        for f in files:
            assert st.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600, os.path.join(root, f)
    assert st.S_IMODE(os.stat(cache).st_mode) == 0o700
    # A shared cache directory is made private; a missing one is created so.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    assert sidecache.side_file(a, str(shared)).path is not None
    assert st.S_IMODE(os.stat(shared).st_mode) == 0o700
    missing = tmp_path / "not" / "yet"
    assert sidecache.side_file(a, str(missing)).path is not None and st.S_IMODE(os.stat(missing).st_mode) == 0o700
    # One that cannot be written: a plain line, no entry.
    blocked = tmp_path / "file-in-the-way"
    blocked.write_text("")
    got = sidecache.side_file(a, str(blocked / "cfi"))
    assert got.path is None and got.why.startswith("cannot create the side-file cache %s" % (blocked / "cfi")), got
    assert "\n" not in got.why and "internal error" not in got.why
    # Another user's cache directory is not used; one this user cannot write into is one line.
    # (Run as `nobody`: root writes anywhere.)
    shared_tmp = tempfile.mkdtemp(prefix="sframe-cache-")
    try:
        os.chmod(shared_tmp, 0o755)
        prog = os.path.join(shared_tmp, "prog")
        shutil.copy(a, prog)
        os.chmod(prog, 0o755)
        os.mkdir(os.path.join(shared_tmp, "roots"), 0o755)             # root's: nobody may not write
        code = ("import sys, types; pkg = types.ModuleType('sframekit'); pkg.__path__ = [%r]; "
                "sys.modules['sframekit'] = pkg; from sframekit.core.elf import sidecache; "
                "print(sidecache.side_file(%r, sys.argv[1]).why)" % (str(REPO), prog))
        for where, want in ((shared_tmp + "/roots", "belongs to another user"),
                            (shared_tmp + "/roots/cfi", "cannot create the side-file cache")):
            proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                                   "-c", code, where], capture_output=True, text=True, timeout=60)
            lines = proc.stdout.splitlines()
            assert proc.returncode == 0 and len(lines) == 1 and want in lines[0], (where, proc.stdout, proc.stderr)
            assert not os.listdir(shared_tmp + "/roots")
    finally:
        shutil.rmtree(shared_tmp, ignore_errors=True)


def _build_id(path):
    from sframekit.core.elf.sidecache import copy_of
    return copy_of(path, None).build_id


# -- a real program, as distributions ship it -----------------------------------------------------

# After the first instruction: a breakpoint at a function of a program without symbols, by its
# address in the build that has them and the entry point the process started at (the program's
# load bias: native PIEs, and qemu-user's placing).
_BREAK_BY_ENTRY = """python
import re
_auxv = gdb.execute("info auxv", to_string=True)
_entry = int(re.search(r"AT_ENTRY\\s.*?(0x[0-9a-fA-F]+)", _auxv).group(1), 16)
gdb.execute("break *%#x" % (_entry - E_ENTRY + ADDRESS))
end"""


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
def test_real_program_stripped(roots, tmp_path, gdb, toolchain):
    """Lua (tests/helpers/realprogs.py, built from Debian's source package) cut `strip -s` without
    `.eh_frame`, stopped deep in its parser: GDB with the plugin gives the frames GDB's DWARF
    unwinder gives on the `strip -s` copy that keeps `.eh_frame`, to `_start` and no further; GDB
    without the plugin, through the side file, too."""
    from helpers import realprogs as RP

    from sframekit.core.elf.image import ElfImage
    tc = T.toolchain(toolchain)
    program = RP.PROGRAMS["lua"]
    work = program.deep
    built = RP.build(toolchain, "lua")
    for kind in ("ref", "noeh"):
        (tmp_path / kind).mkdir()
        removed = ["-R", ".eh_frame", "-R", ".eh_frame_hdr"] if kind == "noeh" else []
        T.run_in(tc, [tc.tool("strip"), "-s", *removed, "-o", str(tmp_path / kind / "lua"), str(built)],
                 binds=[built.parent, tmp_path], check=True)
    for fname, text in work.files:
        (tmp_path / fname).write_text(text)
    args = [a.replace("{dir}", str(tmp_path)) for a in work.args]
    image = ElfImage(str(built))
    stop = _BREAK_BY_ENTRY.replace("E_ENTRY", "%#x" % image.entry).replace("ADDRESS", "%#x" % image.resolve(work.stop))

    def session(prog, label, before=(), plugin=False, qemu=None):
        lines = ["set startup-with-shell off", "set backtrace past-main on", *before]
        if plugin:
            lines.append("source %s" % PLUGIN)
        lines.append("file %s" % prog)
        if qemu is not None:
            lines += ["set sysroot %s" % tc.sysroot, "target remote :%d" % qemu.port]
        else:
            lines.append("starti %s" % " ".join(args))
        lines += [stop, "ignore $bpnum %d" % work.ignore, "continue",
                  "frames-dump %s" % label, "kill", "delete"]
        return lines

    def run(*sessions):
        qemus, lines = [], []
        try:
            for prog, label, options in sessions:
                q = Qemu(toolchain, prog, args) if tc.cross else None
                if q is not None:
                    qemus.append(q)
                lines += session(prog, label, qemu=q, **options)
            return run_gdb(gdb, lines, tmp_path, timeout=900)
        finally:
            for q in qemus:
                q.close()
    out = run((tmp_path / "ref" / "lua", "ref", {}), (tmp_path / "noeh" / "lua", "plugin", {"plugin": True}))
    want = S.pcs(out.frames("ref"), relocated=tc.cross)
    got = S.pcs(out.frames("plugin"), relocated=tc.cross)
    assert "Traceback" not in out and len(want) >= work.depth, out[-4000:]
    assert got == want, "%s %s: Lua strip -s with the plugin\n%s\nDWARF, strip -s with .eh_frame\n%s" % (
        gdb, toolchain, S.hex_pcs(got), S.hex_pcs(want))
    side = tmp_path / "side"
    T.run_in(tc, ["/usr/bin/python3", str(CLI), "cfi", str(tmp_path / "noeh" / "lua"), "--build-id-dir", str(side)],
             cwd=tmp_path, check=True)
    out = run((tmp_path / "noeh" / "lua", "side", {"before": ["set debug-file-directory %s:/usr/lib/debug" % side]}))
    got = S.pcs(out.frames("side"), relocated=tc.cross)
    assert got == want, "%s %s: Lua strip -s through the side file\n%s\nDWARF\n%s" % (gdb, toolchain, S.hex_pcs(got), S.hex_pcs(want))


# -- the frame-pointer fallback -------------------------------------------------------------------

@pytest.mark.parametrize("toolchain", ["host", "trixie"])
def test_fp_fallback_stops_at_a_realigned_frame(corpus, tmp_path, toolchain):
    """`sframe backtrace --fp-fallback` (as `sframe bt -f`) through a DRAP-realigned function that
    has no SFrame (gas before 2.46 writes no FDE for it) and no CFI: its frame pointer is no frame
    record at its CFA, so the walk stops there, saying why, after the frames DWARF gives too
    (before: a wrong CFA, then a false outermost frame)."""
    build = corpus.get(toolchain, "realign", "O2-nofp")
    orig, noeh = twin_copies(build, tmp_path)
    core = tmp_path / "core"
    # (the same stack in both: copies of one build at paths of equal length, started the same way)
    out = run_gdb("gdb13" if toolchain == "host" else "gdb16",
                  ["set startup-with-shell off", "file %s" % orig, "break stop_here", "run", "frames-dump dwarf", "kill",
                   "file %s" % noeh, "run", "generate-core-file %s" % core, "kill"], tmp_path)
    want = [f.pc for f in out.frames("dwarf")]
    assert [f.name for f in out.frames("dwarf")][:3] == ["stop_here", "realigned_drap", "main"], out.frames("dwarf")
    proc = T.run_in(toolchain, ["/usr/bin/python3", str(CLI), "backtrace", str(core), "--exe", str(noeh),
                                "--fp-fallback", "--json"], cwd=tmp_path, check=True)
    doc = json.loads(proc.stdout)["threads"][0]
    got = [f["pc"] for f in doc["frames"]]
    assert got == want[:2], (proc.stdout, [hex(p) for p in want])
    assert doc["stop"]["reason"] == "FP_UNTRUSTED" and "realigns its stack first" in doc["stop"]["text"], doc["stop"]


# -- a running process ----------------------------------------------------------------------------

@pytest.mark.parametrize("toolchain", ["host", "trixie", "sid"])
def test_live_process_of_a_stripped_program(shipped, tmp_path, toolchain):
    """`sframe backtrace -p` of the `strip -s` program without `.eh_frame`, stopped in `leaf`
    (it stops itself): the frames GDB's DWARF unwinder gives, attached to the copy that keeps
    `.eh_frame` stopped at the same place (both started without address randomisation, at paths
    of equal length: the same stack), down to `_start` and no further."""
    work = shipped[toolchain] / "strip-s"
    with S.stopped(toolchain, work) as pids:
        mine = sframe("backtrace", "-p", pids["noeh"], "--json")
        assert mine.returncode == 0 and mine.stderr == "", (mine.returncode, mine.stderr)
        doc = json.loads(mine.stdout)["threads"][0]
        ref = next(iter(live_frames(toolchain, pids["ref"]).values()))
    want = [f["pc"] for f in ref["frames"] if f["type"] not in ("inline", "tailcall")]
    got = [f["pc"] for f in doc["frames"]]
    assert got == want and doc["stop"]["reason"] == "OUTERMOST", (mine.stdout, [hex(p) for p in want])
    assert "entry point" in doc["stop"]["text"], doc["stop"]


@pytest.mark.parametrize("gdb,toolchain", CASES[:3], ids=["%s-%s" % c for c in CASES[:3]])
def test_stopped_in_the_entry_code(shipped, tmp_path, gdb, toolchain):
    """Stopped at the entry point's first instruction of the `strip -s` program without
    `.eh_frame`, and one instruction on: GDB with the plugin shows that frame alone (GDB 13, which
    cannot end a walk at a frame with no saved PC, through the stand-in caller the plugin answers
    with that frame's own id: looked up as a caller, at PC - 1, it would be no entry code)."""
    work = shipped[toolchain] / "strip-s"
    entry = _BREAK_BY_ENTRY.replace("E_ENTRY", "0").replace("ADDRESS", "0")
    out = run_gdb(gdb, ["set startup-with-shell off", "source %s" % PLUGIN, "file %s" % (work / "noeh" / "prog"),
                        "starti", entry, "continue", "frames-dump first", "stepi", "frames-dump second", "kill"],
                  tmp_path)
    for label in ("first", "second"):
        frames = out.frames(label)
        assert len(frames) == 1, (label, frames, out[-3000:])
