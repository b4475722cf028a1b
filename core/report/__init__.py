"""Printed text shared by the CLI and both debugger adapters: the section dump (dump), descriptions
of sections, FDEs and FREs (describe), look-ups and frames (text)."""
