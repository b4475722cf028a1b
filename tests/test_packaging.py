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


def _checkout_packages():
    """Every package of the checkout (a folder with __init__.py under core/, sframe_gdb/, lldb_plugin/)."""
    return sorted("sframekit." + ".".join(p.parent.relative_to(REPO).parts)
                  for top in ("core", "sframe_gdb", "lldb_plugin") for p in (REPO / top).rglob("__init__.py"))


def _checkout_modules():
    return sorted(str(p.relative_to(REPO)) for top in ("core", "sframe_gdb", "lldb_plugin")
                  for p in (REPO / top).rglob("*.py"))


def test_pyproject_lists_every_package():
    """pyproject.toml names each package explicitly (the root is mapped to `sframekit`): a new
    subpackage missing there would be left out of the installed copy."""
    import re
    text = (REPO / "pyproject.toml").read_text()
    listed = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M).group(1)
    assert sorted(re.findall(r'"([\w.]+)"', listed)) == _checkout_packages()


# Inside a debugger: import every module of the installed copy (walking the subpackages), and say
# which failed.  The debugger's own module (gdb, lldb) is present, so the adapters import too.
_IMPORT_ALL = ("import importlib, pkgutil, sframekit; bad = []; n = 0\n"
               "for top in %r:\n"
               "    pkg = importlib.import_module('sframekit.' + top)\n"
               "    for m in [pkg.__name__] + [i.name for i in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.')]:\n"
               "        n += 1\n"
               "        try:\n"
               "            importlib.import_module(m)\n"
               "        except Exception as e:\n"
               "            bad.append('%%s: %%s' %% (m, e))\n"
               "print('IMPORTED', n, 'FAILED', bad)\n")


def _import_all_script(tmp_path, tops):
    path = tmp_path / "import_all.py"
    path.write_text(_IMPORT_ALL % (tops,))
    return path


def _expected_modules(tops):
    return sum(1 for m in _checkout_modules() if m.split("/")[0] in tops)


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
    # Every module of every subpackage is in the installed copy.
    copied = sorted(str(p.relative_to(site / "sframekit")) for top in ("core", "sframe_gdb", "lldb_plugin")
                    for p in (site / "sframekit" / top).rglob("*.py"))
    assert copied == _checkout_modules()
    version = _sframe(venv, "--version")
    assert version.startswith("sframe-gdb ") and str(site / "sframekit") in version, version
    # The installed command runs the installed copy, not this checkout.
    assert str(REPO) not in version


def test_gdb_loads_the_installed_copy(installed, program, tmp_path):
    venv, site = installed
    line = _sframe(venv, "gdbinit")
    assert line == "source %s" % (site / "sframekit" / "sframe_gdb" / "load.py")
    script = ("import sys; print('MODULES', sorted({m.split('.')[0] for m in sys.modules} & "
              "{'core', 'lldb_plugin', 'sframe_gdb', 'sframekit'})); print('FROM', sys.modules['sframekit'].__path__[0])")
    tops = ("core", "sframe_gdb")
    out = subprocess.run(["gdb", "-nx", "-batch", "-ex", line, "-ex", "break leaf", "-ex", "run",
                          "-ex", "info sframe $pc", "-ex", "python " + script,
                          "-ex", "source %s" % _import_all_script(tmp_path, tops), str(program)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd="/").stdout
    assert "sframe-gdb: SFrame unwinder installed" in out, out
    assert "Function: leaf at " in out and "Rules:" in out, out
    assert "MODULES ['sframekit']" in out, out
    assert "FROM %s" % (site / "sframekit") in out, out
    assert "Traceback" not in out and "not loaded" not in out, out
    assert "IMPORTED %d FAILED []" % _expected_modules(tops) in out, out


def test_lldb_loads_the_installed_copy(installed, program, tmp_path):
    venv, site = installed
    line = _sframe(venv, "lldbinit")
    assert line == "command script import %s" % (site / "sframekit" / "lldb_plugin")
    script = ("script import sys; print('MODULES', sorted({m.split('.')[0] for m in sys.modules} & "
              "{'core', 'sframe_gdb', 'sframekit'})); print('FROM', sys.modules['sframekit'].__path__[0]); "
              "print('PATH', %r in sys.path)" % str(site / "sframekit"))
    tops = ("core", "lldb_plugin")
    out = subprocess.run(["lldb-16", "-b", "-o", line, "-o", "sframe lookup leaf", "-o", script,
                          "-o", "command script import %s" % _import_all_script(tmp_path, tops), str(program)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, cwd="/", env=dict(os.environ, TERM="dumb")).stdout
    assert "Function: leaf at " in out and "Rules:" in out, out
    assert "MODULES ['sframekit']" in out, out
    assert "FROM %s" % (site / "sframekit") in out, out
    # The package's own directory is not left on sys.path: `core` is importable by no other name.
    assert "PATH False" in out, out
    assert "cannot load" not in out and "Traceback" not in out, out
    assert "IMPORTED %d FAILED []" % _expected_modules(tops) in out, out
