"""The open-loop schedule: how many messages are due, and when."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.schedule import Arrivals, arrival_offsets


def test_constant_arrivals_are_evenly_spaced_at_the_rate() -> None:
    offsets = list(arrival_offsets(100.0, 2.0, Arrivals.CONSTANT, random.Random(0)))
    assert len(offsets) == 200
    assert offsets[0] == 0.0
    assert offsets[1] == pytest.approx(0.01)
    assert offsets[-1] == pytest.approx(1.99)


def test_poisson_arrivals_average_the_rate_and_are_reproducible() -> None:
    first = list(arrival_offsets(1000.0, 10.0, Arrivals.POISSON, random.Random(7)))
    again = list(arrival_offsets(1000.0, 10.0, Arrivals.POISSON, random.Random(7)))
    assert first == again
    assert 9_500 < len(first) < 10_500  # ~10,000 expected; 5 standard deviations is ~500
    gaps = [b - a for a, b in itertools.pairwise(first)]
    assert len(set(gaps)) > len(gaps) // 2  # not a constant spacing in disguise


@given(
    rate=st.floats(min_value=0.5, max_value=5_000.0),
    duration=st.floats(min_value=0.0, max_value=5.0),
    arrivals=st.sampled_from(list(Arrivals)),
    seed=st.integers(0, 2**32),
)
def test_offsets_are_sorted_and_within_the_run(
    rate: float, duration: float, arrivals: Arrivals, seed: int
) -> None:
    offsets = list(arrival_offsets(rate, duration, arrivals, random.Random(seed)))
    assert offsets == sorted(offsets)
    assert all(0.0 <= offset < duration for offset in offsets)


@pytest.mark.parametrize(("rate", "duration"), [(0.0, 1.0), (-5.0, 1.0), (10.0, -1.0)])
def test_bad_rate_or_duration_is_refused(rate: float, duration: float) -> None:
    with pytest.raises(ValueError, match="must"):
        list(arrival_offsets(rate, duration, Arrivals.CONSTANT, random.Random(0)))
