"""Real open-source programs, built at test time from Debian's source packages with every
toolchain: what users run, where the fixtures are small.

The upstream tarball of each source package (the `.orig` one) is fetched once with apt, through a
private apt state that lists only `deb-src` of the mirror the roots come from (scripts/roots.sh
mirror), and unpacked under the cache directory; nothing is committed.  Each program is built
with each toolchain as a user building it for debugging without DWARF CFI would:
`-O2 -fomit-frame-pointer -g -Wa,--gsframe`, the compiler run in the toolchain's root.  Builds
are cached under the cache directory too, keyed by the toolchain's compiler version, the flags and
the recipe, so a second run (and CI, which reuses the cache) builds nothing anew.

    python3 tests/helpers/realprogs.py [TOOLCHAIN ...]     # build them all, print where they are
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import shlex
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from . import toolchains as T

FLAGS = ("-O2", "-fomit-frame-pointer", *T.BASE_CFLAGS)


@dataclass(frozen=True)
class Workload:
    """A run of the program that recurses deeply, and where the debuggers' tests stop inside it."""
    files: tuple        # (name, text): input files written beside the program
    args: tuple         # its arguments; "{dir}" is the directory of those files
    stop: str           # the function to break in ...
    ignore: int         # ... after letting this many hits pass
    depth: int = 30     # frames at least on the stack there


@dataclass(frozen=True)
class Program:
    name: str           # the program's name here
    package: str        # Debian source package
    sources: tuple      # globs of the C and C++ files, relative to the unpacked tree (`!glob` removes)
    smoke: tuple        # (arguments, text its output must contain[, exit status]): it works
    deep: Optional[Workload] = None
    includes: tuple = ()
    defines: tuple = ()
    libs: tuple = ("-lm",)
    prepare: str = ""   # shell commands run once in the tree, on the host, before building

    def recipe(self) -> str:
        """What the build depends on, in the form the cached builds were first keyed by (so that
        adding a field here rebuilds nothing)."""
        text = "Program(name=%r, package=%r, sources=%r, includes=%r, defines=%r, libs=%r, args=())" % (
            self.name, self.package, self.sources, self.includes, self.defines, self.libs)
        return text + self.prepare

    @property
    def cplusplus(self) -> bool:
        return any(s.endswith(".cpp") for s in self.sources)


def _nested(open_: str, inner: str, close: str, depth: int) -> str:
    return open_ * depth + inner + close * depth


def _words(n: int) -> str:
    """n words of a small vocabulary with numbers, the same every time: text that compresses."""
    vocabulary = ("alpha", "beta", "gamma", "delta", "frame", "stack", "unwind", "sframe", "dwarf", "lua")
    return " ".join("%s%d" % (vocabulary[k * 7 % 10], k * 7919 % 1000) for k in range(n)) + "\n"


PROGRAMS = {
    # A register-based bytecode interpreter: a large switch-dispatched loop (luaV_execute), a
    # recursive-descent parser and code generator, recursion between C and Lua calls.  The deep
    # stop: 40 nested parentheses, each a few C frames (subexpr, simpleexp, suffixedexp,
    # primaryexp, ...); the 70th call of luaX_next is inside them.
    "lua": Program("lua", "lua5.4", ("src/*.c", "!src/luac.c"), defines=("-DLUA_USE_LINUX",),
                   libs=("-lm", "-ldl"), smoke=(("-e", "print(string.format('%d', 6 * 7))"), "42"),
                   deep=Workload((("deep.lua", "return " + _nested("(", "1", ")", 40) + "\n"),),
                                 ("{dir}/deep.lua",), "luaX_next", 70)),
    # A compressor: hand-tuned loops under heavy register pressure, many callee-saved registers.
    "zstd": Program("zstd", "libzstd", ("lib/common/*.c", "lib/compress/*.c", "lib/decompress/*.c",
                                        "lib/dictBuilder/*.c", "programs/*.c"),
                    includes=("lib", "lib/common", "programs"),
                    defines=("-DZSTD_NOBENCH", "-DZSTD_NODICT", "-DZSTD_NOTRACE", "-DZSTD_DISABLE_ASM",
                             "-DZSTD_LEGACY_SUPPORT=0", "-DZSTD_MULTITHREAD=0", "-DBACKTRACE_ENABLE=0"),
                    libs=(), smoke=(("-V",), "Zstandard"),
                    # The deep stop: not deep (zstd does not recurse), in the second block's
                    # double-fast match finder, under the file-compression driver, 8 frames (14 with inlined ones).
                    deep=Workload((("in.txt", _words(40000)),), ("-q", "-f", "-3", "{dir}/in.txt", "-o", "{dir}/out.zst"),
                                  "ZSTD_compressBlock_doubleFast", 1, depth=8)),
    # SQL: the amalgamation and its shell (generated from the source tree by its own build, with
    # its bundled Jim Tcl), a VDBE bytecode engine switch-dispatched in one huge function, a code
    # generator that recurses through nested expressions.  The deep stop: in the code generator,
    # 20 levels of sqlite3ExprCodeTarget / sqlite3ExprCodeTemp into a 30-deep sum.
    "sqlite": Program("sqlite", "sqlite3", ("bld/sqlite3.c", "bld/shell.c"), includes=("bld",),
                      defines=("-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION=1"),
                      prepare="mkdir -p bld && cd bld && ../configure >/dev/null && make sqlite3.c shell.c >/dev/null",
                      smoke=((":memory:", "select 6*7;"), "42"),
                      deep=Workload((("deep.sql", "select " + _nested("x+(", "x", ")", 30) + " from (select 1 as x);\n"),),
                                    ("-init", "{dir}/deep.sql", ":memory:"), "sqlite3ExprCodeTarget", 45)),
    # C++: a JSON library and its test runner: a recursive-descent parser (readValue, readArray,
    # readObject), exceptions, std::string, std::map and std::deque, inlined templates.  The deep
    # stop: the 51st readArray of 60 nested arrays.
    "jsoncpp": Program("jsoncpp", "libjsoncpp", ("src/lib_json/*.cpp", "src/jsontestrunner/main.cpp"),
                       includes=("include",), libs=(),
                       smoke=(("--json-config",), "JSON_NO_INT64=0", 3),   # (then: "no input file")
                       deep=Workload((("deep.json", _nested("[", "1", "]", 60) + "\n"),),
                                     ("--parse-only", "{dir}/deep.json"), "Json::OurReader::readArray", 50)),
}


