"""Debugger-free SFrame core: codec, index, unwinder, ELF access and the `sframe` CLI."""

from .errors import SFrameError, ElfError, NoSFrameError

__all__ = ["SFrameError", "ElfError", "NoSFrameError"]
