"""Shared pytest fixtures: the Debian roots and the corpus of built programs."""

import fcntl
import os
import pickle
import sys
import time
import types
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
# The checkout is imported under its installed package name, as the debugger plugins import it.
_SFRAMEKIT = types.ModuleType("sframekit")
_SFRAMEKIT.__path__ = [str(Path(_TESTS).parent)]
sys.modules.setdefault("sframekit", _SFRAMEKIT)

from helpers import toolchains  # noqa: E402


@pytest.fixture(scope="session")
def roots():
    """Make sure the trixie and sid roots exist (scripts/roots.sh builds them
    the first time, a few minutes; afterwards it returns at once).  Never
    skips: a failure to build them is an error."""
    try:
        toolchains.ensure_roots()
    except RuntimeError as e:
        pytest.fail(f"cannot build the toolchain roots: {e}", pytrace=False)
    return {name: toolchains.root_path(name) for name in ("trixie", "sid")}


@pytest.fixture(scope="session")
def corpus(roots, tmp_path_factory):
    """Every fixture program built with every toolchain and variant, once per
    session: a toolchains.Corpus (list of toolchains.Build records:
    toolchain, fixture, variant, path, version, arch, cflags, args, lib,
    noeh), with .get(toolchain, fixture, variant) and .select(...)."""
    return shared_once(tmp_path_factory, "corpus", _build_corpus)


def _build_corpus(outdir):
    start = time.monotonic()
    built = toolchains.build_corpus(outdir)
    sys.stderr.write(f"\n[corpus: {len(built)} builds in {time.monotonic() - start:.1f} s "
                     f"under {outdir}]\n")
    return built


def shared_once(tmp_path_factory, name, make):
    """make(directory)'s result, made once per run and shared by the workers of pytest-xdist: the
    first to come makes it (under a lock) in the run's common temporary directory and keeps it
    pickled; the others wait, and read it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent        # (each worker's is popen-gwN, below the run's own)
    with open(base / (name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = base / (name + ".pickle")
        if done.exists():
            return pickle.loads(done.read_bytes())
        outdir = base / name
        outdir.mkdir(exist_ok=True)
        made = make(outdir)
        done.write_bytes(pickle.dumps(made))
        return made


@pytest.fixture(scope="session")
def objects(roots, tmp_path_factory):
    """{toolchain: [object paths]} (helpers.objects): each fixture compiled with -c, frames.c also
    with -ffunction-sections, and an `ld -r` of that and libfix.c (-fPIC)."""
    from helpers.objects import build_objects
    return build_objects(tmp_path_factory.mktemp("objects"))


# The fast unit tests: those that need no fixture beyond pytest's own (no toolchain root, no
# corpus, no debugger session, no core dump).  `pytest -m unit` runs them alone, without root.
_UNIT_FIXTURES = {"tmp_path", "tmp_path_factory", "monkeypatch", "capsys", "capfd", "request", "recwarn",
                  "caplog"}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if set(getattr(item, "fixturenames", ())) - set(params) <= _UNIT_FIXTURES:
            item.add_marker(pytest.mark.unit)
