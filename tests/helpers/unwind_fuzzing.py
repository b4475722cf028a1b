"""Fuzzing the unwinder on real stacks: shared by tests/test_reliability.py and bench/fuzz_unwind.py.

A case is a real core (its modules with SFrame, its memory) with the first thread's registers
and some words of its stack changed: wild return addresses, pointers to themselves or further
down the stack, addresses into the program's own code (function starts, middles of
instructions), zeros, misaligned and unmapped values; sometimes the stack becomes unreadable
from some address on.  Both walkers run on it (`core.unwind.unwinder.walk`, one step at a time, and
`core.unwind.ahead.walk`, the GDB hot path), with and without the frame-pointer fallback and the
callee-saved registers.  They may only yield Frames and end with one Stop, within the depth
limit; anything else is an escape.
"""

import random
import time
import traceback

from sframekit.core.target.session import CoreSession
from sframekit.core.unwind import ahead
from sframekit.core.unwind import unwinder as unwind
from sframekit.core.unwind.unwinder import Frame, Stop

LIMIT = 64
WALKERS = (("unwind.walk", unwind.walk), ("ahead.walk", ahead.walk))


class Target:
    """What the cases of one core start from: the session, its first thread's registers and
    stack, and addresses worth planting (the SFrame functions' starts and insides)."""

    def __init__(self, core_path, exe=None, sysroot=None):
        self.session = s = CoreSession(core_path, exe=exe, sysroot=sysroot)
        self.abi = s.abi
        self.thread = s.core.threads[0]
        self.frame = s.initial_frame(self.thread)
        self.order = s.core.byte_order
        self.code = []
        for m in s.modules.with_sframe():
            for fde in list(m.index.section.fdes())[:200]:
                self.code += [fde.start, fde.start + fde.size // 2, fde.end - 1, fde.end]
        self.sp = self.frame.sp
        self.stack = bytes(s.core.read(self.sp, 512)) if s.core.readable(self.sp, 512) else b""

    def value(self, rng, at=None):
        """An interesting word: for a slot at `at`, possibly a pointer to itself."""
        sp, w = self.sp, self.abi.ptr_size
        kind = rng.randrange(10)
        if kind == 0:
            return 0
        if kind == 1 and at is not None:
            return at                                   # a stack of self-pointers
        if kind == 2:
            return sp - w * rng.randrange(1, 64)        # into the callee's area (CFA going down)
        if kind == 3:
            return sp + w * rng.randrange(0, 64)        # up the stack
        if kind in (4, 5) and self.code:
            return rng.choice(self.code) + rng.choice((0, 0, 1, 5))   # into its own code
        if kind == 6:
            return sp + rng.choice((1, 3, 4, 7))       # misaligned
        if kind == 7:
            return rng.choice((1 << 63, (1 << 64) - 1, (1 << 64) - 8, 0x10, 0x1000))
        return rng.getrandbits(64)


def make_case(target, rng):
    """(initial Frame, read(addr, size), options) for one mutated stop."""
    abi, f = target.abi, target.frame
    regs = dict(f.regs)
    pc, sp, fp, ra = f.pc, f.sp, f.fp, f.ra
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
        which = rng.randrange(5)
        v = target.value(rng) & ((1 << 64) - 1)
        if which == 0:
            pc = v
        elif which == 1:
            sp = v
        elif which == 2:
            fp = v
        elif which == 3 and abi.ra_in_register:
            ra = v
        elif regs:
            regs[rng.choice(sorted(regs))] = v
    initial = Frame(pc=pc, sp=sp, fp=fp, ra=ra, regs=regs)
    patches = {}
    w = abi.ptr_size
    base = target.sp & ~(w - 1)
    for _ in range(rng.randrange(0, 9)):
        at = base + w * rng.randrange(0, 96)
        patches[at] = (target.value(rng, at) & ((1 << 64) - 1)).to_bytes(w, target.order)
    cut = base + w * rng.randrange(0, 256) if rng.random() < 0.2 else None
    core_read = target.session.core.read

    def read(addr, size):
        if cut is not None and addr + size > cut and addr < cut + (1 << 20):
            return None
        data = bytearray(core_read(addr, size))
        for at, word in patches.items():
            if addr < at + w and at < addr + size:
                for i in range(w):
                    if addr <= at + i < addr + size:
                        data[at + i - addr] = word[i]
        return bytes(data)
    options = {"fp_fallback": rng.random() < 0.5, "callee_saved": rng.random() < 0.5}
    return initial, read, options


class Report:
    """What a fuzzing run found: cases run, escapes [(case number, text)], the slowest case's
    seconds, and how many walks ended on each stop reason."""

    def __init__(self):
        self.cases = 0
        self.escapes = []
        self.slowest = 0.0
        self.reasons = {}


def run_case(target, initial, read, options, reasons=None):
    """Run both walkers; returns (escapes as text, frames of the longest walk, seconds).
    `reasons`: a dict counting the stop reasons the walks ended on."""
    escapes = []
    most = 0
    t = time.perf_counter()
    for name, walker in WALKERS:
        try:
            items = list(walker(initial, abi=target.abi, read=read, find=target.session.modules.find, limit=LIMIT,
                                symbol=target.session.trampoline_name, **options))
        except Exception:
            escapes.append("%s raised:\n%s" % (name, traceback.format_exc()))
            continue
        frames = items[:-1]
        if not items or not isinstance(items[-1], Stop):
            escapes.append("%s did not end with a Stop: %r" % (name, items[-1:]))
        elif not all(isinstance(x, Frame) for x in frames):
            escapes.append("%s yielded something else than Frames: %r" % (name, [type(x) for x in frames]))
        elif len(frames) > LIMIT:
            escapes.append("%s gave %d frames, over the limit of %d" % (name, len(frames), LIMIT))
        elif reasons is not None:
            key = items[-1].reason.name
            reasons[key] = reasons.get(key, 0) + 1
        most = max(most, len(frames))
    return escapes, most, time.perf_counter() - t


def fuzz(targets, count, seed=0, report=None):
    """Run `count` cases over the targets (round robin); returns the Report (or adds to `report`)."""
    rng = random.Random(seed)
    report = report or Report()
    for i in range(count):
        target = targets[i % len(targets)]
        initial, read, options = make_case(target, rng)
        errs, _, secs = run_case(target, initial, read, options, report.reasons)
        report.slowest = max(report.slowest, secs)
        report.escapes += [(report.cases, e) for e in errs]
        report.cases += 1
    return report
