"""Side files served by debuginfod: SFrame turned into backtraces for clients with no plugin.

The program of tests/fixtures/shipped.c from every toolchain, cut as it ships (`strip -s`; a
`strip -s` shared library; a `strip -s` program whose debug information is in a separate file, as
`-dbgsym` packages carry it), each with and without `.eh_frame`.  `sframe cfi` writes the side
files of the whole tree (one command, every toolchain's copies) into a build-ID directory;
elfutils' own `debuginfod` (Debian's package, started here on a free port and stopped after; 0.188
has no option to listen on one address, the clients use the loopback one) serves it.  Then,
without the plugin and with nothing on the machine but the program:

- GDB 13, 16, 18 (and gdb-multiarch on the AArch64 and s390x builds under qemu-user), told the
  server's URL, download the side file and give the frames GDB's DWARF unwinder gives on the copy
  that keeps `.eh_frame`; without the server they do not;
- LLDB 19, 21 and 23 through their debuginfod symbol locator: the same for LLDB's `bt` (LLDB 19
  repeats the outermost frame where the file carries debug information); LLDB 16 has no locator;
- elfutils' eu-stack, live (`-p`) and on a core (`--core`), with `DEBUGINFOD_URLS`;
- the `-dbgsym` case (`sframe cfi PROG --debug-file DBG`: one file with the debug information and
  the CFI): GDB's `bt full` (each frame's function, arguments, locals, file and line) and LLDB's
  `frame variable` in outer frames as with the real debug file and `.eh_frame`.

Every client gets its own empty debuginfod cache (a stale file of an earlier run, with the same
build ID, would otherwise be taken).
"""

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import shipped as S
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.gdb import free_port
from helpers.lldb import run_lldb

GDB_CASES = [("gdb13", "host"), ("gdb16", "trixie"), ("gdb18", "sid"), ("multiarch", "sid-aarch64"),
             ("multiarch", "sid-s390x")]
SHAPES = ("strip-s", "lib-linked", "buildid")
SERVED = ("strip-s", "lib-linked")      # (buildid: the -dbgsym case, its own test)
LLDBS = ((19, "trixie"), (21, "sid"), (23, "sid"))     # (LLDB, the toolchain whose builds its system runs)
# GDB's word that it took the file from the server (GDB 16 and later give its size).
DOWNLOADED = re.compile(r"^Downloading (\S+ \S+ )?separate debug info for ", re.M)


class Server:
    """elfutils' debuginfod over a directory (-F: its ELF files), on a free port."""

    def __init__(self, directory, work):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = Path(work) / "debuginfod.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["debuginfod", "-F", "-t", "1", "-p", str(self.port), "-d",
                                          str(Path(work) / "debuginfod.sqlite"), str(directory)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def get(self, build_id):
        try:
            with urllib.request.urlopen("%s/buildid/%s/debuginfo" % (self.url, build_id), timeout=10) as r:
                return r.read()
        except (urllib.error.URLError, OSError):
            return None

    def wait_for(self, entries, timeout=120):
        """Until the server gives each {build ID: file} as that file's bytes."""
        deadline = time.monotonic() + timeout
        left = dict(entries)
        while left:
            assert self.proc.poll() is None, self.log.read_text()
            left = {b: f for b, f in left.items() if self.get(b) != Path(f).read_bytes()}
            if left:
                assert time.monotonic() < deadline, "not served: %s\n%s" % (left, self.log.read_text()[-3000:])
                time.sleep(0.5)

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def served(roots, tmp_path_factory):
    """(works {toolchain: directory}, server, JSON of the tree's `sframe cfi`) with every side file
    the server gives."""
    works = {tc: S.build(tc, tmp_path_factory.mktemp("served-" + tc), SHAPES) for _gdb, tc in GDB_CASES}
    side = tmp_path_factory.mktemp("buildids")
    made = sframe("cfi", *works.values(), "--build-id-dir", side, "-j", "2", "--json")
    assert made.returncode == 0 and not made.stderr, (made.stdout[-3000:], made.stderr)
    doc = json.loads(made.stdout)
    # The -dbgsym case: the debug file and the CFI in one file (it replaces the entry the tree
    # command wrote for that build, which it recorded as its own).
    for work in works.values():
        got = sframe("cfi", work / "buildid" / "noeh" / "prog", "--debug-file", work / "buildid" / "prog.debug",
                     "--build-id-dir", side)
        assert got.returncode == 0 and "with the debug information of " in got.stdout, (got.stdout, got.stderr)
    entries = {f["build_id"]: f["entry"] for f in doc["files"] if f["outcome"] == "written"}
    server = Server(side, tmp_path_factory.mktemp("debuginfod"))
    try:
        server.wait_for(entries)
        yield works, server, doc
    finally:
        server.close()


