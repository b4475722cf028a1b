"""Remote targets whose files are not on this machine: `gdbserver` in the sid root runs the program of
tests/fixtures/shipped.c (`strip -s`, with and without `.eh_frame`) from a directory only the server
sees, and GDB 13 (the host's), 16 (trixie's) and 18 (sid's) connect to it over the loopback address,
with GDB's default sysroot for a remote target (`target:`): GDB reads every file through the remote
protocol, and so must the plugin (a file of the same name here, the host's C library, is another
build).  The reference is GDB's own DWARF on the copy that keeps `.eh_frame`, over the same kind of
connection, at the same stop.

Then the memory path on its own: the program's file removed from the target before GDB connects, so
that neither GDB nor the plugin can read it; the plugin finds the program's SFrame through the
auxiliary vector and its PT_GNU_SFRAME in the target's memory.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import shipped as S
from helpers import toolchains as T
from helpers.gdb import GDBS, PLUGIN, Out, Qemu, _listening, free_port, run_gdb

CASES = [("gdb13", "host"), ("gdb16", "trixie"), ("gdb18", "sid"), ("gdb13", "sid"), ("gdb18", "host")]
SERVER_ROOT = "sid"          # runs every x86-64 program built here (its C library is the newest)
CALLEE_SAVED = {"x86_64": ("rbx", "rbp", "r12", "r13", "r14", "r15"),
                "aarch64": tuple("x%d" % n for n in range(19, 30)),
                "s390x": tuple("r%d" % n for n in range(6, 14))}

@pytest.fixture(scope="module")
def builds(roots, tmp_path_factory):
    """{toolchain: work directory} with the `strip -s` shape built (ref/prog keeps .eh_frame)."""
    return {tc: S.build(tc, tmp_path_factory.mktemp("remote-" + tc), ["strip-s"] + (["lib-linked"] if tc == "sid" else []))
            for tc in ("host", "trixie", "sid", "sid-aarch64", "sid-s390x")}


class Target:
    """A directory only the remote target sees (a host directory outside /tmp, bind-mounted into the
    server's root alone: no GDB's root has it, and the host's GDB runs with it hidden), and
    gdbservers in the sid root running programs from it, each waiting for one connection."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="sframe-remote-", dir="/var/tmp"))
        self.servers = []

    def put(self, src, kind):
        """A copy of `src` as DIR/KIND/prog: kinds of four letters ("orig", "noeh"), so that the
        programs' paths, which the kernel puts on their stacks, are of one length, and so are
        the stack addresses of two runs (registers that hold them compare)."""
        assert len(kind) == 4, kind
        dest = self.dir / kind / "prog"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
        if (Path(src).parent / "libship.so").exists():      # (a program's library beside it: its rpath)
            shutil.copy2(Path(src).parent / "libship.so", dest.parent / "libship.so")
        return dest

    def serve(self, prog, args=()):
        port = free_port()
        argv, env = T.wrap_argv(SERVER_ROOT, ["gdbserver", "--once", "127.0.0.1:%d" % port, str(prog), *args],
                                binds=[self.dir], root=SERVER_ROOT)
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.servers.append(proc)
        line = ""
        deadline = time.monotonic() + 60
        while "Listening on port" not in line:       # (gdbserver says so once the program is started)
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "gdbserver did not start"
            assert time.monotonic() < deadline, "gdbserver did not start"
        return port

    def close(self):
        for proc in self.servers:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def target():
    t = Target()
    yield t
    t.close()


def _gdb(gdb, lines, work, target, cache=None):
    """GDB's output: in its root, which has no copy of the target's directory; the host's GDB in a
    mount namespace of its own where an empty file system hides it.  `cache`: the plugin's."""
    check = ["shell test -e %s/noeh/prog && echo TARGET-DIR VISIBLE || echo TARGET-DIR HIDDEN" % target.dir]
    env = {"SFRAME_CACHE": str(cache or work / "cache")}
    if GDBS[gdb][0] != "host":
        return run_gdb(gdb, check + lines, work, env=env)
    return run_gdb(gdb, check + lines, work, env=env, wrap=["unshare", "--mount", "--propagation", "private", "sh",
                                                            "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"',
                                                            str(target.dir)])


def _stop(port, label, plugin, after=(), before=(), arch="x86_64"):
    lines = ["set backtrace past-main on", *before]
    if plugin:
        lines.append("source %s" % PLUGIN)
    return lines + ["target remote 127.0.0.1:%d" % port, "break getppid", "continue", "frames-dump %s" % label,
                    S.TAILCALLS.replace("LABEL", repr(label)), "regs-dump %s %s" % (label, " ".join(CALLEE_SAVED[arch])),
                    *after, "kill", "delete"]


def _same_registers(out, names, least):
    """The callee-saved registers of each frame with the plugin: DWARF's value or none, never
    another; at least `least` values in outer frames."""
    ref_regs, plugin_regs = out.regs("ref"), out.regs("plugin")
    assert set(ref_regs) == set(plugin_regs) and ref_regs, (ref_regs, plugin_regs)
    known = 0
    for level in sorted(ref_regs):
        for name in names:
            w, g = ref_regs[level][name], plugin_regs[level][name]
            assert g in ("-", w), "frame #%d %s: %s with the plugin, %s by DWARF" % (level, name, g, w)
            known += g != "-" and level > 0
    assert known >= least, out[-3000:]


@pytest.mark.parametrize("gdb,toolchain", CASES, ids=["%s-%s" % c for c in CASES])
def test_gdbserver_files_not_here(builds, target, tmp_path, gdb, toolchain):
    """GDB with the plugin over gdbserver: the frames and the outer frames' callee-saved registers
    of GDB's DWARF on the copy that keeps `.eh_frame`; `info sframe` says where the SFrame came
    from; `sframe verify` on the copy with `.eh_frame` agrees with DWARF at the stop."""
    work = builds[toolchain] / "strip-s"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    cache = tmp_path / "cache"
    # (one GDB each: GDB keeps an executable across `target remote`s, and the copies share a build ID)
    out = Out("".join(_gdb(gdb, lines, tmp_path, target, cache) for lines in (
        _stop(target.serve(ref), "ref", False),
        _stop(target.serve(noeh), "plugin", True, after=["mark info", "info sframe", "mark end"]),
        _stop(target.serve(ref), "verify", False, after=["source %s" % PLUGIN, "mark verify", "sframe verify",
                                                         "mark end"]))))
    assert out.count("TARGET-DIR HIDDEN") == 3, out[:2000]
    want = S.pcs(out.frames("ref"))
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    got = S.pcs(out.frames("plugin"))
    assert got == want, "%s %s over gdbserver: with the plugin\n%s\nDWARF with .eh_frame\n%s" % (
        gdb, toolchain, S.hex_pcs(got), S.hex_pcs(want))

    info = out.between("info", "end")
    assert re.search(r"target:%s: remote file, copied to %s/remote/" % (re.escape(str(noeh)), re.escape(str(cache))),
                     info), info
    copies = list((cache / "remote").rglob("prog"))
    assert len(copies) == 1 and copies[0].read_bytes() == (work / "noeh" / "prog").read_bytes(), copies

    # Callee-saved registers of the outer frames: DWARF's value, never another; the plugin's
    # save-slot analysis knows them all here, as it does with the file on this machine.
    _same_registers(out, CALLEE_SAVED["x86_64"], 6 * 20)

    _verified(out.between("verify", "end"))


def _verified(verify):
    """`sframe verify` found every frame and callee-saved register as DWARF has it."""
    checked = re.search(r"sframe verify: (\d+) frames checked at 1 stops, 0 disagreements", verify)
    equal = re.search(r"registers: (\d+) equal, \d+ not recovered, 0 different", verify)
    assert checked and int(checked.group(1)) >= 15 and equal and int(equal.group(1)) >= 15, verify


@pytest.mark.parametrize("gdb", ["gdb13", "gdb18"])
def test_memory_only(builds, target, tmp_path, gdb):
    """The program's file gone from the target before GDB connects: GDB has no file for it (nor its
    symbols, nor its libraries'), and the plugin reads the SFrame from the target's memory; stopped
    where `sorter` has returned from `qsort`, the program's frames down to `main` are DWARF's."""
    work = builds["sid"] / "strip-s"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    first = _gdb(gdb, _stop(target.serve(ref), "ref", False), tmp_path, target)
    frames = S.pcs(first.frames("ref"))
    assert len(frames) > 20, first[-3000:]
    # (getppid in the C library, leaf in the program, qsort's frames, then sorter: its return from qsort)
    in_prog = [p < 0x7f0000000000 for p in frames]
    where = frames[[i for i in range(1, len(frames)) if in_prog[i] and not in_prog[i - 1]][1]]

    def at(port, label, plugin, after=(), before=()):
        return (["set backtrace past-main on", *before] + (["source %s" % PLUGIN] if plugin else [])
                + ["target remote 127.0.0.1:%d" % port, "break *%#x" % where, "continue", "frames-dump %s" % label,
                   *after, "kill", "delete"])
    out = _gdb(gdb, at(target.serve(ref), "ref", False), tmp_path, target)
    port = target.serve(noeh)
    os.unlink(noeh)
    # (GDB would read the file through /proc/PID/exe still: no sysroot has any of the target's files)
    out = Out(out + _gdb(gdb, at(port, "memory", True, ["mark info", "info sframe", "mark end"],
                                     ["set sysroot /nonexistent"]), tmp_path, target))
    want, got = S.pcs(out.frames("ref")), S.pcs(out.frames("memory"))
    assert "Reading symbols from" not in out.split("FRAME ref")[-1], out[-3000:]
    # The program's frames, down to main (in the C library, GDB has no file and no CFI either).
    n = next(i for i, p in enumerate(want) if p >= 0x7f0000000000)
    want, got = want[:n], got[:n]
    assert len(want) >= 16 and want[0] == where, S.hex_pcs(want)
    assert got == want, "from target memory\n%s\nDWARF\n%s" % (S.hex_pcs(got), S.hex_pcs(want))
    info = out.between("info", "end")
    assert re.search(r"%s: target memory \(PT_GNU_SFRAME" % re.escape(str(noeh)), info), out[-3000:]


@pytest.mark.parametrize("sysroot", ["target", "libraries"])
@pytest.mark.parametrize("toolchain", ["sid-aarch64", "sid-s390x"])
def test_qemu_gdbstub(builds, tmp_path, toolchain, sysroot):
    """gdb-multiarch against qemu-user's gdbstub running the program from a directory GDB does not
    see: with the default sysroot GDB reads the files through the stub (and the plugin copies the
    program by build ID); with a sysroot that holds only the libraries, GDB has no file for the
    program and the plugin reads its SFrame from the target's memory.  Either way, the frames (and
    the callee-saved registers) of GDB's DWARF on the copy that keeps `.eh_frame`, its files read
    through the stub."""
    tc = T.toolchain(toolchain)
    target = Target()
    try:
        work = builds[toolchain] / "strip-s"
        ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
        arch = tc.arch
        # (with no file, GDB takes its byte order from nowhere: a big-endian target must be named)
        mode = [] if sysroot == "target" else ["set sysroot %s" % tc.sysroot] + (
            ["set endian big"] if tc.endian == "big" else [])
        outs = []
        sessions = [(ref, "ref", False, [], []), (noeh, "plugin", True, mode, ["mark info", "info sframe", "mark end"])]
        if sysroot == "target":       # the callee-saved registers, against DWARF in the same process
            sessions.append((ref, "verify", False, [], ["source %s" % PLUGIN, "mark verify", "sframe verify",
                                                        "mark end"]))
        for prog, label, plugin, before, after in sessions:
            q = Qemu(toolchain, prog)
            try:
                outs.append(_gdb("multiarch", [line.replace("127.0.0.1:%d" % q.port, ":%d" % q.port) for line in
                                               _stop(q.port, label, plugin, after, before, arch)],
                                 tmp_path, target))
            finally:
                q.close()
        out = Out("".join(outs))
    finally:
        target.close()
    assert out.count("TARGET-DIR HIDDEN") == len(sessions), out[:2000]
    want = S.pcs(out.frames("ref"), relocated=True)
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    got = S.pcs(out.frames("plugin"), relocated=True)
    assert got == want, "%s, sysroot %s: with the plugin\n%s\nDWARF with .eh_frame\n%s" % (
        toolchain, sysroot, S.hex_pcs(got), S.hex_pcs(want))
    info = out.between("info", "end")
    source = "remote file, copied to" if sysroot == "target" else "target memory (PT_GNU_SFRAME"
    assert "%s: %s" % (("target:%s" % noeh) if sysroot == "target" else noeh, source) in info, info
    if sysroot == "target":
        _verified(out.between("verify", "end"))


@pytest.mark.parametrize("gdb", ["gdb13", "gdb18"])
def test_no_remote_reads_per_frame(roots, target, tmp_path, gdb):
    """The remote packets of a `bt` with the plugin (its file copied and its index built at the
    first): as many memory reads for 67 frames as for 17 (the stack is read in one piece, the
    SFrame section and code are not read again), and no file transfer GDB itself does not make.
    GDB's own DWARF unwinder, for comparison, reads more the deeper the stack."""
    from sframekit.core.elf.image import ElfImage
    src = T.FIXTURES_DIR / "recurse.c"
    full = tmp_path / "recurse"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-I", str(T.FIXTURES_DIR), "-o", str(full),
                    str(src)], check=True)
    stop = ElfImage(str(full)).resolve("stop_here")
    progs = {}
    for kind, cut in (("noeh", ["-R", ".eh_frame", "-R", ".eh_frame_hdr"]), ("ref", [])):
        out = tmp_path / ("%s.prog" % kind)
        subprocess.run(["strip", "-s", *cut, "-o", str(out), str(full)], check=True)
        progs[kind] = target.put(out, "orig" if kind == "ref" else kind)
    counts = {}
    for kind in ("noeh", "ref"):
        for depth in (10, 60):
            port = target.serve(progs[kind], [str(depth)])
            lines = (["source %s" % PLUGIN] if kind == "noeh" else []) + [
                "target remote 127.0.0.1:%d" % port, "break *%#x" % (0x555555554000 + stop), "continue", "bt 1",
                "maint flush register-cache", "mark counted", "set debug remote 1", "bt -past-main",
                "set debug remote 0", "mark end", "kill"]
            out = _gdb(gdb, lines, tmp_path, target)
            # (GDB's debugging output goes to its standard error, and it is on for that `bt` alone; memory
            # is read with `m` packets, or `x` since GDB 16)
            frames = len(re.findall(r"^#\d+ ", out.between("counted", "end"), re.M))
            counts[kind, depth] = (frames, len(re.findall(r"Sending packet: \$[mx][0-9a-f]", out.stderr)),
                                   len(re.findall(r"Sending packet: \$vFile", out.stderr)))
    (f10, m10, v10), (f60, m60, v60) = counts["noeh", 10], counts["noeh", 60]
    assert f60 - f10 == 50 and f10 >= 15, counts
    assert m60 == m10 and m10 <= 16, counts
    assert (v10, v60) == (counts["ref", 10][2], counts["ref", 60][2]), counts
    assert counts["ref", 60][1] > counts["ref", 10][1], counts


