"""Every input readelf takes: `sframe dump` and `sframe check` of several files, of archives and
of thin archives (core.elf.archive), against binutils' readelf on the same arguments.

Each toolchain's objects (helpers.objects; clang-23's too) go into an archive and a thin archive
made by the toolchain's own `ar`, with an object assembled without `--gsframe` and a text file
among the members; the command line names an object, both archives and another object.

* V3 (sid: x86-64, AArch64, s390x) and clang-23's V2 objects: `sframe dump` prints what readelf
  2.47 prints, byte for byte, and exits as it does (1: a member is not ELF); each warning and error
  of readelf's has a line of ours naming the same member.
* gas 2.44's V2 objects (trixie) and V1 (host): readelf 2.47 reads gas 2.44's start fields from
  the wrong place and readelf 2.40/2.44 relocate nothing (tests/test_objects.py compares each
  object with them, line by line): here the `File:` lines are readelf's own (2.47; 2.40 for V1,
  which 2.47 refuses), and each file's text is what `sframe dump` prints for that object alone.
* `sframe check` of the same: each member's report is the one-file check of that member, then one
  summary line; its exit status is the worst.
"""

import re
import shlex
from pathlib import Path

import pytest
from helpers import toolchains as T
from helpers.cli import sframe
from helpers.objects import usable

CLANG = ("clang-23", "-g", "-O2", "-fomit-frame-pointer", "-Wa,--gsframe", "-Wa,--allow-experimental-sframe")
CASES = ("host", "trixie", "sid", "sid-aarch64", "sid-s390x", "clang")
# readelf 2.47 prints exactly these (V3, and clang-23's V2 objects, whose start fields it reads right)
EXACT = ("sid", "sid-aarch64", "sid-s390x", "clang")


@pytest.fixture(scope="module")
def libraries(objects, tmp_path_factory):
    """{case: (work, objects, the command line's arguments)}."""
    out = {}
    for case in CASES:
        tc = T.toolchain("sid" if case == "clang" else case)
        work = tmp_path_factory.mktemp("inputs-" + case)
        if case == "clang":
            objs = []
            for fx in ("frames", "recurse", "realign"):
                obj = work / ("clang-%s.o" % fx)
                T.run_in(tc, [*CLANG, "-c", str(T.FIXTURES_DIR / ("%s.c" % fx)), "-o", str(obj)], cwd=work, check=True)
                objs.append(obj)
        else:
            objs = usable(objects[case])
        plain = work / "plain.o"                          # (no --gsframe: no .sframe)
        T.run_in(tc, [tc.cc, "-O2", "-c", str(T.FIXTURES_DIR / "frames.c"), "-o", str(plain)], cwd=work, check=True)
        (work / "notes.txt").write_text("not an object\n")
        members = [str(p) for p in objs[1:]] + [str(plain), str(work / "notes.txt")]
        ar = "ar" if case == "clang" else tc.tool("ar")
        script = "set -e\ncd %s\n" % shlex.quote(str(work)) + "".join(
            "%s %s %s %s\n" % (ar, flags, name, " ".join(map(shlex.quote, members)))
            for flags, name in (("rc", "lib.a"), ("rcT", "thin.a")))
        T.run_in(tc, ["sh", "-c", script], cwd=work, binds=sorted({str(Path(m).parent) for m in members}), check=True)
        out[case] = (work, objs, [str(objs[0]), str(work / "lib.a"), str(work / "thin.a"), str(objs[-1])])
    return out


def _readelf(which, args, work):
    got = T.run_in(which, ["readelf", "--sframe", *args], cwd=work, binds=[work] + [str(Path(a).parent) for a in args])
    return got.stdout, got.stderr, got.returncode


def _blocks(text):
    """[(name, text)] of a multi-file dump, split at its `File: NAME` lines."""
    parts = re.split(r"^\nFile: (.*)\n", "\n" + text if text.startswith("File:") else text, flags=re.M)
    assert parts[0] == "", parts[0][:200]
    return list(zip(parts[1::2], parts[2::2]))


