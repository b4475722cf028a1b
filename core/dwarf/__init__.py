"""DWARF call-frame information: which addresses it covers (coverage), and its rows in the
vocabulary of core.sframe.rules (rows)."""
