"""Held messages in a real Redis, shared by instances: a verdict applies once (again when the
same verdict record comes back, `late` for any other), a timeout is claimed by one instance (by
another once the first died holding its lease), a redelivered review decision changes nothing,
and what an instance held while Redis was away moves there when it is back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from devstack.embedded import EmbeddedRedis
from moderator.decide.cache import ScoreCache
from moderator.metrics import Metrics
from moderator.review import held as held_module
from moderator.review.held import HeldStore
from tests.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
async def caches(fresh_redis: EmbeddedRedis) -> AsyncIterator[list[ScoreCache]]:
    """Two instances' score caches (their Redis client and breaker) on one Redis."""
    made = [ScoreCache(fresh_redis.url, metrics=Metrics().decide, ttl_s=60, l1_size=0,
                       timeout_ms=200) for _ in range(2)]  # fmt: skip
    for cache in made:
        await cache.start()
        assert await cache.wait_redis(10)
    yield made
    for cache in made:
        await cache.stop()


def stores(caches: list[ScoreCache]) -> list[HeldStore]:
    return [HeldStore(cache, Metrics().review, group="g", timeout_s=1.0) for cache in caches]


def held(message_id: str, expires_at_ms: int) -> dict[str, Any]:
    return {"message_id": message_id, "text": "t", "held_at_ms": 0, "expires_at_ms": expires_at_ms}


async def hold(store: HeldStore, *messages: dict[str, Any]) -> None:
    assert await store.hold(list(messages), {}, [], ring_size=4, ring_ttl_s=60) == {}


async def test_the_first_verdict_decides_and_the_same_one_again_is_applied_again(
    caches: list[ScoreCache],
) -> None:
    one, two = stores(caches)
    await hold(one, held("m-1", 10**13))
    assert (await two.apply("m-1", "v/0/1")).status == "applied"
    assert (await one.apply("m-1", "v/0/1")).status == "again", "redelivered, on any instance"
    late = await two.apply("m-1", "v/1/9")
    assert (late.status, late.held) == ("late", held("m-1", 10**13))
    assert (await one.apply("m-404", "v/0/2")).status == "not_held"
    await hold(one, held("m-1", 10**13))  # the review decision redelivered: changes nothing
    assert (await two.apply("m-1", "v/1/10")).status == "late"


async def test_a_timeout_is_claimed_by_one_instance(caches: list[ScoreCache]) -> None:
    one, two = stores(caches)
    await hold(one, *(held(f"m-{i}", 1_000 + i) for i in range(20)), held("m-later", 10**13))
    claimed = await asyncio.gather(one.claim_due(5_000), two.claim_due(5_000))
    ids = [h["message_id"] for batch in claimed for h in batch]
    assert sorted(ids) == sorted(f"m-{i}" for i in range(20)), "each once, none twice"
    await one.settle(ids)
    assert (await two.apply("m-3", "v/0/1")).status == "timed_out"
    assert (await two.apply("m-later", "v/0/1")).status == "applied"
    assert await one.claim_due(10**14) == [], "decided messages never time out"


