"""core.target.corefile: synthetic cores, and real ones checked against GDB.

Real cores are made at test time from small C programs (nothing is committed):
  * x86-64: GDB's `gcore` at a breakpoint (one thread, and two threads), and a kernel
    core (when core_pattern writes plain files) for memory the core leaves out;
  * AArch64 and s390x: qemu-user crash dumps in the sid root (scripts/inroot), checked
    against gdb-multiarch in that root.
Tests needing a tool that is missing fail, naming it (scripts/setup.sh installs them all).
"""

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers import toolchains as T

from sframekit.core.elf.image import ElfImage
from sframekit.core.errors import ElfError
from sframekit.core.target.corefile import CoreFile, CoreMemoryError, MappedFile, Mapping, Thread

REPO = Path(__file__).resolve().parent.parent
INROOT = REPO / "scripts" / "inroot"

PROG_C = r"""
#include <stdlib.h>
volatile long sink;
__attribute__((noinline, noipa)) void f(long x)
{
    volatile long marker = 0x1122334455667788L + x;
    sink = marker;
    abort();
}
__attribute__((noinline, noipa)) void g(long x) { f(x + 1); sink++; }
int main(int argc, char **argv) { (void)argv; g(argc); return 0; }
"""

THREADS_C = r"""
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
volatile long sink;
static pthread_barrier_t ready;
__attribute__((noinline)) void thread_crash(long x) { sink = x; abort(); }
__attribute__((noinline)) void *worker(void *arg)
{
    pthread_barrier_wait(&ready);
    thread_crash((long)arg);
    return arg;
}
__attribute__((noinline)) void main_wait(void) { for (;;) pause(); }
int main(void)
{
    pthread_t t;
    pthread_barrier_init(&ready, 0, 2);
    if (pthread_create(&t, 0, worker, (void *)42L))
        return 1;
    pthread_barrier_wait(&ready);
    main_wait();
    return 0;
}
"""

GDB_QUIET = ["-nx", "-batch", "-iex", "set debuginfod enabled off"]


# ----------------------------------------------------------------------------------------
# Synthetic cores

EM_X86_64, EM_AARCH64, EM_S390, EM_RISCV = 62, 183, 22, 243
PF_X, PF_W, PF_R = 1, 2, 4


def _note(o, name, ntype, desc):
    n = name.encode() + b"\0"
    pad = lambda b: b + bytes(-len(b) % 4)
    return struct.pack(o + "III", len(n), len(desc), ntype) + pad(n) + pad(desc)


def make_core(path, machine=EM_X86_64, big=False, loads=(), notes=(), e_type=4):
    """A 64-bit core: loads are (vaddr, memsz, flags, data); notes (name, type, desc)."""
    o = ">" if big else "<"
    blob = b"".join(_note(o, *n) for n in notes)
    phnum = 1 + len(loads)
    off = 64 + 56 * phnum
    ehdr = b"\x7fELF" + bytes([2, 2 if big else 1, 1, 0]) + bytes(8)
    ehdr += struct.pack(o + "HHIQQQIHHHHHH", e_type, machine, 1, 0, 64, 0, 0, 64, 56, phnum, 64, 0, 0)
    phdrs = struct.pack(o + "IIQQQQQQ", 4, 0, off, 0, 0, len(blob), 0, 4)
    body = blob
    for vaddr, memsz, flags, data in loads:
        phdrs += struct.pack(o + "IIQQQQQQ", 1, flags, off + len(body), vaddr, 0, len(data), memsz, 1)
        body += data
    Path(path).write_bytes(ehdr + phdrs + body)
    return path


def prstatus(o, regs_bytes, pid=1234, sig=11):
    desc = bytearray(112 + len(regs_bytes) + 8)
    struct.pack_into(o + "h", desc, 12, sig)
    struct.pack_into(o + "i", desc, 32, pid)
    desc[112:112 + len(regs_bytes)] = regs_bytes
    return ("CORE", 1, bytes(desc))


def nt_file(o, page, entries):
    """entries: (start, end, pgoff, name)."""
    d = struct.pack(o + "QQ", len(entries), page)
    d += b"".join(struct.pack(o + "QQQ", s, e, p) for s, e, p, _n in entries)
    d += b"".join(n.encode() + b"\0" for *_x, n in entries)
    return ("CORE", 0x46494C45, d)


