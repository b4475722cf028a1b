"""The program of tests/fixtures/shipped.c cut the ways binaries ship (`strip -s`, `--strip-debug`,
`-g`, a separate debug file, a shared library), and its GDB and LLDB sessions stopped at getppid:
what tests/test_shipped.py and tests/test_debuginfod.py share."""

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from helpers import toolchains as T
from helpers.gdb import PLUGIN, Qemu, run_gdb
from sframekit.core.elf import sidefile

SOURCE = T.FIXTURES_DIR / "shipped.c"


CFLAGS = ("-O2", "-fomit-frame-pointer", "-Wa,--gsframe")


SHAPES = ("strip-s", "strip-s-nopie", "strip-debug", "g", "debuglink", "buildid", "lib-linked", "lib-dlopen")


LIBRARY_SHAPES = ("lib-linked", "lib-dlopen")


def shape_cmds(tc, shape, work):
    """Commands (run in the toolchain's root) that build `shape` as WORK/ref/prog (keeps .eh_frame)
    and WORK/noeh/prog (without it): one build, cut two ways."""
    build = work / ("build-" + shape)
    flags = list(CFLAGS) + ["-g"] + (["-no-pie"] if shape == "strip-s-nopie" else [])
    if shape in LIBRARY_SHAPES:
        # The program keeps its CFI; its library (libship.so, beside it) is cut `strip -s`.
        lib = work / ("build-%s.so" % shape)
        cmds = [[tc.cc, *flags, "-fPIC", "-shared", "-DSHIP_LIBRARY", "-Wl,-soname,libship.so", "-o", str(lib),
                 str(SOURCE)]]
        if shape == "lib-linked":
            cmds.append([tc.cc, *flags, "-DSHIP_LINKED", "-o", str(build), str(SOURCE), str(lib), "-Wl,-rpath,$ORIGIN"])
        else:
            cmds.append([tc.cc, *flags, "-DSHIP_DLOPEN", "-o", str(build), str(SOURCE), "-ldl"])
        for kind in ("ref", "noeh"):
            out = work / shape / kind / "prog"
            removed = ["-R", ".eh_frame", "-R", ".eh_frame_hdr"] if kind == "noeh" else []
            cmds += [["mkdir", "-p", str(out.parent)], ["cp", str(build), str(out)],
                     [tc.tool("strip"), "-s", *removed, "-o", str(out.parent / "libship.so"), str(lib)]]
        return cmds
    cmds = [[tc.cc, *flags, "-o", str(build), str(SOURCE)]]
    cut = {"strip-s": ["-s"], "strip-s-nopie": ["-s"], "strip-debug": ["--strip-debug"], "g": None,
           "debuglink": ["-s"], "buildid": ["-s"]}[shape]
    debug = work / shape / "prog.debug"          # a separate debug file, as -dbgsym packages ship
    if shape in ("debuglink", "buildid"):
        cmds += [["mkdir", "-p", str(debug.parent)], [tc.tool("objcopy"), "--only-keep-debug", str(build), str(debug)]]
    for kind in ("ref", "noeh"):
        out = work / shape / kind / "prog"
        removed = ["-R", ".eh_frame", "-R", ".eh_frame_hdr"] if kind == "noeh" else []
        cmds.append(["mkdir", "-p", str(out.parent)])
        if cut is None:
            cmds.append([tc.tool("objcopy"), *removed, str(build), str(out)] if removed else ["cp", str(build), str(out)])
        else:
            cmds.append([tc.tool("strip"), *cut, *removed, "-o", str(out), str(build)])
        if shape == "debuglink":      # found beside the program by its .gnu_debuglink
            cmds += [[tc.tool("objcopy"), "--add-gnu-debuglink=%s" % debug, str(out)],
                     ["cp", str(debug), str(out.parent / debug.name)]]
    return cmds


def build(toolchain, work, shapes):
    """Build `shapes` of the toolchain in `work` (under /tmp, seen inside the roots); the buildid
    shape's debug file placed where debuggers look it up by build ID (WORK/buildid/debugdir)."""
    tc = T.toolchain(toolchain)
    script = "set -e\n" + "".join(shlex.join(map(str, c)) + "\n" for shape in shapes for c in shape_cmds(tc, shape, work))
    T.run_in(tc, ["sh", "-c", script], cwd=work, check=True)
    if "buildid" in shapes:
        where = Path(sidefile.build_id_path(str(work / "buildid" / "debugdir"), str(work / "build-buildid")))
        where.parent.mkdir(parents=True)
        shutil.copy(work / "buildid" / "prog.debug", where)
    return work


def pcs(frames, skip=(), relocated=False):
    """Frame PCs, GDB's inline frames (the PC and CFA of the frame after them) and the levels in
    `skip` left out.  `relocated`: as (PC within its page, CFA less frame 0's), comparable across
    two runs under qemu-user, which may map the program and its libraries elsewhere each run."""
    out, last = [], None
    base = frames[0].cfa if frames and frames[0].cfa is not None else 0
    for f in frames:
        if (f.pc, f.cfa) != last and f.level not in skip:
            out.append((f.pc & 0xFFF, None if f.cfa is None else f.cfa - base) if relocated else f.pc)
        last = (f.pc, f.cfa)
    if relocated and out:
        out[-1] = (out[-1][0], None)      # (the outermost frame's id: GDB's DWARF unwinder gives it none)
    return out


