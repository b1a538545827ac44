"""bench/wake_placement.py: what one arm's figures say."""

from __future__ import annotations

from bench.wake_placement import summary


def test_the_summary_counts_late_wakes_and_the_tail() -> None:
    latencies = [0.05] * 98 + [1.0, 1.0]
    got = summary(latencies)
    assert "later than 0.5 ms 2.0%" in got
    assert "p99 1.000 ms" in got
    assert got.startswith("mean 0.069 ms")