def test_the_tree_is_written_once_per_build(served):
    """Every copy of a build (the ones that keep `.eh_frame`, the ones without, the `-g` build they
    were cut from; the strip-s and buildid shapes are one build) shares one entry, written from a
    copy without `.eh_frame`, for every function (the copies' CFI differs); the debug file the
    buildid shape ships is no program; a second run writes nothing."""
    works, _server, doc = served
    by_path = {f["path"]: f for f in doc["files"]}
    for work in works.values():
        for shape in SHAPES:
            for kind in ("ref", "noeh"):
                copy = work / shape / kind / ("libship.so" if shape == "lib-linked" else "prog")
                mine = by_path[str(copy)]
                if mine["outcome"] == "same build":
                    mine = by_path[mine["why"]]
                assert mine["outcome"] == "written" and mine["functions"] > 0 and mine["skipped"] == 0, mine
                assert "/noeh/" in mine["path"], mine
        assert by_path[str(work / "buildid" / "prog.debug")]["outcome"] == "no SFrame"
    written = [f for f in doc["files"] if f["outcome"] == "written"]
    assert len({f["build_id"] for f in written}) == len(written)
    again = sframe("cfi", *works.values(), "--build-id-dir", Path(doc["directory"]), "--json")
    counts = json.loads(again.stdout)["counts"]
    # (the buildid shape's entry carries its debug file since `sframe cfi --debug-file`: it keeps it)
    assert again.returncode == 0 and counts["written"] == 0 and counts["up to date"] == len(written), \
        again.stdout[-2000:]


def _env(tmp_path, server, name):
    return {"DEBUGINFOD_URLS": server.url, "DEBUGINFOD_CACHE_PATH": str(tmp_path / ("cache-" + name))}


@pytest.mark.parametrize("gdb,toolchain", GDB_CASES, ids=["%s-%s" % c for c in GDB_CASES])
@pytest.mark.parametrize("shape", SERVED)
def test_gdb_without_the_plugin(served, tmp_path, gdb, toolchain, shape):
    works, server, _doc = served
    work = works[toolchain] / shape
    tc = T.toolchain(toolchain)
    ref, noeh = work / "ref" / "prog", work / "noeh" / "prog"
    off, on = ["set debuginfod enabled off"], ["set debuginfod enabled on", "set debuginfod urls %s" % server.url]
    out = S.run_sessions(gdb, tc, tmp_path, (ref, "ref", {"before": off}), (noeh, "alone", {"before": off}),
                         (noeh, "served", {"before": on}), env=_env(tmp_path, server, gdb))
    want = S.pcs(out.frames("ref"), relocated=tc.cross)
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    assert DOWNLOADED.search(out), out[-4000:]
    # (the strip-s and buildid shapes are one build, whose entry carries the debug file: GDB makes
    # tail-call frames from its call-site information, which no unwinder of the stack shows)
    got = S.pcs(out.frames("served"), S.tailcalls(out, "served"), relocated=tc.cross)
    assert got == want, "%s %s %s: through debuginfod\n%s\nDWARF with .eh_frame\n%s" % (
        gdb, toolchain, shape, S.hex_pcs(got), S.hex_pcs(want))
    if shape == "strip-s":
        # (and the server is what makes it right: without it GDB's own analysis of the code does
        # not get through the realigned frame; the library's frames it sometimes gets right)
        assert S.pcs(out.frames("alone"), relocated=tc.cross) != want