def test_x86_64_register_layout(tmp_path):
    vals = list(range(0x1000, 0x1000 + 27))       # r15 .. gs, in user_regs_struct order
    core = make_core(tmp_path / "core", notes=[prstatus("<", struct.pack("<27Q", *vals), pid=77, sig=6)])
    c = CoreFile(core)
    assert (c.arch, c.machine, c.byte_order, c.big_endian) == ("x86_64", "EM_X86_64", "little", False)
    (t,) = c.threads
    assert (t.tid, t.signal) == (77, 6)
    r = t.registers
    names = ["r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
             "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
             "gs_base", "ds", "es", "fs", "gs"]
    assert [r[n] for n in names] == vals
    dwarf = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"] + ["r%d" % i for i in range(8, 16)] + ["rip"]
    assert [r[i] for i in range(17)] == [r[n] for n in dwarf]
    assert r[7] == r["rsp"] == t.sp and r[6] == r["rbp"] and r[16] == r["rip"] == t.pc


def test_aarch64_register_layout(tmp_path):
    vals = [0xA000 + i for i in range(34)]          # x0..x30, sp, pc, pstate
    core = make_core(tmp_path / "core", machine=EM_AARCH64,
                     notes=[prstatus("<", struct.pack("<34Q", *vals))])
    t = CoreFile(core).threads[0]
    assert [t.registers[i] for i in range(31)] == vals[:31]
    assert t.registers["x29"] == vals[29] and t.registers["x30"] == vals[30]
    assert t.registers[31] == t.registers["sp"] == t.sp == vals[31]
    assert t.registers[32] == t.registers["pc"] == t.pc == vals[32]
    assert t.registers["pstate"] == vals[33]


def test_s390x_register_layout_big_endian(tmp_path):
    gprs = [0x5000 + i for i in range(16)]
    acrs = [0x70 + i for i in range(16)]
    regs = struct.pack(">QQ16Q16IQ", 0x0705000180000000, 0x2AA00001234, *gprs, *acrs, 0x99)
    core = make_core(tmp_path / "core", machine=EM_S390, big=True, notes=[prstatus(">", regs, pid=5, sig=6)])
    c = CoreFile(core)
    assert (c.arch, c.byte_order) == ("s390x", "big")
    t = c.threads[0]
    assert (t.tid, t.signal) == (5, 6)
    assert [t.registers[i] for i in range(16)] == gprs
    assert t.registers["r15"] == t.sp == gprs[15]
    assert t.registers["pswa"] == t.registers["pc"] == t.pc == t.registers[65] == 0x2AA00001234
    assert t.registers["pswm"] == t.registers[64] == 0x0705000180000000
    assert [t.registers["a%d" % i] for i in range(16)] == acrs
    assert t.registers["orig_gpr2"] == 0x99


def test_threads_in_note_order_and_signalled_first(tmp_path):
    regs = bytes(27 * 8)
    core = make_core(tmp_path / "core", notes=[prstatus("<", regs, pid=1, sig=0),
                                               prstatus("<", regs, pid=2, sig=6),
                                               prstatus("<", regs, pid=3, sig=0)])
    ts = CoreFile(core).threads
    # qemu-user gives pr_cursig only to the crashed thread, which it may not write first
    assert [(t.tid, t.signal, t.note_index) for t in ts] == [(2, 6, 1), (1, 0, 0), (3, 0, 2)]
    core = make_core(tmp_path / "core2", notes=[prstatus("<", regs, pid=9, sig=5),
                                                prstatus("<", regs, pid=8, sig=5)])
    assert [t.tid for t in CoreFile(core).threads] == [9, 8]


