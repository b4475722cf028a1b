"""`sframe cfi PATH... --build-id-dir DIR` over trees (core.elf.sidetree): each build once, an
entry up to date left alone, the walk going on past bad files, the same files in one process or
several."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import CLI, REPO, sframe

from sframekit.core.elf.image import ElfImage, load_elf, section_headers
from sframekit.core.elf.notes import build_id_of, debug_file_path


def _build_id(path):
    return load_elf(str(path), lambda elf, _fh: build_id_of(elf, section_headers(elf), str(path)), "its notes")


def _entry(directory, path):
    return debug_file_path(str(directory), _build_id(path))


@pytest.fixture
def tree(corpus, tmp_path):
    """A tree as a system or a build has one: two copies of one build (one keeps `.eh_frame`),
    a hard link, links inside and out of the tree, another toolchain's build, a script, an object
    file, and a program whose SFrame section is malformed."""
    sid, host = corpus.get("sid", "frames", "O2-nofp"), corpus.get("host", "frames", "O2-nofp")
    root = tmp_path / "tree"
    for d in ("bin", "lib", "share", "obj"):
        (root / d).mkdir(parents=True)
    shutil.copy(sid.noeh, root / "bin" / "frames")
    shutil.copy(sid.path, root / "bin" / "frames-with-cfi")
    os.link(root / "bin" / "frames", root / "bin" / "frames-hardlink")
    os.symlink("../bin/frames", root / "lib" / "inside")
    os.symlink(str(host.path), root / "lib" / "outside")        # (out of the tree: not followed)
    os.symlink("/nonexistent", root / "lib" / "dangling")
    shutil.copy(host.noeh, root / "bin" / "frames-v1")
    (root / "share" / "README").write_text("not a program\n")
    (root / "share" / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "obj" / "a.c").write_text("int f(int x) { return x + 1; }\n")
    subprocess.run(["gcc", "-c", "-O2", "-Wa,--gsframe", "-o", str(root / "obj" / "a.o"), str(root / "obj" / "a.c")],
                   check=True)
    data = bytearray(sid.noeh.read_bytes())
    data[ElfImage(str(sid.noeh)).sframe.file_offset + 2] = 9        # SFrame version 9
    (root / "bin" / "broken").write_bytes(bytes(data))
    return root, sid, host


def _run(*args):
    got = sframe("cfi", *args)
    return got.returncode, got.stdout, got.stderr


def test_a_tree_is_written_once_per_build(tree, tmp_path):
    root, sid, host = tree
    out = tmp_path / "dir"
    code, text, err = _run(root, "--build-id-dir", out, "-j", "2")
    broken = root / "bin" / "broken"
    # One line for the bad file (a copy of the sid build, tried first: the build is written from
    # the next copy, and the walk goes on), then one summary line.
    assert code == 1 and err.count("\n") == 1 and err.startswith("%s: " % broken), err
    assert "malformed SFrame section at byte offset 0x2: unknown version 9" in err, err
    assert text.count("\n") == 1 and text.startswith("%s: 2 side files written, 0 up to date, " % out), text
    entries = sorted(p for p in (out / ".build-id").rglob("*.debug"))
    assert entries == sorted(Path(_entry(out, b.noeh)) for b in (sid, host)), entries
    # The copies of the sid build differ in their CFI: its entry covers every function, written
    # from the copy without .eh_frame; the host build has one copy.
    sframe("cfi", sid.noeh, "-o", tmp_path / "sid.debug", "--all", "-j", "1")
    sframe("cfi", host.noeh, "-o", tmp_path / "host.debug", "-j", "1")
    assert open(_entry(out, sid.noeh), "rb").read() == (tmp_path / "sid.debug").read_bytes()
    assert open(_entry(out, host.noeh), "rb").read() == (tmp_path / "host.debug").read_bytes()
    for e in entries:
        assert e.stat().st_mode & 0o777 == 0o644 & ~_umask(), oct(e.stat().st_mode)

    doc = json.loads(_run(root, "--build-id-dir", out, "--json")[1])
    by = {f["path"]: f for f in doc["files"]}
    assert set(by) == {str(root / "bin" / n) for n in ("frames", "frames-with-cfi", "frames-v1", "broken")}, sorted(by)
    assert {by[str(root / "bin" / n)]["outcome"] for n in ("frames", "frames-v1")} == {"up to date"}
    assert by[str(root / "bin" / "frames-with-cfi")]["outcome"] == "same build"
    assert by[str(root / "bin" / "frames-with-cfi")]["why"] == str(root / "bin" / "frames")
    assert by[str(broken)]["outcome"] == "failed"
    assert doc["counts"]["written"] == 0 and doc["counts"]["up to date"] == 2

    # One process writes the same files.
    one = tmp_path / "one"
    _run(root, "--build-id-dir", one, "-j", "1")
    for e in entries:
        assert e.read_bytes() == (one / e.relative_to(out)).read_bytes()

    # An entry altered is written again; a file this command did not write is left alone.
    with open(_entry(out, sid.noeh), "r+b") as fh:
        fh.truncate(100)
    foreign = _entry(out, host.noeh)
    os.unlink(os.path.join(out, ".sframe-cfi", _build_id(host.noeh).hex() + ".json"))
    code, text, err = _run(root, "--build-id-dir", out)
    assert "1 side file written, 0 up to date" in text, text
    assert "%s: %s is there and this command did not write it (a real debug file?): left alone\n" % (
        root / "bin" / "frames-v1", foreign) in err, err
    assert open(_entry(out, sid.noeh), "rb").read() == (tmp_path / "sid.debug").read_bytes()


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_one_program_says_what_became_of_it(tree, tmp_path):
    root, sid, _host = tree
    out = tmp_path / "dir"
    code, text, err = _run(root / "bin" / "frames", "--build-id-dir", out)
    entry = _entry(out, sid.noeh)
    assert code == 0 and not err and text.startswith("%s: " % entry) and " functions with SFrame written as " in text
    code, again, err = _run(root / "bin" / "frames", "--build-id-dir", out)
    n = text.split(": ", 1)[1].split()[0]
    assert code == 0 and not err and again.startswith("%s: up to date (%s functions with SFrame written as " % (entry, n))
    code, text, err = _run(root / "bin" / "frames-with-cfi", "--build-id-dir", tmp_path / "other")
    assert code == 0 and text == "%s: no side file needed: its own DWARF CFI covers every function its SFrame does\n" % (
        root / "bin" / "frames-with-cfi"), text
    for args, msg in (((root / "share" / "README",), "not an ELF file"),
                      ((root / "obj" / "a.o",), "an ELF file of type ET_REL, not a program or a shared library")):
        code, text, err = _run(*args, "--build-id-dir", tmp_path / "x")
        assert code == 1 and text == "" and err.startswith("sframe: %s: %s" % (args[0], msg)), err


def test_usage(tree, tmp_path):
    root, _sid, _host = tree
    for args, msg in (((root / "bin" / "frames", root / "bin" / "frames-v1", "-o", tmp_path / "x"),
                       "-o OUT takes one program; for several, or a tree, give --build-id-dir DIR"),
                      ((root, "-o", tmp_path / "x"), "-o OUT takes one program"),
                      ((root, "--build-id-dir", tmp_path, "--debug-file", root / "bin" / "frames"),
                       "--debug-file DBG goes with one program, not several")):
        code, text, err = _run(*args)
        assert code == 2 and text == "" and msg in err, (args, err)


def test_progress_on_a_terminal(tree, tmp_path):
    """On a terminal, a progress line on standard error, rewritten in place and cleared at the
    end; the summary line stays."""
    import pexpect
    root, _sid, _host = tree
    child = pexpect.spawn(sys.executable, [str(CLI), "cfi", str(root), "--build-id-dir", str(tmp_path / "dir")],
                          cwd=str(REPO), encoding="utf-8", timeout=300, dimensions=(24, 200))
    child.expect(pexpect.EOF)
    child.close()
    text = child.before
    assert "\rsframe cfi: 1/" in text.replace("\x1b[K", "") and " looked at  " in text, repr(text)
    assert re.search(r"sframe cfi: \d+/\d+ written  ", text), repr(text)
    assert re.search(r"^%s: 2 side files written, 0 up to date, .*, 1 failed \(\d+\.\d s, \d+ process(es)?\)\r?$"
                     % re.escape(str(tmp_path / "dir")), text, re.M), repr(text)
    assert child.exitstatus == 1


def test_across_runs_and_odd_inputs(tree, tmp_path):
    """A run over the copy without `.eh_frame`, then one over the copy with it: the entry still
    covers every function (the first copy's clients need them).  A named FIFO is no regular file."""
    root, sid, _host = tree
    out = tmp_path / "dir"
    first = json.loads(_run(root / "bin" / "frames", "--build-id-dir", out, "--json")[1])["files"][0]
    assert first["outcome"] == "written" and first["skipped"] == 0, first
    code, text, err = _run(root / "bin" / "frames-with-cfi", "--build-id-dir", out, "--json")
    second = json.loads(text)["files"][0]
    assert second["outcome"] == "written" and second["functions"] == first["functions"], second
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, text, err = _run(fifo, root / "bin" / "frames-v1", "--build-id-dir", out)
    assert code == 1 and err == "%s: not a regular file\n" % fifo and "1 side file written" in text, (text, err)
