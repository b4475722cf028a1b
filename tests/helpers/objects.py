"""Object files (`gcc -c`, `ld -r`) of the fixtures, built with every toolchain: the `objects`
fixture (tests/conftest.py) of the tests of relocatable SFrame sections."""

from . import toolchains as T

FIXTURES = ("frames", "recurse", "realign", "bigfunc", "signal", "threads")
CFLAGS = ("-g", "-Wa,--gsframe", "-O2", "-fomit-frame-pointer")


# `ld -r` before binutils 2.47 (2.40 on the host: V1; 2.44 in trixie: V2) merges the FDEs of its
# inputs into one table but leaves the second input's relocations where that input's FDEs were
# before the merge (past the merged table): such a section cannot be relocated, and saying so is
# all that is right.  readelf 2.47 applies them anyway, into the FRE data.
STALE_RELOCATIONS = {"host-ldr.o", "trixie-ldr.o"}


def object_names(tc):
    return ["%s-%s.o" % (tc, fx) for fx in FIXTURES] + ["%s-frames-fs.o" % tc, "%s-ldr.o" % tc]


def usable(paths):
    return [p for p in paths if p.name not in STALE_RELOCATIONS]


def build_objects(work):
    """{toolchain: [object paths]}: each fixture compiled with -c, frames.c also with
    -ffunction-sections, and an `ld -r` of that and libfix.c (-fPIC)."""
    out = {}
    for name in T.TOOLCHAINS:
        tc = T.toolchain(name)
        cmds = [[tc.cc, *CFLAGS, "-c", str(T.FIXTURES_DIR / ("%s.c" % fx)), "-o", "%s-%s.o" % (name, fx)]
                for fx in FIXTURES]
        cmds.append([tc.cc, *CFLAGS, "-ffunction-sections", "-c", str(T.FIXTURES_DIR / "frames.c"),
                     "-o", "%s-frames-fs.o" % name])
        cmds.append([tc.cc, *CFLAGS, "-fPIC", "-c", str(T.FIXTURES_DIR / "libfix.c"), "-o", "%s-libfix.o" % name])
        cmds.append([tc.tool("ld"), "-r", "-o", "%s-ldr.o" % name, "%s-frames-fs.o" % name, "%s-libfix.o" % name])
        T._run_script(tc, cmds, work)
        out[name] = [work / n for n in object_names(name)]
    return out
