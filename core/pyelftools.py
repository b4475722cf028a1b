"""pyelftools imported without `pdb`.

Every part of pyelftools the project uses imports its `construct`, whose `debug` module imports
`pdb` for a debugging aid nothing here calls; under Python 3.14 `pdb` imports `asyncio`, and that
was 65 ms of a debugger's first stop.  `load` imports `construct` with a stand-in for `pdb` that
imports the real one the first time anything of it is used, so nothing changes for whoever uses
it (the user's own `import pdb` gets the real module).  Each place that imports a part of
pyelftools calls `load` first (cheap once done); `load` is one import at a time, as the LLDB
plugin's preloading thread calls it beside a stop that may need it first."""

import importlib
import sys
import threading
import types


class _OnFirstUse(types.ModuleType):
    """A module that is imported for real when an attribute of it is first read."""

    def __getattr__(self, name: str):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


_LOADING = threading.Lock()
_LOADED: list = []


def load() -> None:
    """Import pyelftools' `construct` (ImportError where pyelftools is missing), `pdb` deferred."""
    if _LOADED:
        return
    with _LOADING:
        if _LOADED:
            return
        stand_in = None
        if "pdb" not in sys.modules:
            stand_in = sys.modules["pdb"] = _OnFirstUse("pdb")
        try:
            import elftools.construct  # noqa: F401
        finally:
            if stand_in is not None and sys.modules.get("pdb") is stand_in:
                del sys.modules["pdb"]
        _LOADED.append(True)
