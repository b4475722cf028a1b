"""A DWARF compile unit that describes nothing: `.debug_abbrev`, `.debug_info` and `.debug_line`
for a side file that has no debug information of its own.

Why: LLDB picks the reader of a symbol file by what each can do, and stops at the first that can
do everything.  Its DWARF reader can where the file has all three sections; otherwise LLDB also
tries its symbol-table reader, which parses the program's whole symbol table once more (through
the program's own object file) at every `target symbols add`: measured on LLDB 23 with 50,000
functions, 0.07–0.1 s an add with no unit or without `.debug_line`, 0.03–0.05 s with all three.
The unit has no attributes: no address range, no line program of its own, no names, so nothing
is looked up in it (the module's symbols stay the program's).

DWARF 4 (7.5.1.1, 6.2.4): a unit header of 32-bit DWARF, one DIE of abbreviation 1
(DW_TAG_compile_unit, no children, no attributes); a line-program header with no directories, no
files and no program.
"""

import struct
from typing import Tuple

DW_TAG_compile_unit = 0x11
DW_CHILDREN_no = 0
DWARF_VERSION = 4
_STANDARD_OPCODE_LENGTHS = (0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1)     # DW_LNS_copy .. DW_LNS_set_isa
_LINE_BASE, _LINE_RANGE = -5, 14


def empty_unit(big_endian: bool, address_size: int) -> Tuple[Tuple[str, bytes], ...]:
    """((section name, bytes), ...) of a compile unit that describes nothing."""
    e = ">" if big_endian else "<"
    abbrev = bytes([1, DW_TAG_compile_unit, DW_CHILDREN_no, 0, 0, 0])    # code 1; no attributes; the table's end
    unit = struct.pack(e + "HIB", DWARF_VERSION, 0, address_size) + bytes([1])
    info = struct.pack(e + "I", len(unit)) + unit
    header = bytes([1, 1, 1, _LINE_BASE & 0xFF, _LINE_RANGE, len(_STANDARD_OPCODE_LENGTHS) + 1])
    header += bytes(_STANDARD_OPCODE_LENGTHS) + bytes([0, 0])             # no directories, no files
    line = struct.pack(e + "H", DWARF_VERSION) + struct.pack(e + "I", len(header)) + header
    return ((".debug_abbrev", abbrev), (".debug_info", info), (".debug_line", struct.pack(e + "I", len(line)) + line))
