"""Fuzz the codec with mutated real sections: `python3 bench/fuzz.py [COUNT] [ELF...]`.

Default: 1,000,000 mutants of the .sframe sections of the fixture corpus (every toolchain) plus
synthetic sections.  Prints progress and the escapes (exceptions other than SFrameError), the
slowest case, and peak memory relative to the section size; exits 1 on any escape.
"""

import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import common  # noqa: E402,F401  (the checkout as the package sframekit)
from helpers import (
    fuzzing,  # noqa: E402
    synthetic,  # noqa: E402
)

from sframekit.core.elf.image import ElfImage  # noqa: E402


def corpus_sections(paths):
    out = []
    for p in paths:
        img = ElfImage(p)
        if img.sframe is not None:
            out.append(img.sframe.data)
    return out


def default_corpus():
    from helpers import toolchains
    tmp = Path(tempfile.mkdtemp(prefix="sframe-fuzz-"))
    entries = toolchains.build_corpus(tmp)
    return [e.path for e in entries]


def big_memory_figures():
    """Peak memory against section size where the size dominates: a 20,000-function section."""
    from sframekit.core.report.dump import dump
    from sframekit.core.sframe import format as F
    from sframekit.core.sframe.decode import Section
    from sframekit.core.sframe.encode import Func, Row, build
    from sframekit.core.sframe.index import SFrameIndex
    data = build(3, F.ABI.AMD64_ENDIAN_LITTLE,
                 [Func(0x1000 + 0x40 * i, 0x30, [Row(0, (8,)), Row(1, (16, -16)), Row(0x2a, (8,))]) for i in range(20000)])
    def lookups():
        idx = SFrameIndex(data)
        for i in range(20000):
            idx.lookup(0x1000 + 0x40 * i + 5)

    def checks():
        Section(data).check_all(keep=False)

    for what, fn in (("full decode and checks", checks), ("dump (its text included)", lambda: dump(data, 0)),
                     ("index + 20,000 lookups", lookups)):
        tracemalloc.start()
        fn()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print("memory: %s of a %d-byte section: peak %.1f MiB = %.0f x the section size"
              % (what, len(data), peak / 2**20, peak / len(data)))


def main(argv):
    count = int(argv[0]) if argv else 1000000
    paths = argv[1:] or default_corpus()
    seeds = corpus_sections(paths)
    real = len(seeds)
    seeds += synthetic.sections()
    print("fuzz: %d seed sections (%d real from %d files, %d synthetic), %d mutants"
          % (len(seeds), real, len(paths), len(seeds) - real, count))
    t = time.perf_counter()
    escapes = fuzzing.run(seeds, count, seed=12345,
                          report=lambda k, e: print("  %7d mutants, %d escapes, %.0f s" % (k, e, time.perf_counter() - t)))
    elapsed = time.perf_counter() - t
    # Peak memory and worst time over a sample, measured separately (tracing slows every case down).
    import random
    rng = random.Random(7)
    worst_time = 0.0
    worst_peak = 0
    tracemalloc.start()
    for _ in range(2000):
        data = fuzzing.mutate(rng.choice(seeds), rng)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        fuzzing.fuzz_one(data)
        worst_time = max(worst_time, time.perf_counter() - t0)
        worst_peak = max(worst_peak, tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    print("fuzz: %d mutants in %.1f s (%.0f/s): %d escapes" % (count, elapsed, count / elapsed, len(escapes)))
    print("fuzz: sample of 2000 mutants: slowest case %.1f ms, largest memory peak %.0f KiB"
          % (worst_time * 1e3, worst_peak / 1024))
    big_memory_figures()
    for data, exc in escapes[:20]:
        print("ESCAPE %s: %s  input=%s" % (type(exc).__name__, exc, data[:64].hex()))
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
