"""Which unwinder takes a frame: the rule behind `set sframe mode`, one function for every adapter.

Python unwinders run before a debugger's own DWARF unwinder, so an SFrame unwinder that claimed
every PC it covers would replace complete DWARF CFI (every callee-saved register) with SFrame's
three values.  In mode `auto` it therefore takes a frame only where the debugger's DWARF
unwinder cannot: no CFI covers the PC, or the debugger's DWARF unwinders are disabled.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Callable, List, Optional, Sequence, Tuple

from ..dwarf.coverage import ALL_COVERED, CfiRange


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


def activity(mode: Mode, any_sframe: Callable[[], bool], sframe_only: Callable[[], Sequence[Tuple[str, int]]],
             dwarf_enabled: Callable[[], Optional[bool]], debugger: str = "GDB",
             explain: bool = True) -> Tuple[bool, Optional[str]]:
    """(active?, why) for a whole program: can the SFrame unwinder take any frame of it?  In mode
    auto, not where the debugger's DWARF unwinders are on and DWARF CFI covers every function that
    has SFrame (an ordinary program with SFrame beside its CFI): the debugger need not call it.
    `any_sframe()`: does a loaded module have SFrame; `sframe_only()` gives (module path, functions)
    only SFrame describes; `dwarf_enabled()` whether the
    debugger's DWARF unwinders are on (None: it does not say, taken as on); both are asked only
    when the answer depends on them.  `explain` False: why is None where it would be formatted."""
    if mode is Mode.OFF:
        return False, "set sframe off"
    if mode is Mode.ALWAYS:
        return True, "mode always: SFrame first wherever it covers the PC"
    if not any_sframe():
        return False, "nothing loaded has SFrame"
    only = sframe_only()
    if only:
        return True, explain and "mode auto: SFrame alone describes %s" % ", ".join(
            "%d function%s of %s" % (n, "" if n == 1 else "s", path) for path, n in only) or None
    if dwarf_enabled() is False:
        return True, "mode auto: %s's DWARF unwinders are off" % debugger
    return False, "mode auto: every module with SFrame: %s; %s's DWARF unwinders take them" % (ALL_COVERED, debugger)
