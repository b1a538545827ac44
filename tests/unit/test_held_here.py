"""Messages held in this process while Redis is away (moderator/review/held.py): a verdict on one
is told apart as Redis would tell it (applied, again, late, timed out), one not held here is
refused rather than guessed at, and an ended one is forgotten after FINAL_KEEP_S, as Redis
forgets it. The same answers from Redis's Lua: tests/integration/test_held.py.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from moderator.metrics import Metrics
from moderator.review.held import FINAL_KEEP_S, Applied, HeldStore, RedisUnavailable


class NoRedis:
    """The score cache with Redis down (or, `redis_enabled` False, switched off)."""

    client = None

    def __init__(self, *, enabled: bool = True) -> None:
        self.redis_enabled = enabled

    def failed(self, exc: BaseException) -> None:
        raise AssertionError("no call is made without a client")


def held(message_id: str, due_in_ms: int) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)
    return {"message_id": message_id, "held_at_ms": now_ms, "expires_at_ms": now_ms + due_in_ms}


async def store_holding(*messages: dict[str, Any], enabled: bool = True) -> HeldStore:
    store = HeldStore(NoRedis(enabled=enabled), Metrics().review, group="g", timeout_s=0.1)
    assert await store.hold(list(messages), {}, [], ring_size=1, ring_ttl_s=1) is None
    return store


async def test_the_first_verdict_decides_and_a_redelivery_or_another_verdict_is_told_apart() -> (
    None
):
    m1 = held("m-1", 60_000)
    store = await store_holding(m1)
    assert await store.apply("m-1", "v-1") == Applied("applied", m1)
    assert await store.apply("m-1", "v-1") == Applied("again", m1)  # the same verdict redelivered
    assert await store.apply("m-1", "v-2") == Applied("late", m1)


async def test_a_verdict_after_the_timeout_claimed_the_message_is_told_it_timed_out() -> None:
    m2 = held("m-2", -1)
    store = await store_holding(m2)
    assert await store.claim_due(int(time.time() * 1000)) == [m2]
    assert await store.apply("m-2", "v-1") == Applied("timed_out", m2)
    await store.settle(["m-2"])  # its fallback was acknowledged
    assert await store.apply("m-2", "v-1") == Applied("timed_out", m2)


async def test_a_verdict_on_a_message_not_held_here_is_refused_while_redis_is_down() -> None:
    store = await store_holding(held("m-1", 60_000))
    with pytest.raises(RedisUnavailable, match="redis is unavailable and m-9 is not held here"):
        await store.apply("m-9", "v-1")
    off = await store_holding(held("m-1", 60_000), enabled=False)
    assert await off.apply("m-9", "v-1") == Applied("not_held", None)  # no Redis to ask


async def test_an_ended_message_is_forgotten_a_days_keep_after_it_ended() -> None:
    m1 = held("m-1", 60_000)
    store = await store_holding(m1)
    await store.apply("m-1", "v-1")
    ended_ms = int(time.time() * 1000)
    await store.claim_due(ended_ms + (FINAL_KEEP_S - 60) * 1000)
    assert await store.apply("m-1", "v-1") == Applied("again", m1), "kept within the day"
    await store.claim_due(ended_ms + (FINAL_KEEP_S + 60) * 1000)
    with pytest.raises(RedisUnavailable):
        await store.apply("m-1", "v-1")


async def test_holding_here_is_counted_per_message_and_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    store = HeldStore(NoRedis(), metrics.review, group="g", timeout_s=0.1)
    with caplog.at_level(logging.WARNING, logger="moderator.review.held"):
        await store.hold([held("m-1", 60_000), held("m-2", 60_000)], {}, [], ring_size=1,
                         ring_ttl_s=1)  # fmt: skip
        await store.hold([held("m-3", -1)], {}, [], ring_size=1, ring_ttl_s=1)
    assert metrics.registry.get_sample_value("moderator_review_fallbacks_total") == 3
    warnings = [r.getMessage() for r in caplog.records if r.name == "moderator.review.held"]
    assert len(warnings) == 1
    assert warnings[0].startswith("redis is unavailable: held messages are kept in this process")
    await store.claim_due(int(time.time() * 1000))
    assert metrics.registry.get_sample_value("moderator_held_messages") == 2, "m-3 timed out"
