"""What went in and what came out of one scenario's topics, and the figures drawn from it.

Pure bookkeeping, no Kafka: the observer feeds it every inbound record, decision and dead letter
with the wall-clock time it was read (milliseconds, the clock `sent_at_ms` is stamped with), and
it answers: which valid inputs got neither a decision nor, when the broker refused their decision
for good, a `publish_failed` dead letter, how many decisions were repeated, whether a
channel's decisions ever went backwards, per-second p99 by send time, when the first decision
of a message sent after a given moment arrived, and which model made each decision.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from loadgen.decisions import read_decision
from moderator.config import Settings
from moderator.errors import InvalidRecord
from moderator.kafka.refusal import PUBLISH_FAILED
from moderator.records import parse_message

MAX_RECORD_BYTES = Settings().max_record_bytes  # the moderators under test run the default


@dataclass(frozen=True, slots=True)
class Input:
    """A valid-looking inbound chat message, as read back from the inbound topic."""

    message_id: str
    channel_id: str
    sent_at_ms: int
    partition: int
    offset: int


@dataclass
class Ledger:
    """Inputs, decisions and dead letters of one scenario (times in wall-clock ms)."""

    inputs: dict[str, Input] = field(default_factory=dict)
    junk_inputs: int = 0
    first_ms: dict[str, float] = field(default_factory=dict)  # first decision's arrival
    arrivals: list[str] = field(default_factory=list)  # message ids in decision-arrival order
    counts: Counter[str] = field(default_factory=Counter)
    models: dict[str, list[str]] = field(default_factory=dict)  # each decision's, in arrival order
    degraded: set[str] = field(default_factory=set)
    actions: Counter[str] = field(default_factory=Counter)
    dead: dict[bytes, str] = field(default_factory=dict)  # dead letter key -> error code
    dead_count: Counter[str] = field(default_factory=Counter)
    dead_repeats: int = 0
    diverted: dict[tuple[int, int], float] = field(default_factory=dict)  # source → first seen
    diverted_decided_ms: dict[tuple[int, int], int | None] = field(default_factory=dict)
    bad_decisions: int = 0
    finals: Counter[str] = field(default_factory=Counter)  # held messages' final decisions
    # each held message's final decisions by (action, reason): one kind, repeats allowed
    final_kinds: dict[str, Counter[tuple[str, str | None]]] = field(default_factory=dict)
    final_first_ms: dict[str, float] = field(default_factory=dict)

    # -- feeding -----------------------------------------------------------------------------

    def on_input(self, value: bytes | None, partition: int, offset: int) -> None:
        # The moderator's own parser decides what is valid (size limit included), so the
        # ledger can never expect a decision for a record the service rightly dead-letters.
        try:
            msg = parse_message(value, timestamp_ms=0, max_bytes=MAX_RECORD_BYTES)
        except InvalidRecord:
            self.junk_inputs += 1
            return
        mid, channel, sent = msg.message_id, msg.channel_id, msg.sent_at_ms
        self.inputs.setdefault(mid, Input(mid, channel, sent, partition, offset))

    def on_decision(self, value: bytes | None, now_ms: float) -> None:
        decision = read_decision(value)
        if decision is None:
            self.bad_decisions += 1
            return
        mid = decision.message_id
        if decision.final:  # no duplicate: at most one per held message, after the first
            self.finals[mid] += 1
            kinds = self.final_kinds.setdefault(mid, Counter())
            kinds[(decision.action, decision.reason)] += 1
            self.final_first_ms.setdefault(mid, now_ms)
            return
        self.counts[mid] += 1
        self.models.setdefault(mid, []).append(decision.model or "?")
        if mid in self.first_ms:
            return
        self.first_ms[mid] = now_ms
        self.arrivals.append(mid)
        self.actions[decision.action] += 1
        if decision.degraded:
            self.degraded.add(mid)

    def on_dead_letter(
        self,
        key: bytes | None,
        code: str,
        source: tuple[int, int] | None = None,
        now_ms: float = 0,
        decision: bytes | None = None,
    ) -> None:
        """One dead letter; `source` is its inbound (partition, offset) and `decision` the
        refused decision of a `publish_failed` one, both from its headers."""
        key = key or b""
        if key in self.dead:
            self.dead_repeats += 1
        self.dead[key] = code
        self.dead_count[code] += 1
        if code == PUBLISH_FAILED and source is not None:
            self.diverted.setdefault(source, now_ms)
            self.diverted_decided_ms.setdefault(source, _decided_at(decision))

    # -- figures -----------------------------------------------------------------------------

    def lost(self, since_ms: float | None = None) -> list[str]:
        """Valid inputs (sent at or after `since_ms`) with neither a decision nor a diversion."""
        return sorted(
            mid
            for mid, inp in self.inputs.items()
            if mid not in self.first_ms
            and (inp.partition, inp.offset) not in self.diverted
            and (since_ms is None or inp.sent_at_ms >= since_ms)
        )

    def diverted_inputs(self) -> list[tuple[Input, float]]:
        """Valid inputs whose refused decision became a `publish_failed` dead letter, with the
        time that dead letter was read, in offset order."""
        out = [
            (inp, self.diverted[(inp.partition, inp.offset)])
            for mid, inp in self.inputs.items()
            if mid not in self.first_ms and (inp.partition, inp.offset) in self.diverted
        ]
        return sorted(out, key=lambda pair: (pair[0].partition, pair[0].offset))

    @property
    def decided(self) -> int:
        return sum(1 for mid in self.inputs if mid in self.first_ms)

    @property
    def duplicates(self) -> int:
        return sum(c - 1 for mid, c in self.counts.items() if mid in self.inputs and c > 1)

    def order_violations(self) -> list[tuple[str, str, str]]:
        """(channel, earlier-sent id, later-sent id) whose first decisions arrived swapped.

        One channel is one key, so one partition: its messages' offsets are its send order.
        A violation means a decision for that channel went backwards.
        """
        last: dict[str, Input] = {}
        out: list[tuple[str, str, str]] = []
        for mid in self.arrivals:
            inp = self.inputs.get(mid)
            if inp is None:
                continue
            prev = last.get(inp.channel_id)
            if prev is not None and (prev.partition, prev.offset) > (inp.partition, inp.offset):
                out.append((inp.channel_id, mid, prev.message_id))
            if prev is None or (prev.partition, prev.offset) < (inp.partition, inp.offset):
                last[inp.channel_id] = inp
        return out

    @property
    def start_ms(self) -> float | None:
        """Send time of the earliest input (the start of the traffic)."""
        return min((i.sent_at_ms for i in self.inputs.values()), default=None)

    def latencies_ms(self, lo_ms: float = -math.inf, hi_ms: float = math.inf) -> list[float]:
        """First-decision latencies of inputs sent in [lo_ms, hi_ms), sorted."""
        return sorted(
            self.first_ms[mid] - inp.sent_at_ms
            for mid, inp in self.inputs.items()
            if mid in self.first_ms and lo_ms <= inp.sent_at_ms < hi_ms
        )

    def p_ms(self, q: float, lo_ms: float = -math.inf, hi_ms: float = math.inf) -> float | None:
        return quantile(self.latencies_ms(lo_ms, hi_ms), q)

    def per_second_p99(self) -> dict[int, float]:
        """p99 latency (ms) of the inputs sent in each second from the start of the traffic."""
        start = self.start_ms
        if start is None:
            return {}
        by_second: dict[int, list[float]] = {}
        for mid, inp in self.inputs.items():
            if mid in self.first_ms:
                second = int((inp.sent_at_ms - start) // 1000)
                by_second.setdefault(second, []).append(self.first_ms[mid] - inp.sent_at_ms)
        return {s: quantile(sorted(v), 0.99) or 0.0 for s, v in sorted(by_second.items())}

    def first_decision_after(self, t_ms: float) -> float | None:
        """Seconds from `t_ms` to the first decision of a message sent at or after `t_ms`."""
        times = [
            self.first_ms[mid]
            for mid, inp in self.inputs.items()
            if inp.sent_at_ms >= t_ms and mid in self.first_ms
        ]
        return (min(times) - t_ms) / 1000 if times else None

    def back_under_budget(self, t_ms: float, budget_ms: float) -> float | None:
        """Seconds from `t_ms` until per-second p99 is within `budget_ms` for good.

        The clock stops at the start of the first send-second (at or after the one holding
        `t_ms`) from which every later second's p99 stays within the budget; None if the run
        ended before that. 0.0 means the latency never left the budget.
        """
        start = self.start_ms
        p99 = self.per_second_p99()
        if start is None or not p99:
            return None
        fault_second = int((t_ms - start) // 1000)
        seconds = [s for s in sorted(p99) if s >= fault_second]
        good_from: int | None = None
        for s in seconds:
            if p99[s] <= budget_ms:
                if good_from is None:
                    good_from = s
            else:
                good_from = None
        if good_from is None:
            return None
        return max(0.0, (start + good_from * 1000 - t_ms) / 1000)

    def decided_between(self, lo_ms: float, hi_ms: float) -> int:
        """First decisions that arrived in [lo_ms, hi_ms)."""
        return sum(1 for t in self.first_ms.values() if lo_ms <= t < hi_ms)


def _decided_at(value: bytes | None) -> int | None:
    decision = read_decision(value)
    return decision.decided_at_ms if decision is not None else None


def quantile(sorted_values: list[float], q: float) -> float | None:
    """The `q` quantile (nearest rank) of already sorted values, or None for none."""
    if not sorted_values:
        return None
    rank = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]
