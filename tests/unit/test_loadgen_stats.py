"""Percentiles and budget counts read from the HDR histograms."""

from __future__ import annotations

import pytest
from hdrh.histogram import HdrHistogram

from loadgen.stats import (
    HIGHEST_US,
    count_above_ms,
    encode,
    new_histogram,
    percentile_ms,
    percentiles_ms,
    record_s,
)


def test_empty_histogram_has_no_percentiles() -> None:
    h = new_histogram()
    assert percentile_ms(h, 99.0) is None
    assert count_above_ms(h, 50.0) == 0


def test_percentiles_and_over_budget_count() -> None:
    h = new_histogram()
    for ms in range(1, 101):  # 1 .. 100 ms
        record_s(h, ms / 1000.0)
    assert percentiles_ms(h) == {
        50.0: pytest.approx(50.0, rel=2e-3),
        90.0: pytest.approx(90.0, rel=2e-3),
        99.0: pytest.approx(99.0, rel=2e-3),
        99.9: pytest.approx(100.0, rel=2e-3),
    }
    assert count_above_ms(h, 50.0) == 50


def test_out_of_range_latencies_are_clamped_not_dropped() -> None:
    h = new_histogram()
    record_s(h, -0.5)
    record_s(h, 10_000.0)
    assert h.get_total_count() == 2
    assert h.get_max_value() >= HIGHEST_US * 0.999


def test_encoded_histogram_decodes_to_the_same_counts() -> None:
    h = new_histogram()
    for ms in (1, 2, 3, 40):
        record_s(h, ms / 1000.0)
    decoded = HdrHistogram.decode(encode(h))
    assert decoded.get_total_count() == 4
    assert decoded.get_max_value() == h.get_max_value()
