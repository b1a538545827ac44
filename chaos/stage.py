"""One scenario's world: its own broker and Redis, fresh topics, the observer, moderators.

`async with Stage(...) as st:` starts the broker (with a schema directory when asked), Redis,
the topics (4 partitions in and out, 1 for dead letters) and the observer; on exit every
moderator still running gets SIGTERM, then the servers stop. Traffic comes from `run_load`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import orjson

from chaos.ledger import Ledger
from chaos.observer import Observer, committed_offsets
from chaos.procs import Broker, ModeratorEnv, start_moderator
from chaos.results import ScenarioResult
from devstack.child import ModeratorChild
from devstack.embedded import EmbeddedRedis
from loadgen.config import LoadConfig
from loadgen.kafka import TopicSet, assign_at_end, make_consumer, make_producer
from loadgen.runner import run_load
from loadgen.summary import LoadSummary
from moderator.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

PARTITIONS = 4
BUDGET_MS = 50.0
SchemaFor = Callable[[TopicSet], Mapping[str, Mapping[str, Any]]]


class Stage:
    """Broker, Redis, topics, observer and the moderators of one scenario."""

    def __init__(
        self,
        tag: str,
        *,
        model_dir: Path,
        log_dir: Path,
        redis: bool = True,
        redis_dir: Path | None = None,
        schemas: SchemaFor | None = None,
        seed: int = 1,
    ) -> None:
        self.names = TopicSet.fresh("chaos", tag)
        self.model_dir = model_dir
        self.log_dir = log_dir
        self.seed = seed
        self._schemas = schemas
        self._schema_tmp: tempfile.TemporaryDirectory[str] | None = None
        self.broker: Broker | None = None
        # With `redis_dir`: an append-only file there, as shipped (devstack/embedded.py).
        self.redis = EmbeddedRedis(data_dir=redis_dir) if redis else None
        self.observer: Observer | None = None
        self.procs: list[ModeratorChild] = []
        self._stack = contextlib.AsyncExitStack()

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap

    @property
    def obs(self) -> Observer:
        assert self.observer is not None
        return self.observer

    async def __aenter__(self) -> Self:
        schema_dir = None
        if self._schemas is not None:
            self._schema_tmp = tempfile.TemporaryDirectory(prefix="chaos-schema-")
            schema_dir = Path(self._schema_tmp.name)
            for topic, schema in self._schemas(self.names).items():
                (schema_dir / f"{topic}.json").write_bytes(orjson.dumps(schema))
        self.broker = Broker(schema_dir=schema_dir)
        try:
            self.broker.start()
            if self.redis is not None:
                self.redis.start()
            n = self.names
            partitions = {n.in_topic: PARTITIONS, n.out_topic: PARTITIONS, n.dlq_topic: 1}
            await ensure_topics(self.bootstrap, partitions)
            self.observer = await self._stack.enter_async_context(Observer(self.bootstrap, n))
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        await asyncio.gather(
            *(asyncio.to_thread(p.terminate, 30) for p in self.procs if p.alive()),
            return_exceptions=True,
        )
        await self._stack.aclose()
        if self.redis is not None:
            self.redis.stop()
        if self.broker is not None:
            self.broker.thaw_quietly()
            self.broker.stop()
        if self._schema_tmp is not None:
            self._schema_tmp.cleanup()

    # -- moderators --------------------------------------------------------------------------

    def env(self, names: TopicSet | None = None, **settings: str) -> ModeratorEnv:
        """Settings of a moderator here; `settings` are extra MODERATOR_* variables."""
        return ModeratorEnv(
            bootstrap=self.bootstrap,
            redis_url=self.redis.url if self.redis is not None else "",
            names=names or self.names,
            model_dir=self.model_dir,
            extra=tuple(settings.items()),
        )

    def spawn(
        self, name: str, env: ModeratorEnv | None = None, args: tuple[str, ...] = ()
    ) -> ModeratorChild:
        """Start a moderator and return at once (it loads its model, then joins the group)."""
        proc = start_moderator(env or self.env(), name, self.log_dir, args)
        self.procs.append(proc)
        return proc

    async def start(
        self, name: str, env: ModeratorEnv | None = None, args: tuple[str, ...] = ()
    ) -> ModeratorChild:
        """Start a moderator and wait until it consumes."""
        proc = self.spawn(name, env, args)
        await asyncio.to_thread(proc.wait_ready)
        return proc

    # -- traffic -----------------------------------------------------------------------------

    def load_config(self, rate: float, duration_s: float, **changes: Any) -> LoadConfig:
        n = self.names
        options: dict[str, Any] = dict(
            bootstrap=self.bootstrap, rate=rate, duration_s=duration_s, in_topic=n.in_topic,
            out_topic=n.out_topic, dlq_topic=n.dlq_topic, budget_ms=BUDGET_MS,
            drain_timeout_s=90.0, partitions=PARTITIONS, hop=False, seed=self.seed,
        )  # fmt: skip
        options.update(changes)
        return LoadConfig(**options)

    async def load(self, rate: float, duration_s: float, **changes: Any) -> LoadSummary:
        return await run_load(self.load_config(rate, duration_s, **changes))

    async def committed(self) -> dict[int, int | None]:
        n = self.names
        return await committed_offsets(self.bootstrap, n.group_id, n.in_topic, PARTITIONS)


async def traffic_and_finish(
    st: Stage,
    res: ScenarioResult,
    load: asyncio.Task[Any],
    fault_ms: float | None,
    *,
    timeout_s: float = 120.0,
    diverts: bool = False,
    settled: Callable[[Ledger], bool] | None = None,
    settle_s: float = 0.0,
) -> None:
    """Wait for the traffic and for every decision (then, up to `settle_s`, for `settled`),
    then fill the common figures."""
    summary = await load
    await st.obs.all_decided(timeout_s)
    if settled is not None:
        await st.obs.wait_for(settled, settle_s, quiet_s=2.0)
    res.fill(st.obs.ledger, fault_ms, BUDGET_MS, diverts=diverts)
    if summary.send_errors:
        res.figure("load generator send errors", summary.send_errors)
    lag = summary.send_lag_p99_ms
    res.figure("generator send lag p99", "-" if lag is None else f"{lag:.0f} ms")


async def drain_rate(stage: Stage, messages: int, *, timeout_s: float = 180.0) -> float:
    """Saturation rate of one moderator: a backlog of `messages` unique texts, produced at
    once on topics of their own, divided by the time until its last decision.

    Uses a moderator that always waits for the model (degraded mode off) and no repeats, so the
    rate is the model-bound one a steady overload would meet.
    """
    names = TopicSet.fresh("chaos", "probe")
    n_in, n_out = names.in_topic, names.out_topic
    await ensure_topics(stage.bootstrap, {n_in: PARTITIONS, n_out: PARTITIONS,
                                          names.dlq_topic: 1})  # fmt: skip
    proc = await stage.start("probe", stage.env(names, degraded_mode="off", l1_cache_size="0",
                                                 redis_url=""))  # fmt: skip
    try:
        consumer = make_consumer(stage.bootstrap)
        producer = make_producer(stage.bootstrap)
        await consumer.start()
        await producer.start()
        try:
            await assign_at_end(consumer, [n_out])
            warm = [orjson.dumps({"message_id": f"w{i}", "channel_id": "c", "user_id": "u",
                                  "text": f"warm up line {i}"}) for i in range(32)]  # fmt: skip
            for value in warm:
                await producer.send(n_in, value, key=b"c")
            seen = await _collect(consumer, 32, timeout_s)
            start = time.monotonic()
            for i in range(messages):
                text = f"backlog line {i}: {i * 7919 % 10007} players said gg to team {i % 97}"
                value = orjson.dumps({"message_id": f"p{i}", "channel_id": f"c{i % 16}",
                                      "user_id": "u", "text": text})  # fmt: skip
                await producer.send(n_in, value, key=f"c{i % 16}".encode())
            await producer.flush()
            seen = await _collect(consumer, messages, timeout_s)
            return seen / max(time.monotonic() - start, 1e-9)
        finally:
            await producer.stop()
            await consumer.stop()
    finally:
        await asyncio.to_thread(proc.terminate, 30)


async def _collect(consumer: Any, n: int, timeout_s: float) -> int:
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < n and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            seen.update(orjson.loads(r.value)["message_id"].encode() for r in records)
    return len(seen)