def _locals_lines(out, label):
    """GDB's `bt full` after the label's marker: every frame's line, and the locals of the
    program's own (the C library's hold values that differ from run to run: pointer guards)."""
    m = re.search(r"^@@ %s\n(.*?)^@@ end\n" % re.escape(label), out, re.M | re.S)
    assert m, out[-3000:]
    frames = re.split(r"^(?=#\d+ )", m.group(1), flags=re.M)
    text = "".join(f if "shipped.c:" in f.split("\n", 1)[0] else f.split("\n", 1)[0] + "\n" for f in frames)
    return re.sub(r"^\s+local = .*\n", "", text, flags=re.M)      # (realigned's array: uninitialised)


@pytest.mark.parametrize("gdb,toolchain", GDB_CASES, ids=["%s-%s" % c for c in GDB_CASES])
def test_gdb_dbgsym_case(served, tmp_path, gdb, toolchain):
    """A program whose debug file a distribution ships: the one file the server gives (its debug
    information and the CFI) shows GDB each frame's function, arguments, locals, file and line, as
    the real debug file with `.eh_frame` does."""
    works, server, _doc = served
    work = works[toolchain] / "buildid"
    tc = T.toolchain(toolchain)
    full = ["echo @@ %s\\n", "bt full", "echo @@ end\\n"]
    real = ["set debuginfod enabled off", "set debug-file-directory %s:/usr/lib/debug" % (work / "debugdir")]
    on = ["set debug-file-directory /usr/lib/debug", "set debuginfod enabled on", "set debuginfod urls %s" % server.url]
    out = S.run_sessions(gdb, tc, tmp_path,
                         (work / "ref" / "prog", "ref", {"before": real, "after": [c.replace("%s", "ref") for c in full]}),
                         (work / "noeh" / "prog", "served", {"before": on, "after": [c.replace("%s", "served") for c in full]}),
                         env=_env(tmp_path, server, gdb))
    assert DOWNLOADED.search(out), out[-4000:]
    want, got = _locals_lines(out, "ref"), _locals_lines(out, "served")
    assert "descend (n=" in want and "pad = " in want and "shipped.c:" in want, want
    # The two programs' paths differ in length ("ref", "noeh"), and so, by the kernel's 16-byte
    # alignment of the strings it puts on the stack, can the two runs' stack addresses (qemu-user
    # may place them apart too): stack addresses are compared as such, every other value exactly.
    stack = r"0x[0-9a-f]+" if tc.cross else r"0x7ff[0-9a-f]{9}\b"
    want, got = (re.sub(stack, "0xSTACK", t) for t in (want, got))
    assert got == want, "%s %s: bt full through debuginfod\n%s\nwith the real debug file\n%s" % (gdb, toolchain, got, want)


# The variables of the third frame of `descend` from the top (an outer frame), as LLDB shows them.
_DESCEND_VARIABLES = ("script print([str(f.GetVariables(True, True, False, True)) for f in "
                      "lldb.debugger.GetSelectedTarget().GetProcess().GetSelectedThread() "
                      "if f.GetFunctionName() == 'descend'][2])")


def _lldb_lines(server, cache, work, shape, dbgsym=False):
    ref, noeh = work / shape / "ref" / "prog", work / shape / "noeh" / "prog"
    look = [("own", S.OWN)] + ([("vars", _DESCEND_VARIABLES)] if dbgsym else [])
    before = ["settings set target.debug-file-search-paths %s" % (work / shape / "debugdir")] if dbgsym else []
    return (before + S.lldb_stop(ref, "ref", look)
            + ["settings clear target.debug-file-search-paths",
               "settings set plugin.symbol-locator.debuginfod.server-urls %s" % server.url,
               "settings set plugin.symbol-locator.debuginfod.cache-path %s" % cache]
            + S.lldb_stop(noeh, "served", look))


