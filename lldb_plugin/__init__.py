"""SFrame commands for LLDB: `command script import /path/to/sframe-gdb/lldb_plugin`.

LLDB has no Python hook for unwinders, so this package adds an `sframe` command container whose
commands read SFrame sections through the project's `core` and walk stacks themselves with
LLDB's registers and memory:

    sframe lookup ADDR                       FDE, FRE and rules covering ADDR (and their values)
    sframe backtrace [-c COUNT] [-t THREAD]  (alias `sframe bt`) backtrace unwound with SFrame
    sframe info                              loaded modules with SFrame
    sframe dump [MODULE]                     the section in readelf --sframe format

`command script import DIR/lldb_plugin` imports this file as the top-level module `lldb_plugin`
and puts DIR on sys.path.  It then imports DIR as the package `sframekit` (its installed name;
`sframe lldbinit` prints the line for an installed copy), takes DIR off sys.path again so that no
generic name such as `core` becomes importable, and registers the commands from
`sframekit.lldb_plugin.command` (one module per command family; LLDB is read in
`sframekit.lldb_plugin.access`).  pyelftools comes from the distribution's package (python3-pyelftools),
which Debian's LLDB Python sees.
"""

import os
import sys
import types

PKGDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIST_PACKAGES = ("/usr/lib/python3/dist-packages",)
INSTALL_HINT = ("install it for LLDB's Python %d.%d with 'apt-get install python3-pyelftools' "
                "(or 'pip install pyelftools' for that Python)" % sys.version_info[:2])


def _as_sframekit():
    """The package `sframekit.lldb_plugin` for this copy (the first copy registered wins)."""
    while PKGDIR in sys.path:
        sys.path.remove(PKGDIR)
    pkg = types.ModuleType("sframekit")
    pkg.__path__ = [PKGDIR]
    sys.modules.setdefault("sframekit", pkg)
    site = os.path.dirname(PKGDIR)
    if os.path.basename(PKGDIR) == "sframekit" and site not in sys.path:
        sys.path.append(site)
    import sframekit.lldb_plugin
    return sframekit.lldb_plugin


def _find_pyelftools():
    """True if pyelftools imports, trying the distribution's directory as a last resort."""
    try:
        import elftools  # noqa: F401
        return True
    except ImportError:
        pass
    for d in _DIST_PACKAGES:
        if os.path.isdir(os.path.join(d, "elftools")) and d not in sys.path:
            sys.path.append(d)
            try:
                import elftools  # noqa: F401,F811
                return True
            except ImportError:
                sys.path.remove(d)
    return False


def _readline_stub_safe():
    """Import rlcompleter with `readline` hidden where LLDB's stand-in lacks set_completer.

    LLDB 19 (Debian 13, Python 3.13) puts its `lldb_editline` module in sys.modules as readline,
    without set_completer; rlcompleter then fails on import, and with it pdb, which pyelftools'
    `construct` imports: reading any DWARF CFI (sframe bt through the C library) raised
    AttributeError.  Without readline, rlcompleter imports as it does in a Python built without it."""
    stub = sys.modules.get("readline")
    if stub is None or hasattr(stub, "set_completer") or "rlcompleter" in sys.modules:
        return
    sys.modules["readline"] = None      # (`import readline` then raises ImportError)
    try:
        import rlcompleter  # noqa: F401
    except Exception:
        pass
    finally:
        sys.modules["readline"] = stub


def bytecode_wanted():
    """May the plugin keep its compiled modules?  Not where the user asked Python to write none."""
    return not os.environ.get("PYTHONDONTWRITEBYTECODE")


def _compiled_once():
    """Let Python keep the plugin's compiled modules (__pycache__, as any installed package has
    them): LLDB's Python writes none, so each session compiled them all again, a sixth of a second
    of the first stop.  Not where the user asked Python to write none (PYTHONDONTWRITEBYTECODE)."""
    if not bytecode_wanted():
        return sys.dont_write_bytecode
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    return before


def __lldb_init_module(debugger, internal_dict):
    before = _compiled_once()
    try:
        _init(debugger, internal_dict)
    finally:
        sys.dont_write_bytecode = before


def _init(debugger, internal_dict):
    if __name__ != "sframekit.lldb_plugin":
        global __path__
        __path__ = []          # this copy's modules are sframekit.lldb_plugin.*, never loaded twice
        _as_sframekit().__lldb_init_module(debugger, internal_dict)
        return
    _readline_stub_safe()
    if not _find_pyelftools():
        print("sframe: pyelftools is missing, the sframe commands are not loaded: " + INSTALL_HINT)
        return
    # LLDB resolves `command script add -c a.b.Class` from its session dictionary: name the package there.
    top = __name__.split(".")[0]
    internal_dict[top] = sys.modules[top]
    try:
        from . import command
        command.register(debugger, __name__ + ".command", PKGDIR if bytecode_wanted() else None)
    except Exception as exc:   # one line, never a traceback
        print("sframe: cannot load the LLDB commands: %s: %s" % (type(exc).__name__, exc))
