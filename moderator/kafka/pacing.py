"""How long a fetch may linger to gather a batch: from the arrival rate and the budget left.

Why: most of the event loop's cost is paid per fetched batch (BENCHMARKS.md, "the loop's cost"),
and in open loop at the goodput rate a fetch holds about 1.1 messages. Waiting a few
milliseconds for more is worth it only when (a) the arrival rate means the wait gathers at least
one more message and (b) the budget has that time to spare after what the rest of a batch's
journey takes. The rule, fed numbers (pure, no clock of its own):

- rate: the fetched records per second, an exponentially weighted average over `RATE_TAU_S`;
- slack: `budget_ms` less the p99 of the last `SAMPLES` batches' fetch-to-decided times; half of
  it may be spent waiting (the other half is for the broker hops before the fetch, which this
  process cannot see, and for the batch growing the p99 it is measured by);
- wait cap: min(`max_linger_ms`, slack / 2); target = 1 + rate x cap, at most `max_target`;
- a target under 2 (the wait would likely gather nobody) means no wait: a message at once;
  otherwise the wait is what the target takes to arrive, (target - 1) / rate, within the cap.

Until `MIN_SAMPLES` batches were measured there is no p99 to trust, so there is no wait.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

RATE_TAU_S = 1.0  # the rate follows a change of load within a second or two
SAMPLES = 256  # batches the p99 is read from: a few seconds at the rates that batch
MIN_SAMPLES = 20  # fewer: no p99 worth trusting, so no waiting


class Plan(NamedTuple):
    """What the next fetch does: gather up to `target` records, waiting at most `wait_ms`
    once it has one. `Plan(0.0, 1)`: take what arrived, as without pacing."""

    wait_ms: float
    target: int


NO_WAIT = Plan(0.0, 1)


class Pacer:
    """Chooses each fetch's linger from the measured arrival rate and latency budget."""

    def __init__(self, *, budget_ms: float, max_linger_ms: float, max_target: int) -> None:
        self.budget_ms = budget_ms
        self.max_linger_ms = max_linger_ms
        self.max_target = max(max_target, 1)
        self._rate = 0.0  # records/s
        self._at: float | None = None
        self._took_ms: deque[float] = deque(maxlen=SAMPLES)

    @property
    def rate(self) -> float:
        """The arrival rate last seen, records a second."""
        return self._rate

    def arrived(self, count: int, now_s: float) -> None:
        """`count` records were fetched at `now_s` (a monotonic clock)."""
        if self._at is None:
            self._at = now_s
            return  # no interval to spread the first fetch over
        decay = math.exp(-max(now_s - self._at, 0.0) / RATE_TAU_S)
        self._rate = self._rate * decay + count / RATE_TAU_S
        self._at = now_s

    def decided(self, took_ms: float) -> None:
        """A batch took `took_ms` from its fetch to its outcomes (its linger not counted)."""
        self._took_ms.append(took_ms)

    def others_p99_ms(self) -> float | None:
        """The p99 of the batches' fetch-to-decided times, or None while too few were seen."""
        if len(self._took_ms) < MIN_SAMPLES:
            return None
        ordered = sorted(self._took_ms)
        return ordered[min(math.ceil(len(ordered) * 0.99), len(ordered)) - 1]

    def plan(self) -> Plan:
        """The next fetch's linger and target."""
        p99 = self.others_p99_ms()
        if self.max_linger_ms <= 0 or p99 is None or self._rate <= 0:
            return NO_WAIT
        cap_ms = min(self.max_linger_ms, (self.budget_ms - p99) / 2)
        target = min(1 + math.floor(self._rate * cap_ms / 1000), self.max_target)
        if target < 2:
            return NO_WAIT
        return Plan(min((target - 1) / self._rate * 1000, cap_ms), target)
