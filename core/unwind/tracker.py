"""A `ModuleSet` kept equal to a debugger's list of loaded modules (the LLDB commands use it;
GDB's objfile events keep their own, in sframe_gdb.objfiles).

Each loaded module is identified by (identity, bias): identity is the path with the build
ID/UUID (or with the file's size and time when there is none); the bias is where it is loaded.
Indexes of modules that stay loaded are kept; a module that appears (dlopen, relaunch at another
address) gets a new one, built on first use.
"""

import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Optional, Tuple

from ..sframe.index import SFrameIndex
from .modules import Module, ModuleSet


def file_identity(path: str, uuid: Optional[str] = None) -> str:
    """What identifies a loaded file: its path with its build ID/UUID if known, else with its size
    and mtime.  (The path too: a copy of a binary made by objcopy keeps its build ID.)"""
    if uuid:
        return "uuid:%s:%s" % (uuid, path)
    try:
        st = os.stat(path)
        return "file:%s:%d:%d" % (path, st.st_size, st.st_mtime_ns)
    except OSError:
        return "file:%s" % path


@dataclass(frozen=True)
class LoadedModule:
    """One module as the debugger reports it."""
    identity: str      # see file_identity
    path: str          # local file to read the SFrame section from
    bias: int          # load address minus link-time address
    name: str = ""     # short name for messages (the debugger's)

    @property
    def key(self) -> Tuple[str, int]:
        return (self.identity, self.bias)


class ModuleTracker:
    """A ModuleSet kept equal to the debugger's current list of loaded modules."""

    def __init__(self, log: Optional[Callable[[str], None]] = None):
        self.modules = ModuleSet(log=log)
        self.loaded: Dict[Tuple[str, int], LoadedModule] = {}   # key -> LoadedModule
        self.builds = 0           # modules (re)added, i.e. indexes built (lazily) so far or to come

    def sync(self, loaded: Iterable[LoadedModule]) -> bool:
        """Make the set equal to `loaded` (LoadedModule records); True if anything changed."""
        new: Dict[Tuple[str, int], LoadedModule] = {}
        for m in loaded:
            new.setdefault(m.key, m)
        if new.keys() == self.loaded.keys():
            return False
        for key in self.loaded.keys() - new.keys():
            self.modules.remove(key)
        for key in new.keys() - self.loaded.keys():
            m = new[key]
            self.modules.add(key, m.path, m.bias, name=m.name)
            self.builds += 1
        self.loaded = new
        return True

    def clear(self) -> None:
        self.modules.clear()
        self.loaded = {}

    def find(self, pc: int) -> Optional[Tuple[SFrameIndex, Module]]:
        return self.modules.find(pc)