def hex_pcs(pcs):
    return [hex(p) if isinstance(p, int) else p for p in pcs]


def tailcalls(out, label):
    return {int(m.group(1)) for m in re.finditer(r"^TAILCALL %s (\d+)$" % re.escape(label), out, re.M)}


# The levels of GDB's tail-call frames (made from a caller's DWARF call-site information, which
# only GDB reads): no unwinder of the stack itself shows them.
TAILCALLS = """python
f = gdb.newest_frame()
while f is not None:
    if f.type() == gdb.TAILCALL_FRAME:
        print("TAILCALL %s %d" % (LABEL, f.level()))
    try:
        f = f.older()
    except gdb.error:
        f = None
end"""


def session(prog, label, core=None, before=(), plugin=False, tc=None, qemu=None, after=()):
    """GDB's commands for one stop at getppid in `prog`: natively, or under qemu-user (`qemu` waits
    for GDB on its port; `tc`: its toolchain, for the sysroot); `before`: commands before the
    program is loaded, `after`: at the stop."""
    lines = ["set startup-with-shell off", "set backtrace past-main on", *before]
    if plugin:
        lines.append("source %s" % PLUGIN)
    lines.append("file %s" % prog)
    if qemu is not None:
        lines += ["set sysroot %s" % tc.sysroot, "set solib-search-path %s" % prog.parent, "break getppid",
                  "target remote :%d" % qemu.port, "continue"]
    else:
        lines += ["break getppid", "run"]
    lines += ["frames-dump %s" % label, TAILCALLS.replace("LABEL", repr(label)), *after]
    if core is not None:
        lines.append("generate-core-file %s" % core)
    return lines + ["kill", "delete"]


def run_sessions(gdb, tc, work, *sessions, env=None):
    """One GDB over sessions of (program, label, options): each under its own qemu-user for a cross
    toolchain (started the same way: the same stack).  `env`: variables set for GDB."""
    qemus = []
    try:
        lines = []
        for prog, label, options in sessions:
            q = Qemu(tc.name, prog) if tc.cross else None
            if q is not None:
                qemus.append(q)
            lines += session(prog, label, tc=tc, qemu=q, **options)
        return run_gdb(gdb, lines, work, env=env)
    finally:
        for q in qemus:
            q.close()


LLDB_FRAME = re.compile(r"^\s*\*?\s*frame #\d+: (0x[0-9a-f]+) ")


# LLDB's own frames of the selected thread, as its SB API tells them: PC, inlined, artificial.
OWN = ("script print('OWN ' + ' '.join('%#x:%d:%d' % (f.GetPC(), f.IsInlined(), f.IsArtificial()) "
        "for f in lldb.debugger.GetSelectedTarget().GetProcess().GetSelectedThread()))")


def own_pcs(text):
    """The PCs of the stack's own frames in an `OWN` line: a frame whose functions LLDB shows inlined
    into one another counts once, at the PC of the innermost; the tail-call frames LLDB makes from
    debug information ("artificial") not at all."""
    line = next(ln for ln in text.splitlines() if ln.startswith("OWN "))
    out, inlined = [], False
    for item in line.split()[1:]:
        pc, is_inlined, artificial = item.split(":")
        if artificial == "1":
            continue
        if not inlined:
            out.append(int(pc, 16))
        inlined = is_inlined == "1"
    return out


def lldb_pcs(text):
    """The PCs of the frames `sframe bt` prints."""
    return [int(m.group(1), 16) for m in map(LLDB_FRAME.match, text.splitlines()) if m]


def blocks(stdout):
    """{tag: text} between `script print('@@ TAG')` markers."""
    parts = re.split(r"^@@ (\S+)$", stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def lldb_stop(prog, tag, what):
    return (["target create %s" % prog, "breakpoint set -n getppid", "process launch"]
            + [c for name, cmd in what for c in ("script print('@@ %s-%s')" % (name, tag), cmd)]
            + ["script print('@@ end')", "process kill"])



@contextlib.contextmanager
def stopped(toolchain, work, kinds=("ref", "noeh")):
    """{kind: pid} of WORK/KIND/prog each started without address randomisation (copies at paths
    of equal length: the same stack) and stopped by itself in `leaf` (SHIPPED_STOP); killed after."""
    procs = {}
    try:
        for kind in kinds:
            exe = work / kind / "prog"
            full, env = T.wrap_argv(toolchain, ["setarch", "-R", str(exe)], [exe.parent], exe.parent)
            env["SHIPPED_STOP"] = "1"
            proc = subprocess.Popen(full, cwd=exe.parent, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            line = proc.stdout.readline()
            m = re.match(r"shipped: pid (\d+)$", line.strip())
            assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
            procs[kind] = (proc, int(m.group(1)))
        for _proc, pid in procs.values():
            for _ in range(3000):
                if open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "T":
                    break
                time.sleep(0.02)
        yield {kind: pid for kind, (_proc, pid) in procs.items()}
    finally:
        for proc, pid in procs.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=60)
