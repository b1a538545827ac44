"""The metrics by wing export what the one flat `Metrics` did, and each bound child counts on
the series its old `.labels(...)` call named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from moderator.metric_families import ByLabel
from moderator.metrics import Metrics

# The exposition of a fresh `Metrics(budget_s=0.035)` with precreate_verdicts(["toxic",
# "threat"]), made by the flat Metrics before the split into wings (issue 38), less the
# process_/python_ collectors and the `_created` stamps (they differ per run). The dashboard
# and the alerts read these names: change this file only with them.
EXPOSITION = Path(__file__).with_name("metrics_exposition.txt")


def exposition(metrics: Metrics) -> list[str]:
    """Its lines, sorted (the wings register in another order), as EXPOSITION has them."""
    kept = []
    for line in generate_latest(metrics.registry).decode().splitlines():
        name = line.split()[2] if line.startswith("#") else line.split("{")[0].split()[0]
        if not name.startswith(("process_", "python_")) and not name.endswith("_created"):
            kept.append(line)
    return sorted(kept)


def test_a_fresh_moderator_exports_the_families_series_and_buckets_it_always_did() -> None:
    metrics = Metrics(budget_s=0.035)
    metrics.review.precreate_verdicts(["toxic", "threat"])
    assert exposition(metrics) == sorted(EXPOSITION.read_text().splitlines())


Event = Callable[[Metrics], object]
# One event on each bound child or label value, and the one series it must move: the label
# values the modules passed to `.labels()` before the split.
EVENTS: list[tuple[Event, str, dict[str, str]]] = [
    (lambda m: m.kafka.consumed.inc(), "messages_consumed_total", {}),
    (lambda m: m.kafka.decisions["allow"].inc(), "decisions_total", {"action": "allow"}),
    (
        lambda m: m.kafka.dead_letters["too_large"].inc(),
        "dead_letters_total",
        {"reason": "too_large"},
    ),
    (lambda m: m.kafka.in_flight.set(1), "in_flight", {}),
    (
        lambda m: m.kafka.consumer_lag["in", "3"].set(1),
        "consumer_lag",
        {"topic": "in", "partition": "3"},
    ),
    (lambda m: m.kafka.publish_retries.inc(), "publish_retries_total", {}),
    (
        lambda m: m.kafka.publish_refused["receipt"].inc(),
        "publish_refused_total",
        {"outcome": "receipt"},
    ),
    (lambda m: m.kafka.commit_ok.inc(), "commits_total", {"result": "ok"}),
    (lambda m: m.kafka.commit_failed.inc(), "commits_total", {"result": "failed"}),
    (lambda m: m.kafka.review_records.inc(), "review_records_total", {}),
    (lambda m: m.decide.l1_hit.inc(), "cache_requests_total", {"level": "l1", "result": "hit"}),
    (lambda m: m.decide.l1_miss.inc(), "cache_requests_total", {"level": "l1", "result": "miss"}),
    (
        lambda m: m.decide.redis_hit.inc(),
        "cache_requests_total",
        {"level": "redis", "result": "hit"},
    ),
    (
        lambda m: m.decide.redis_miss.inc(),
        "cache_requests_total",
        {"level": "redis", "result": "miss"},
    ),
    (
        lambda m: m.decide.inflight_hit.inc(),
        "cache_requests_total",
        {"level": "inflight", "result": "hit"},
    ),
    (lambda m: m.decide.cache_writes_dropped.inc(), "cache_writes_dropped_total", {}),
    (lambda m: m.decide.redis_errors.inc(), "redis_errors_total", {}),
    (lambda m: m.decide.redis_up.set(1), "redis_up", {}),
    (lambda m: m.decide.cache_reads.inc(), "redis_round_trips_total", {"part": "cache_read"}),
    (lambda m: m.decide.cache_writes.inc(), "redis_round_trips_total", {"part": "cache_write"}),
    (lambda m: m.decide.stage_queue.observe(0.01), "stage_seconds_count", {"stage": "queue"}),
    (lambda m: m.decide.stage_score.observe(0.01), "stage_seconds_count", {"stage": "score"}),
    (lambda m: m.decide.stage_total.observe(0.01), "stage_seconds_count", {"stage": "total"}),
    (lambda m: m.decide.end_to_end.observe(0.01), "end_to_end_seconds_count", {}),
    (lambda m: m.decide.batch_size.observe(4), "batch_size_count", {}),
    (lambda m: m.decide.over_budget.inc(), "over_budget_total", {}),
    (lambda m: m.decide.message_windows.observe(2), "message_windows_count", {}),
    (lambda m: m.decide.truncated.inc(), "truncated_messages_total", {}),
    (
        lambda m: m.decide.unsupported_language["fr"].inc(),
        "unsupported_language_total",
        {"language": "fr"},
    ),
    (lambda m: m.decide.degraded["block"].inc(), "degraded_decisions_total", {"action": "block"}),
    (lambda m: m.users.rules["spam"].inc(), "user_rules_total", {"rule": "spam"}),
    (lambda m: m.users.escalated.inc(), "user_rules_total", {"rule": "escalated"}),
    (lambda m: m.users.degraded.set(1), "user_state_degraded", {}),
    (
        lambda m: m.users.round_trips["after"].inc(),
        "user_state_round_trips_total",
        {"step": "after"},
    ),
    (lambda m: m.users.local["before"].inc(), "user_state_local_total", {"step": "before"}),
    (lambda m: m.users.redis_errors.inc(), "redis_errors_total", {}),
    (lambda m: m.policy.updates["removed"].inc(), "policy_updates_total", {"result": "removed"}),
    (lambda m: m.policy.rejected.inc(), "policy_updates_total", {"result": "rejected"}),
    (lambda m: m.policy.policies.set(1), "channel_policies", {}),
    (lambda m: m.review.review_fallbacks.inc(), "review_fallbacks_total", {}),
    (lambda m: m.review.held_messages.set(1), "held_messages", {}),
    (lambda m: m.review.held_timeout_spent.set(1), "held_timeout_spent_ratio", {}),
    (lambda m: m.review.review_timeouts.inc(), "review_timeouts_total", {}),
    (
        lambda m: m.review.verdicts["review", "block", "toxic"].inc(),
        "verdicts_total",
        {"model_action": "review", "verdict": "block", "label": "toxic"},
    ),
    (
        lambda m: m.review.verdict_outcomes["late"].inc(),
        "verdict_outcomes_total",
        {"outcome": "late"},
    ),
    (
        lambda m: m.review.override_decisions["nudge"].inc(),
        "override_decisions_total",
        {"action": "nudge"},
    ),
    (
        lambda m: m.review.override_updates["applied"].inc(),
        "override_updates_total",
        {"result": "applied"},
    ),
    (lambda m: m.review.overrides.set(1), "overrides", {}),
    (lambda m: m.review.review_trips.inc(), "redis_round_trips_total", {"part": "review"}),
    (lambda m: m.review.verdict_trips.inc(), "redis_round_trips_total", {"part": "verdict"}),
    (lambda m: m.review.sweep_trips.inc(), "redis_round_trips_total", {"part": "sweep"}),
]


def counts(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every moderator sample that counts events (a histogram's by its _count)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        if family.name.startswith("moderator_")
        for s in family.samples
        if not s.name.endswith(("_created", "_sum", "_bucket"))
    }


@pytest.mark.parametrize(("event", "name", "labels"), EVENTS, ids=[e[1] for e in EVENTS])
def test_each_bound_child_moves_its_own_series_and_no_other(
    event: Event, name: str, labels: dict[str, str]
) -> None:
    metrics = Metrics()
    before = counts(metrics.registry)
    event(metrics)
    after = counts(metrics.registry)
    moved = {key: v - before.get(key, 0.0) for key, v in after.items() if v != before.get(key)}
    assert moved == {(f"moderator_{name}", tuple(sorted(labels.items()))): 1.0}


def test_every_wing_is_on_the_one_registry_metrics_serves() -> None:
    metrics = Metrics()
    wings = (metrics.kafka, metrics.redis, metrics.decide, metrics.users, metrics.policy)
    assert all(wing.registry is metrics.registry for wing in (*wings, metrics.review))


def test_a_label_value_is_bound_once_and_a_removed_series_comes_back_at_its_next_value() -> None:
    registry = CollectorRegistry()
    lag = ByLabel(Counter("lag", "", ("topic", "partition"), registry=registry), ("in", "0"))
    assert registry.get_sample_value("lag_total", {"topic": "in", "partition": "0"}) == 0
    assert lag["in", "1"] is lag["in", "1"], "one child per value, not one per event"
    lag["in", "1"].inc(5)
    lag.remove(("in", "1"))  # the partition handed over: its series goes
    lag.remove(("in", "1"))  # twice (or never bound) is nothing
    assert registry.get_sample_value("lag_total", {"topic": "in", "partition": "1"}) is None
    lag["in", "1"].inc(2)  # assigned again: a fresh series, not the stale child
    assert registry.get_sample_value("lag_total", {"topic": "in", "partition": "1"}) == 2
