"""The layering of core/ (core.LAYERS): no module imports from a layer above its own, every
import of the project's own modules names a module that exists, core/ imports no debugger, and
the two debugger adapters do not import each other."""

import ast
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from sframekit.core import LAYERS

REPO = Path(__file__).resolve().parent.parent
PKG = "sframekit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PKG] + parts)


def _imports(name: str, is_package: bool, source: str) -> List[tuple]:
    """(line, module named by the statement, module or attribute imported from it) for every
    import statement, nested ones included."""
    out = []
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.extend((node.lineno, mod, mod + "." + a.name) for a in node.names)
    return out


def layer_of(module: str) -> Optional[int]:
    """The index in LAYERS of a core module (its longest matching entry), None outside the layers
    (the core package itself)."""
    best, best_len = None, -1
    for i, entry in enumerate(LAYERS):
        full = "%s.core.%s" % (PKG, entry)
        if (module == full or module.startswith(full + ".")) and len(full) > best_len:
            best, best_len = i, len(full)
    return best


def _resolve(imported: str, known: Dict[str, bool]) -> Optional[str]:
    """The project module an import names (`pkg.mod.attr` -> `pkg.mod`), or None if none exists."""
    parts = imported.split(".")
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in known:
            return cand
    return None


def violations(sources: Dict[str, tuple]) -> List[str]:
    """Every broken rule in {module name: (is package, source)}."""
    known = {name: is_pkg for name, (is_pkg, _src) in sources.items()}
    found = []
    for name, (is_pkg, src) in sorted(sources.items()):
        in_core = name == PKG + ".core" or name.startswith(PKG + ".core.")
        for line, named, imported in _imports(name, is_pkg, src):
            top = imported.split(".")[0]
            if in_core and top in ("gdb", "lldb"):
                found.append("%s:%d imports the debugger module %s" % (name, line, imported))
            if top != PKG:
                continue
            target = _resolve(imported, known)
            if named not in known or target is None:
                found.append("%s:%d imports %s, which does not exist" % (name, line, named))
                continue
            for a, b in (("sframe_gdb", "lldb_plugin"), ("lldb_plugin", "sframe_gdb")):
                if name.startswith("%s.%s" % (PKG, a)) and target.startswith("%s.%s" % (PKG, b)):
                    found.append("%s:%d: the %s adapter imports the %s one (%s)" % (name, line, a, b, target))
            if not in_core:
                continue
            if not (target == PKG + ".core" or target.startswith(PKG + ".core.")):
                found.append("%s:%d: core imports %s, outside core" % (name, line, target))
                continue
            mine, theirs = layer_of(name), layer_of(target)
            if mine is None or theirs is None:
                if target != PKG + ".core" and name != PKG + ".core":
                    found.append("%s:%d: %s is in no layer of core.LAYERS" % (name, line, name if mine is None else target))
                continue
            if theirs > mine:
                found.append("%s:%d imports %s: layer %r is above %r" % (name, line, target, LAYERS[theirs], LAYERS[mine]))
    return found


def import_graph(sources: Dict[str, tuple]) -> Dict[str, set]:
    """{module: the project modules it imports}: every import statement, nested ones and those
    under TYPE_CHECKING included (a circle is a circle to the reader, whenever it runs)."""
    known = {name: is_pkg for name, (is_pkg, _src) in sources.items()}
    graph: Dict[str, set] = {name: set() for name in sources}
    for name, (is_pkg, src) in sources.items():
        for _line, _named, imported in _imports(name, is_pkg, src):
            target = _resolve(imported, known) if imported.split(".")[0] == PKG else None
            if target is not None and target != name:
                graph[name].add(target)
    return graph


def circles(sources: Dict[str, tuple]) -> List[List[str]]:
    """The import circles among the project's modules: each strongly connected set of two or more
    modules (Tarjan's algorithm, iterative), sorted.  A package's __init__ importing its own
    submodules and being imported by them is a circle too: such imports name the submodule."""
    graph = import_graph(sources)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return sorted(found)


def _project_sources() -> Dict[str, tuple]:
    out = {}
    for top in ("core", "sframe_gdb", "lldb_plugin"):
        for path in (REPO / top).rglob("*.py"):
            out[_module_name(path)] = (path.name == "__init__.py", path.read_text())
    return out


def test_no_import_runs_upward():
    sources = _project_sources()
    assert len([n for n in sources if n.startswith(PKG + ".core.")]) > 40
    assert violations(sources) == []


def test_every_core_module_is_in_a_layer():
    for name in _project_sources():
        if name.startswith(PKG + ".core."):
            assert layer_of(name) is not None, name
    # Every layer names something that exists.
    for entry in LAYERS:
        path = REPO / "core" / entry.replace(".", "/")
        assert path.is_dir() or path.with_suffix(".py").is_file(), entry


def _planted(module, line):
    """(module name, the project's sources with `line` planted in `module`; indented: in a function)."""
    sources = _project_sources()
    name = _module_name(REPO / module)
    is_pkg, src = sources[name]
    if line.startswith(" "):
        src += "\n\ndef _planted():\n" + line + "\n"
    else:
        src += "\n" + line + "\n"
    sources[name] = (is_pkg, src)
    return name, sources


def test_no_import_circle():
    assert circles(_project_sources()) == []


@pytest.mark.parametrize("module, line", [
    ("core/arch/sigframe.py", "from .abi import ABIInfo"),
    ("core/sframe/format.py", "    from . import decode"),
    ("sframe_gdb/arch.py", "from .unwinder import Answer"),
])
def test_the_circle_check_fails_on_a_planted_import(module, line):
    """An import planted in a copy of the sources that closes a circle is reported, with both ends."""
    name, sources = _planted(module, line)
    found = circles(sources)
    assert len(found) == 1 and name in found[0] and len(found[0]) >= 2, found


@pytest.mark.parametrize("module, line, broken", [
    ("core/arch/abi.py", "from ..unwind import ahead", "layer 'unwind' is above 'arch'"),
    ("core/sframe/decode.py", "from ..saves.analysis import at", "layer 'saves' is above 'sframe'"),
    ("core/sframe/format.py", "from . import records", "layer 'sframe' is above 'sframe.format'"),
    ("core/unwind/unwinder.py", "    from ..report import dump", "layer 'report' is above 'unwind'"),
    ("core/elf/image.py", "from ..checks.against_cfi import check_file", "layer 'checks' is above 'elf'"),
    ("core/report/describe.py", "from ..sframe.nosuch import X", "does not exist"),
    ("core/saves/flow.py", "import gdb", "imports the debugger module gdb"),
    ("lldb_plugin/access.py", "from ..sframe_gdb import arch", "the lldb_plugin adapter imports the sframe_gdb one"),
])
def test_the_check_fails_on_a_planted_import(module, line, broken):
    """The rule is checked, not assumed: one import planted in a copy of the sources is reported."""
    name, sources = _planted(module, line)
    found = violations(sources)
    assert len(found) == 1 and broken in found[0] and found[0].startswith(name), found
