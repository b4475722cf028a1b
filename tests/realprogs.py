"""Real open-source programs, built at test time from Debian's source packages with every
toolchain: what users run, where the fixtures are small.

The upstream tarball of each source package (the `.orig` one) is fetched once with apt, through a
private apt state that lists only `deb-src` of the mirror the roots come from (scripts/roots.sh
mirror), and unpacked under the cache directory; nothing is committed.  Each program is built
with each toolchain as a user building it for debugging without DWARF CFI would:
`-O2 -fomit-frame-pointer -g -Wa,--gsframe`, the compiler run in the toolchain's root.  Builds
are cached under the cache directory too, keyed by the toolchain's compiler version, the flags and
the recipe, so a second run (and CI, which reuses the cache) builds nothing anew.

    python3 tests/realprogs.py [TOOLCHAIN ...]     # build them all, print where they are
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import toolchains as T

FLAGS = ("-O2", "-fomit-frame-pointer", *T.BASE_CFLAGS)


@dataclass(frozen=True)
class Program:
    name: str           # the program's name here
    package: str        # Debian source package
    sources: tuple      # globs of the C files, relative to the unpacked tree (`!glob` removes)
    includes: tuple = ()
    defines: tuple = ()
    libs: tuple = ("-lm",)
    args: tuple = ()     # a workload that recurses (for the debuggers' tests)


PROGRAMS = {
    # A register-based bytecode interpreter: a large switch-dispatched loop (luaV_execute), a
    # recursive-descent parser and code generator, recursion between C and Lua calls.
    "lua": Program("lua", "lua5.4", ("src/*.c", "!src/luac.c"), defines=("-DLUA_USE_LINUX",),
                   libs=("-lm", "-ldl")),
    # A compressor: hand-tuned loops under heavy register pressure, many callee-saved registers.
    "zstd": Program("zstd", "libzstd", ("lib/common/*.c", "lib/compress/*.c", "lib/decompress/*.c",
                                        "lib/dictBuilder/*.c", "programs/*.c"),
                    includes=("lib", "lib/common", "programs"),
                    defines=("-DZSTD_NOBENCH", "-DZSTD_NODICT", "-DZSTD_NOTRACE", "-DZSTD_DISABLE_ASM",
                             "-DZSTD_LEGACY_SUPPORT=0", "-DZSTD_MULTITHREAD=0", "-DBACKTRACE_ENABLE=0"),
                    libs=()),
}


def _apt_options(state: Path) -> list:
    return ["-o", "Dir::Etc::SourceList=%s" % (state / "sources.list"), "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", "Dir::State::Lists=%s" % (state / "lists"), "-o", "Dir::Cache=%s" % (state / "cache"),
            "-o", "APT::Sandbox::User=root", "-q"]


def source_tree(package: str) -> Path:
    """The unpacked upstream tree of a Debian source package (fetched once, then cached)."""
    base = T.cache_dir() / "sources"
    done = base / package / ".unpacked"
    if done.exists():
        return Path(done.read_text().strip())
    state = base / ".apt"
    for d in ("lists/partial", "cache/archives/partial"):
        (state / d).mkdir(parents=True, exist_ok=True)
    mirror = subprocess.run(["bash", str(T.REPO / "scripts" / "roots.sh"), "mirror"], capture_output=True,
                            text=True, check=True).stdout.split()[0]
    (state / "sources.list").write_text("deb-src %s sid main\n" % mirror)
    opts = _apt_options(state)
    if not (state / "lists" / ".updated").exists():
        subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, text=True)
        (state / "lists" / ".updated").touch()
    fetch = base / package / "fetch"
    fetch.mkdir(parents=True, exist_ok=True)
    # Only the upstream tarball is needed (the mirror may not serve the Debian parts): apt's
    # non-zero exit for those is ignored, the tarball's presence is what counts.
    subprocess.run(["apt-get", *opts, "source", "--download-only", package], cwd=fetch, capture_output=True, text=True)
    tarballs = sorted(p for p in fetch.glob("*.orig.tar.*") if "orig-" not in p.name)
    if not tarballs:
        raise RuntimeError("apt-get source %s fetched no upstream tarball from %s" % (package, mirror))
    with tarfile.open(tarballs[0]) as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(base / package, filter="data") if sys.version_info >= (3, 12) else tar.extractall(base / package)
    tree = base / package / top
    done.write_text(str(tree))
    return tree


def _files(tree: Path, globs: Sequence[str]) -> list:
    keep: list = []
    for g in globs:
        if g.startswith("!"):
            drop = set(glob.glob(str(tree / g[1:])))
            keep = [f for f in keep if f not in drop]
        else:
            keep += sorted(glob.glob(str(tree / g)))
    return [os.path.relpath(f, tree) for f in keep]


def compiler_version(tc: T.Toolchain) -> str:
    return T.run_in(tc, [tc.cc, "--version"], check=True).stdout.splitlines()[0]


def build(tc_name: str, name: str) -> Path:
    """The program built with the toolchain (cached): its path."""
    tc = T.toolchain(tc_name)
    prog = PROGRAMS[name]
    tree = source_tree(prog.package)
    files = _files(tree, prog.sources)
    recipe = repr((compiler_version(tc), FLAGS, prog, files, tree.name))
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    out_dir = T.cache_dir() / "realprogs" / tc.name / ("%s-%s" % (name, key))
    exe = out_dir / name
    if exe.exists():
        return exe
    obj_dir = out_dir / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)
    cflags = [*FLAGS, *("-I" + str(tree / i) for i in prog.includes), *prog.defines]
    objs = [str(obj_dir / (f.replace("/", "_") + ".o")) for f in files]
    compile_lines = "".join(shlex.join([tc.cc, *cflags, "-c", str(tree / f), "-o", o]) + "\n" for f, o in zip(files, objs))
    (out_dir / "compile.list").write_text(compile_lines)
    script = ("set -e\ntr '\\n' '\\0' < %s | xargs -0 -P2 -n1 sh -c\n%s\n" % (
        shlex.quote(str(out_dir / "compile.list")),
        shlex.join([tc.cc, *FLAGS, "-o", str(exe) + ".tmp", *objs, *prog.libs])))
    T.run_in(tc, ["sh", "-c", script], cwd=out_dir, binds=[tree, out_dir], check=True, timeout=1800)
    os.replace(str(exe) + ".tmp", exe)
    for o in objs:
        os.unlink(o)
    return exe


if __name__ == "__main__":
    for tcn in sys.argv[1:] or T.TOOLCHAINS:
        for pname in PROGRAMS:
            print(tcn, pname, build(tcn, pname), flush=True)
