"""Property-based fuzzing in the test suite (the 100,000-mutant run is bench/fuzz.py)."""

import random

from helpers import fuzzing, synthetic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sframekit.core.sframe.decode import Section
from sframekit.core.sframe.encode import encode

SEEDS = synthetic.sections()


def test_synthetic_seeds_roundtrip_and_decode():
    for data in SEEDS:
        s = Section(data, 0x1000)
        assert encode(s.header, s.check_all()) == data
        assert fuzzing.exercise(data) > 0


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(SEEDS) - 1), st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_mutated_sections_raise_only_sframe_error(seed_idx, rng_seed, rounds):
    rng = random.Random(rng_seed)
    data = SEEDS[seed_idx]
    for _ in range(rounds):
        data = fuzzing.mutate(data, rng)
    exc = fuzzing.fuzz_one(data)
    assert exc is None, "%s: %s (input %s)" % (type(exc).__name__, exc, data.hex())


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_sframe_error(data):
    assert fuzzing.fuzz_one(b"\xe2\xde" + data) is None
    assert fuzzing.fuzz_one(data) is None
