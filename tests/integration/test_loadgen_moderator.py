"""The load generator against the real `Moderator` (broker, Redis and the default model).

A few seconds at a modest rate, with repeats, toxic lines and malformed records: every valid
message must be decided exactly once, every malformed one dead-lettered, and the latency
percentiles reported. Nothing here asserts a time.
"""

from __future__ import annotations

import pytest

from loadgen import LoadConfig, format_summary, run_load
from moderator.config import Settings
from moderator.policy.rules import DEFAULT_ACTIONS
from moderator.service import Moderator

pytestmark = pytest.mark.integration


async def test_loadgen_against_the_moderator(settings: Settings, moderator: Moderator) -> None:
    cfg = LoadConfig(
        bootstrap=settings.kafka_bootstrap,
        in_topic=settings.in_topic,
        out_topic=settings.out_topic,
        dlq_topic=settings.dlq_topic,
        rate=50.0,
        duration_s=4.0,
        dup_ratio=0.4,
        toxic_ratio=0.2,
        malformed_ratio=0.05,
        drain_timeout_s=30.0,
        seed=4,
    )
    summary = await run_load(cfg)
    report = format_summary(summary)
    assert summary.sent + summary.malformed_sent == 200, report
    assert summary.decided == summary.sent, report
    assert summary.missing == 0, report
    assert summary.duplicates == 0, report
    assert summary.foreign == 0, report
    assert summary.bad_decisions == 0, report
    assert summary.malformed_sent > 0
    assert summary.dead_letters == summary.malformed_sent, report
    assert summary.dead_letters_unmatched == 0, report
    assert set(summary.actions) <= set(DEFAULT_ACTIONS)
    assert sum(summary.actions.values()) == summary.decided
    assert summary.cache_hit_ratio is not None
    assert summary.cache_hit_ratio > 0, report
    data = summary.as_dict()
    for key in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "over_budget_ratio"):
        assert data[key] is not None, key
    assert data["p50_ms"] <= data["p99_ms"] <= data["max_ms"]
    hop = data["broker_hop"]
    assert hop["received"] == hop["sent"] > 0
    assert data["server_total_p50_ms"] is not None  # the decisions carry latency_ms.total
