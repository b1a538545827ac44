"""The score cache's rules without a Redis server (moderator/decide/cache.py): the client it makes,
the circuit breaker (open until a probe answers, opened by a failed or slow call, one warning a
minute), lookups (L1 first, one MGET of the misses), writes (L1 at once, Redis in the background,
dropped while Redis is down or the queue is full) and the L1's order of forgetting.

Redis is replaced by a client answering from a dict, or failing, or hanging, on demand. The same
cache against a real Redis that stops and comes back: tests/integration/test_service.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import orjson
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from moderator.config import Settings
from moderator.decide import cache as cache_module
from moderator.decide.cache import LruCache, ScoreCache
from moderator.metrics import Metrics
from tests.waiting import eventually

URL = "redis://:s3cret@redis.internal:6379/0"
A, B, C = b"k-a", b"k-b", b"k-c"


def scores(*values: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(values, dtype=np.float32)


class Pipe:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.sets: list[tuple[bytes, bytes, int]] = []

    def set(self, key: bytes, value: bytes, *, ex: int) -> None:
        self.sets.append((key, value, ex))

    async def execute(self) -> list[bool]:
        self.client.executing += 1
        await self.client.answer()
        for key, value, ex in self.sets:
            self.client.data[key] = value
            self.client.ttls[key] = ex
        self.client.pipelines += 1
        return [True] * len(self.sets)


class Client:
    """A Redis client: answers from `data`, or fails while `down`, or hangs while `hanging`."""

    def __init__(self, url: str, **options: Any) -> None:
        self.url, self.options = url, options
        self.data: dict[bytes, bytes] = {}
        self.ttls: dict[bytes, int] = {}
        self.down = False
        self.hanging = False
        self.mgets: list[list[bytes]] = []
        self.pings = 0
        self.pipelines = 0  # executed
        self.transactions: list[bool] = []  # each pipeline's MULTI/EXEC flag
        self.executing = 0  # started
        self.closed = False

    async def answer(self) -> None:
        if self.hanging:
            await asyncio.Event().wait()
        if self.down:
            raise RedisConnectionError("Connection refused")

    async def ping(self) -> bool:
        self.pings += 1
        await self.answer()
        return True

    async def mget(self, keys: list[bytes]) -> list[bytes | None]:
        self.mgets.append(keys)
        await self.answer()
        return [self.data.get(key) for key in keys]

    def pipeline(self, *, transaction: bool) -> Pipe:
        self.transactions.append(transaction)
        return Pipe(self)

    async def aclose(self) -> None:
        self.closed = True


class Redis:
    """The clients the cache made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clients: list[Client] = []
        monkeypatch.setattr(aioredis.Redis, "from_url", self.from_url)

    def from_url(self, url: str, **options: Any) -> Client:
        self.clients.append(Client(url, **options))
        return self.clients[-1]

    @property
    def client(self) -> Client:
        [client] = self.clients
        return client


@pytest.fixture
def redis(monkeypatch: pytest.MonkeyPatch) -> Redis:
    return Redis(monkeypatch)


class Cache:
    """A started cache on the `Redis` stand-in, with its metrics."""

    def __init__(self, url: str = URL, **options: Any) -> None:
        self.metrics = Metrics()
        options = {"ttl_s": 60, "l1_size": 10, "timeout_ms": 25, **options}
        self.cache = ScoreCache(url, metrics=self.metrics.decide, **options)

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(f"moderator_{name}", labels)

    def requests(self, level: str, result: str) -> float | None:
        return self.sample("cache_requests_total", level=level, result=result)


@pytest.fixture
async def started(redis: Redis) -> Any:
    made = Cache()
    await made.cache.start()
    assert await made.cache.wait_redis(5)
    yield made
    await made.cache.stop()


def background() -> list[str]:
    """The cache's background tasks running (named: a task dump says whose they are)."""
    names = [t.get_name() for t in asyncio.all_tasks() if not t.done()]
    return sorted(n for n in names if n.startswith("redis-"))


