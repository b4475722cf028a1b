"""Packaging: an installed copy claims only the package name `sframekit`, and GDB and LLDB load
it with the one line `sframe gdbinit` / `sframe lldbinit` print.

The copy is installed with pip into a fresh virtual environment (Debian's Python, the one GDB 13
and LLDB 16 embed; its setuptools builds the wheel, so no index is needed), from a copy of the
checkout so that the build leaves nothing behind in it.
"""

import importlib
import os
import pkgutil
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"
FIXTURE = r"""
int leaf(int x) { return x * 3; }
int middle(int x) { return leaf(x) + 1; }
int main(void) { return middle(2) - 7; }
"""


def test_every_core_module_imports():
    """Every module of the core, in every subpackage, imports on its own (annotations and import
    cycles included)."""
    import sframekit.core as core
    names = [m.name for m in pkgutil.walk_packages(core.__path__, "sframekit.core.")]
    assert "sframekit.core.unwind.unwinder" in names and "sframekit.core.arch.abi" in names
    for name in names:
        importlib.import_module(name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv directory, site-packages directory) with this checkout pip-installed."""
    work = tmp_path_factory.mktemp("pkg")
    src = work / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", ".hypothesis"))
    venv = work / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-deps", str(src)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    assert pip.returncode == 0, pip.stdout
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, stdout=subprocess.PIPE, text=True).stdout.strip())
    return venv, site


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("prog")
    (d / "p.c").write_text(FIXTURE)
    exe = d / "p"
    subprocess.run(["gcc", "-g", "-O0", "-Wa,--gsframe", "-o", str(exe), str(d / "p.c")], check=True)
    return exe


def _sframe(venv, *args):
    return subprocess.run([str(venv / "bin" / "sframe"), *args], check=True, stdout=subprocess.PIPE,
                          text=True, cwd="/").stdout.strip()


def test_installed_copy_claims_only_sframekit(installed):
    venv, site = installed
    ours = {p.name for p in site.iterdir()}
    assert "sframekit" in ours
    for generic in ("core", "lldb_plugin", "sframe_gdb", "sframe_gdb.py"):
        assert generic not in ours, sorted(ours)
    assert {p.name for p in (site / "sframekit").iterdir()} >= {"core", "sframe_gdb", "lldb_plugin"}
    version = _sframe(venv, "--version")
    assert version.startswith("sframe-gdb ") and str(site / "sframekit") in version, version
    # The installed command runs the installed copy, not this checkout.
    assert str(REPO) not in version


def test_gdb_loads_the_installed_copy(installed, program):
    venv, site = installed
    line = _sframe(venv, "gdbinit")
    assert line == "source %s" % (site / "sframekit" / "sframe_gdb" / "load.py")
    script = ("import sys; print('MODULES', sorted({m.split('.')[0] for m in sys.modules} & "
              "{'core', 'lldb_plugin', 'sframe_gdb', 'sframekit'})); print('FROM', sys.modules['sframekit'].__path__[0])")
    out = subprocess.run(["gdb", "-nx", "-batch", "-ex", line, "-ex", "break leaf", "-ex", "run",
                          "-ex", "info sframe $pc", "-ex", "python " + script, str(program)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd="/").stdout
    assert "sframe-gdb: SFrame unwinder installed" in out, out
    assert "Function: leaf at " in out and "Rules:" in out, out
    assert "MODULES ['sframekit']" in out, out
    assert "FROM %s" % (site / "sframekit") in out, out
    assert "Traceback" not in out and "not loaded" not in out, out


def test_lldb_loads_the_installed_copy(installed, program):
    venv, site = installed
    line = _sframe(venv, "lldbinit")
    assert line == "command script import %s" % (site / "sframekit" / "lldb_plugin")
    script = ("script import sys; print('MODULES', sorted({m.split('.')[0] for m in sys.modules} & "
              "{'core', 'sframe_gdb', 'sframekit'})); print('FROM', sys.modules['sframekit'].__path__[0]); "
              "print('PATH', %r in sys.path)" % str(site / "sframekit"))
    out = subprocess.run(["lldb-16", "-b", "-o", line, "-o", "sframe lookup leaf", "-o", script, str(program)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd="/", env=dict(os.environ, TERM="dumb")).stdout
    assert "Function: leaf at " in out and "Rules:" in out, out
    assert "MODULES ['sframekit']" in out, out
    assert "FROM %s" % (site / "sframekit") in out, out
    # The package's own directory is not left on sys.path: `core` is importable by no other name.
    assert "PATH False" in out, out
    assert "cannot load" not in out and "Traceback" not in out, out