async def test_a_timeout_claimed_by_an_instance_that_died_is_claimed_again(
    caches: list[ScoreCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = stores(caches)
    monkeypatch.setattr(held_module, "LEASE_MS", 1_000)
    await hold(one, held("m-1", 1_000))
    assert [h["message_id"] for h in await one.claim_due(2_000)] == ["m-1"]  # then it dies
    assert await two.claim_due(2_999) == [], "the lease holds"
    assert [h["message_id"] for h in await two.claim_due(3_000)] == ["m-1"]
    await two.settle(["m-1"])
    assert await one.claim_due(10**14) == []


class Away:
    """An instance's cache while its Redis calls fail: no client (the breaker is open)."""

    def __init__(self, cache: ScoreCache) -> None:
        self.cache = cache
        self.away = True
        self.redis_enabled = True

    @property
    def client(self) -> Any:
        return None if self.away else self.cache.client

    def failed(self, exc: BaseException) -> None:
        self.cache.failed(exc)


async def test_what_was_held_here_while_redis_was_away_moves_there_when_it_is_back(
    caches: list[ScoreCache],
) -> None:
    cache = Away(caches[0])
    one, two = HeldStore(cache, Metrics().review, group="g", timeout_s=1.0), stores(caches)[1]
    assert await one.hold([held("m-1", 10**13), held("m-2", 10**13)], {}, [], ring_size=4,
                          ring_ttl_s=60) is None  # fmt: skip
    assert (await one.apply("m-2", "v/0/1")).status == "applied", "decided here meanwhile"
    assert (await two.apply("m-1", "v/0/2")).status == "not_held", "only this instance has it"
    cache.away = False
    assert await one.claim_due(1_000) == []  # the sweep moves them to Redis
    assert (await two.apply("m-1", "v/0/3")).status == "applied"
    assert (await two.apply("m-2", "v/0/4")).status == "late", "its verdict went with it"
    assert (await two.apply("m-2", "v/0/1")).status == "again", "that verdict redelivered"


def trips(metrics: Metrics) -> dict[str, float]:
    samples = metrics.registry.collect()
    return {s.labels["part"]: s.value for family in samples for s in family.samples
            if s.name == "moderator_redis_round_trips_total"}  # fmt: skip


async def test_each_redis_call_counts_one_round_trip_for_its_part(
    fresh_redis: EmbeddedRedis,
) -> None:
    metrics = Metrics()
    cache = ScoreCache(fresh_redis.url, metrics=metrics.decide, ttl_s=60, l1_size=0, timeout_ms=200)
    await cache.start()
    try:
        assert await cache.wait_redis(10)
        store = HeldStore(cache, metrics.review, group="g", timeout_s=1.0)
        assert set(trips(metrics).values()) == {0}, "every part's series exists from the start"
        rings = {"c-1": [b'{"message_id": "m-0"}'], "c-2": [b'{"message_id": "m-9"}']}
        await store.hold([held("m-1", 1_000), held("m-2", 10**13)], rings, ["c-1", "c-2"],
                         ring_size=4, ring_ttl_s=60)  # fmt: skip
        assert trips(metrics)["review"] == 1, "a batch's rings and held messages: one pipeline"
        assert await store.hold([], {}, [], ring_size=4, ring_ttl_s=60) == {}
        assert trips(metrics)["review"] == 1, "nothing to hold or push: no call"
        await store.apply("m-2", "v/0/1")
        assert trips(metrics)["verdict"] == 1
        claimed = await store.claim_due(5_000)
        await store.settle([h["message_id"] for h in claimed])
        assert trips(metrics)["sweep"] == 2, "the claim script, then the settle pipeline"
        await cache.get_many([b"k-1", b"k-2", b"k-3"])
        assert trips(metrics)["cache_read"] == 1, "one MGET for a batch's misses"
        await cache.get_many([])
        assert trips(metrics)["cache_read"] == 1
        cache.put_many([(b"k-1", np.zeros(2, dtype=np.float32))])  # written in the background
        await eventually(lambda: trips(metrics)["cache_write"], "the cache write went out")
        assert trips(metrics)["cache_write"] == 1
    finally:
        await cache.stop()


async def test_the_gauge_reads_the_next_held_message_due_from_redis_skipping_leases(
    caches: list[ScoreCache],
) -> None:
    """What ModeratorHeldNearTimeout reads, the same on every instance of the group: a message
    claimed for its timeout (a lease, due again later) is not the one to page about."""
    metrics = Metrics()
    one = HeldStore(caches[0], metrics.review, group="g", timeout_s=1.0)
    two = stores(caches)[1]

    def gauge() -> float | None:
        return metrics.registry.get_sample_value("moderator_held_timeout_spent_ratio")

    await hold(one, {**held("m-1", 2_000), "held_at_ms": 1_000},
               {**held("m-2", 11_000), "held_at_ms": 1_000})  # fmt: skip
    assert await one.claim_due(1_500) == []
    assert gauge() == pytest.approx(0.5), "m-1: half its second"
    assert [h["message_id"] for h in await two.claim_due(2_000)] == ["m-1"]  # a lease now
    assert await one.claim_due(3_000) == []
    assert gauge() == pytest.approx(0.2), "m-2: 2 s of its 10; m-1's lease skipped"
    assert (await two.apply("m-2", "v/0/1")).status == "applied"
    assert await one.claim_due(3_000) == []
    assert gauge() == 0, "nothing held: m-1 is timing out, m-2 decided"


async def test_a_channels_context_ring_is_read_whole_as_it_was_then_trimmed_to_its_size(
    caches: list[ScoreCache],
) -> None:
    one, two = stores(caches)
    first = [f"e-{i}".encode() for i in range(6)]
    assert await one.hold([], {"c-1": first}, ["c-1"], ring_size=4, ring_ttl_s=60) == {"c-1": []}
    rings = await two.hold([], {"c-1": [b"e-6"]}, ["c-1", "c-2"], ring_size=4, ring_ttl_s=60)
    assert rings == {"c-1": first[2:], "c-2": []}, "the last 4, before this push"
    rings = await one.hold([], {"c-1": [b"e-7"]}, ["c-1"], ring_size=4, ring_ttl_s=60)
    assert rings == {"c-1": [*first[3:], b"e-6"]}


async def test_a_held_message_outlives_its_timeout_by_a_margin_and_keeps_its_first_due_time(
    caches: list[ScoreCache],
) -> None:
    one, _ = stores(caches)
    await hold(one, {**held("m-1", 61_000), "held_at_ms": 1_000},
               {**held("m-2", 1_500), "held_at_ms": 1_000})  # fmt: skip
    client = caches[0].client
    assert client is not None
    ttl = [await client.ttl(f"{held_module.PREFIX}g:m-{i}") for i in (1, 2)]
    margin = held_module.HELD_MARGIN_S
    assert ttl == [60 + margin, 1 + margin], "its timeout (1 s at least), then the margin"
    await hold(one, {**held("m-2", 10**13), "held_at_ms": 5_000})  # redelivered, re-decided
    assert [h["message_id"] for h in await one.claim_due(2_000)] == ["m-2"], "due as first held"


async def test_the_held_gauge_counts_the_messages_in_redis(caches: list[ScoreCache]) -> None:
    metrics = Metrics()
    one = HeldStore(caches[0], metrics.review, group="g", timeout_s=1.0)
    await hold(one, held("m-1", 10**13), held("m-2", 10**13), held("m-3", 10**13))
    assert await one.claim_due(1_000) == []
    assert metrics.registry.get_sample_value("moderator_held_messages") == 3