@pytest.mark.parametrize("lldb,toolchain", LLDBS, ids=["lldb%d" % c[0] for c in LLDBS])
@pytest.mark.parametrize("shape", SHAPES)
def test_lldb_without_the_plugin(served, tmp_path, lldb, toolchain, shape):
    """LLDB's own `bt` (and for the -dbgsym case, an outer frame's variables) through the
    side file its debuginfod symbol locator downloads, as on the copy that keeps `.eh_frame`."""
    works, server, _doc = served
    lines = _lldb_lines(server, tmp_path / "cache", works[toolchain], shape, dbgsym=shape == "buildid")
    s = run_lldb(lldb, lines, tmp_path, "served%d-%s" % (lldb, shape), preamble=False)
    blocks = S.blocks(s.stdout)
    want = S.own_pcs(blocks["own-ref"])
    assert len(want) > 20, s.stdout[-3000:] + s.stderr[-3000:]
    got = S.own_pcs(blocks["own-served"])
    if lldb == 19 and shape == "buildid" and got == want + want[-1:]:
        # LLDB 19, with the debug information the side file carries, shows the outermost frame
        # (`_start`, whose row says the return address is undefined) twice; LLDB 21 and 23 stop
        # there with the same file, as LLDB 19 does with it less the debug information.
        got = got[:-1]
    assert got == want, "LLDB %d %s through debuginfod\n%s\nwith .eh_frame\n%s" % (
        lldb, shape, [hex(p) for p in got], [hex(p) for p in want])
    if shape == "buildid":
        assert "pad = " in blocks["vars-ref"], blocks["vars-ref"]
        assert blocks["vars-served"] == blocks["vars-ref"], (blocks["vars-served"], blocks["vars-ref"])


def _eu_frames(text):
    return [int(m.group(1), 16) for m in re.finditer(r"^#\d+\s+(0x[0-9a-f]+)", text, re.M)]


@pytest.mark.parametrize("shape", SERVED)
def test_eu_stack_without_the_plugin(served, tmp_path, shape):
    """eu-stack, live and on a core, with DEBUGINFOD_URLS: the frames it gives the copy that keeps
    `.eh_frame` (the host's build; both started the same way: the same addresses)."""
    works, server, _doc = served
    work = works["host"] / shape
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}
    eu = ["eu-stack", "-q"]
    core = tmp_path / "noeh.core"
    with S.stopped("host", work) as pids:
        want = subprocess.run(eu + ["-p", str(pids["ref"])], capture_output=True, text=True, timeout=120, env=clean)
        live = subprocess.run(eu + ["-p", str(pids["noeh"])], capture_output=True, text=True, timeout=120,
                              env=dict(clean, **_env(tmp_path, server, "live")))
        subprocess.run(["gdb", "-nx", "-batch", "-p", str(pids["noeh"]), "-ex", "set debuginfod enabled off",
                        "-ex", "gcore %s" % core], capture_output=True, timeout=300, check=True, env=clean)
    dead = subprocess.run(eu + ["--core", str(core), "--executable", str(work / "noeh" / "prog")], capture_output=True,
                          text=True, timeout=120, env=dict(clean, **_env(tmp_path, server, "core")))
    stack = _eu_frames(want.stdout)
    assert len(stack) > 20, want.stdout + want.stderr
    assert _eu_frames(live.stdout) == stack, "eu-stack -p through debuginfod\n%s%s\nwith .eh_frame\n%s" % (
        live.stdout, live.stderr, want.stdout)
    assert _eu_frames(dead.stdout) == stack, "eu-stack --core through debuginfod\n%s%s\nwith .eh_frame\n%s" % (
        dead.stdout, dead.stderr, want.stdout)


def test_lldb16_has_no_debuginfod(tmp_path):
    """LLDB 16, the one LLDB that cannot take side files from a server: it has no debuginfod symbol
    locator (LLDB 18 brought it), so the setting the others take does not exist (the plugin gives
    LLDB 16 its side files itself: docs/lldb.md)."""
    s = run_lldb(16, ["settings set plugin.symbol-locator.debuginfod.server-urls http://127.0.0.1:1",
                      "settings show plugin.symbol-locator"], tmp_path, "lldb16-debuginfod", preamble=False)
    out = s.stdout + s.stderr
    assert "invalid value path 'plugin.symbol-locator.debuginfod.server-urls'" in out, out
