"""Fuzz the codec with mutated real sections: `python3 bench/fuzz.py [COUNT] [ELF...]`.

Default: 100,000 mutants of the .sframe sections of the fixture corpus (every toolchain) plus
synthetic sections.  Prints progress and the escapes (exceptions other than SFrameError), the
slowest case, and peak memory relative to the section size; exits 1 on any escape.
"""

import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from core.elf import ElfImage  # noqa: E402
import fuzzing  # noqa: E402
import synthetic  # noqa: E402


def corpus_sections(paths):
    out = []
    for p in paths:
        img = ElfImage(p)
        if img.sframe is not None:
            out.append(img.sframe.data)
    return out


def default_corpus():
    import toolchains
    tmp = Path(tempfile.mkdtemp(prefix="sframe-fuzz-"))
    entries = toolchains.build_corpus(tmp)
    return [e.path for e in entries]


def main(argv):
    count = int(argv[0]) if argv else 100000
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
    worst_ratio = worst_time = 0.0
    worst_peak = 0
    tracemalloc.start()
    for _ in range(2000):
        data = fuzzing.mutate(rng.choice(seeds), rng)
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        fuzzing.fuzz_one(data)
        worst_time = max(worst_time, time.perf_counter() - t0)
        peak = tracemalloc.get_traced_memory()[1] - base
        worst_peak = max(worst_peak, peak)
        if len(data) >= 4096:      # below that, fixed interpreter overheads dominate any ratio
            worst_ratio = max(worst_ratio, peak / len(data))
    tracemalloc.stop()
    print("fuzz: %d mutants in %.1f s (%.0f/s): %d escapes" % (count, elapsed, count / elapsed, len(escapes)))
    print("fuzz: sample of 2000: slowest case %.1f ms; peak memory of a full decode + dump: at most %.0f bytes per "
          "section byte (sections >= 4 KiB; every decoded record is a Python object), largest peak %.0f KiB"
          % (worst_time * 1e3, worst_ratio, worst_peak / 1024))
    for data, exc in escapes[:20]:
        print("ESCAPE %s: %s  input=%s" % (type(exc).__name__, exc, data[:64].hex()))
    return 1 if escapes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
