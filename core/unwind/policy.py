"""Which unwinder takes a frame: the rule behind `set sframe mode`, one function for every adapter.

Python unwinders run before a debugger's own DWARF unwinder, so an SFrame unwinder that claimed
every PC it covers would replace complete DWARF CFI (every callee-saved register) with SFrame's
three values.  In mode `auto` it therefore takes a frame only where the debugger's DWARF
unwinder cannot: no CFI covers the PC, or the debugger's DWARF unwinders are disabled.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Callable, List, Optional

from ..dwarf.coverage import CfiRange


class Mode(Enum):
    AUTO = "auto"           # SFrame where the debugger has no DWARF CFI for the PC (the default)
    ALWAYS = "always"       # SFrame wherever it covers the PC
    OFF = "off"             # never

    @classmethod
    def names(cls) -> List[str]:
        return [m.value for m in cls]


@dataclass(frozen=True)
class Choice:
    """The verdict for one frame: does the SFrame unwinder take it, why (one phrase), and the CFI
    range that decided it, if one did."""
    sframe: bool
    reason: str
    cfi: Optional[CfiRange] = None


def choose(mode: Mode, dwarf_enabled: Optional[bool], cfi_at: Callable[[], Optional[CfiRange]],
           debugger: str = "GDB") -> Choice:
    """The unwinder for a frame whose PC (its address in the block: PC - 1 for a caller) SFrame
    covers.  `dwarf_enabled`: whether the debugger's DWARF unwinders are on (None: it does not
    say, taken as on); `cfi_at()` gives the CFI range covering that address, and is called only
    when the answer depends on it."""
    if mode is Mode.OFF:
        return Choice(False, "SFrame unwinding is off")
    if mode is Mode.ALWAYS:
        return Choice(True, "mode always: SFrame first wherever it covers the PC")
    if dwarf_enabled is False:
        return Choice(True, "mode auto: %s's DWARF unwinders are disabled" % debugger)
    cfi = cfi_at()
    if cfi is not None:
        return Choice(False, "mode auto: DWARF CFI covers it", cfi)
    return Choice(True, "mode auto: no DWARF CFI covers it")
