"""Latency histograms (HDR, microsecond resolution) and the percentiles read from them."""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 30 * 60 * 1_000_000  # half an hour: anything later is clamped, never dropped
SIGNIFICANT_FIGURES = 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9)
CURVE_PERCENTILES = (
    0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.999, 100.0,
)  # fmt: skip


def new_histogram() -> HdrHistogram:
    """An empty histogram of latencies in microseconds, 1 µs to 30 min, 3 significant digits."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def record_s(histogram: HdrHistogram, seconds: float) -> None:
    """Record a latency given in seconds (clamped into the histogram's range)."""
    micros = min(max(round(seconds * 1_000_000), LOWEST_US), HIGHEST_US)
    histogram.record_value(micros)


def percentile_ms(histogram: HdrHistogram, percentile: float) -> float | None:
    """The latency in milliseconds at `percentile` (0-100), or None when nothing was recorded."""
    if histogram.get_total_count() == 0:
        return None
    if percentile >= 100.0:
        return round(float(histogram.get_max_value()) / 1000.0, 3)
    return round(float(histogram.get_value_at_percentile(percentile)) / 1000.0, 3)


def percentiles_ms(
    histogram: HdrHistogram, percentiles: tuple[float, ...] = PERCENTILES
) -> dict[float, float | None]:
    return {p: percentile_ms(histogram, p) for p in percentiles}


def count_above_ms(histogram: HdrHistogram, threshold_ms: float) -> int:
    """How many recorded latencies are above `threshold_ms` (to the histogram's precision)."""
    threshold_us = threshold_ms * 1000.0
    above = 0
    for item in histogram.get_recorded_iterator():
        if histogram.get_lowest_equivalent_value(item.value_iterated_to) > threshold_us:
            above += item.count_at_value_iterated_to
    return int(above)


def encode(histogram: HdrHistogram) -> str:
    """The histogram in the standard compressed HDR form, for merging runs later."""
    encoded = histogram.encode()
    return encoded.decode("ascii") if isinstance(encoded, bytes) else str(encoded)