def test_memory_segments_nt_file_and_fallback(tmp_path):
    page = 0x1000
    lib = tmp_path / "data.bin"
    lib.write_bytes(bytes((i * 7) & 0xFF for i in range(3 * page)))
    libdata = lib.read_bytes()
    a = bytes(range(256)) * 16                       # 0x1000 bytes
    loads = [
        (0x10000, page, PF_R | PF_W, a),              # in the core
        (0x11000, 2 * page, PF_R | PF_X, b""),        # left out; read-only file mapping
        (0x13000, 2 * page, PF_R | PF_W, a[:page]),   # half in the core, writable
        (0x20000, page, PF_R, b""),                   # left out, no file behind it
    ]
    notes = [nt_file("<", page, [(0x11000, 0x13000, 1, str(lib))]),
             prstatus("<", bytes(27 * 8))]
    core = make_core(tmp_path / "core", loads=loads, notes=notes)
    with CoreFile(core) as c:
        assert c.mappings == [Mapping(0x11000, 0x13000, page, str(lib))]
        assert c.mappings_source == "NT_FILE"
        assert c.read(0x10010, 16) == a[0x10:0x20]
        assert c.read(0x11000, 32) == libdata[page:page + 32]
        # spans the core segment and the file-backed one, then on into the next segment
        assert c.read(0x10FF0, 32) == a[-16:] + libdata[page:page + 16]
        assert c.read(0x12FF8, 16) == libdata[3 * page - 8:3 * page] + a[:8]
        assert c.read_pointer(0x10000) == int.from_bytes(a[:8], "little")
        assert c.read(0x10000, 0) == b""
        with pytest.raises(CoreMemoryError) as e:
            c.read(0x13FF8, 16)                      # past p_filesz of a writable segment
        assert e.value.address == 0x14000 and "writable" in str(e.value)
        with pytest.raises(CoreMemoryError) as e:
            c.read(0x20000, 8)
        assert e.value.address == 0x20000
        with pytest.raises(CoreMemoryError) as e:
            c.read(0x30000, 8)
        assert e.value.address == 0x30000 and "not mapped" in str(e.value)
        assert not c.readable(0x30000, 1) and c.readable(0x10000, 8)
        # the mapped file is no ELF: no module
        assert c.modules() == []
    # the file is looked up under sysroot
    with CoreFile(core, sysroot=tmp_path / "nowhere") as c:
        with pytest.raises(CoreMemoryError) as e:
            c.read(0x11000, 8)
        assert e.value.address == 0x11000 and "not found" in str(e.value)


def test_big_endian_nt_file(tmp_path):
    notes = [nt_file(">", 0x1000, [(0x1000, 0x3000, 0, "/a"), (0x5000, 0x6000, 2, "/b c")])]
    c = CoreFile(make_core(tmp_path / "core", machine=EM_S390, big=True, notes=notes))
    assert c.mappings == [Mapping(0x1000, 0x3000, 0, "/a"), Mapping(0x5000, 0x6000, 0x2000, "/b c")]
    assert c.threads == []


def test_errors(tmp_path):
    text = tmp_path / "text"
    text.write_text("hello\n")
    with pytest.raises(ElfError, match="not an ELF file"):
        CoreFile(text)
    with pytest.raises(ElfError, match="no such file"):
        CoreFile(tmp_path / "missing")
    with pytest.raises(ElfError, match="is a directory"):
        CoreFile(tmp_path)
    exe = make_core(tmp_path / "exe", e_type=2)
    with pytest.raises(ElfError, match="not a core file"):
        CoreFile(exe)
    with pytest.raises(ElfError, match="not a core file"):
        CoreFile("/bin/sh")
    riscv = make_core(tmp_path / "riscv", machine=EM_RISCV)
    with pytest.raises(ElfError, match="unsupported core file architecture"):
        CoreFile(riscv)
    good = make_core(tmp_path / "core", notes=[prstatus("<", bytes(27 * 8))])
    data = good.read_bytes()
    for cut in (20, 70, 130, len(data) - 50):
        bad = tmp_path / ("cut%d" % cut)
        bad.write_bytes(data[:cut])
        with pytest.raises(ElfError) as e:
            CoreFile(bad)
        assert "\n" not in str(e.value)
    short = make_core(tmp_path / "short", notes=[("CORE", 1, bytes(200))])
    with pytest.raises(ElfError, match="NT_PRSTATUS note of 200 bytes"):
        CoreFile(short)


# ----------------------------------------------------------------------------------------
# Helpers for real cores

def _need(*tools):
    for t in tools:
        if shutil.which(t) is None:
            pytest.fail("%s is not installed" % t)


