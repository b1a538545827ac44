"""The result of one run: numbers for `--json`, and the text summary printed at the end."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from loadgen.hop import HopResult
from loadgen.stats import (
    CURVE_PERCENTILES,
    count_above_ms,
    encode,
    new_histogram,
    percentile_ms,
)
from loadgen.tracker import DecisionTracker
from moderator.policy.rules import DEFAULT_ACTIONS


@dataclass
class LoadSummary:
    """What one run measured. Latencies are from each message's scheduled send time.

    `missing` counts valid messages that got no decision by the end of the drain (including any
    the processor dead-lettered, also shown as `valid_dead_lettered`). `over_budget_ratio` is the
    share of sent messages decided later than the budget or not at all. `throughput_per_s` is
    decisions per second from the start of sending to the last decision.
    """

    run_id: str
    rate: float
    duration_s: float
    arrivals: str
    budget_ms: float
    sent: int
    decided: int
    missing: int
    duplicates: int
    finals: int
    foreign: int
    bad_decisions: int
    send_errors: int
    malformed_sent: int
    dead_letters: int
    dead_letters_unmatched: int
    valid_dead_lettered: int
    malformed_decided: int
    malformed_missing: int
    throughput_per_s: float
    offered_rate_per_s: float
    cache_hit_ratio: float | None
    degraded: int
    over_budget_ratio: float | None
    actions: dict[str, int]
    actions_by_kind: dict[str, dict[str, int]]
    broker_hop: HopResult | None
    send_lag_p99_ms: float | None
    send_lag_max_ms: float | None
    machine: dict[str, object]
    latency: HdrHistogram = field(default_factory=new_histogram, repr=False)
    server_total: HdrHistogram = field(default_factory=new_histogram, repr=False)
    per_second: dict[int, HdrHistogram] = field(default_factory=dict, repr=False)
    missing_offsets_s: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def from_tracker(cls, tracker: DecisionTracker, **fields: Any) -> LoadSummary:
        sent = tracker.sent
        decided = tracker.decided
        missing = tracker.missing
        over = count_above_ms(tracker.latency, fields["budget_ms"]) + missing
        return cls(
            run_id=tracker.run_id,
            sent=sent,
            decided=decided,
            missing=missing,
            duplicates=tracker.duplicates,
            finals=tracker.finals,
            foreign=tracker.foreign,
            bad_decisions=tracker.bad_decisions,
            send_errors=tracker.send_errors,
            malformed_sent=tracker.malformed_sent,
            dead_letters=tracker.dead_letters,
            dead_letters_unmatched=tracker.dead_letters_unmatched,
            valid_dead_lettered=tracker.valid_dead_lettered,
            malformed_decided=tracker.malformed_decided,
            malformed_missing=tracker.malformed_outstanding,
            cache_hit_ratio=round(tracker.cached / decided, 4) if decided else None,
            degraded=tracker.degraded,
            over_budget_ratio=round(over / sent, 4) if sent else None,
            actions=by_severity(tracker.actions),
            actions_by_kind={k: by_severity(v) for k, v in tracker.actions_by_kind.items()},
            latency=tracker.latency,
            server_total=tracker.server_total,
            per_second=tracker.per_second,
            missing_offsets_s=tracker.missing_offsets_s(),
            **fields,
        )

    def p(self, percentile: float) -> float | None:
        """End-to-end latency in ms at `percentile` (100 is the maximum)."""
        return percentile_ms(self.latency, percentile)

    def timeline(self) -> list[dict[str, float | int | None]]:
        """Per scheduled second: how many were decided, and their p50 and p99."""
        return [
            {
                "second": second,
                "decided": int(h.get_total_count()),
                "p50_ms": percentile_ms(h, 50.0),
                "p99_ms": percentile_ms(h, 99.0),
            }
            for second, h in sorted(self.per_second.items())
        ]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able numbers (what `--json` writes)."""
        return {
            "run_id": self.run_id,
            "rate": self.rate,
            "duration_s": self.duration_s,
            "arrivals": self.arrivals,
            "budget_ms": self.budget_ms,
            "sent": self.sent,
            "decided": self.decided,
            "missing": self.missing,
            "duplicates": self.duplicates,
            "final_decisions": self.finals,
            "foreign_decisions": self.foreign,
            "bad_decisions": self.bad_decisions,
            "send_errors": self.send_errors,
            "malformed_sent": self.malformed_sent,
            "dead_letters": self.dead_letters,
            "dead_letters_unmatched": self.dead_letters_unmatched,
            "valid_dead_lettered": self.valid_dead_lettered,
            "malformed_decided": self.malformed_decided,
            "malformed_missing": self.malformed_missing,
            "throughput_per_s": self.throughput_per_s,
            "offered_rate_per_s": self.offered_rate_per_s,
            "p50_ms": self.p(50.0),
            "p90_ms": self.p(90.0),
            "p99_ms": self.p(99.0),
            "p999_ms": self.p(99.9),
            "max_ms": self.p(100.0),
            "mean_ms": (round(self.latency.get_mean_value() / 1000.0, 3) if self.decided else None),
            "over_budget_ratio": self.over_budget_ratio,
            "cache_hit_ratio": self.cache_hit_ratio,
            "degraded": self.degraded,
            "actions": self.actions,
            "actions_by_kind": self.actions_by_kind,
            "broker_hop": self.broker_hop.as_dict() if self.broker_hop else None,
            "server_total_p50_ms": percentile_ms(self.server_total, 50.0),
            "server_total_p99_ms": percentile_ms(self.server_total, 99.0),
            "send_lag_p99_ms": self.send_lag_p99_ms,
            "send_lag_max_ms": self.send_lag_max_ms,
            "machine": self.machine,
            "percentiles_ms": {str(p): self.p(p) for p in CURVE_PERCENTILES},
            "timeline": self.timeline(),
            "latency_hdr": encode(self.latency) if self.decided else None,
        }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def format_summary(summary: LoadSummary) -> str:
    """A human summary of one run, a few lines."""
    s = summary
    lines = [
        f"loadgen {s.run_id}: {s.arrivals} {s.rate:g}/s for {s.duration_s:g} s "
        f"(offered {s.offered_rate_per_s:.1f}/s) on {_machine(s.machine)}",
        f"  sent {s.sent}  decided {s.decided}  missing {s.missing}  duplicates {s.duplicates}"
        f"  final {s.finals}  throughput {s.throughput_per_s:.1f}/s",
        f"  latency  p50 {_ms(s.p(50))}  p90 {_ms(s.p(90))}  p99 {_ms(s.p(99))}"
        f"  p99.9 {_ms(s.p(99.9))}  max {_ms(s.p(100))}",
        f"  budget {s.budget_ms:g} ms: over budget {_ratio(s.over_budget_ratio)}"
        f"  cache hits {_ratio(s.cache_hit_ratio)}  degraded {s.degraded}",
        f"  actions {_counts(s.actions)}",
    ]
    for kind, counts in sorted(s.actions_by_kind.items()):
        lines.append(f"    {kind}: {_counts(counts)}")
    if s.malformed_sent or s.dead_letters or s.dead_letters_unmatched:
        lines.append(
            f"  malformed sent {s.malformed_sent}  dead letters {s.dead_letters}"
            f"  (unmatched {s.dead_letters_unmatched}, decided instead {s.malformed_decided},"
            f" neither {s.malformed_missing})"
        )
    if s.broker_hop is not None:
        hop = s.broker_hop
        lines.append(
            f"  broker hop alone (floor; end-to-end crosses it twice): p50 {_ms(hop.p50_ms)}"
            f"  p99 {_ms(hop.p99_ms)}  at {hop.rate_per_s:g}/s ({hop.received}/{hop.sent})"
        )
    server_p50 = percentile_ms(s.server_total, 50.0)
    if server_p50 is not None:
        lines.append(
            f"  processor's own total: p50 {_ms(server_p50)}"
            f"  p99 {_ms(percentile_ms(s.server_total, 99.0))}"
        )
    lines.append(f"  generator send lag p99 {_ms(s.send_lag_p99_ms)}  max {_ms(s.send_lag_max_ms)}")
    problems = []
    if s.missing:
        first = s.missing_offsets_s[:1]
        where = f", first scheduled at {first[0]:.2f} s" if first else ""
        problems.append(f"{s.missing} message(s) never decided{where}")
    if s.valid_dead_lettered:
        problems.append(f"{s.valid_dead_lettered} valid message(s) dead-lettered")
    if s.send_errors:
        problems.append(f"{s.send_errors} send error(s)")
    if s.bad_decisions:
        problems.append(f"{s.bad_decisions} decision(s) not valid JSON with a message_id")
    if s.foreign:
        problems.append(f"{s.foreign} decision(s) for messages of another run")
    for problem in problems:
        lines.append(f"  ! {problem}")
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def by_severity(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts per action, least severe first as policies order them (allow, nudge, review,
    block); an action a custom policy added comes after, by name."""
    known = {action: i for i, action in enumerate(DEFAULT_ACTIONS)}
    order = sorted(counts, key=lambda a: (known.get(a, len(known)), a))
    return {a: counts[a] for a in order}


def _counts(counts: dict[str, int]) -> str:
    return "  ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def _machine(machine: dict[str, object]) -> str:
    flags = [k for k, v in machine.items() if v is True]
    return f"{machine.get('cores')} cores" + (f", {' '.join(flags)}" if flags else "")
