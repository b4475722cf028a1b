"""The project's own exceptions: every bad input ends in one of these, never a stray IndexError."""


class SFrameError(ValueError):
    """A malformed SFrame section.  Names the byte offset (within the section) and the rule broken."""

    def __init__(self, offset, rule):
        self.offset = offset
        self.rule = rule
        super().__init__("malformed SFrame section at byte offset %#x: %s" % (offset, rule))


class ElfError(Exception):
    """A file that cannot be used: missing, unreadable, not ELF, or a broken ELF structure."""


class NoSFrameError(ElfError):
    """An ELF file without an SFrame section."""
