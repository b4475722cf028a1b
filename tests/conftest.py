"""Shared pytest fixtures: the Debian roots and the corpus of built programs."""

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

import toolchains  # noqa: E402


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
    outdir = tmp_path_factory.mktemp("corpus")
    start = time.monotonic()
    built = toolchains.build_corpus(outdir)
    sys.stderr.write(f"\n[corpus: {len(built)} builds in {time.monotonic() - start:.1f} s "
                     f"under {outdir}]\n")
    return built


# The fast unit tests: those that need no fixture beyond pytest's own (no toolchain root, no
# corpus, no debugger session, no core dump).  `pytest -m unit` runs them alone, without root.
_UNIT_FIXTURES = {"tmp_path", "tmp_path_factory", "monkeypatch", "capsys", "capfd", "request", "recwarn",
                  "caplog"}


def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if set(getattr(item, "fixturenames", ())) - set(params) <= _UNIT_FIXTURES:
            item.add_marker(pytest.mark.unit)
