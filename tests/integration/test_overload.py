"""Overload: a backlog far larger than the in-flight cap, with degraded mode on.

The in-flight gauge never passes MODERATOR_MAX_IN_FLIGHT (fetching waits), messages already
past their budget when fetched get a fast deny-list decision marked `degraded: true`, and every
message is decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import orjson
import pytest

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.service import Moderator
from tests.integration.kafka_io import consume, decisions_by_id, distinct_ids, produce
from tests.waiting import eventually

pytestmark = pytest.mark.integration

CAP = 100
LATE = 2000  # stamped a minute ago: past the budget whatever the machine does
FRESH = 1000


def message(i: int, text: str, sent_at_ms: int) -> tuple[bytes, bytes]:
    channel = f"c-{i % 16}"
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": f"u-{i % 7}",
             "text": text, "sent_at_ms": sent_at_ms}  # fmt: skip
    return channel.encode(), orjson.dumps(value)


async def test_a_backlog_past_the_cap_stays_bounded_degrades_and_drains(
    settings: Settings, classifier: Classifier
) -> None:
    settings = settings.replace(degraded_mode="lexical", max_in_flight=CAP, budget_ms=50.0)
    now_ms = int(time.time() * 1000)
    late = [message(i, f"late line {i}, kill yourself" if i % 10 == 0 else f"late line {i}",
                    now_ms - 60_000) for i in range(LATE)]  # fmt: skip
    # Stamped ten minutes ahead: no machine is slow enough to make them late, so each one must
    # reach the model (a clock-skewed sender is not late either).
    fresh = [message(LATE + i, f"fresh line {i} gg", now_ms + 600_000) for i in range(FRESH)]
    await produce(settings.kafka_bootstrap, settings.in_topic, late + fresh)

    peak = 0.0
    samples = 0

    async def watch(service: Moderator) -> None:
        nonlocal peak, samples
        while True:
            value = service.metrics.registry.get_sample_value("moderator_in_flight") or 0.0
            peak = max(peak, value)
            samples += 1
            await asyncio.sleep(0)

    async with Moderator(settings, classifier=classifier) as service:
        watcher = asyncio.create_task(watch(service))
        try:
            records = await consume(settings.kafka_bootstrap, settings.out_topic,
                                    until=distinct_ids(LATE + FRESH), timeout_s=90)  # fmt: skip
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

        def degraded_counted() -> float:
            return sum(
                service.metrics.registry.get_sample_value(
                    "moderator_degraded_decisions_total", {"action": action}
                ) or 0.0
                for action in ("allow", "block")
            )  # fmt: skip

        await eventually(lambda: degraded_counted() >= LATE, "every degraded decision counted")
        degraded_metric = degraded_counted()
        assert service.failure is None

    decisions = decisions_by_id(records)
    assert set(decisions) == {f"m-{i}" for i in range(LATE + FRESH)}, "nothing lost"
    assert samples > 100, "the gauge was watched while the backlog drained"
    assert 0 < peak <= CAP, f"in flight peaked at {peak}, over the cap of {CAP}"

    degraded = {mid for mid, d in decisions.items() if d["degraded"]}
    assert degraded == {f"m-{i}" for i in range(LATE)}, "every late message and no other degraded"
    assert degraded_metric == len(degraded)
    for i in range(LATE):
        d = decisions[f"m-{i}"]
        if i % 10 == 0:
            assert (d["action"], d["reason"]) == ("block", "denylist")
        else:
            assert (d["action"], d["reason"]) == ("allow", None)
        assert d["scores"] == {}, "a degraded decision never saw the model"
    fresh_decisions = [decisions[f"m-{i}"] for i in range(LATE, LATE + FRESH)]
    assert len(fresh_decisions) == FRESH
    for d in fresh_decisions:
        assert set(d["scores"]) == set(classifier.labels), "the model scored every fresh message"