async def test_the_redis_client_gives_up_fast_and_never_retries(redis: Redis) -> None:
    fast, slower = Cache(), Cache(timeout_ms=100)
    for made in (fast, slower):
        await made.cache.start()
    await fast.cache.start()  # started already: the same client
    first, second = redis.clients
    assert first.url == URL
    retry = first.options.pop("retry")
    assert first.options == {
        "socket_timeout": pytest.approx(0.1),  # four times the timeout
        "socket_connect_timeout": 0.25,  # a quarter of a second at least
        "health_check_interval": 0,
    }
    assert retry.get_retries() == 0, "one failure opens the breaker"
    assert second.options["socket_connect_timeout"] == pytest.approx(0.4)
    assert background() == ["redis-probe", "redis-probe", "redis-writer", "redis-writer"]
    for made in (fast, slower):
        await made.cache.stop()
    assert background() == [], "stopped with the cache"
    assert first.closed
    assert second.closed
    await fast.cache.stop()  # stopped already


async def test_without_a_redis_url_there_is_no_client_and_l1_serves(redis: Redis) -> None:
    made = Cache("")
    await made.cache.start()
    assert redis.clients == []
    assert not made.cache.redis_enabled
    made.cache.put_many([(A, scores(0.5))])
    [found] = await made.cache.get_many([A])
    assert found is not None
    await made.cache.stop()


