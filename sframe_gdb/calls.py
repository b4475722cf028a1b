"""The calls GDB makes in the inferior, which the unwinder must know of (see InferiorCalls)."""

import gdb

from ..core.sframe.format import MASK64
from . import arch as archmod


class InferiorCalls:
    """Where GDB called functions in the inferior (`print f()`, `call`, breakpoint conditions).
    Above the dummy frame of such a call, the frame it was made from has all its registers valid
    (GDB restores them), though GDB unwinds it as a caller: _full needs to know.  A site stays
    until its call returns, or, if the call stopped inside, until the process exits.  Bounded."""

    def __init__(self):
        self.sites = {}           # PC -> [SP, one per call] of the frames calls were made from
        self._open = []           # (PC, SP) of the calls GDB is making (nested), innermost last

    def event(self, event):
        """gdb.events.inferior_call: before a call, its site; after, the site goes if it returned."""
        if isinstance(event, gdb.InferiorCallPreEvent):
            frame = gdb.newest_frame()
            arch = archmod.lookup(frame.architecture().name())
            if arch is None:
                return
            site = (int(frame.pc()) & MASK64, int(frame.read_register(arch.sp)) & MASK64)
            self._open.append(site)
            if len(self.sites) >= 256:
                self.sites = {}
            self.sites.setdefault(site[0], []).append(site[1])
        elif self._open:
            pc, sp = self._open.pop()
            sps = self.sites.get(pc)
            # The dummy frame still the newest: the call returned, and GDB is about to pop it.
            if sps and sp in sps and gdb.newest_frame().type() == gdb.DUMMY_FRAME:
                sps.remove(sp)
                if not sps:
                    del self.sites[pc]

    def made_from(self, pc, sp):
        sps = self.sites.get(pc)
        return sps is not None and sp in sps

    def clear(self):
        self.sites = {}
        self._open = []