def prepared(prog: Program) -> Path:
    """The program's source tree, its `prepare` commands run (once)."""
    tree = source_tree(prog.package)
    if prog.prepare:
        stamp = tree / (".prepared-" + hashlib.sha256(prog.prepare.encode()).hexdigest()[:12])
        if not stamp.exists():
            subprocess.run(["sh", "-c", "set -e; " + prog.prepare], cwd=tree, check=True, capture_output=True,
                           text=True, timeout=1800)
            stamp.touch()
    return tree


def _apt_options(state: Path) -> list:
    return ["-o", "Dir::Etc::SourceList=%s" % (state / "sources.list"), "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", "Dir::State::Lists=%s" % (state / "lists"), "-o", "Dir::Cache=%s" % (state / "cache"),
            "-o", "APT::Sandbox::User=root", "-q"]


@contextlib.contextmanager
def _locked(directory: Path):
    """Hold a lock on a cache directory (two test workers may want the same program at once)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def source_tree(package: str) -> Path:
    """The unpacked upstream tree of a Debian source package (fetched once, then cached)."""
    with _locked(T.cache_dir() / "sources"):
        return _source_tree(package)


def _source_tree(package: str) -> Path:
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
    with _locked(T.cache_dir() / "realprogs"):
        return _build(tc_name, name)


def _build(tc_name: str, name: str) -> Path:
    tc = T.toolchain(tc_name)
    prog = PROGRAMS[name]
    tree = prepared(prog)
    files = _files(tree, prog.sources)
    recipe = "(%r, %r, %s, %r, %r)" % (compiler_version(tc), FLAGS, prog.recipe(), files, tree.name)
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    out_dir = T.cache_dir() / "realprogs" / tc.name / ("%s-%s" % (name, key))
    exe = out_dir / name
    if exe.exists():
        return exe
    obj_dir = out_dir / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)
    cflags = [*FLAGS, *("-I" + str(tree / i) for i in prog.includes), *prog.defines]
    objs = [str(obj_dir / (f.replace("/", "_") + ".o")) for f in files]
    compile_lines = "".join(shlex.join([tc.cxx if f.endswith(".cpp") else tc.cc, *cflags, "-c", str(tree / f), "-o", o])
                            + "\n" for f, o in zip(files, objs))
    (out_dir / "compile.list").write_text(compile_lines)
    script = ("set -e\ntr '\\n' '\\0' < %s | xargs -0 -P2 -n1 sh -c\n%s\n" % (
        shlex.quote(str(out_dir / "compile.list")),
        shlex.join([tc.cxx if prog.cplusplus else tc.cc, *FLAGS, "-o", str(exe) + ".tmp", *objs, *prog.libs])))
    T.run_in(tc, ["sh", "-c", script], cwd=out_dir, binds=[tree, out_dir], check=True, timeout=1800)
    os.replace(str(exe) + ".tmp", exe)
    for o in objs:
        os.unlink(o)
    return exe


def objects(tc_name: str, name: str) -> Path:
    """The program's object files, in a static archive (`objects.a` beside the cached program, made
    by the toolchain's own `ar`): compiled again from the build's own command lines, once."""
    exe = build(tc_name, name)
    archive = exe.parent / "objects.a"
    with _locked(T.cache_dir() / "realprogs"):
        if archive.exists():
            return archive
        tc = T.toolchain(tc_name)
        lines = (exe.parent / "compile.list").read_text().splitlines()
        objs = [shlex.split(line)[-1] for line in lines]
        script = ("set -e\ntr '\\n' '\\0' < %s | xargs -0 -P2 -n1 sh -c\n%s\n" % (
            shlex.quote(str(exe.parent / "compile.list")),
            shlex.join([tc.tool("ar"), "rc", str(archive) + ".tmp", *objs])))
        T.run_in(tc, ["sh", "-c", script], cwd=exe.parent, binds=[prepared(PROGRAMS[name]), exe.parent], check=True,
                 timeout=1800)
        os.replace(str(archive) + ".tmp", archive)
        for o in objs:
            os.unlink(o)
        return archive


if __name__ == "__main__":
    for tcn in sys.argv[1:] or T.TOOLCHAINS:
        for pname in PROGRAMS:
            print(tcn, pname, build(tcn, pname), flush=True)
