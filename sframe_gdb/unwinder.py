"""The GDB frame unwinder: a gdb.unwinder.Unwinder that asks core.unwind.unwinder.step for the caller.

Translation only: read the pending frame's registers, give the core a memory reader and the
module finder, and turn its answer into GDB's UnwindInfo (frame id = CFA and function start, the
caller's PC, SP, FP, on AArch64 and s390x the return-address register, and the callee-saved
registers the save-slot analysis recovers: `set sframe callee-saved`).

GDB tries Python unwinders first for every frame.  A PC outside every SFrame range is declined at
once (one bisect), and so is every failure: GDB's other unwinders then get their turn, and the
reason is logged under `set debug sframe on`.  Nothing raises into GDB.  In mode `auto` (the
default) a frame whose PC GDB's DWARF unwinder can handle is declined too (core.unwind.policy.choose), so
loading the plugin changes nothing where DWARF CFI exists.
"""

import gc
from collections import deque
from operator import itemgetter

import gdb
import gdb.unwinder

from ..core.sframe.format import MASK64
from ..core.unwind import policy
from ..core.unwind.policy import Mode, choose
from . import arch as archmod
from . import dwarf_unwinders
from .calls import InferiorCalls

# core.unwind.unwinder is imported on the first frame, so that sourcing the plugin stays cheap.
frame_from_registers = lookup_address = Method = Stop = StopReason = step = sigframe = LazyRegisters = None
Ahead = FIRST_CHUNK = next_chunk = entry_code_of = None


def _import_core():
    global frame_from_registers, lookup_address, Method, Stop, StopReason, step, sigframe, LazyRegisters, Ahead
    global FIRST_CHUNK, next_chunk, entry_code_of
    from ..core.arch import sigframe as _sigframe
    from ..core.unwind import ahead as _ahead
    from ..core.unwind import unwinder as _u
    frame_from_registers, lookup_address, LazyRegisters = _u.frame_from_registers, _u.lookup_address, _u.LazyRegisters
    Method, Stop, StopReason, step, sigframe = _u.Method, _u.Stop, _u.StopReason, _u.step, _sigframe
    Ahead, FIRST_CHUNK, next_chunk = _ahead.Ahead, _ahead.FIRST_CHUNK, _ahead.next_chunk
    entry_code_of = _u.entry_code_of

if hasattr(gdb.unwinder, "FrameId"):                 # GDB 14 and later
    FrameId = gdb.unwinder.FrameId
else:
    class FrameId:
        """A frame id for GDB 13: any object with `sp` and `pc` attributes."""
        __slots__ = ("sp", "pc")

        def __init__(self, sp, pc):
            self.sp = sp
            self.pc = pc


class Answer(tuple):
    """GDB's answer for a frame, prepared ahead (see _prepare_all).  A tuple, so that it is made
    without a Python __init__, and its own frame id (GDB reads `sp` and `pc`).  The hot path reads
    it by index, [4] and [5] (the registers to save) and [2], [6] (the caller, the Arch); everything
    else by name."""
    __slots__ = ()
    sp = property(itemgetter(0))          # the CFA (gdb.Value)
    pc = property(itemgetter(1))          # the function's start (gdb.Value)
    caller = property(itemgetter(2))      # the caller (core Frame)
    frame_pc = property(itemgetter(3))    # the PC of the frame it answers for
    reg_ids = property(itemgetter(4))     # the caller's registers to save: their ids ...
    reg_values = property(itemgetter(5))  # ... and their gdb.Values
    arch = property(itemgetter(6))        # the Arch (sframe_gdb.arch)
    abi = property(itemgetter(7))         # the ABIInfo
    special = None                        # GDB asks for it: an attribute saves an AttributeError per frame


_new_answer = tuple.__new__

# Kinds of per-level records (_Unwind.levels).
OURS, DECLINED = 1, 2
_DWARF_COVERS = "left to GDB's unwinders: mode auto: DWARF CFI covers it (%s)"
_NO_SFRAME = "no SFrame covers it; left to GDB's other unwinders"
_PENDING_PC = hasattr(gdb.PendingFrame, "pc")     # GDB 14+: PendingFrame.pc()
_selected_thread = gdb.selected_thread
_FRESH = 1 << 62          # SFrameUnwinder._seen before any level: the next call starts an unwind


