"""Two-level score cache: an in-process LRU, then Redis, keyed on model digest + token ids.

The cache stores label scores, never actions, so a policy change needs no invalidation. Redis is
an optimisation, not a dependency: when it fails or is slow, a circuit breaker opens, decisions
keep flowing from L1 and the model, and a background probe closes the breaker when Redis is back.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import orjson
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from moderator.config import Settings
from moderator.decide.classifier import Scores, TokenIds
from moderator.metric_wings import DecideMetrics
from moderator.redaction import redact_url
from moderator.tasks import cancel, reraise_cancel

log = logging.getLogger(__name__)

# The stored format's name; it says `verdict` but holds scores. Renaming it would orphan every
# entry already in Redis (a rolling deploy would need reads under both prefixes), so it stays.
KEY_PREFIX = "moderator:verdict:v1:"
WARN_EVERY_S = 60.0
# Writes wait this long for the next batches' so they share one pipeline: off the latency path,
# and at most 1 / WRITE_COALESCE_S write round trips a second instead of one per model batch.
WRITE_COALESCE_S = 0.01


def cache_key(model_sha256: str, ids: TokenIds) -> bytes:
    """Key of one text's scores: the model file's sha256 and a 128-bit hash of its token ids.

    The digest, not the manifest's `name@version`: a hand-written manifest may reuse a version
    for other weights, and a day of stale scores would follow from Redis. 128 bits of it.
    """
    digest = hashlib.blake2b(ids.tobytes(), digest_size=16).hexdigest()
    return f"{KEY_PREFIX}{model_sha256[:32]}:{digest}".encode()


class LruCache:
    """A bounded mapping that forgets the least recently used entry first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: OrderedDict[bytes, Scores] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: bytes) -> Scores | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: bytes, value: Scores) -> None:
        self._data[key] = value  # at capacity 0 (a disabled L1) it goes again at once
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)


