"""Open-loop arrival schedules: when each message is due, fixed before the run starts.

A message's latency is measured from its scheduled time, so a system that stalls cannot slow the
sender down nor hide the queue it builds (no coordinated omission).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from enum import StrEnum


class Arrivals(StrEnum):
    CONSTANT = "constant"
    POISSON = "poisson"


def arrival_offsets(
    rate_per_s: float, duration_s: float, arrivals: Arrivals, rng: random.Random
) -> Iterator[float]:
    """Seconds from the start at which each message is due, in order, all below `duration_s`.

    Constant arrivals are evenly spaced (`rate * duration` messages); Poisson arrivals have
    exponential gaps with mean `1 / rate`, so the count varies around `rate * duration`.
    """
    if rate_per_s <= 0:
        raise ValueError(f"rate must be positive, got {rate_per_s}")
    if duration_s < 0:
        raise ValueError(f"duration must not be negative, got {duration_s}")
    if arrivals is Arrivals.CONSTANT:
        count = round(rate_per_s * duration_s)
        for i in range(count):
            offset = i / rate_per_s
            if offset < duration_s:
                yield offset
        return
    offset = rng.expovariate(rate_per_s)
    while offset < duration_s:
        yield offset
        offset += rng.expovariate(rate_per_s)