class _Unwind:
    """What one unwind (GDB's walk up one stack, level 0 or the first level above inline frames
    first) has learnt and prepared.  Replaced whole when a new unwind begins, so that nothing of
    the last one can be given in this one."""
    __slots__ = ("levels", "given", "ahead", "ready", "next", "shift", "chunk", "verdicts", "last", "problems",
                 "standin")

    def __init__(self):
        self.levels = {}          # level -> (OURS | DECLINED, pc): what the unwinder did there (not via an Answer)
        self.given = {}           # level -> the Answer GDB took there (it stands for the level's record)
        self.ahead = {}           # chain index -> its caller (core Frame or Stop), unwound ahead, not in `ready`
        self.ready = {}           # chain index -> the Answer for it, prepared ahead (see _prepare_all)
        self.next = None          # the level whose `ready` Answer GDB may take now (the chain is unbroken)
        self.shift = 0            # GDB level - chain index: the inline frames GDB put between ours
        self.chunk = None         # how many frames to unwind ahead next (None: core.unwind.ahead.FIRST_CHUNK)
        self.verdicts = {}        # caller PC -> the verdict of _chain_verdict
        self.last = {}            # level -> (pc, cfa, None): outermost frames (see SFrameUnwinder.last)
        self.problems = {}        # level -> (pc, why): frames declined for an error (a malformed section ...)
        self.standin = None       # GDB 13: (level, pc, sp, function) of an outermost frame's stand-in caller

    def forget_ahead(self):
        """Drop what was unwound ahead and the verdicts (they read memory that has changed)."""
        self.ahead, self.ready, self.verdicts = {}, {}, {}

    def record(self, level):
        """(OURS | DECLINED, pc) of a level seen in this unwind, or None."""
        rec = self.levels.get(level)
        if rec is None:
            given = self.given.get(level)
            if given is not None:
                rec = (OURS, given.frame_pc)
        return rec