class ScoreCache:
    """L1 + Redis. `get_many` never raises for Redis trouble and never waits past the timeout."""

    def __init__(
        self,
        redis_url: str,
        *,
        metrics: DecideMetrics,
        ttl_s: int,
        l1_size: int,
        timeout_ms: float,
        max_pending_writes: int = 10_000,
    ) -> None:
        self.redis_url = redis_url
        self.metrics = metrics
        self.ttl_s = ttl_s
        self.timeout_s = timeout_ms / 1000
        # Off the decision path (connect, probe, background write) a call may take longer: four
        # lookups' worth, and a quarter of a second at least, so a busy Redis is not called down.
        self.call_timeout_s = max(self.timeout_s * 4, 0.25)
        self.l1 = LruCache(l1_size)
        self._redis: aioredis.Redis | None = None
        self._writes: asyncio.Queue[tuple[bytes, bytes]] = asyncio.Queue(max_pending_writes)
        self._tasks: list[asyncio.Task[None]] = []
        self._redis_up = asyncio.Event()
        self._last_warning_s = -WARN_EVERY_S
        self._redis_down = asyncio.Event()

    @property
    def redis_enabled(self) -> bool:
        return bool(self.redis_url)

    @property
    def redis_available(self) -> bool:
        """False while the breaker is open (Redis failed and has not answered a probe since)."""
        return self._redis_up.is_set()

    @property
    def client(self) -> aioredis.Redis | None:
        """The Redis client while the breaker is closed, for the loop's shared state
        (moderator/review/held.py); None while Redis is disabled or down."""
        return self._redis if self._redis_up.is_set() else None

    def failed(self, exc: BaseException) -> None:
        """A call through `client` failed or timed out: open the breaker until a probe answers."""
        self._trip(exc)

    async def start(self) -> None:
        if not self.redis_enabled or self._redis is not None:
            return
        # No client-side retries: one failed call opens the breaker instead of stalling.
        self._redis = aioredis.Redis.from_url(
            self.redis_url,
            socket_timeout=self.timeout_s * 4,
            socket_connect_timeout=self.call_timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._redis_down.set()  # closed only once a probe succeeds
        self.metrics.redis_up.set(0)
        self._tasks = [
            asyncio.create_task(self._probe_loop(), name="redis-probe"),
            asyncio.create_task(self._write_loop(), name="redis-writer"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel(*tasks)
        client, self._redis = self._redis, None
        if client is not None:
            await client.aclose()

    async def wait_redis(self, timeout_s: float) -> bool:
        """Wait until Redis answers (for start-up and tests); False if it did not in time."""
        try:
            await asyncio.wait_for(self._redis_up.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def _trip(self, exc: BaseException) -> None:
        self.metrics.redis_errors.inc()
        if self._redis_up.is_set():
            self._warn("failed", exc)
        self._redis_up.clear()
        self._redis_down.set()
        self.metrics.redis_up.set(0)

    def _warn(self, what: str, exc: BaseException) -> None:
        """Say why Redis is not used (a wrong password must not look like a quiet cache)."""
        now = time.monotonic()
        if now - self._last_warning_s > WARN_EVERY_S:
            self._last_warning_s = now  # a flapping Redis logs once a minute, not per flap
            log.warning(
                "redis at %s %s (%s: %s); serving from the in-process cache and the model, "
                "retrying in the background",
                redact_url(self.redis_url),
                what,
                type(exc).__name__,
                exc,
            )

    async def _probe_loop(self) -> None:
        assert self._redis is not None
        backoff_s = 0.1
        while True:
            await self._redis_down.wait()
            try:
                await asyncio.wait_for(self._redis.ping(), self.call_timeout_s)
            except (RedisError, OSError, TimeoutError) as exc:
                reraise_cancel(exc)
                self._warn("is unavailable", exc)
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            backoff_s = 0.1
            self._redis_down.clear()
            self._redis_up.set()
            self.metrics.redis_up.set(1)
            log.info("redis at %s is available", redact_url(self.redis_url))

    async def get_many(self, keys: Sequence[bytes]) -> list[Scores | None]:
        """Look each key up in L1, then the L1 misses in Redis with one MGET."""
        results = [self.l1.get(key) for key in keys]
        missing = [i for i, hit in enumerate(results) if hit is None]
        self.metrics.l1_hit.inc(len(keys) - len(missing))
        self.metrics.l1_miss.inc(len(missing))

        if not missing or self._redis is None or not self._redis_up.is_set():
            return results
        self.metrics.cache_reads.inc()
        try:
            values = await asyncio.wait_for(
                self._redis.mget([keys[i] for i in missing]), self.timeout_s
            )
        except (RedisError, OSError, TimeoutError) as exc:
            self._trip(exc)
            return results
        redis_hits = 0
        for i, raw in zip(missing, values, strict=True):
            if raw is None:
                continue
            try:
                scores = np.asarray(orjson.loads(raw), dtype=np.float32)
            except orjson.JSONDecodeError:
                log.warning("ignoring a corrupt cache entry %r", keys[i])
                continue
            self.l1.put(keys[i], scores)
            results[i] = scores
            redis_hits += 1
        self.metrics.redis_hit.inc(redis_hits)
        self.metrics.redis_miss.inc(len(missing) - redis_hits)
        return results

    def put_many(self, items: Sequence[tuple[bytes, Scores]]) -> None:
        """Store fresh scores: L1 at once, Redis in the background (dropped while it is down)."""
        for key, scores in items:
            self.l1.put(key, scores)
            if self._redis is None or not self._redis_up.is_set():
                continue
            try:
                self._writes.put_nowait((key, orjson.dumps(scores.tolist())))
            except asyncio.QueueFull:
                self.metrics.cache_writes_dropped.inc()

    async def _write_loop(self) -> None:
        assert self._redis is not None
        while True:
            batch = [await self._writes.get()]
            if self._redis_up.is_set():  # else they are dropped below, at once
                await asyncio.sleep(WRITE_COALESCE_S)
            while not self._writes.empty() and len(batch) < 500:
                batch.append(self._writes.get_nowait())
            if not self._redis_up.is_set():
                self.metrics.cache_writes_dropped.inc(len(batch))
                continue
            pipe = self._redis.pipeline(transaction=False)
            for key, value in batch:
                pipe.set(key, value, ex=self.ttl_s)
            self.metrics.cache_writes.inc()
            try:
                await asyncio.wait_for(pipe.execute(), self.call_timeout_s)
            except (RedisError, OSError, TimeoutError) as exc:
                reraise_cancel(exc)
                self.metrics.cache_writes_dropped.inc(len(batch))
                self._trip(exc)


def cache_for(s: Settings, metrics: DecideMetrics) -> ScoreCache:
    """The score cache the settings describe (not started)."""
    return ScoreCache(
        s.redis_url,
        metrics=metrics,
        ttl_s=s.cache_ttl_s,
        l1_size=s.l1_cache_size,
        timeout_ms=s.redis_timeout_ms,
    )
