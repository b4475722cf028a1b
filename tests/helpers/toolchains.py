"""Toolchains that emit SFrame, and the fixture programs built with them.

Five toolchains, each giving one SFrame version for one architecture:

    host          Debian 12: gcc 12, binutils 2.40        V1, x86-64, runs natively
    trixie        Debian trixie root: binutils 2.44       V2, x86-64, runs in the root
    sid           Debian sid root: gcc 16, binutils 2.47  V3, x86-64, runs in the root
    sid-aarch64   sid's aarch64-linux-gnu-gcc             V3, AArch64, qemu-aarch64 in sid
    sid-s390x     sid's s390x-linux-gnu-gcc               V3, s390x (big-endian), qemu-s390x in sid

The roots are built and cached by scripts/roots.sh; commands run inside them
through scripts/inroot (a chroot in a private mount namespace), with /tmp and
the checkout bind-mounted at their own paths, so files under either are seen
at the same path inside and outside.

Main entry points:
    TOOLCHAINS, toolchain(name) -> Toolchain (arch, triplet, prefix, cc, tool(),
        sframe_version, endian, abi_arch, qemu, sysroot, gdb, cross)
    root_path(name), ensure_roots(), roots_ready()
    run_in(tc, argv, cwd=, binds=, check=, timeout=, input=, env=), wrap_argv()
    qemu_argv(tc, exe, args, gdb_port=), program_argv(), run_program()
    FIXTURES, VARIANTS, variants_for(), build(), build_library(), strip_eh()
    corpus_plan(), build_corpus() -> Corpus of Build records
    readelf_sframe(path, which), parse_readelf_sframe(text), sframe_section(),
    sframe_version(), function_symbols()
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPTS = REPO / "scripts"
FIXTURES_DIR = REPO / "tests" / "fixtures"
INROOT = SCRIPTS / "inroot"
ROOTS_SH = SCRIPTS / "roots.sh"

TOOLCHAINS = ("host", "trixie", "sid", "sid-aarch64", "sid-s390x")

# SFrame magic and the ABI/arch identifiers of the header.
SFRAME_MAGIC = 0xDEE2
ABI_AARCH64_BE, ABI_AARCH64_LE, ABI_AMD64_LE, ABI_S390X_BE = 1, 2, 3, 4


@dataclass(frozen=True)
class Toolchain:
    name: str
    root: Optional[str]  # name of the cached root, None for the host
    arch: str  # "x86_64", "aarch64", "s390x"
    triplet: str  # GNU triplet of the target
    prefix: str  # prefix of the compiler and binutils ("" when native)
    sframe_version: int  # version the assembler/linker writes
    endian: str  # "little" or "big"
    abi_arch: int  # SFrame header abi_arch value
    qemu: Optional[str] = None  # qemu-user binary (in the sid root) for cross builds
    gdb: str = "gdb"  # the GDB that debugs its programs (in the root if any)

    @property
    def cross(self) -> bool:
        return self.qemu is not None

    @property
    def sysroot(self) -> Optional[str]:
        """Target library directory inside the root (qemu -L, GDB sysroot)."""
        return f"/usr/{self.triplet}" if self.cross else None

    @property
    def cc(self) -> str:
        return self.prefix + "gcc"

    @property
    def cxx(self) -> str:
        return self.prefix + "g++"

    def tool(self, name: str) -> str:
        """A binutils program for this target: objcopy, readelf, objdump, ..."""
        return self.prefix + name


_TOOLCHAINS = {
    "host": Toolchain("host", None, "x86_64", "x86_64-linux-gnu", "", 1, "little",
                      ABI_AMD64_LE),
    "trixie": Toolchain("trixie", "trixie", "x86_64", "x86_64-linux-gnu", "", 2,
                        "little", ABI_AMD64_LE),
    "sid": Toolchain("sid", "sid", "x86_64", "x86_64-linux-gnu", "", 3, "little",
                     ABI_AMD64_LE),
    "sid-aarch64": Toolchain("sid-aarch64", "sid", "aarch64", "aarch64-linux-gnu",
                             "aarch64-linux-gnu-", 3, "little", ABI_AARCH64_LE,
                             qemu="qemu-aarch64", gdb="gdb-multiarch"),
    "sid-s390x": Toolchain("sid-s390x", "sid", "s390x", "s390x-linux-gnu",
                           "s390x-linux-gnu-", 3, "big", ABI_S390X_BE,
                           qemu="qemu-s390x", gdb="gdb-multiarch"),
}


def toolchain(name: str | Toolchain) -> Toolchain:
    if isinstance(name, Toolchain):
        return name
    try:
        return _TOOLCHAINS[name]
    except KeyError:
        raise ValueError(f"unknown toolchain {name!r}; known: {TOOLCHAINS}") from None


# --------------------------------------------------------------------------
# Roots


# The roots scripts/roots.sh builds: toolchains (trixie: V2; sid: V3, GDB 18, LLDB 21, cross
# compilers, qemu-user, clang) and LLDB 23 (its python3-lldb cannot share sid's).
ROOTS = ("trixie", "sid", "lldb23")


def cache_dir() -> Path:
    """Same rule as scripts/roots.sh."""
    if os.environ.get("SFRAME_CACHE"):
        return Path(os.environ["SFRAME_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sframe-gdb"


def root_path(name: str) -> Path:
    """Directory of a root: "trixie", "sid", "lldb23", or a toolchain name ("/" for host)."""
    if name in _TOOLCHAINS:
        root = _TOOLCHAINS[name].root
        if root is None:
            return Path("/")
        name = root
    if name not in ROOTS:
        raise ValueError(f"unknown root {name!r}")
    return cache_dir() / "roots" / name


def roots_ready() -> bool:
    """True if every root exists (not whether its stamp is current)."""
    return all((root_path(r) / ".sframe-stamp").is_file() for r in ROOTS)


def ensure_roots() -> None:
    """Build the roots if needed (scripts/roots.sh; instant when cached).

    Raises RuntimeError with the script's output when that fails.
    """
    proc = subprocess.run(["bash", str(ROOTS_SH)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0 or not roots_ready():
        raise RuntimeError(f"scripts/roots.sh failed (exit {proc.returncode}):\n{proc.stdout}")


# --------------------------------------------------------------------------
# Running commands


def _under(path: Path, parent: Path) -> bool:
    try:
        path.relative_to(parent)
        return True
    except ValueError:
        return False


def _binds(extra: Iterable[os.PathLike | str], cwd) -> list[str]:
    """Directories to bind into a root: the checkout, cwd and `extra`.

    Anything under /tmp is already visible (inroot binds /tmp), and a path
    under another bound directory needs no bind of its own.
    """
    wanted = [REPO] + ([Path(cwd)] if cwd else []) + [Path(p) for p in extra]
    out: list[Path] = []
    for p in wanted:
        p = Path(os.path.realpath(p))
        if not p.is_dir():
            p = p.parent
        if _under(p, Path("/tmp")) or any(_under(p, q) for q in out):
            continue
        out = [q for q in out if not _under(q, p)] + [p]
    return [str(p) for p in out]


def wrap_argv(tc: str | Toolchain, argv: Sequence[str], binds: Iterable = (), cwd=None, root: Optional[str] = None,
              ) -> tuple[list[str], dict[str, str]]:
    """The argv (and environment) that runs `argv` in the toolchain's root (or in `root`, one
    of ROOTS).

    For the host it is `argv` itself.  Useful for pexpect-driven debuggers.
    """
    tc = toolchain(tc)
    env = dict(os.environ)
    argv = [str(a) for a in argv]
    root = root or tc.root
    if root is None:
        return argv, env
    env["SFRAME_BINDS"] = ":".join(_binds(binds, cwd))
    return ["bash", str(INROOT), str(root_path(root))] + argv, env


def run_in(tc: str | Toolchain, argv: Sequence[str], cwd=None, binds: Iterable = (),
           check: bool = False, timeout: Optional[float] = 600, input: Optional[str] = None,
           env: Optional[Mapping[str, str]] = None, root: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run argv with the toolchain's environment: directly for the host, else
    chrooted in its root, or in `root` (through scripts/inroot, with the checkout,
    cwd and `binds` bind-mounted).  Output is captured as text (stdout, stderr)."""
    full, full_env = wrap_argv(tc, argv, binds, cwd, root=root)
    if env:
        full_env.update(env)
    proc = subprocess.run(full, cwd=cwd, env=full_env, input=input, text=True, errors="backslashreplace",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{tc if isinstance(tc, str) else tc.name}: {shlex.join(full)} "
                           f"exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                           f"stderr:\n{proc.stderr}")
    return proc


def qemu_argv(tc: str | Toolchain, exe, args: Sequence[str] = (),
              gdb_port: Optional[int] = None, seed: Optional[int] = None,
              cpu: Optional[str] = None) -> list[str]:
    """argv (to run in the sid root) of a cross program under qemu-user;
    with gdb_port, qemu waits for GDB on that port (target remote :PORT);
    with seed, the guest's random bytes (AT_RANDOM: stack guard, pointer
    guard) are the same in every run; with cpu, that CPU model (qemu's
    default is its "max": on AArch64 with SVE and SME)."""
    tc = toolchain(tc)
    if not tc.cross:
        raise ValueError(f"{tc.name} is not a cross toolchain")
    argv = [tc.qemu, "-L", tc.sysroot] + (["-cpu", cpu] if cpu else [])
    if seed is not None:
        argv += ["-seed", str(seed)]
    if gdb_port is not None:
        argv += ["-g", str(gdb_port)]
    return argv + [str(exe)] + [str(a) for a in args]


def program_argv(tc: str | Toolchain, exe, args: Sequence[str] = ()) -> list[str]:
    """argv, to run in the toolchain's root, that runs a program built by it."""
    tc = toolchain(tc)
    if tc.cross:
        return qemu_argv(tc, exe, args)
    return [str(exe)] + [str(a) for a in args]


def run_program(tc: str | Toolchain, exe, args: Sequence[str] = (), **kw
                ) -> subprocess.CompletedProcess:
    """Run a program built by toolchain tc: natively, in its root, or under
    qemu-user in the sid root.  Keyword arguments as for run_in."""
    return run_in(tc, program_argv(tc, exe, args), **kw)


# --------------------------------------------------------------------------
# Fixtures and building

# Base flags of every build: debug info, SFrame from the assembler.
BASE_CFLAGS = ("-g", "-Wa,--gsframe")

# Optimisation variants built for every fixture.
VARIANTS: dict[str, tuple[str, ...]] = {
    "O2-nofp": ("-O2", "-fomit-frame-pointer"),
    "O0-fp": ("-O0", "-fno-omit-frame-pointer"),
    "O2-fp": ("-O2", "-fno-omit-frame-pointer"),
}

# Extra variants for one architecture: return-address signing on AArch64.
ARCH_VARIANTS: dict[str, dict[str, tuple[str, ...]]] = {
    "aarch64": {
        "O2-pac": ("-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret"),
        "O2-pacb": ("-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret+b-key"),
    },
}


@dataclass(frozen=True)
class Fixture:
    name: str
    functions: tuple[str, ...]  # the fixture's own named functions
    stops: tuple[str, ...]  # good breakpoint locations
    cflags: tuple[str, ...] = ()
    arch_cflags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ldflags: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # default command-line arguments
    library: Optional[str] = None  # source stem of a shared library it loads
    arch_variants: tuple[str, ...] = ()  # which ARCH_VARIANTS it gets

    @property
    def source(self) -> Path:
        return FIXTURES_DIR / f"{self.name}.c"


FIXTURES: dict[str, Fixture] = {f.name: f for f in (
    Fixture("frames", ("main", "level1", "level2", "level3", "leaf_work", "stop_here"),
            ("stop_here", "leaf_work"), arch_variants=("O2-pac", "O2-pacb")),
    Fixture("alloca", ("main", "use_vla", "use_alloca", "stop_here"), ("stop_here",)),
    Fixture("realign", ("main", "realigned_drap", "realigned", "stop_here"), ("stop_here",),
            arch_cflags={"x86_64": ("-mstackrealign",)}),
    Fixture("bigframe", ("main", "mid_frame", "huge_frame", "stop_here"), ("stop_here",)),
    Fixture("bigfunc", ("main", "big_function", "stop_here"), ("stop_here",)),
    Fixture("signal", ("main", "install", "raise_it", "handler", "in_handler", "stop_here"),
            ("stop_here", "handler")),
    Fixture("dlopen", ("main", "call_library", "exe_callback"), ("lib_stop_here",),
            ldflags=("-ldl", "-Wl,-rpath,$ORIGIN"), library="libfix"),
    Fixture("recurse", ("main", "descend", "descend_odd", "stop_here"), ("stop_here",),
            args=("50",), arch_variants=("O2-pac",)),
    Fixture("threads", ("main", "main_wait", "worker", "worker_chain", "thread_stop_here",
                        "stop_here"), ("thread_stop_here", "stop_here"),
            cflags=("-pthread",), ldflags=("-pthread",)),
    Fixture("shrinkwrap", ("main", "dispatch", "early_out", "stop_here"), ("stop_here",)),
    Fixture("floats", ("main", "outer", "relay", "middle", "eight", "inner", "stop_here"),
            ("stop_here",)),
)}

# Functions of the shared library built from tests/fixtures/libfix.c.
LIBRARY_FUNCTIONS = {"libfix": ("fix_entry", "lib_middle", "lib_stop_here")}


def variants_for(tc: str | Toolchain, fixture: str | Fixture) -> dict[str, tuple[str, ...]]:
    """Variant name -> optimisation flags, for this toolchain and fixture."""
    tc = toolchain(tc)
    fx = FIXTURES[fixture] if isinstance(fixture, str) else fixture
    out = dict(VARIANTS)
    extra = ARCH_VARIANTS.get(tc.arch, {})
    for v in fx.arch_variants:
        if v in extra:
            out[v] = extra[v]
    return out


def _compile_cmd(tc: Toolchain, sources: Sequence[Path], out: Path, cflags: Sequence[str],
                 ldflags: Sequence[str] = ()) -> list[str]:
    return [tc.cc, *BASE_CFLAGS, *cflags, "-o", str(out), *map(str, sources), *ldflags]


def _strip_eh_cmd(tc: Toolchain, src: Path, dst: Path) -> list[str]:
    return [tc.tool("objcopy"), "--remove-section=.eh_frame",
            "--remove-section=.eh_frame_hdr", "--remove-section=.debug_frame",
            str(src), str(dst)]


def _run_script(tc: Toolchain, cmds: Sequence[Sequence[str]], cwd: Path) -> None:
    """Run commands one after the other (stop at the first failure) in one
    process of the toolchain's environment."""
    script = "set -e\n" + "".join(shlex.join(c) + "\n" for c in cmds)
    run_in(tc, ["sh", "-c", script], cwd=cwd, check=True)


def library_cmds(tc: Toolchain, source: str, outdir: Path, cflags: Sequence[str] = (),
                 noeh: bool = False) -> tuple[list[list[str]], Path]:
    src = FIXTURES_DIR / f"{source}.c"
    out = outdir / f"{source}.so"
    cmds = [_compile_cmd(tc, [src], out, [*cflags, "-fPIC", "-shared"])]
    if noeh:
        (outdir / "noeh").mkdir(exist_ok=True)
        cmds.append(_strip_eh_cmd(tc, out, outdir / "noeh" / out.name))
    return cmds, out


def build_library(tc: str | Toolchain, source: str, outdir, cflags: Sequence[str] = (),
                  noeh: bool = False) -> Path:
    """Build tests/fixtures/SOURCE.c as OUTDIR/SOURCE.so (-shared -fPIC);
    with noeh, also OUTDIR/noeh/SOURCE.so without .eh_frame."""
    tc = toolchain(tc)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cmds, out = library_cmds(tc, source, outdir, cflags, noeh)
    _run_script(tc, cmds, outdir)
    return out


def build_cmds(tc: Toolchain, fx: Fixture, outdir: Path, cflags: Sequence[str],
               noeh: bool) -> tuple[list[list[str]], Path, Optional[Path]]:
    cmds: list[list[str]] = []
    lib = None
    allflags = [*cflags, *fx.cflags, *fx.arch_cflags.get(tc.arch, ())]
    if fx.library:
        lcmds, lib = library_cmds(tc, fx.library, outdir, cflags, noeh)
        cmds += lcmds
    out = outdir / fx.name
    cmds.append(_compile_cmd(tc, [fx.source], out, allflags, fx.ldflags))
    if noeh:
        (outdir / "noeh").mkdir(exist_ok=True)
        cmds.append(_strip_eh_cmd(tc, out, outdir / "noeh" / fx.name))
    return cmds, out, lib


def build(tc: str | Toolchain, fixture: str, outdir, cflags: Sequence[str] = VARIANTS["O2-nofp"],
          noeh: bool = False) -> Path:
    """Compile fixture (tests/fixtures/FIXTURE.c) with toolchain tc into
    OUTDIR/FIXTURE, with `-g -Wa,--gsframe`, `cflags` and the fixture's own
    flags.  A fixture that loads a library (dlopen) gets it built next to it
    (OUTDIR/libfix.so, found through $ORIGIN).  With noeh, copies without
    .eh_frame/.eh_frame_hdr go to OUTDIR/noeh/.  Returns the executable."""
    tc = toolchain(tc)
    fx = FIXTURES[fixture]
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cmds, out, _ = build_cmds(tc, fx, outdir, cflags, noeh)
    _run_script(tc, cmds, outdir)
    return out


def strip_eh(tc: str | Toolchain, src, dst) -> Path:
    """Copy binary src to dst without .eh_frame, .eh_frame_hdr and
    .debug_frame (with the toolchain's own objcopy), leaving .sframe as the
    only unwind information."""
    tc = toolchain(tc)
    src, dst = Path(src), Path(dst)
    run_in(tc, _strip_eh_cmd(tc, src, dst), cwd=dst.parent, binds=[src.parent], check=True)
    return dst


# --------------------------------------------------------------------------
# The corpus: every fixture, every toolchain, every variant


@dataclass(frozen=True)
class Build:
    """One built fixture program."""
    toolchain: str
    fixture: str
    variant: str
    path: Path  # the executable
    version: int  # SFrame version it must carry
    arch: str  # x86_64, aarch64, s390x
    cflags: tuple[str, ...]
    args: tuple[str, ...] = ()  # default arguments to run it with
    lib: Optional[Path] = None  # shared library it loads (dlopen), if any
    noeh: Optional[Path] = None  # copy without .eh_frame (lib copy beside it)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.toolchain, self.fixture, self.variant)

    @property
    def id(self) -> str:
        return f"{self.toolchain}-{self.fixture}-{self.variant}"

    @property
    def tc(self) -> Toolchain:
        return toolchain(self.toolchain)

    @property
    def noeh_lib(self) -> Optional[Path]:
        if self.lib is None or self.noeh is None:
            return None
        return self.noeh.parent / self.lib.name

    def argv(self, args: Optional[Sequence[str]] = None, noeh: bool = False) -> list[str]:
        """argv to run it in its toolchain's root (qemu for cross builds)."""
        exe = self.noeh if noeh else self.path
        return program_argv(self.toolchain, exe, self.args if args is None else args)

    def run(self, args: Optional[Sequence[str]] = None, noeh: bool = False, **kw
            ) -> subprocess.CompletedProcess:
        return run_in(self.toolchain, self.argv(args, noeh), **kw)


class Corpus(list):
    """A list of Build records, with lookups."""

    def get(self, toolchain: str, fixture: str, variant: str = "O2-nofp") -> Build:
        for b in self:
            if b.key == (toolchain, fixture, variant):
                return b
        raise KeyError((toolchain, fixture, variant))

    def select(self, toolchain=None, fixture=None, variant=None, arch=None) -> list[Build]:
        return [b for b in self
                if (toolchain is None or b.toolchain == toolchain)
                and (fixture is None or b.fixture == fixture)
                and (variant is None or b.variant == variant)
                and (arch is None or b.arch == arch)]


def corpus_plan(toolchains: Sequence[str] = TOOLCHAINS) -> list[tuple[str, str, str]]:
    """Keys (toolchain, fixture, variant) of every corpus build, in order;
    known without building anything (for test parametrisation)."""
    return [(t, f, v) for t in toolchains for f in FIXTURES for v in variants_for(t, f)]


def build_corpus(outdir, toolchains: Sequence[str] = TOOLCHAINS, noeh: bool = True,
                 jobs: Optional[int] = None) -> Corpus:
    """Build every fixture with every toolchain and variant into
    OUTDIR/TOOLCHAIN/VARIANT/, in parallel.  Roots must exist."""
    outdir = Path(outdir)
    work = []
    for key in corpus_plan(toolchains):
        t, f, v = key
        tc, fx = toolchain(t), FIXTURES[f]
        flags = variants_for(tc, fx)[v]
        d = outdir / t / v
        d.mkdir(parents=True, exist_ok=True)
        # A library is shared by the variant's directory: one fixture builds it.
        cmds, exe, lib = build_cmds(tc, fx, d, flags, noeh)
        rec = Build(t, f, v, exe, tc.sframe_version, tc.arch, tuple(flags), fx.args, lib,
                    d / "noeh" / f if noeh else None)
        work.append((tc, cmds, d, rec))

    def one(item):
        tc, cmds, d, _ = item
        _run_script(tc, cmds, d)

    # Big jobs first so the pool is not left waiting for one at the end.
    order = sorted(work, key=lambda w: w[3].fixture != "bigfunc")
    with ThreadPoolExecutor(max_workers=jobs or max(2, os.cpu_count() or 2)) as pool:
        for _ in pool.map(one, order):
            pass
    return Corpus(w[3] for w in work)


# --------------------------------------------------------------------------
# Inspecting SFrame


READELF_VERSIONS = {"host": (1,), "trixie": (2,), "sid": (2, 3)}  # what each can print


def readelf_sframe(path, which: str = "sid", check: bool = True) -> str:
    """`readelf --sframe` text of a binary, by the readelf of `which`: "sid"
    (binutils 2.47: V2 and V3; it refuses V1), "trixie" (2.44: V2) or "host"
    (2.40: V1 only).  With check=False, a failure gives stdout + stderr."""
    path = Path(path)
    if which not in READELF_VERSIONS:
        raise ValueError(f"no readelf {which!r}")
    proc = run_in(which, ["readelf", "--sframe", str(path)], binds=[path.parent], check=check)
    return proc.stdout if proc.returncode == 0 else proc.stdout + proc.stderr


@dataclass
class ReadelfFDE:
    """One function of `readelf --sframe` text."""
    index: int
    pc: int
    size: int
    attr: str = ""  # "S", "F", "SF" or ""
    pauth: Optional[str] = None  # "A"/"B" when printed
    mask: bool = False  # STARTPC[m]: a PC-type MASK FDE (PLT)
    # (start, cfa, fp, ra) as printed; start is an address, or for MASK
    # FDEs the raw offset; a row "RA undefined" has cfa = "RA undefined".
    rows: list = field(default_factory=list)


@dataclass
class ReadelfSFrame:
    version: int
    flags: list
    fixed_ra: Optional[int]
    fixed_fp: Optional[int]
    num_fdes: int
    num_fres: int
    fdes: list

    def at(self, pc: int) -> ReadelfFDE:
        """The FDE whose function starts at pc."""
        for f in self.fdes:
            if f.pc == pc:
                return f
        raise KeyError(hex(pc))


_FUNC_RE = re.compile(r"^\s*func idx \[(\d+)\]: pc = (0x[0-9a-fA-F]+), size = (\d+) bytes(.*)$")


def parse_readelf_sframe(text: str) -> ReadelfSFrame:
    """Parse the `readelf --sframe` text of one binary (one .sframe section)."""
    version, flags, fixed_ra, fixed_fp, nfdes, nfres = 0, [], None, None, 0, 0
    fdes: list[ReadelfFDE] = []
    in_flags = False
    for line in text.splitlines():
        st = line.strip()
        if not st:
            in_flags = False
            continue
        m = _FUNC_RE.match(line)
        if m:
            in_flags = False
            fde = ReadelfFDE(int(m.group(1)), int(m.group(2), 16), int(m.group(3)))
            for part in m.group(4).split(","):
                part = part.strip()
                if part.startswith("attr ="):
                    fde.attr = part.split("=", 1)[1].strip().strip('"')
                elif part.startswith("pauth ="):
                    fde.pauth = part.split("=", 1)[1].split()[0]
            fdes.append(fde)
        elif st.startswith("STARTPC"):
            if fdes:
                fdes[-1].mask = st.startswith("STARTPC[m]")
        elif st.startswith("Version:"):
            version = int(st.rsplit("_", 1)[1]) if "_" in st else 0
        elif st.startswith("Flags:"):
            in_flags = True
            flags += [f for f in st[len("Flags:"):].replace(",", " ").split() if f != "NONE"]
        elif in_flags and st.startswith("SFRAME_F_"):
            flags += st.replace(",", " ").split()
        elif st.startswith("CFA fixed RA offset:"):
            fixed_ra = int(st.rsplit(":", 1)[1])
        elif st.startswith("CFA fixed FP offset:"):
            fixed_fp = int(st.rsplit(":", 1)[1])
        elif st.startswith("Num FDEs:"):
            nfdes = int(st.rsplit(":", 1)[1])
        elif st.startswith("Num FREs:"):
            nfres = int(st.rsplit(":", 1)[1])
        elif fdes and re.match(r"^[0-9a-fA-F]{8,}\s", st):
            start, rest = st.split(None, 1)
            if rest.strip() == "RA undefined":
                row = (int(start, 16), "RA undefined", None, None)
            else:
                cols = rest.split()
                cols += [None] * (3 - len(cols))
                row = (int(start, 16), cols[0], cols[1], cols[2])
            fdes[-1].rows.append(row)
    return ReadelfSFrame(version, flags, fixed_ra, fixed_fp, nfdes, nfres, fdes)


def sframe_section(path, name: str = ".sframe") -> tuple[bytes, str, int]:
    """(contents, endianness "little"/"big", address) of a binary's .sframe,
    read with pyelftools.  Raises LookupError if it has none."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(name)
        if sec is None:
            raise LookupError(f"{path}: no {name} section")
        return sec.data(), ("little" if elf.little_endian else "big"), sec["sh_addr"]


def sframe_version(path) -> int:
    """Version byte of the binary's .sframe; checks the magic first."""
    data, endian, _ = sframe_section(path)
    if len(data) < 4 or int.from_bytes(data[0:2], endian) != SFRAME_MAGIC:
        raise ValueError(f"{path}: .sframe does not start with the SFrame magic")
    return data[2]


def function_symbols(path) -> dict[str, tuple[int, int]]:
    """name -> (address, size) of the binary's defined function symbols."""
    from elftools.elf.elffile import ELFFile

    out = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for secname in (".symtab", ".dynsym"):
            sec = elf.get_section_by_name(secname)
            if sec is None:
                continue
            for sym in sec.iter_symbols():
                if (sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF"
                        and sym.name and sym.name not in out):
                    out[sym.name] = (sym["st_value"], sym["st_size"])
    return out