def _objects_by_name(work, objs):
    """{`File:` name: the object it stands for} of lib.a's and thin.a's members and the files."""
    out = {}
    for name, _text in _blocks(sframe("dump", work / "lib.a", work / "thin.a").stdout):
        m = re.match(r"^.*[(\[](.*)[)\]]$", name)
        inner = Path(m.group(1))
        out[name] = inner if inner.is_absolute() else (work / inner).resolve() if "[" in name else \
            next(p for p in list(objs) + [work / "plain.o"] if p.name == inner.name)
    return out


@pytest.mark.parametrize("case", CASES)
def test_dump_of_files_and_archives(libraries, case):
    work, objs, args = libraries[case]
    code, out, err = sframe("dump", *args)
    ref_out, ref_err, ref_code = _readelf("host" if case == "host" else "sid", args, work)
    assert code == ref_code == 1, (code, ref_code, err, ref_err)
    names = [n for n, _t in _blocks(out)]
    assert names == [n for n, _t in _blocks(ref_out)], (names, ref_out[:3000])
    members = _objects_by_name(work, objs)
    # the first object, each archive's members but the text file (readelf leaves it out too), the last
    assert len(names) == 2 + 2 * len(objs) and len(members) == 2 * len(objs), names
    if case in EXACT:
        assert out == ref_out
    for name, text in _blocks(out):
        obj = members.get(name, Path(name))
        if obj.name == "plain.o":
            assert text == "" and "sframe: warning: %s: no SFrame section (.sframe)\n" % name in err, (name, err)
        else:
            alone = sframe("dump", obj)
            assert alone.returncode == 0 and text == alone.stdout, name
    # readelf's complaints: the text file in each archive (an error), plain.o in each (a warning);
    # ours name each member as the File: lines do
    assert [ln for ln in ref_err.splitlines() if ln.startswith("readelf: Error:")] == [
        ln for ln in ref_err.splitlines() if ln.startswith("readelf: Error:") and "notes.txt" in ln] and \
        ref_err.count("readelf: Error:") == 2 and ref_err.count("readelf: Warning:") == 2, ref_err
    notes = [n for n in names if n.endswith("plain.o)") or n.endswith("plain.o]")]
    assert len(notes) == 2 and all(n.replace("plain.o", "notes.txt") + ": not an ELF file\n" in err for n in notes), err
    assert err.count("not an ELF file") == 2 and err.count("no SFrame section") == 2, err


@pytest.mark.parametrize("case", CASES)
def test_check_of_files_and_archives(libraries, case):
    work, objs, args = libraries[case]
    code, out, err = sframe("check", *args)
    assert code == 2, (code, err)                 # (the text file: a file error)
    lines = out.splitlines()
    summary = lines.pop()
    assert summary == "sframe check: %d files: %d agree, 0 disagree, 2 without SFrame, 2 failed" % (
        2 + 2 * (len(objs) + 1), 2 * len(objs)), summary
    text = "\n".join(lines) + "\n"
    members = _objects_by_name(work, objs)
    for name, obj in members.items():
        if obj.name == "plain.o":
            assert "sframe: warning: %s: no SFrame section (.sframe)\n" % name in err, err
            continue
        alone = sframe("check", obj)
        assert alone.returncode == 0, alone.stderr
        assert alone.stdout.replace(str(obj), name) in text, (name, text[:3000])
    assert sframe("check", args[0]).stdout in text


def test_a_malformed_archive_is_one_line(tmp_path):
    """An archive whose member size is no decimal number (a byte Python's isdigit takes: "²"), or
    whose member runs past its end: one line naming the byte offset, and the other inputs go on."""
    header = b"a.o/            0           0     0     644     %s`\n"
    cases = ((b"\xb2         ", "a member's size is not a decimal number", 0x8 + 48),
             (b"999       ", "the member's 999 bytes run past the end of the file", 0x8 + 48))
    for size, what, offset in cases:
        bad = tmp_path / "bad.a"
        bad.write_bytes(b"!<arch>\n" + header % size + b"\x7fELF")
        code, out, err = sframe("dump", bad, tmp_path / "missing.o")
        assert code == 1 and out == "", (out, err)
        lines = err.splitlines()
        assert lines[0].startswith("sframe: %s: malformed archive at byte offset %#x: %s" % (bad, offset, what)), err
        assert lines[1:] == ["sframe: %s: no such file" % (tmp_path / "missing.o")], err