class SFrameUnwinder(gdb.unwinder.Unwinder):
    """GDB's frame unwinder for SFrame.

    The protocol GDB follows.  To build the frame at level N (0 is the newest) GDB calls each
    enabled Python unwinder with a PendingFrame whose registers are those its frame N-1 gave.  The
    first to return an UnwindInfo (the frame's id, and the caller's registers) takes the frame;
    None leaves it to GDB's other unwinders (DWARF, inline frames, signal trampolines, dummy
    frames, prologue analysis).  GDB asks about each level once per unwind, innermost first,
    beginning at 0 or, where its inline-frame unwinder takes the top frames, at a later level.  It
    never says when an unwind begins or ends: a level at or below the last one asked (`_seen`)
    begins a new one, and so do a new stop, a register write, `set` of our settings, and frames
    of another thread or inferior (the hooks in plugin.py call reset() and friends); a memory
    write only drops what was unwound ahead (memory_changed).

    The state:
      * per unwind, `_u` (an _Unwind, replaced whole by _new_unwind): what was taken, declined,
        given, unwound ahead and prepared;
      * `_seen`, the last level GDB asked about (_FRESH: none yet); `_idle` and `_quick`, decided
        at each unwind's first call (_begin); `_plain`, after every call;
      * per set of objfiles (forget_modules): `_cfi_both`, `_uncovered`, `_sframe_only`, the
        walkers of core.unwind.ahead;
      * per process (`calls`, an InferiorCalls): where GDB called functions.

    Each call goes one of four ways:
      1. idle (`_idle`): no frame can be ours (mode off, no SFrame loaded, or mode auto with GDB's
         DWARF unwinders on and DWARF CFI for every function that has SFrame): declined at once;
         where hooks wake the unwinder again, it is also disabled, and GDB does not call it.
      2. quick (`_quick`): mode auto with GDB's DWARF unwinders on, a frame below which this
         unwinder gave nothing: a PC that DWARF CFI covers (with PC - 1) or that no SFrame
         covers, learnt before, is declined after one look-up.  While the unwind has given and
         prepared nothing (`_plain`), __call__ does it before anything else; else _quick_decline.
      3. chained (`_u.next`): GDB asks for the caller of the frame given it at the level below.
         The answer was prepared when the frames above were unwound ahead (core.unwind.ahead, in
         chunks that grow), so it is given at once (the first thing _sniff tries: no idle unwind
         has one); GDB checks nothing, so `verify` checks it is that caller (same PC and SP)
         where no hook tells of registers replaced.
      4. first: any other frame: its registers are read from GDB, the policy decides
         (core.unwind.policy.choose), and the core's step() gives its caller.
    Inline frames GDB puts between two of ours shift its levels against the chain (`_u.shift`).
    Anything raised ends in a decline, the reason kept in `problems` and logged: never into GDB.
    """

    def __init__(self, plugin):
        super().__init__("sframe")
        self.plugin = plugin
        self._u = _Unwind()       # the current unwind
        self._seen = _FRESH       # the last level GDB asked about (a lower or equal one starts a new unwind)
        self._calling = False     # inside __call__ (see switch)
        self._arches = {}         # gdb.Architecture -> archmod.Arch (or None: unsupported)
        self._walkers = {}        # (SFrame ABI, callee-saved?) -> core.unwind.ahead.Ahead, for the current modules
        self._generation = None   # the tracker's generation the walkers were made for
        self._tramp = {}          # pc -> is it a signal trampoline (declined frames only)
        self._inferior = None
        self._dwarf = None        # are GDB's DWARF unwinders on (None: not asked since the last prompt or unwind)
        self._cfi_both = {}       # pc -> CfiRange: DWARF CFI covers pc and pc - 1 (mode auto declines at once)
        self._uncovered = set()   # caller PCs no SFrame covers (nor PC - 1): declined at once
        self._sframe_only = None  # [(module, functions)] only SFrame describes (None: not worked out yet)
        self._idle = False        # this unwind: no frame can be ours, every call declines at once
        self._quick = False       # this unwind: mode auto, GDB's DWARF unwinders on (see __call__)
        self._quick_pc = None     # what the PC is read by there (GDB 13, without PendingFrame.pc())
        self._plain = False       # may the next frame take __call__'s hot path (see _plain_now)
        self._thread = None       # the gdb.InferiorThread whose frames the current unwind is of
        self._progspace = None    # its program space (what _cfi_both, _uncovered and _tramp are of)
        self.verify = True        # check that a frame GDB asks about is the caller given it (Plugin.install)
        self.calls = InferiorCalls()

    # -- bookkeeping ------------------------------------------------------------------------

    @property
    def problems(self):
        """level -> (pc, why): the frames of this unwind declined for an error (sframe verify)."""
        return self._u.problems

    def reset(self, *_):
        """Forget the current unwind (new stop, frames flushed, registers or memory changed)."""
        self._restart()
        self._tramp = {}

    def memory_changed(self, *_):
        """Memory was written.  What was unwound ahead read the old memory: it goes.  The frames
        GDB has built stay (a write from Python's Inferior.write_memory keeps them; `set var`
        drops them, and GDB begins a new unwind), and so do the records of their levels: a frame
        above them is a caller, not the topmost (reset, GDB asking on at frame #2, took it for
        the topmost, looked it up at its return address, and found the next function there)."""
        self._forget_ahead()

    def resumed(self, *_):
        """The inferior runs on: forget this unwind, and the register-sized values made for its
        stack (kept, they would fill the cache with the SPs and counters of stops long gone: 8,192
        gdb.Values, some 3 MB of GDB's memory)."""
        self.reset()
        for arch in self._arches.values():
            if arch:
                arch.values.clear()

    def _new_unwind(self):
        """A new unwind begins (its first level is being asked about, or about to be)."""
        self._u = _Unwind()
        for walker in self._walkers.values():
            walker.new_unwind()
        if not self.plugin.watched:
            self._dwarf = None    # (asked again for each unwind, where no hook tells of a change)

    def _restart(self):
        """A new unwind begins at the next call, whatever its level."""
        self._new_unwind()
        self._seen = _FRESH

    def _forget_ahead(self):
        """Drop what was unwound ahead of GDB, and what it was unwound from (memory read, verdicts)."""
        self._u.forget_ahead()
        for walker in self._walkers.values():
            walker.new_unwind()

    def undecided(self):
        """Decide again at the next call whether to idle (what it depends on changed)."""
        self._seen = _FRESH

    def forget_modules(self):
        """Objfiles changed: what was learnt about their CFI and SFrame may no longer hold."""
        self._cfi_both = {}
        self._uncovered = set()
        self._walkers = {}
        self._sframe_only = None

    def _idle_now(self):
        """Can no frame of this unwind be this unwinder's?  Asked at each unwind's first frame
        while GDB calls it (Plugin.wake); where no hook tells of a change of GDB's DWARF
        unwinders (dwarf_unwinders.watch), a script may turn them off just before `bt`, and they are
        asked about each time.  The functions only SFrame describes are worked out once per set
        of objfiles."""
        return not self.activity(again=False, explain=False)[0]

    def activity(self, again=True, explain=True):
        """(active?, why) for `info sframe` and for each unwind (core.unwind.policy.activity): in
        mode auto the unwinder idles when GDB's DWARF unwinders are on and DWARF CFI covers every
        function that has SFrame, and GDB need not call it (see __call__).  `again`: work out anew
        which functions only SFrame describes, and ask GDB about its DWARF unwinders.  `explain`
        False: why is None (the per-unwind question formats nothing)."""
        plugin = self.plugin
        loaded = []

        def any_sframe():
            loaded.append(plugin.tracker.current())
            return loaded[0] is not None

        def sframe_only():
            if again or self._sframe_only is None:
                self._sframe_only = loaded[0].sframe_only()
            return [(m.path, n) for m, n in self._sframe_only]

        def dwarf():
            if again or not plugin.watched:
                self._dwarf = None
            return self.dwarf_enabled()
        return policy.activity(plugin.mode, any_sframe, sframe_only, dwarf, explain=explain)

    def forget_dwarf_state(self, *_):
        """Ask GDB again whether its DWARF unwinders are on (it announces no change of them)."""
        self._dwarf = None

    def dwarf_enabled(self):
        if self._dwarf is None:
            self._dwarf = dwarf_unwinders.enabled()
            if self._dwarf is None:
                self._dwarf = True        # GDB does not say: assume they run (do no harm)
        return self._dwarf

    def _note(self, level, kind, pc):
        self._u.levels[level] = (kind, pc)

    def _produced_at(self, level):
        """(core Frame, Arch, ABIInfo) this unwinder gave the frame at `level`, or None."""
        given = self._u.given.get(level - 1)
        return None if given is None else (given.caller, given.arch, given.abi)

    @property
    def last(self):
        """level -> (pc, cfa, Frame) of the frames SFrame unwound in the current unwind (for commands)."""
        got = {level: (given.frame_pc, given.caller.cfa, given.caller) for level, given in self._u.given.items()}
        got.update(self._u.last)
        return got

    def _arch(self, pf):
        a = pf.architecture()
        info = self._arches.get(a, False)
        if info is False:
            info = self._arches[a] = archmod.lookup(a.name())
        return info

    def _read(self, addr, size):
        return self._inferior.read_memory(addr, size)

    def _full(self, level, pc, abi, pf):
        """Are all registers of the pending frame `pf` at `level` (its PC `pc`) valid (topmost, or
        interrupted by a signal, or below only inline frames, or above a dummy frame: GDB called
        a function there, and restores the registers it saved)?  Decided from what this
        unwinder saw of the frames below it during the same unwind, and the calls GDB made."""
        if level == 0:
            return True
        k = level - 1
        while k >= 0:
            rec = self._u.record(k)
            if rec is not None:
                if k < level - 1 and pc in self.calls.sites:
                    # GDB's own frames between (none this unwinder's): inline frames, whose outer
                    # frame has the PC of the caller given at k, or a dummy frame.  (GDB's Frame
                    # API cannot tell: asked from a sniffer, GDB 13 stops on an internal error.)
                    given = self._u.given.get(k)
                    if (given is None or given.caller.pc != pc) and self._called_from(pf, pc):
                        return True
                if rec[0] == OURS:
                    return False
                return self._is_trampoline(rec[1], abi)
            k -= 1
        return True

    def _called_from(self, pf, pc):
        """Did GDB call a function from a frame with this PC and the pending frame's SP?"""
        arch = self._arch(pf)
        try:
            return arch is not None and self.calls.made_from(pc, int(pf.read_register(arch.sp)) & MASK64)
        except ValueError:        # (GDB 13: a frame of another gdbarch)
            return False

    def inferior_call(self, event):
        """gdb.events.inferior_call (see InferiorCalls): never raises into GDB."""
        try:
            self.calls.event(event)
        except Exception as exc:
            self.plugin.log("inferior call: %s" % exc)

    def exited(self, *_):
        """The process exited: its calls with it."""
        self.reset()
        self.calls.clear()

    def _is_trampoline(self, pc, abi):
        t = self._tramp.get(pc)
        if t is None:
            def fetch(addr, size):
                try:
                    return bytes(self._inferior.read_memory(addr, size))
                except Exception:
                    return None
            t = self._tramp[pc] = sigframe.by_code(abi, pc, fetch, True) is not None
        return t

    # -- the unwinder -----------------------------------------------------------------------

    def switch(self, on):
        """Enable or disable it.  GDB 14 and later's `enabled` setter also drops every frame GDB
        has built: right where the change alters what GDB would unwind, but never while GDB is
        unwinding (inside __call__, where the frames it drops are the ones being built, and GDB
        stops on an internal error): there, only the flag changes."""
        if on == self.enabled:
            return
        if self._calling and isinstance(getattr(type(self), "enabled", None), property):
            self._enabled = on
        else:
            self.enabled = on

    def __call__(self, pf):
        try:
            level = pf.level()
            try:
                thread = _selected_thread()
            except Exception:
                # (Some remote targets: "could not find gdb thread object".)  Another thread's
                # frames cannot be told from this one's: check each frame against its caller.
                thread, self.verify = self._thread, True
            if thread is not self._thread:
                # Another thread's frames (GDB unwinds the selected thread's): what was recorded
                # and prepared for the last thread's is not this one's, whatever level GDB begins
                # at (above inline frames it begins at 1 or later, where the levels alone cannot
                # tell a new unwind from the last one going on).
                self._thread = thread
                self._restart()
                if gdb.current_progspace() is not self._progspace:
                    # Another inferior's: the PCs learnt as CFI-covered or without SFrame were
                    # another program's (two builds of one program share their addresses).
                    self._progspace = gdb.current_progspace()
                    self.forget_modules()
                    self._tramp = {}
            elif self._plain and level > self._seen and level not in self._u.levels:
                # The hot path of a mixed program's CFI modules (see _plain_now): the PC read, and
                # the frame declined if DWARF CFI covers it (and PC - 1) or no SFrame covers it.
                pc = (int(pf.pc()) if _PENDING_PC else int(pf.read_register(self._quick_pc))) & MASK64
                if pc in self._cfi_both or pc in self._uncovered:
                    self._seen = level
                    self._u.levels[level] = (DECLINED, pc)
                    return None
        except Exception:
            pass                      # (met again below, and declined with the reason)
        self._calling = True
        try:
            return self._sniff(pf)
        finally:
            self._calling = False
            self._plain = self._plain_now()

    def _plain_now(self):
        """May the next frame take __call__'s hot path?  In mode auto with GDB's DWARF unwinders
        on (_quick), while this unwind has given GDB no frame and prepared none (so the frame
        below the next one is GDB's, and a decline needs no record but its level's), and no
        debug log is written (its lines say why each frame was declined)."""
        return (self._quick and not self._idle and not self._u.ready and not self._u.ahead and not self._u.given
                and not self.plugin.debug)

    def _sniff(self, pf):
        """The ways of the class docstring: 3 (prepared), a new unwind's decisions (_begin), 1, 2, then
        3 (not prepared) or 4 in _unwind; anything raised declines."""
        try:
            level = pf.level()
            u = self._u
            if level == u.next:
                if not self.verify or self._is_caller(pf, u.given[level - 1]):
                    # 3, chained, the hot path: the answer prepared ahead (_give, inlined).
                    ready = u.ready.get(level - u.shift)
                    if ready is not None:
                        ui = pf.create_unwind_info(ready)
                        deque(map(ui.add_saved_register, ready[4], ready[5]), 0)
                        u.given[level] = ready
                        u.next = level + 1
                        self._seen = level
                        return ui
                else:
                    # Not that caller: GDB unwinds anew, from registers replaced with no event
                    # (`record goto`, `tfind`, `restart` where our pre-hooks could not be set),
                    # and begins above inline frames at the very level the last unwind would
                    # have gone on at.
                    self._restart()
            elif (self.verify and u.next is not None and level > u.next and level > self._seen
                  and not self._same_frame(pf)):
                # (the same, GDB beginning above more inline frames: not the caller given either)
                self._restart()
            if level <= self._seen:
                self._begin(pf, level)
            self._seen = level
            if self._idle:                # 1, idle
                return None
            if self._quick:
                if level == 0:
                    self._new_unwind()    # (as _unwind does at level 0)
                if self._quick_decline(pf, level):
                    return None           # 2, quick
            if self.plugin.mode is Mode.OFF:   # (GDB does not call a disabled unwinder: see Plugin.set_mode)
                return None
            return self._unwind(pf, self.plugin, level)     # 3 (not prepared) or 4
        except Exception as exc:          # anything at all: decline, never raise into GDB
            level = _level(pf)
            why = "%s%s: %s" % (INTERNAL_ERROR, type(exc).__name__, exc)
            if isinstance(level, int):
                self._u.problems[level] = (None, why)     # (sframe verify counts them)
            self.plugin.log("frame #%s: declined after an %s" % (level, why))
            return None

    def _begin(self, pf, level):
        """A new unwind: GDB asks about each level once per unwind, innermost first, from level 0
        or, where GDB's inline-frame unwinder takes the top frames, from a later one.  Decides
        whether it idles (1) and whether it may decline quickly (2)."""
        if level > 0 and self._seen != _FRESH:
            # (from a later one: what is recorded is the last unwind's; after undecided(),
            # _FRESH, it may be this one's, GDB going on with a backtrace it had begun)
            self._new_unwind()
        self._idle = self._idle_now()      # decided again for each unwind (see _idle_now)
        arch = self._arch(pf) if not self._idle and self.plugin.mode is Mode.AUTO else None
        self._quick = arch is not None and self.dwarf_enabled()
        if self._quick and not _PENDING_PC:
            self._quick_pc = arch.read_pc_by(pf)     # (one architecture for a whole stack)
        if self._idle:
            u = self._u
            if u.given or u.last or u.levels or u.problems:
                self._new_unwind()         # a previous unwind's records are not this one's
            if self.plugin.watched and sum(1 for i in gdb.inferiors() if i.pid) <= 1:
                # Nothing can make it active but what wakes it (Plugin.wake): GDB need
                # not call it until then.  (With another inferior, selecting it may:
                # `inferior 2` in a script, or from Python, tells of it by no event.)
                self.switch(False)

    def _quick_decline(self, pf, level):
        """2, quick: decline a frame below which this unwinder gave nothing (a mixed program's
        CFI modules) when DWARF CFI covers its PC and PC - 1, or no SFrame covers it, as learnt
        before: _unwind's declines at the cost of reading the PC.  True if declined."""
        u = self._u
        if level != 0 and (u.ready or u.ahead or level - 1 in u.given or level in u.levels):
            return False
        try:
            pc = (int(pf.pc()) if _PENDING_PC else int(pf.read_register(self._quick_pc))) & MASK64
        except ValueError:        # GDB 13: a frame of another gdbarch refuses _quick_pc
            return False          # (_unwind reads it by the frame's own)
        cfi = self._cfi_both.get(pc)
        if cfi is None and pc not in self._uncovered:
            return False
        if self.plugin.debug:
            self._decline(level, pc, _DWARF_COVERS if cfi else _NO_SFRAME, detail=cfi)
        else:
            u.levels[level] = (DECLINED, pc)
        return True

    def _decline(self, level, pc, why, always=False, detail=None):
        """Leave the frame to GDB's other unwinders, and say why under `set debug sframe on`
        (`always`: an anomaly worth a line in the debug log whenever it happens).  `detail`, if
        given, is put into `why` (`why % detail`) only when the line is written: the common
        declines of a mixed program pay no formatting."""
        self._note(level, DECLINED, pc or 0)
        if (always or self.plugin.debug) and detail is not None:
            why = why % (detail,)
        if always:
            self._u.problems[level] = (pc, why)
        if always or self.plugin.debug:
            where = "" if pc is None else "pc %#x: " % pc
            self.plugin.log("frame #%d: %s%s" % (level, where, why))
        return None

    def _unwind(self, pf, plugin, level):
        if level == 0 or level in self._u.levels or level in self._u.given:
            # GDB started a new unwind: it sniffs each level once per unwind, innermost first.
            self._new_unwind()
        elif level != self._u.next and (self._u.ready or self._u.ahead):
            # GDB did not ask about the levels since the last answer: its inline-frame unwinder
            # put frames there (with the registers of the frame this unwinder gave it, which GDB
            # now shows at `level`).  The answers prepared ahead go on from that frame, GDB's
            # levels shifted; if it is some other frame, they are another stack's.
            if self._u.next is not None and level > self._u.next and self._same_frame(pf):
                self._u.shift += level - self._u.next
                ready = self._u.ready.get(level - self._u.shift)
                if ready is not None:
                    return self._give(pf, level, ready)
            else:
                self._u.ready.clear()
                self._u.ahead.clear()
        standin, self._u.standin = self._u.standin, None
        if standin is not None and level == standin[0]:
            info = self._standin_info(pf, standin)
            if info is not None:
                return info
        self._u.next = None
        ms = plugin.tracker.current()
        if ms is None:                    # nothing loaded has SFrame
            return None
        if step is None:
            _import_core()
        known = self._produced_at(level)
        if known is not None:
            return self._chained(pf, plugin, ms, level, *known)
        arch = self._arch(pf)
        if arch is None:
            return self._decline(level, None, "architecture %s not supported" % pf.architecture().name())
        # GDB 14+ gives the PC itself: the one it computes for its own sniffers anyway (cached),
        # where reading the register makes a gdb.Value through the callee's unwinder each time.
        pc = (int(pf.pc()) if _PENDING_PC else int(pf.read_register(arch.read_pc_by(pf)))) & MASK64
        if plugin.mode is Mode.AUTO:
            # The common case of mode auto, at the cost of one dict look-up: CFI covers both the
            # PC and PC - 1, so GDB's DWARF unwinder takes the frame whatever its kind.
            cfi = self._cfi_both.get(pc)
            if cfi is not None and self.dwarf_enabled():
                return self._decline(level, pc, _DWARF_COVERS, detail=cfi)
        self._inferior = gdb.selected_inferior()
        verdict = self._verdict(ms, arch, level, pc, None, pf)
        if isinstance(verdict[0], str):
            return self._decline(level, pc, *verdict)
        found, abi, full = verdict
        callee_saved = plugin.callee_saved
        read = archmod.register_reader(pf, arch, abi)
        # A frame another unwinder produced: the callee-saved registers GDB knows in it may be
        # carried on to the caller where they are unchanged.
        regs = LazyRegisters(read) if callee_saved and not full else None
        frame = frame_from_registers(abi, pc, read, full=full, regs=regs, interrupted=full and level > 0)
        if frame.sp is None:      # as an internal error: no record for this level
            self._u.problems[level] = (pc, "GDB cannot read %s" % arch.sp)
            plugin.log("frame #%d: pc %#x: declined: GDB cannot read %s" % (level, pc, arch.sp))
            return None
        res = step(frame, abi=abi, read=self._read, find=ms.find, topmost=level == 0, callee_saved=callee_saved,
                   symbolize=ms.symbolize)
        return self._answer(pf, arch, abi, level, pc, res, found)

    def _same_frame(self, pf):
        """Is the pending frame the caller this unwinder gave GDB at the last level it answered?"""
        given = self._u.given.get(self._u.next - 1)
        return given is not None and self._is_caller(pf, given)

    @staticmethod
    def _is_caller(pf, given):
        """Is the pending frame the caller in the Answer `given` (same PC and SP)?"""
        caller, arch = given[2], given[6]
        try:
            pc = pf.pc() if _PENDING_PC else pf.read_register(arch.pc_id)
            return int(pc) & MASK64 == caller.pc and int(pf.read_register(arch.sp_id)) & MASK64 == caller.sp
        except ValueError:        # GDB 13: a frame of another gdbarch refuses the descriptors
            return False

    def _verdict(self, ms, arch, level, pc, full, pf=None):
        """((index, module), ABIInfo, full) if this unwinder takes the frame at `level`, else
        (why not, always log it?).  `full`: are all its registers valid (None: find out, from
        the pending frame `pf`)."""
        found = ms.find(pc)
        if found is None and level > 0:
            found = ms.find(lookup_address(pc, True))
        if found is None:
            if level > 0 or ms.find(lookup_address(pc, True)) is None:
                if len(self._uncovered) >= 65536:     # bounded in a long session
                    self._uncovered = set()
                self._uncovered.add(pc)               # (neither PC nor PC - 1: at any level)
            return (_NO_SFRAME, False)
        index, module = found
        abi = arch.abi_for(index.abi)
        if abi is None:
            return ("%s has SFrame for another architecture" % module.path, True)
        if full is None:
            full = self._full(level, pc, abi, pf)
        if self.plugin.mode is Mode.AUTO:
            why = self._dwarf_takes(ms, module, level, pc, full)
            if why is not None:
                return (why, False)
        return found, abi, full

    def _chain_verdict(self, ms, arch, abi, level, pc):
        """`_verdict` for a caller PC of a frame this unwinder produced, remembered for the unwind."""
        verdict = self._u.verdicts.get(pc)
        if verdict is None:
            cfi = self._cfi_both.get(pc) if self.plugin.mode is Mode.AUTO else None
            if cfi is not None and self.dwarf_enabled():
                verdict = (_DWARF_COVERS % (cfi,), False)
            else:
                verdict = self._verdict(ms, arch, level, pc, False)
                if not isinstance(verdict[0], str) and verdict[1] is not abi:
                    verdict = ("its SFrame is for another ABI than the frame below it", True)
            self._u.verdicts[pc] = verdict
        return verdict

    def _chained(self, pf, plugin, ms, level, frame, arch, abi):
        """A frame this unwinder produced (its registers are the ones it gave GDB): its caller was
        unwound ahead with the frames above it, or is now, by core.unwind.ahead."""
        pc = frame.pc
        verdict = self._chain_verdict(ms, arch, abi, level, pc)
        if isinstance(verdict[0], str):
            return self._decline(level, pc, *verdict)
        ready = self._u.ready.get(level - self._u.shift)
        if ready is None:
            res = self._u.ahead.get(level - self._u.shift)
            if res is None:
                res = self._unwind_ahead(pf, ms, level, frame, arch, abi)
            ready = self._u.ready.get(level - self._u.shift)
            if ready is None:
                return self._answer(pf, arch, abi, level, pc, res, verdict[0])
        return self._give(pf, level, ready)

    def _unwind_ahead(self, pf, ms, level, frame, arch, abi):
        """The caller of `frame` (at `level`), and those of the frames above it while this
        unwinder would take them, kept in self._u.ahead, with GDB's answers prepared in
        self._u.ready where they are ordinary frames (not under `set debug sframe on`)."""
        gen = self.plugin.tracker.generation
        if gen != self._generation:
            self._walkers, self._generation = {}, gen
        callee_saved = self.plugin.callee_saved
        walker = self._walkers.get((abi.sframe_abi, callee_saved))
        if walker is None:
            walker = self._walkers[(abi.sframe_abi, callee_saved)] = Ahead(abi, self._read, ms.find, callee_saved=callee_saved,
                                                               symbolize=ms.symbolize)

        verdicts = self._u.verdicts

        def go_on(caller):
            verdict = verdicts.get(caller.pc)
            if verdict is None:
                verdict = self._chain_verdict(ms, arch, abi, level + 1, caller.pc)
            return verdict[0].__class__ is not str

        chunk = self._u.chunk or FIRST_CHUNK
        # Everything made here is kept (frames, values, answers): a collection would find no garbage.
        collecting = gc.isenabled()
        gc.disable()
        try:
            got = walker.walk(frame, chunk, go_on=go_on, increasing=False)
            self._u.chunk = next_chunk(chunk)
            if not self.plugin.debug:
                self._prepare_all(pf, arch, abi, level - self._u.shift, frame.pc, got)
            else:
                self._u.ahead.update(enumerate(got, level - self._u.shift))
        finally:
            if collecting:
                gc.enable()
        return got[0]

    def _prepare_all(self, pf, arch, abi, level, pc, got):
        """GDB's Answer for each ordinary frame `got[k - level]` in self._u.ready[k], and the others
        (a Stop or a frame restored from a signal frame, the last of `got`) in self._u.ahead[k].
        An Answer: the frame id (CFA and function start), the caller, the PC of the frame at
        level k, the registers to save (ids and gdb.Values), the Arch and the ABIInfo.  This loop
        runs once per frame of a whole backtrace."""
        arch.prepare(pf, abi)
        ahead, ready = self._u.ahead, self._u.ready
        signal = Method.SIGNAL
        shapes, shape_of, saved, vget = arch.shapes, arch.shape, arch.saved, arch.values.__getitem__
        value, word, size, order = gdb.Value, arch.word, arch.word.sizeof, arch.order
        new, answer = _new_answer, Answer
        partial, below = arch.partial, None
        for k, res in enumerate(got, level):
            if isinstance(res, Stop) or res.method is signal:
                ahead[k] = res            # (the last of `got`): _chained answers for it
                break
            regs = res.regs
            ids, head, owns = shapes.get((res.fp is None, res.ra is None, *regs)) or shape_of(res)
            cfa = res.cfa
            if owns is None:
                # Each frame has a CFA of its own (not worth caching); on most ABIs it is the SP.
                vcfa = value((cfa & MASK64).to_bytes(size, order), word)
                sp = res.sp
                vals = (vcfa if sp == cfa else vget(sp), *map(vget, head(res)), *map(vget, regs.values()))
            else:
                ids, vals = saved(res)
                vcfa = vget(cfa)
            if partial:               # AArch64's v8-v15: their other GDB registers (Arch.with_views)
                ids, vals, below = arch.with_views(pf if k == level else None, abi, res, ids, vals, below)
            match = res.match
            ready[k] = new(answer, (vcfa, vget(pc if match is None else match.fde.start), res, pc, ids, vals,
                                    arch, abi))
            pc = res.pc

    def _give(self, pf, level, ready):
        """Answer GDB with a prepared Answer (see _prepare_all; inlined in __call__'s hot path)."""
        ui = pf.create_unwind_info(ready)
        deque(map(ui.add_saved_register, ready[4], ready[5]), 0)    # each register, without a Python loop
        self._u.given[level] = ready
        self._u.next = level + 1
        return ui

    def _answer(self, pf, arch, abi, level, pc, res, found):
        """GDB's answer for the frame at `level` from the core's `res` (its caller, or a Stop)."""
        if isinstance(res, Stop):
            if res.reason is StopReason.OUTERMOST:
                self._note(level, OURS, pc)
                return self._outermost(pf, arch, level, pc, found, res)
            # No FDE covers the PC (gas before 2.46 writes none for a DRAP-realigned function):
            # simply not SFrame's; every other stop is an anomaly worth reporting.
            return self._decline(level, pc, "declined: " + res.text,
                                 always=res.reason is not StopReason.NO_SFRAME)
        if res.method is Method.SIGNAL:
            # GDB's own signal-trampoline unwinder knows this frame's type and registers.
            self._tramp[pc] = True
            return self._decline(level, pc, "signal trampoline; left to GDB's sigtramp unwinder")
        return self._unwind_info(pf, arch, abi, level, pc, res, found[1])

    def _dwarf_takes(self, ms, module, level, pc, full):
        """Why GDB's DWARF unwinder takes this frame in mode auto, or None if SFrame does."""
        # GDB looks a frame's CFI up at its address in the block: PC - 1 for a caller.
        addr = lookup_address(pc, not (level == 0 or full))
        choice = choose(self.plugin.mode, self.dwarf_enabled(), lambda: ms.cfi_find(module, addr))
        if choice.cfi is not None and ms.cfi_find(module, pc - 1 if addr == pc else pc) is not None:
            if len(self._cfi_both) >= 65536:      # bounded in a long session
                self._cfi_both = {}
            self._cfi_both[pc] = choice.cfi
        if choice.sframe:
            return None
        return "left to GDB's unwinders: %s%s" % (choice.reason, " (%s)" % choice.cfi if choice.cfi else "")

    def _unwind_info(self, pf, arch, abi, level, pc, res, module):
        """GDB's UnwindInfo for the caller `res` of the frame at `level`."""
        if self.plugin.debug:
            self.plugin.log("frame #%d: pc %#x: %s: CFA %#x, caller pc %#x sp %#x%s (%s)" % (
                level, pc, res.method.value, res.cfa, res.pc, res.sp,
                "" if res.fp is None else " fp %#x" % res.fp, module.path))
        self._prepare_all(pf, arch, abi, level - self._u.shift, pc, [res])
        return self._give(pf, level, self._u.ready[level - self._u.shift])

    def _outermost(self, pf, arch, level, pc, found, stop):
        """The outermost frame: a frame id but no saved PC, so the backtrace ends here."""
        index, module = found
        entry = entry_code_of(found)
        if entry is not None and entry[0] <= pc <= entry[1]:
            func = entry[0]               # the program's entry code (a return address may be its end)
        else:
            match = index.lookup(pc)
            func = match.fde.start if match is not None else pc
        known = self._produced_at(level)
        sp = known[0].sp if known is not None else int(pf.read_register(arch.sp)) & MASK64
        self._u.last[level] = (pc, sp, None)
        if self.plugin.debug:
            self.plugin.log("frame #%d: pc %#x: outermost frame (%s)" % (level, pc, stop.message))
        info = pf.create_unwind_info(FrameId(gdb.Value(sp), gdb.Value(func)))
        if not _PENDING_PC:
            # GDB 13 does not end a backtrace where a Python unwinder saves no PC: it raises "PC
            # not saved" from every walk past the frame (`bt`, gdb.Frame.older()).  The frame's
            # own PC and SP as its caller's end it as cleanly as GDB 13 can: asked about that
            # stand-in next (and nothing else recorded of it), the unwinder gives it this
            # frame's id, and GDB stops at "previous frame identical to this frame".
            _save_own_pc_and_sp(info, pf, arch)
            self._u.standin = (level + 1, pc, sp, func)
        return info

    def _standin_info(self, pf, standin):
        """GDB 13: the stand-in caller of an outermost frame (see _outermost), given that frame's
        id and registers again; None if the pending frame is another."""
        try:
            arch = self._arch(pf)
            if arch is None:
                return None
            pc = int(pf.read_register(arch.read_pc_by(pf))) & MASK64
            if (pc, int(pf.read_register(arch.sp)) & MASK64) != standin[1:3]:
                return None
            info = pf.create_unwind_info(FrameId(gdb.Value(standin[2]), gdb.Value(standin[3])))
            _save_own_pc_and_sp(info, pf, arch)
            return info
        except Exception:        # (declined below, with the reason, as any frame)
            return None


def _save_own_pc_and_sp(info, pf, arch):
    """The pending frame's own PC and SP as its caller's (GDB 13's end of a walk: see _outermost)."""
    info.add_saved_register(arch.read_pc_by(pf), pf.read_register(arch.read_pc_by(pf)))
    info.add_saved_register(arch.sp, pf.read_register(arch.sp))


INTERNAL_ERROR = "internal error: "     # how a problem caused by an exception in the plugin begins


def _level(pf):
    try:
        return pf.level()
    except Exception:
        return "?"
