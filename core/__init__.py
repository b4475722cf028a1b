"""Debugger-free SFrame core: codec, index, unwinder, ELF access and the `sframe` CLI.

The core is layered (LAYERS below): each subpackage imports only from its own layer and the
layers before it, and tests/test_layers.py fails on any import that runs upward.
"""

from .errors import ElfError, NoSFrameError, SFrameError

__version__ = "0.1.0"

# Bottom to top: a module may import from its own layer and those before it.  An entry names a
# subpackage or a module; a module belongs to the longest entry that names it or a package above it.
LAYERS = (
    "errors",           # the project's exceptions
    "parallel",         # work shared among forked processes
    "pyelftools",       # pyelftools imported without pdb
    "sframe.format",    # the SFrame binary layout, names and numbers (the ABIs' identifiers among them)
    "arch",             # ABI descriptions and signal-frame layouts
    "sframe",           # the SFrame codec, rules and index
    "saves",            # the save-slot analysis
    "dwarf",            # DWARF CFI: coverage and rows
    "elf",              # ELF images, notes, relocations
    "unwind",           # the unwinder, unwinding ahead, module sets, the unwinder policy
    "target",           # core files, live processes, the backtrace session
    "report",           # printed text: dump, descriptions, look-ups, frames, backtraces
    "checks",           # sframe check (against the CFI) and sframe verify (against a debugger)
    "cli",              # the sframe command
)

__all__ = ["SFrameError", "ElfError", "NoSFrameError", "LAYERS", "__version__"]