@pytest.mark.parametrize("lldb", [21, 23])
def test_lldb_remote_platform(builds, target, tmp_path, lldb):
    """LLDB connected to `lldb-server platform` in the sid root (`platform select remote-linux`,
    `platform connect`), the program in a directory LLDB does not see: LLDB copies each module into
    its module cache, and the plugin reads it there.  LLDB's own `bt` through the side file, and
    `sframe bt`, give the frames of LLDB's `bt` on the copy that keeps `.eh_frame`."""
    from helpers.lldb import PLUGIN as LLDB_PLUGIN
    from helpers.lldb import run_lldb
    work = builds["sid"] / "strip-s"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    port = free_port()
    # (in a directory of its own: the platform writes the programs it runs into its working directory)
    home = tmp_path / "platform"
    home.mkdir()
    argv, env = T.wrap_argv(SERVER_ROOT, ["lldb-server", "platform", "--server", "--listen", "127.0.0.1:%d" % port],
                            binds=[target.dir], cwd=home, root=SERVER_ROOT)
    server = subprocess.Popen(argv, env=env, cwd=home, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    target.servers.append(server)
    deadline = time.monotonic() + 30
    while not _listening(port):
        assert server.poll() is None and time.monotonic() < deadline, "lldb-server platform did not start"
        time.sleep(0.05)

    def stop(prog, tag, what):
        return (["target create --remote-file %s %s" % (prog, prog), "breakpoint set -n getppid", "process launch"]
                + [c for name, cmd in what for c in ("script print('@@ %s-%s')" % (name, tag), cmd)]
                + ["script print('@@ end')", "process kill"])
    lines = (["platform select remote-linux", "platform connect connect://127.0.0.1:%d" % port,
              "script import os; print('@@ seen'); print('TARGET-DIR', os.path.exists(%r))" % str(ref),
              "script print('@@ end')"]
             + stop(ref, "ref", [("own", S.OWN)])
             + ["command script import %s" % LLDB_PLUGIN]
             + stop(noeh, "plugin", [("own", S.OWN), ("sframe", "sframe bt"), ("info", "sframe info")]))
    s = run_lldb(lldb, lines, tmp_path, "remote%d" % lldb, preamble=False)
    blocks = S.blocks(s.stdout)
    assert "TARGET-DIR False" in blocks["seen"], s.stdout[-3000:]
    want = S.own_pcs(blocks["own-ref"])
    assert len(want) > 20, s.stdout[-3000:] + s.stderr[-3000:]
    got = S.own_pcs(blocks["own-plugin"])
    assert got == want, "LLDB %d remote: own bt with the plugin\n%s\nwith .eh_frame\n%s" % (
        lldb, S.hex_pcs(got), S.hex_pcs(want))
    assert S.lldb_pcs(blocks["sframe-plugin"]) == want, blocks["sframe-plugin"]
    assert "module_cache" in s.stdout and "[sframe]" in blocks["sframe-plugin"], blocks["info-plugin"]


def test_no_copy_possible(builds, target, tmp_path):
    """Where no copy of the file can be made (here the plugin's cache cannot be created), the
    objfile's SFrame still comes from the target's memory: the frames are DWARF's, and `info
    sframe` says why there is no file."""
    work = builds["sid"] / "strip-s"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    out = Out(_gdb("gdb18", _stop(target.serve(ref), "ref", False), tmp_path, target)
              + _gdb("gdb18", _stop(target.serve(noeh), "plugin", True, after=["mark info", "info sframe", "mark end"]),
                     tmp_path, target, cache=blocker / "cache"))
    want = S.pcs(out.frames("ref"))
    assert len(want) > 20 and S.pcs(out.frames("plugin")) == want, out[-3000:]
    info = out.between("info", "end")
    assert "target:%s: target memory (cannot create the cache of copies of the target's files" % noeh in info, info


@pytest.mark.parametrize("gdb", ["gdb13", "gdb18"])
def test_gdbserver_library(builds, target, tmp_path, gdb):
    """A program that keeps its CFI and its shared library cut `strip -s` without `.eh_frame`, both
    on the target alone: the plugin copies the library by build ID and gives DWARF's frames."""
    work = builds["sid"] / "lib-linked"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    out = Out(_gdb(gdb, _stop(target.serve(ref), "ref", False), tmp_path, target)
              + _gdb(gdb, _stop(target.serve(noeh), "plugin", True, after=["mark info", "info sframe", "mark end"]),
                     tmp_path, target))
    want = S.pcs(out.frames("ref"))
    assert "Traceback" not in out and len(want) > 20, out[-4000:]
    assert S.pcs(out.frames("plugin")) == want, out[-4000:]
    info = out.between("info", "end")
    assert "target:%s: remote file, copied to" % (noeh.parent / "libship.so") in info, info
    _same_registers(out, CALLEE_SAVED["x86_64"], 20)


def test_memory_only_library_loaded_later(builds, target, tmp_path):
    """No file for anything (no sysroot has the target's files), and the library with SFrame (cut
    `strip -s` without `.eh_frame`) is loaded after GDB connects: the plugin, at the stop, sees the
    dynamic linker's list changed and reads the library's SFrame from memory.  Stopped where
    `sorter` (in the library) has returned from `qsort`, the frames down to `main` are DWARF's."""
    work = builds["sid"] / "lib-linked"
    ref, noeh = target.put(work / "ref" / "prog", "orig"), target.put(work / "noeh" / "prog", "noeh")
    first = _gdb("gdb18", _stop(target.serve(ref), "ref", False), tmp_path, target)
    frames = first.frames("ref")
    k = max(i for i, f in enumerate(frames) if "qsort" in f.name)
    where = frames[k + 1].pc          # (sorter, in the library: its return from qsort)
    assert frames[k + 1].name == "sorter", frames

    from sframekit.core.elf.image import ElfImage
    entry = 0x555555554000 + ElfImage(str(work / "noeh" / "prog")).entry

    def at(port, label, plugin, after=(), before=()):
        # (the library is mapped at the program's entry point, not yet where GDB connects)
        return (["set backtrace past-main on", *before] + (["source %s" % PLUGIN] if plugin else [])
                + ["target remote 127.0.0.1:%d" % port, "break *%#x" % entry, "continue", "break *%#x" % where,
                   "continue", "frames-dump %s" % label, *after, "kill", "delete"])
    out = Out(_gdb("gdb18", at(target.serve(ref), "ref", False), tmp_path, target)
              + _gdb("gdb18", at(target.serve(noeh), "memory", True, ["mark info", "info sframe", "mark end"],
                                 ["set sysroot /nonexistent"]), tmp_path, target))
    want, got = S.pcs(out.frames("ref")), S.pcs(out.frames("memory"))
    n = [f.name for f in out.frames("ref")].index("main") + 1        # (down to main; sorter's callers are the program's)
    assert n >= 16 and want[0] == where, S.hex_pcs(want)
    assert got[:n] == want[:n], "from target memory\n%s\nDWARF\n%s" % (S.hex_pcs(got[:n]), S.hex_pcs(want[:n]))
    info = out.between("info", "end")
    assert "%s: target memory (PT_GNU_SFRAME" % (noeh.parent / "libship.so") in info, info