async def test_the_breaker_opens_at_start_and_closes_once_a_probe_answers(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    made = Cache()
    with caplog.at_level(logging.INFO, logger=cache_module.__name__):
        await made.cache.start()
        assert made.cache.client is None, "open until a probe answers"
        assert made.sample("redis_up") == 0
        assert await made.cache.wait_redis(5)
    assert made.cache.client is redis.client
    assert made.cache.redis_available
    assert made.sample("redis_up") == 1
    said = [r.getMessage() for r in caplog.records]
    assert said == ["redis at redis://:***@redis.internal:6379/0 is available"]
    await made.cache.stop()


async def test_a_redis_that_never_answers_is_waited_for_in_vain_and_warned_about(
    redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    made = Cache()
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        await made.cache.start()
        redis.client.down = True
        assert not await made.cache.wait_redis(0.05)
        await eventually(lambda: caplog.records, "the warning")
        redis.client.down = False
        assert await made.cache.wait_redis(5), "a later probe answers"
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (
        "redis at redis://:***@redis.internal:6379/0 is unavailable (ConnectionError: "
        "Connection refused); serving from the in-process cache and the model, retrying in "
        "the background"
    )
    await made.cache.stop()


async def test_a_lookup_asks_redis_only_for_the_l1_misses_in_one_call(started: Cache) -> None:
    client = started.cache.client
    assert isinstance(client, Client)
    started.cache.l1.put(A, scores(0.1))
    client.data[B] = orjson.dumps([0.2, 0.3])
    found = await started.cache.get_many([A, C, B])  # C: in neither
    assert client.mgets == [[C, B]]
    assert [f.tolist() if f is not None else None for f in found] == [
        pytest.approx([0.1]),
        None,
        pytest.approx([0.2, 0.3]),
    ]
    assert found[2] is not None
    assert found[2].dtype == np.float32, "as the model scores"
    assert started.cache.l1.get(B) is not None, "a Redis hit is kept in L1"
    counts = [started.requests(*r) for r in [("l1", "hit"), ("l1", "miss"), ("redis", "hit"),
                                              ("redis", "miss")]]  # fmt: skip
    assert counts == [1, 2, 1, 1]
    assert started.sample("redis_round_trips_total", part="cache_read") == 1
    await started.cache.get_many([A, B])
    assert len(client.mgets) == 1, "all in L1: no call"
    client.data.update({b"k-d": orjson.dumps([0.4]), b"k-e": orjson.dumps([0.5])})
    await started.cache.get_many([b"k-d", b"k-e"])
    assert started.requests("redis", "hit") == 3


async def test_a_corrupt_entry_is_a_miss(started: Cache, caplog: pytest.LogCaptureFixture) -> None:
    client = started.cache.client
    assert isinstance(client, Client)
    client.data[A] = b"{not json"
    client.data[B] = orjson.dumps([0.2])
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        found = await started.cache.get_many([A, B])
    assert found[0] is None
    assert found[1] is not None
    assert [r.getMessage() for r in caplog.records] == ["ignoring a corrupt cache entry b'k-a'"]
    assert (started.requests("redis", "hit"), started.requests("redis", "miss")) == (1, 1)


@pytest.mark.parametrize("how", ["down", "hanging"])
async def test_a_failed_or_slow_lookup_opens_the_breaker_and_l1_serves(
    started: Cache, redis: Redis, how: str
) -> None:
    started.cache.l1.put(A, scores(0.1))
    setattr(redis.client, how, True)
    found = await started.cache.get_many([A, B])
    assert found[0] is not None
    assert found[1] is None
    assert started.cache.client is None
    assert (started.sample("redis_up"), started.sample("redis_errors_total")) == (0, 1)
    calls = len(redis.client.mgets)
    await started.cache.get_many([B])  # the breaker open: not asked
    assert len(redis.client.mgets) == calls
    setattr(redis.client, how, False)
    assert await started.cache.wait_redis(5), "the probe closes it again"


async def test_fresh_scores_go_to_l1_at_once_and_to_redis_in_the_background(
    started: Cache, redis: Redis
) -> None:
    started.cache.put_many([(A, scores(0.5)), (B, scores(0.25))])
    assert started.cache.l1.get(A) is not None
    await eventually(lambda: len(redis.client.data) == 2, "both written")
    assert redis.client.data[A] == orjson.dumps([0.5])
    assert redis.client.ttls == {A: 60, B: 60}
    assert started.sample("redis_round_trips_total", part="cache_write") == 1, "one pipeline"
    assert redis.client.transactions == [False], "plain SETs: no MULTI/EXEC round trips"


async def test_writes_of_batches_close_together_share_one_round_trip(
    started: Cache, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "WRITE_COALESCE_S", 0.5)  # no loop is stalled this long
    started.cache.put_many([(A, scores(0.5))])
    for _ in range(5):
        await asyncio.sleep(0)  # the writer has taken A and waits for company
    started.cache.put_many([(B, scores(0.5))])
    await asyncio.sleep(0)
    started.cache.put_many([(C, scores(0.5))])
    await eventually(lambda: len(redis.client.data) == 3, "all three written")
    assert started.sample("redis_round_trips_total", part="cache_write") == 1, "one pipeline"
    assert redis.client.pipelines == 1


async def test_writes_are_dropped_while_redis_is_down_and_a_failed_write_opens_the_breaker(
    started: Cache, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    redis.client.down = True
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        started.cache.put_many([(A, scores(0.5))])
        await eventually(lambda: started.cache.client is None, "the breaker open")
    assert started.sample("cache_writes_dropped_total") == 1
    assert "failed (ConnectionError: Connection refused)" in caplog.records[0].getMessage()
    started.cache.put_many([(B, scores(0.5)), (C, scores(0.5))])  # open: not even queued
    for _ in range(5):
        await asyncio.sleep(0)  # turns for a writer that would have had them
    assert started.sample("cache_writes_dropped_total") == 1
    assert started.cache.l1.get(B) is not None
    assert started.cache.l1.get(C) is not None


async def test_a_failure_reported_by_a_caller_opens_the_breaker_and_says_why(
    started: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        started.cache.failed(RedisConnectionError("Connection reset by peer"))  # a held-queue call
    assert started.cache.client is None
    said = caplog.records[0].getMessage()
    assert said.endswith(
        "failed (ConnectionError: Connection reset by peer); serving from the"
        " in-process cache and the model, retrying in the background"
    )


async def test_probes_back_off_doubling_to_five_seconds_and_start_again_after_an_outage(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    sleep = asyncio.sleep

    async def probe_sleep(delay: float) -> None:
        task = asyncio.current_task()
        if task is not None and task.get_name() == "redis-probe":
            slept.append(delay)
        await sleep(0)  # the delays are recorded, not waited

    monkeypatch.setattr(asyncio, "sleep", probe_sleep)
    made = Cache()
    await made.cache.start()
    redis.client.down = True
    await eventually(lambda: len(slept) >= 8, "eight failed probes")
    assert slept[:8] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    redis.client.down = False
    assert await made.cache.wait_redis(5)
    slept.clear()
    redis.client.down = True
    await made.cache.get_many([A])  # fails: the breaker opens again
    await eventually(lambda: len(slept) >= 2, "two failed probes")
    assert slept[:2] == pytest.approx([0.1, 0.2]), "a new outage starts from the shortest wait"
    await made.cache.stop()


def test_calls_off_the_decision_path_may_take_four_lookups_and_a_quarter_second_at_least() -> None:
    assert Cache(timeout_ms=25).cache.call_timeout_s == 0.25
    assert Cache(timeout_ms=100).cache.call_timeout_s == pytest.approx(0.4)
    assert Cache(timeout_ms=25).cache.timeout_s == pytest.approx(0.025)


def test_the_settings_make_the_cache() -> None:
    metrics = Metrics()
    settings = Settings(redis_url=URL, cache_ttl_s=120, l1_cache_size=7, redis_timeout_ms=40.0)
    made = cache_module.cache_for(settings, metrics.decide)
    assert (made.redis_url, made.ttl_s, made.l1.capacity) == (URL, 120, 7)
    assert made.timeout_s == pytest.approx(0.04)
    assert made.metrics is metrics.decide


async def test_writes_queued_before_the_breaker_opened_are_dropped_then_writing_resumes(
    started: Cache, redis: Redis
) -> None:
    started.cache.put_many([(A, scores(0.5)), (B, scores(0.5))])
    started.cache.failed(RedisConnectionError("Connection reset by peer"))  # before the writer ran
    await eventually(lambda: started.sample("cache_writes_dropped_total") == 2, "both dropped")
    assert redis.client.data == {}
    assert await started.cache.wait_redis(5)
    started.cache.put_many([(C, scores(0.5))])
    await eventually(lambda: C in redis.client.data, "written once Redis is back")


async def test_a_pipeline_holds_500_writes_at_most(started: Cache, redis: Redis) -> None:
    keys = [f"k-{i}".encode() for i in range(501)]
    started.cache.put_many([(key, scores(0.5)) for key in keys])
    await eventually(lambda: len(redis.client.data) == 501, "every write")
    assert redis.client.pipelines == 2


async def test_a_hanging_probe_is_given_up_and_tried_again(redis: Redis) -> None:
    made = Cache()
    await made.cache.start()
    redis.client.hanging = True
    await eventually(lambda: redis.client.pings >= 1, "a probe sent")
    redis.client.hanging = False
    assert await made.cache.wait_redis(5), "the hung ping abandoned, the next one answered"
    await made.cache.stop()


async def test_a_hanging_write_is_given_up_and_opens_the_breaker(
    started: Cache, redis: Redis
) -> None:
    redis.client.hanging = True
    started.cache.put_many([(A, scores(0.5))])
    await eventually(lambda: started.cache.client is None, "the breaker open")
    assert started.sample("cache_writes_dropped_total") == 1


async def test_writes_beyond_the_queue_are_dropped(redis: Redis) -> None:
    made = Cache(max_pending_writes=1)
    await made.cache.start()
    assert await made.cache.wait_redis(5)
    redis.client.hanging = True  # the writer waits on the first write
    made.cache.put_many([(A, scores(0.1))])
    await eventually(lambda: redis.client.executing == 1, "the first write under way")
    made.cache.put_many([(B, scores(0.2)), (C, scores(0.3))])
    assert made.sample("cache_writes_dropped_total") == 1
    await made.cache.stop()


async def test_warnings_come_once_a_minute_at_most(
    started: Cache, redis: Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Clock:
        now_s = 5.0

        @classmethod
        def monotonic(cls) -> float:
            return cls.now_s

    monkeypatch.setattr(cache_module, "time", Clock)
    warned_at: list[float] = []
    with caplog.at_level(logging.WARNING, logger=cache_module.__name__):
        for now_s in (5.0, 30.0, 65.0, 65.5):  # a flapping Redis
            Clock.now_s, redis.client.down = now_s, True
            before = len(caplog.records)
            await started.cache.get_many([A])  # fails: the breaker opens
            redis.client.down = False
            assert await started.cache.wait_redis(5)
            warned_at += [now_s] * (len(caplog.records) - before)
    assert warned_at == [5.0, 65.5], "a minute since the last warning, not per flap"
    assert started.sample("redis_errors_total") == 4
    said = caplog.records[0].getMessage()
    assert said.startswith("redis at redis://:***@redis.internal:6379/0 failed (ConnectionError: ")


def test_the_l1_forgets_the_least_recently_used_first() -> None:
    l1 = LruCache(2)
    l1.put(A, scores(0.1))
    l1.put(B, scores(0.2))
    assert l1.get(A) is not None  # A used: B is the least recent now
    l1.put(C, scores(0.3))
    assert (l1.get(A) is not None, l1.get(B), len(l1)) == (True, None, 2)
    l1.put(A, scores(0.4))  # put again: the most recent
    l1.put(B, scores(0.5))
    assert l1.get(C) is None
    one = LruCache(1)
    one.put(A, scores(0.1))
    assert one.get(A) is not None
    off = LruCache(0)
    off.put(A, scores(0.1))
    assert (off.get(A), len(off)) == (None, 0)
