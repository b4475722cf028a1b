"""Checks of an SFrame section: against the file's DWARF CFI (against_cfi, `sframe check`), and
against a debugger's own backtrace (against_debugger, `sframe verify`)."""
