"""Mutation fuzzing of SFrame sections: shared by tests/test_fuzz.py and bench/fuzz.py.

`exercise(data)` does everything a user can make the core do with a section: full decode and
checks, lookups at every function and around it, rule interpretation, the readelf-style dump.
The only exception it may raise is SFrameError; anything else is an escape.
"""

import itertools
import random
import struct

from sframekit.core.errors import SFrameError
from sframekit.core.report.dump import dump
from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.index import SFrameIndex

INTERESTING_BYTES = (0, 1, 2, 3, 0x7F, 0x80, 0xFE, 0xFF, 0x10, 0x20, 0x40, 0x60)
INTERESTING_U32 = (0, 1, 2, 4, 5, 16, 17, 20, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                   0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


def exercise(data, section_addr=0x1000):
    """Decode and use a section completely.  Returns the number of FDEs looked up."""
    sec = Section(data, section_addr)
    sec.check_all(keep=False)
    idx = SFrameIndex(data, section_addr)
    n = 0
    for fde in itertools.islice(sec.fdes(), 64):
        for pc in (fde.start, fde.start + fde.size // 2, fde.end - 1, fde.end):
            idx.lookup(pc)
        n += 1
    idx.text_range()
    dump(data, section_addr)
    return n


def mutate(data, rng):
    """One random mutation of `data` (bytes) aimed at the structures the decoder trusts."""
    b = bytearray(data)
    if not b:
        return bytes([rng.choice(INTERESTING_BYTES)])
    kind = rng.randrange(9)
    end = ">" if b[:2] == b"\xde\xe2" else "<"
    if kind == 0:                                    # flip bits
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:                                  # interesting byte anywhere
        b[rng.randrange(len(b))] = rng.choice(INTERESTING_BYTES)
    elif kind == 2 and len(b) >= 28:                 # header u32 field
        off = rng.choice((8, 12, 16, 20, 24))
        val = rng.choice(INTERESTING_U32 + (len(b), len(b) - 28, len(b) + 1, rng.randrange(1 << 32)))
        struct.pack_into(end + "I", b, off, val & 0xFFFFFFFF)
    elif kind == 3 and len(b) >= 8:                  # preamble and header bytes
        b[rng.randrange(2, 8)] = rng.choice(INTERESTING_BYTES + (rng.randrange(256),))
    elif kind == 4:                                  # truncate
        del b[rng.randrange(len(b)):]
    elif kind == 5:                                  # insert or delete a run
        i = rng.randrange(len(b))
        if rng.random() < 0.5:
            b[i:i] = bytes(rng.choice(INTERESTING_BYTES) for _ in range(rng.randint(1, 8)))
        else:
            del b[i:i + rng.randint(1, 8)]
    elif kind == 6 and len(b) > 32:                  # an aligned 4-byte field past the header
        i = 28 + 4 * rng.randrange((len(b) - 32) // 4 + 1)
        struct.pack_into(end + "I", b, i, rng.choice(INTERESTING_U32))
    elif kind == 7 and len(b) > 30:                  # a 2-byte field anywhere
        i = rng.randrange(len(b) - 1)
        struct.pack_into(end + "H", b, i, rng.choice((0, 1, 0xFF, 0x100, 0x7FFF, 0xFFFF, rng.randrange(1 << 16))))
    else:                                            # swap two chunks
        i, j = rng.randrange(len(b)), rng.randrange(len(b))
        n = rng.randint(1, 16)
        b[i:i + n], b[j:j + n] = b[j:j + n], b[i:i + n]
    return bytes(b)


def fuzz_one(data):
    """Run exercise(data); return None on success or SFrameError, else the escaping exception."""
    try:
        exercise(data)
    except SFrameError:
        return None
    except Exception as exc:    # an escape: what this fuzzer exists to find
        return exc
    return None


def run(seeds, count, seed=0, max_stack=3, report=None):
    """Mutate `seeds` (list of bytes) `count` times; return the list of (input, exception) escapes."""
    rng = random.Random(seed)
    escapes = []
    for k in range(count):
        data = rng.choice(seeds)
        for _ in range(rng.randint(1, max_stack)):
            data = mutate(data, rng)
        exc = fuzz_one(data)
        if exc is not None:
            escapes.append((data, exc))
        if report and k and k % 10000 == 0:
            report(k, len(escapes))
    return escapes