def _run(argv, cwd, timeout=300, ok=(0,), env=None):
    p = subprocess.run([str(a) for a in argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env=env)
    if p.returncode not in ok:
        raise AssertionError("%s exited %d:\n%s" % (" ".join(map(str, argv)), p.returncode, p.stdout))
    return p.stdout


def _gdb_regs(text):
    """name -> value from GDB `info registers` output."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z][a-z0-9_]*)\s+(0x[0-9a-f]+)\b", line)
        if m:
            out[m.group(1)] = int(m.group(2), 16)
    return out


def _gdb_words(text):
    """The 8-byte words printed by `x/Ngx`."""
    words = []
    for line in text.splitlines():
        if re.match(r"^0x[0-9a-f]+( <[^>]*>)?:", line):
            words += [int(w, 16) for w in re.findall(r"\t(0x[0-9a-f]+)", line)]
    return words


def _gdb_threads(text):
    """LWP -> registers, from `thread apply all info registers ...`."""
    out = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^Thread \d+ \(.*LWP (\d+)", line)
        if m:
            cur = out.setdefault(int(m.group(1)), {})
            continue
        if cur is not None:
            cur.update(_gdb_regs(line))
    return out


def _words(data, order):
    return [int.from_bytes(data[i:i + 8], order) for i in range(0, len(data), 8)]


def _core_segments(path):
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as fh:
        return [(s["p_vaddr"], s["p_memsz"], s["p_filesz"], s["p_flags"])
                for s in ELFFile(fh).iter_segments() if s["p_type"] == "PT_LOAD"]


# ----------------------------------------------------------------------------------------
# x86-64: GDB gcore

@pytest.fixture(scope="module")
def gcore_single(tmp_path_factory):
    _need("gcc", "gdb")
    d = tmp_path_factory.mktemp("gcore1")
    (d / "prog.c").write_text(PROG_C)
    _run(["gcc", "-g", "-O1", "-fno-omit-frame-pointer", "-o", "prog", "prog.c"], d)
    _run(["gdb", *GDB_QUIET, "-ex", "break f", "-ex", "run", "-ex", "gcore %s" % (d / "core"), "./prog"], d)
    assert (d / "core").is_file(), "gcore wrote no core"
    return d


@pytest.fixture(scope="module")
def gcore_threads(tmp_path_factory):
    _need("gcc", "gdb")
    d = tmp_path_factory.mktemp("gcore2")
    (d / "thr.c").write_text(THREADS_C)
    _run(["gcc", "-g", "-O1", "-pthread", "-o", "thr", "thr.c"], d)
    _run(["gdb", *GDB_QUIET, "-ex", "break thread_crash", "-ex", "run", "-ex", "gcore %s" % (d / "core"),
          "./thr"], d)
    assert (d / "core").is_file(), "gcore wrote no core"
    return d


def _gdb_on_core(d, exe, *cmds):
    argv = ["gdb", *GDB_QUIET]
    for c in cmds:
        argv += ["-ex", c]
    return _run(argv + [exe, "core"], d)


def test_gcore_registers_match_gdb(gcore_single):
    d = gcore_single
    extra = ['printf "%s 0x%%lx\\n", $%s' % (n, n) for n in ("fs_base", "gs_base", "orig_rax")]
    gdb = _gdb_regs(_gdb_on_core(d, "./prog", "info registers", *extra))
    with CoreFile(d / "core") as c:
        assert c.arch == "x86_64" and not c.big_endian
        assert len(c.threads) == 1
        r = c.threads[0].registers
        names = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp"] + ["r%d" % i for i in range(8, 16)] \
            + ["rip", "eflags", "cs", "ss", "ds", "es", "fs", "gs", "fs_base", "gs_base", "orig_rax"]
        assert {n: r[n] for n in names} == {n: gdb[n] for n in names}
        assert r[7] == gdb["rsp"] and r[6] == gdb["rbp"] and r[16] == gdb["rip"]
        exe = ElfImage(d / "prog")
        bias = [m for m in c.modules() if m.image is not None and m.image.path.endswith("prog")][0].bias
        assert exe.symbolize(r["rip"], bias)[0] == "f"


def test_gcore_memory_matches_gdb(gcore_single):
    d = gcore_single
    out = _gdb_on_core(d, "./prog", "x/8gx $rsp", "x/2gx $rbp")
    words = _gdb_words(out)
    with CoreFile(d / "core") as c:
        t = c.threads[0]
        assert _words(c.read(t.sp, 64), "little") == words[:8]
        assert _words(c.read(t.registers["rbp"], 16), "little") == words[8:]
        # a read across two adjacent segments held in the core
        segs = sorted(_core_segments(d / "core"))
        pairs = [(a, b) for a, b in zip(segs, segs[1:]) if a[0] + a[1] == b[0] and a[2] and b[2]]
        assert pairs, "no adjacent segments in the core"
        edge = pairs[0][1][0]
        gdb_words = _gdb_words(_gdb_on_core(d, "./prog", "x/2gx %#x" % (edge - 8)))
        assert _words(c.read(edge - 8, 16), "little") == gdb_words


def test_gcore_nt_file_and_modules(gcore_single):
    d = gcore_single
    out = _gdb_on_core(d, "./prog", "print/x (long)&f", "print/x (long)&abort")
    f_addr, abort_addr = [int(x, 16) for x in re.findall(r"= (0x[0-9a-f]+)", out)]
    with CoreFile(d / "core") as c:
        assert c.mappings_source == "NT_FILE"
        paths = [m.path for m in c.mappings]
        exe = os.path.realpath(d / "prog")
        assert exe in paths
        assert any(os.path.basename(p) == "libc.so.6" for p in paths)
        assert all(m.start < m.end and m.file_offset % 4096 == 0 for m in c.mappings)
        mods = c.modules()
        assert all(isinstance(m, MappedFile) for m in mods)
        assert mods[0].path == exe                     # the executable comes first
        by_name = {os.path.basename(m.path): m for m in mods}
        assert {"prog", "libc.so.6"} <= set(by_name)
        assert any(n.startswith("ld-linux") for n in by_name)
        prog, libc = by_name["prog"], by_name["libc.so.6"]
        assert prog.image is not None and libc.image is not None
        assert prog.image.resolve("f") + prog.bias == f_addr
        assert libc.image.resolve("abort") + libc.bias == abort_addr
        assert c.module_at(f_addr).path == exe
        assert c.module_at(abort_addr) == libc
        assert c.fname == "prog"
        addr, image = c.vdso()
        assert image[:4] == b"\x7fELF" and addr % 4096 == 0
        assert c.module_at(addr) is None


def test_gcore_two_threads(gcore_threads):
    d = gcore_threads
    out = _gdb_on_core(d, "./thr", "info threads", "thread apply all info registers rip rsp rbp")
    current = int(re.search(r"^\*\s+\d+\s+.*LWP (\d+)", out, re.M).group(1))
    gdb = _gdb_threads(out)
    with CoreFile(d / "core") as c:
        assert len(c.threads) == 2
        assert len({t.tid for t in c.threads}) == 2
        assert c.threads[0].tid == current            # GDB's selected thread is written first
        for t in c.threads:
            assert isinstance(t, Thread)
            assert {n: t.registers[n] for n in ("rip", "rsp", "rbp")} == gdb[t.tid]
        exe = [m for m in c.modules() if m.path.endswith("/thr")][0]
        assert exe.image.symbolize(c.threads[0].pc, exe.bias)[0] == "thread_crash"


# ----------------------------------------------------------------------------------------
# x86-64: a kernel core (leaves out read-only file pages)

def _kernel_cores_plain():
    try:
        pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    except OSError:
        return None
    if not pattern or pattern.startswith("|") or "/" in pattern or "%" in pattern:
        return None
    return pattern


@pytest.fixture(scope="module")
def kernel_core(tmp_path_factory):
    _need("gcc", "gdb")
    pattern = _kernel_cores_plain()
    if pattern is None:
        pytest.fail("kernel.core_pattern does not write a plain core file in the cwd")
    d = tmp_path_factory.mktemp("kcore")
    (d / "prog.c").write_text(PROG_C)
    _run(["gcc", "-g", "-O1", "-fno-omit-frame-pointer", "-o", "prog", "prog.c"], d)
    _run(["sh", "-c", "ulimit -c unlimited && exec ./prog"], d, ok=(134, -6, 128 + 6))
    cores = [p for p in d.iterdir() if p.name == pattern or p.name.startswith(pattern + ".")]
    if not cores:
        pytest.fail("the kernel wrote no core (core size limit or filter)")
    cores[0].rename(d / "core")
    return d


def test_kernel_core_reads_left_out_text_from_the_file(kernel_core, tmp_path):
    d = kernel_core
    out = _gdb_on_core(d, "./prog", "info registers rip rsp", "x/2gx $rsp", "print/x (long)&f", "x/2gx &f")
    gdb = _gdb_regs(out)
    f_addr = int(re.search(r"= (0x[0-9a-f]+)", out).group(1), 16)
    words = _gdb_words(out)
    image = ElfImage(d / "prog")
    with CoreFile(d / "core") as c:
        t = c.threads[0]
        assert t.signal == 6
        assert (t.pc, t.sp) == (gdb["rip"], gdb["rsp"])
        assert _words(c.read(t.sp, 16), "little") == words[:2]
        # Whether the kernel left the text out (the default coredump_filter) or dumped it,
        # the bytes read must be the file's.
        code = c.read(f_addr, 16)
        assert code == image.file_bytes(image.resolve("f"), 16)
        assert _words(code, "little") == words[2:]
        exe_mod = c.modules()[0]
        assert exe_mod.bias + image.resolve("f") == f_addr
    # no files found: the text is unavailable, the stack still is
    empty = tmp_path / "empty"
    empty.mkdir()
    with CoreFile(d / "core", sysroot=empty) as c:
        assert c.read(c.threads[0].sp, 8)
        with pytest.raises(CoreMemoryError) as e:
            c.read(f_addr, 16)
        assert e.value.address == f_addr
        assert all(m.image is None for m in c.modules())
    # the executable given by exe=, elsewhere under another name
    moved = tmp_path / "renamed"
    shutil.copy(d / "prog", moved)
    with CoreFile(d / "core", sysroot=empty, exe=moved) as c:
        assert c.read(f_addr, 16) == code
        mods = c.modules()
        assert mods[0].image is not None and mods[0].image.path == str(moved)
        assert all(m.image is None for m in mods[1:])


def test_kernel_core_rejects_a_different_executable(kernel_core, tmp_path):
    d = kernel_core
    (tmp_path / "other.c").write_text(PROG_C.replace("0x1122334455667788L", "0x99L"))
    _run(["gcc", "-g", "-O1", "-fno-omit-frame-pointer", "-o", "other", "other.c"], tmp_path)
    with CoreFile(d / "core", exe=tmp_path / "other") as c:
        mods = c.modules()
        assert mods[0].image is None
        assert any("differs" in w for w in c.warnings)
        f_addr = mods[0].bias + ElfImage(d / "prog").resolve("f")
        seg = [s for s in _core_segments(d / "core") if s[0] <= f_addr < s[0] + s[1]][0]
        if seg[2] == 0:
            with pytest.raises(CoreMemoryError, match="differs"):
                c.read(f_addr, 4)


# ----------------------------------------------------------------------------------------
# AArch64 and s390x: qemu-user crash dumps in the sid root

CROSS = {
    "aarch64": dict(triplet="aarch64-linux-gnu", qemu="qemu-aarch64", sp="sp",
                    regs=["x%d" % i for i in range(31)] + ["sp", "pc"], order="little"),
    "s390x": dict(triplet="s390x-linux-gnu", qemu="qemu-s390x", sp="r15",
                  regs=["r%d" % i for i in range(16)] + ["pswm", "pswa"], order="big"),
}


def _sid_root():
    return T.root_path("sid")


def _inroot(cmd, cwd, ok=(0,)):
    return _run(["bash", INROOT, _sid_root(), "sh", "-c", cmd], cwd, ok=ok)


@pytest.fixture(scope="module")
def qemu_cores(tmp_path_factory):
    root = _sid_root()
    if not (root / "usr/bin/qemu-aarch64").exists() or not (root / "usr/bin/gdb-multiarch").exists():
        pytest.fail("the sid root (scripts/roots.sh) with qemu-user and gdb-multiarch is not built")
    if os.geteuid() != 0:
        pytest.fail("scripts/inroot needs root")
    d = tmp_path_factory.mktemp("qemu")
    if not str(d.resolve()).startswith("/tmp/"):
        pytest.fail("pytest's temporary directory is not under /tmp (not seen inside the root)")
    (d / "prog.c").write_text(PROG_C)
    (d / "thr.c").write_text(THREADS_C)
    script = []
    for arch, a in CROSS.items():
        script += [
            "%s-gcc -g -O1 -o prog-%s prog.c" % (a["triplet"], arch),
            "%s-gcc -g -O1 -pthread -o thr-%s thr.c" % (a["triplet"], arch),
            "(%s -L /usr/%s ./prog-%s; true)" % (a["qemu"], a["triplet"], arch),
            "mv qemu_prog-%s_*.core prog-%s.core" % (arch, arch),
            "(%s -L /usr/%s ./thr-%s; true)" % (a["qemu"], a["triplet"], arch),
            "mv qemu_thr-%s_*.core thr-%s.core" % (arch, arch),
        ]
    _inroot("ulimit -c unlimited && " + " && ".join(script), d)
    return d


def _gdb_multiarch(d, arch, exe, core, *cmds):
    a = CROSS[arch]
    argv = ["gdb-multiarch", *GDB_QUIET, "-ex", "set sysroot /usr/%s" % a["triplet"],
            "-ex", "file %s" % exe, "-ex", "core %s" % core]
    for c in cmds:
        argv += ["-ex", c]
    return _run(["bash", INROOT, _sid_root(), *argv], d)


@pytest.mark.parametrize("arch", sorted(CROSS))
def test_qemu_core_registers_and_stack_match_gdb(qemu_cores, arch):
    d, a = qemu_cores, CROSS[arch]
    out = _gdb_multiarch(d, arch, "prog-%s" % arch, "prog-%s.core" % arch,
                         "info registers", "x/4gx $%s" % a["sp"])
    gdb = _gdb_regs(out)
    sysroot = _sid_root() / "usr" / a["triplet"]
    with CoreFile(d / ("prog-%s.core" % arch), sysroot=sysroot) as c:
        assert c.arch == arch and c.byte_order == a["order"]
        (t,) = c.threads
        assert t.signal == 6
        assert {n: t.registers[n] for n in a["regs"]} == {n: gdb[n] for n in a["regs"]}
        if arch == "aarch64":
            assert t.registers["pstate"] == gdb["cpsr"]
            assert t.registers[31] == gdb["sp"] and t.registers[29] == gdb["x29"]
        else:
            assert t.pc == gdb["pswa"] == gdb["pc"]
            assert [t.registers["a%d" % i] for i in range(16)] == [gdb["acr%d" % i] for i in range(16)]
            assert t.registers[15] == gdb["r15"] and t.registers[14] == gdb["r14"]
        assert _words(c.read(t.sp, 32), a["order"]) == _gdb_words(out)


@pytest.mark.parametrize("arch", sorted(CROSS))
def test_qemu_core_modules_from_link_map(qemu_cores, arch):
    d, a = qemu_cores, CROSS[arch]
    sysroot = _sid_root() / "usr" / a["triplet"]
    with CoreFile(d / ("prog-%s.core" % arch), sysroot=sysroot) as c:
        assert c.mappings_source == "link_map"       # qemu writes no NT_FILE
        mods = c.modules()
        names = [os.path.basename(m.path) for m in mods]
        assert names[0] == "prog-%s" % arch
        assert "libc.so.6" in names and len(mods) == 3, names
        assert all(m.image is not None for m in mods), c.warnings
        exe = mods[0]
        libc = mods[names.index("libc.so.6")]
        t = c.threads[0]
        assert c.module_at(t.pc) == libc
        # the pc lies in libc's text; return addresses on the stack fall in g, main (the
        # executable) and abort (libc): the biases are right
        assert any(v <= t.pc - libc.bias < v + filesz for v, _m, _o, filesz in libc.image.loads)
        stack = _words(c.read(t.sp, 2048), a["order"])
        callers = set()
        for w in stack:
            for m in (exe, libc):
                hit = m.image.symbolize(w, m.bias)
                if hit is not None and hit[1] > 0:
                    callers.add(hit[0])
        assert {"g", "main", "abort"} <= callers, callers
        # the executable's text is not in the core: it comes from the file
        f_addr = exe.image.resolve("f") + exe.bias
        seg = [s for s in _core_segments(d / ("prog-%s.core" % arch)) if s[0] <= f_addr < s[0] + s[1]][0]
        assert seg[2] == 0
        assert c.read(f_addr, 16) == exe.image.file_bytes(exe.image.resolve("f"), 16)
    # without the sysroot, the libraries are not found (the executable is, beside the core)
    with CoreFile(d / ("prog-%s.core" % arch)) as c:
        mods = c.modules()
        assert mods[0].image is not None
        assert all(m.image is None for m in mods[1:])


@pytest.mark.parametrize("arch", sorted(CROSS))
def test_qemu_core_two_threads(qemu_cores, arch):
    d, a = qemu_cores, CROSS[arch]
    pc = "pswa" if arch == "s390x" else "pc"
    out = _gdb_multiarch(d, arch, "thr-%s" % arch, "thr-%s.core" % arch,
                         "thread apply all info registers %s %s" % (pc, a["sp"]))
    gdb = _gdb_threads(out)
    sysroot = _sid_root() / "usr" / a["triplet"]
    with CoreFile(d / ("thr-%s.core" % arch), sysroot=sysroot) as c:
        assert len(c.threads) == 2 and set(gdb) == {t.tid for t in c.threads}
        crashed, other = c.threads
        assert crashed.signal == 6 and other.signal == 0
        for t in c.threads:
            assert (t.pc, t.sp) == (gdb[t.tid][pc], gdb[t.tid][a["sp"]])
        assert crashed.note_index == 1               # qemu writes the main thread first
        libc = c.module_at(crashed.pc)
        assert libc is not None and libc.path.endswith("libc.so.6")


# -- floating-point registers: NT_PRFPREG, and AArch64's NT_ARM_SVE / NT_ARM_SSVE ------------------

def test_floating_point_register_notes():
    """The callee-saved floating-point registers of frame 0 come from the core's notes: AArch64's
    d0-d31 (the low halves of user_fpsimd_state's v0-v31, either byte order, or of the Z registers
    of an SVE note), s390x's f0-f15 after the fpc word; short notes give what they hold."""
    from sframekit.core.target import corenotes as C
    vregs = b"".join(struct.pack("<QQ", 0x1000 + n, 0xdead0000 + n) for n in range(32))
    got = C.decode_fpregs(C._AARCH64, vregs + bytes(8), "little")
    assert got[72] == got["d8"] == 0x1008 and got[79] == 0x100f
    big = b"".join(struct.pack(">QQ", 0xdead0000 + n, 0x1000 + n) for n in range(32))   # (__uint128_t, big-endian)
    assert C.decode_fpregs(C._AARCH64, big, "big")[72] == 0x1008
    assert C.decode_fpregs(C._AARCH64, vregs[:16 * 9], "little").keys() == {"d%d" % n for n in range(9)} | set(range(64, 73))
    s390 = struct.pack(">II", 0, 0) + b"".join(struct.pack(">Q", 0x2000 + n) for n in range(16))
    f = C.decode_fpregs(C._S390X, s390, "big")
    assert f["f8"] == 0x2008 and f[24] == 0x2008 and f["f15"] == 0x200f and f[31] == 0x200f
    # SVE form: a header, then Z0-Z31 of vl bytes each; FPSIMD form: the user_fpsimd_state.
    vl = 32
    zregs = b"".join(struct.pack("<QQQQ", 0x3000 + n, 1, 2, 3) for n in range(32))
    sve = struct.pack("<IIHHHH", 16 + len(zregs), 0, vl, vl, 1, 0) + zregs
    assert C.decode_sve(C._AARCH64, sve, "<", "little")[78] == 0x300e
    fpsimd = struct.pack("<IIHHHH", 16 + len(vregs) + 8, 0, 0, vl, 0, 0) + vregs + bytes(8)
    assert C.decode_sve(C._AARCH64, fpsimd, "<", "little")[78] == 0x100e
    assert C.decode_sve(C._AARCH64, b"\0" * 10, "<", "little") == {}
    assert C.decode_sve(C._AARCH64, sve[:16 + 3 * vl], "<", "little").keys() == {"d0", "d1", "d2", 64, 65, 66}
