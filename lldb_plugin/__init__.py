"""SFrame commands for LLDB: `command script import /path/to/sframe-gdb/lldb_plugin`.

LLDB has no Python hook for unwinders, so this package adds an `sframe` command container whose
commands read SFrame sections through the project's `core/` and walk stacks themselves with
LLDB's registers and memory:

    sframe lookup ADDR                       FDE, FRE and rules covering ADDR (and their values)
    sframe backtrace [-c COUNT] [-t THREAD]  (alias `sframe bt`) backtrace unwound with SFrame
    sframe info                              loaded modules with SFrame
    sframe dump [MODULE]                     the section in readelf --sframe format

The checkout's root (this package's parent) goes on sys.path so that `core` imports; pyelftools
comes from the distribution's package (python3-pyelftools), which Debian's LLDB Python sees.
"""

import os
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIST_PACKAGES = ("/usr/lib/python3/dist-packages",)
INSTALL_HINT = ("install it for LLDB's Python %d.%d with 'apt-get install python3-pyelftools' "
                "(or 'pip install pyelftools' for that Python)" % sys.version_info[:2])


def _ensure_paths():
    if _REPO not in sys.path:
        sys.path.insert(0, _REPO)


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


def __lldb_init_module(debugger, internal_dict):
    _ensure_paths()
    if not _find_pyelftools():
        print("sframe: pyelftools is missing, the sframe commands are not loaded: " + INSTALL_HINT)
        return
    try:
        from . import commands
        commands.register(debugger, __name__ + ".commands")
    except Exception as exc:   # one line, never a traceback
        print("sframe: cannot load the LLDB commands: %s: %s" % (type(exc).__name__, exc))
