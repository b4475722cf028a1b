"""The project's own exceptions: every bad input ends in one of these, never a stray IndexError."""


class SFrameError(ValueError):
    """A malformed SFrame section.  Names the byte offset (within the section) and the rule broken."""

    def __init__(self, offset: int, rule: str):
        self.offset = offset
        self.rule = rule
        super().__init__("malformed SFrame section at byte offset %#x: %s" % (offset, rule))


class ElfError(Exception):
    """A file that cannot be used: missing, unreadable, not ELF, or a broken ELF structure."""


class NotElfError(ElfError):
    """A file that is no ELF file at all (a mapped locale or font file, for a backtrace: normal)."""


class NoSFrameError(ElfError):
    """An ELF file without an SFrame section."""


class EmptySFrameError(NoSFrameError):
    """An ELF file whose SFrame section has no bytes (gas 2.45+ writes one for inputs without
    functions): no SFrame, quietly, like readelf's "has no debugging data"."""


class CfiError(ValueError):
    """A malformed DWARF CFI section (.eh_frame, .eh_frame_hdr, .debug_frame): names it, the byte
    offset within it and the rule broken."""

    def __init__(self, section: str, offset: int, rule: str):
        self.section = section
        self.offset = offset
        self.rule = rule
        super().__init__("malformed %s section at byte offset %#x: %s" % (section, offset, rule))


class ProcessError(Exception):
    """A running process that cannot be read: no such process, not permitted, or it exited
    while being read.  The message is one line and says which."""


class UsageError(Exception):
    """A command line that cannot be carried out as given (the CLI's exit status 2, as argparse's)."""
