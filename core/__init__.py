"""Debugger-free SFrame core: codec, index, unwinder, ELF access and the `sframe` CLI."""

from .errors import ElfError, NoSFrameError, SFrameError

__version__ = "0.1.0"

__all__ = ["SFrameError", "ElfError", "NoSFrameError", "__version__"]
