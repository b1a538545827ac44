"""Messages held in this process while Redis is away (moderator/review/held.py): a verdict on one
is told apart as Redis would tell it (applied, again, late, timed out), one not held here is
refused rather than guessed at, and an ended one is forgotten after FINAL_KEEP_S, as Redis
forgets it. A Redis that hangs or fails is given up on within its wait and reported to the
breaker. The same answers from Redis's Lua: tests/integration/test_held.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from moderator.metrics import Metrics
from moderator.review import held as held_module
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


async def test_a_timed_out_message_settled_here_is_forgotten_a_days_keep_later() -> None:
    m1 = held("m-1", -1)
    store = await store_holding(m1)
    now_ms = int(time.time() * 1000)
    assert await store.claim_due(now_ms) == [m1]
    await store.settle(["m-1"])  # its fallback was acknowledged: it ended now
    await store.claim_due(now_ms + (FINAL_KEEP_S + 60) * 1000)
    with pytest.raises(RedisUnavailable):
        await store.apply("m-1", "v-1")


async def test_an_ended_message_is_kept_up_to_a_days_keep_to_the_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Clock:
        @staticmethod
        def time() -> float:
            return 1_000.0

    m1 = held("m-1", 60_000)
    store = await store_holding(m1)
    monkeypatch.setattr(held_module, "time", Clock)
    await store.apply("m-1", "v-1")  # ended at 1_000_000 ms
    await store.claim_due(1_000_000 + FINAL_KEEP_S * 1000)
    assert await store.apply("m-1", "v-1") == Applied("again", m1), "kept a whole day"
    await store.claim_due(1_000_001 + FINAL_KEEP_S * 1000)
    with pytest.raises(RedisUnavailable):
        await store.apply("m-1", "v-1")


class Pipe:
    """A pipeline of a `Client`: queues anything, then answers as its client does."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def __getattr__(self, command: str) -> Any:
        return lambda *args, **kwargs: None

    async def execute(self) -> Any:
        return await self.client.answer()


class Client:
    """A Redis client that hangs (`hangs`), fails, or answers `reply` to every call."""

    def __init__(self, *, hangs: bool = False, reply: Any = None) -> None:
        self.hangs = hangs
        self.reply = reply

    def pipeline(self, *, transaction: bool) -> Pipe:
        return Pipe(self)

    async def eval(self, *args: Any) -> Any:
        return await self.answer()

    async def answer(self) -> Any:
        if self.hangs:
            await asyncio.Event().wait()
        if self.reply is None:
            raise RedisConnectionError("Connection reset by peer")
        return self.reply


class Breaker:
    """The score cache in front of `client`, recording what it was told failed."""

    redis_enabled = True

    def __init__(self, client: Client | None) -> None:
        self.client: Client | None = client
        self.failures: list[BaseException] = []

    def failed(self, exc: BaseException) -> None:
        self.failures.append(exc)


async def test_a_hanging_redis_is_given_up_on_within_each_calls_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(held_module, "SLOW_S", 0.01)
    m1, m2 = held("m-1", -1), held("m-2", 60_000)
    cache = Breaker(None)
    store = HeldStore(cache, Metrics().review, group="g", timeout_s=0.01)
    await store.hold([m1], {}, [], ring_size=1, ring_ttl_s=1)  # Redis down: held here
    cache.client = Client(hangs=True)
    assert await store.hold([m2], {}, [], ring_size=1, ring_ttl_s=1) is None  # the path's wait
    with pytest.raises(RedisUnavailable):
        await store.apply("m-9", "v-1")
    assert await store.claim_due(int(time.time() * 1000)) == [m1]  # moving them hung: here
    await store.settle(["m-1"])
    assert len(cache.failures) == 4
    assert all(isinstance(exc, TimeoutError) for exc in cache.failures)


async def test_a_failing_redis_is_reported_and_a_verdict_not_held_here_waits_for_it() -> None:
    cache = Breaker(Client())
    store = HeldStore(cache, Metrics().review, group="g", timeout_s=0.1)
    with pytest.raises(RedisUnavailable):
        await store.apply("m-9", "v-1")
    assert await store.hold([held("m-1", 60_000)], {}, [], ring_size=1, ring_ttl_s=1) is None
    await store.settle(["m-1"])
    assert await store.claim_due(int(time.time() * 1000)) == []
    assert [type(exc) for exc in cache.failures] == [RedisConnectionError] * 4


async def test_a_message_held_here_is_decided_here_until_it_moved_to_redis() -> None:
    m1 = held("m-1", 60_000)
    cache = Breaker(None)
    store = HeldStore(cache, Metrics().review, group="g", timeout_s=0.1)
    await store.hold([m1], {}, [], ring_size=1, ring_ttl_s=1)
    cache.client = Client(reply=[b"not_held", b""])  # back, before the sweep moved it there
    assert await store.apply("m-1", "v-1") == Applied("applied", m1)
    assert await store.apply("m-2", "v-1") == Applied("not_held", None), "Redis's answer"


async def test_each_outage_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    cache = Breaker(None)
    store = HeldStore(cache, Metrics().review, group="g", timeout_s=0.1)
    with caplog.at_level(logging.WARNING, logger="moderator.review.held"):
        await store.hold([held("m-1", 60_000)], {}, [], ring_size=1, ring_ttl_s=1)
        cache.client = Client(reply=[])  # back
        assert await store.hold([held("m-2", 60_000)], {}, [], ring_size=1, ring_ttl_s=1) == {}
        cache.client = None  # down again
        await store.hold([held("m-3", 60_000)], {}, [], ring_size=1, ring_ttl_s=1)
        await store.hold([held("m-4", 60_000)], {}, [], ring_size=1, ring_ttl_s=1)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
