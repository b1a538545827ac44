"""Moderator processes against the embedded broker and Redis, and timed backlog drains.

Every run gets fresh topics (4 partitions), a fresh consumer group and, when the cache is on, a
fresh Redis server, so nothing carries over from one run to the next. The moderator runs as
`python -m moderator run` (the command users run), its settings passed in the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from devstack.child import ModeratorChild, moderator_env
from devstack.embedded import EmbeddedRedis
from loadgen.decisions import read_decision
from loadgen.kafka import TopicSet, assign_at_end, make_consumer, make_producer
from moderator.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

PARTITIONS = 4
CHANNELS = 16
READY_TIMEOUT_S = 90.0
WARMUP_MESSAGES = 64


@dataclass(frozen=True)
class ModeratorConfig:
    """What one moderator run looks like."""

    model_dir: Path
    threads: int
    batch_threads: int = 1  # intra-op threads per batch (threads // batch_threads at once)
    workers: int = 1
    cache: bool = False  # True: L1 (default size) + a fresh Redis; False: no cache at all
    module: str = "moderator"  # run as `python -m MODULE run` (a diagnostic may wrap it)
    cores: frozenset[int] | None = None  # pin the moderator to these cores (None: anywhere)
    settings: tuple[tuple[str, str], ...] = ()  # more settings, e.g. (("review_context", "0"),)
    tree: Path | None = None  # run another checkout's moderator (an old commit); None: this one

    def env(self, bootstrap: str, names: TopicSet, redis_url: str) -> dict[str, str]:
        no_cache = {} if self.cache else {"l1_cache_size": "0"}
        env = moderator_env(
            kafka_bootstrap=bootstrap, **asdict(names), model_dir=self.model_dir,
            threads=self.threads, batch_threads=self.batch_threads, redis_url=redis_url,
            degraded_mode="off",  # every message waits for the model
            **no_cache, **dict(self.settings),
        )  # fmt: skip
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree)
        return env


@contextlib.contextmanager
def moderator(cfg: ModeratorConfig, bootstrap: str, names: TopicSet) -> Iterator[ModeratorChild]:
    """Start `moderator run` (with a fresh Redis when the cache is on); stop it on exit."""
    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(EmbeddedRedis()).url if cfg.cache else ""
        args = ["run", "--workers", str(cfg.workers)] if cfg.workers > 1 else ["run"]
        child = ModeratorChild(args, cfg.env(bootstrap, names, redis_url), module=cfg.module,
                               cwd=cfg.tree)  # fmt: skip
        with affinity(cfg.cores):  # the child inherits this process's cores when it starts
            child.start()
        with child:
            child.wait_ready(READY_TIMEOUT_S, workers=cfg.workers)
            yield child


@contextlib.contextmanager
def affinity(cores: frozenset[int] | None, *pids: int) -> Iterator[None]:
    """Run this process (and every thread of `pids`) on `cores` inside the block; None: as is."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    threads = [int(t.name) for pid in pids for t in Path(f"/proc/{pid}/task").iterdir()]
    saved = {tid: os.sched_getaffinity(tid) for tid in threads}
    os.sched_setaffinity(0, cores)
    for tid in threads:
        os.sched_setaffinity(tid, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        for tid, was in saved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, was)


# -- producing and draining -----------------------------------------------------------------


async def create_topics(bootstrap: str, names: TopicSet) -> None:
    await ensure_topics(bootstrap, {names.in_topic: PARTITIONS, names.out_topic: PARTITIONS,
                                    names.dlq_topic: 1})  # fmt: skip


def encode_messages(prefix: str, texts: Sequence[str]) -> list[tuple[bytes, bytes, str]]:
    """(key, value, message_id) for each text, spread over CHANNELS channels."""
    now_ms = int(time.time() * 1000)
    out = []
    for i, text in enumerate(texts):
        mid = f"{prefix}-{i}"
        channel = f"c-{i % CHANNELS}"
        value = orjson.dumps({"message_id": mid, "channel_id": channel, "user_id": f"u-{i % 97}",
                              "text": text, "sent_at_ms": now_ms})  # fmt: skip
        out.append((channel.encode(), value, mid))
    return out


@dataclass(frozen=True)
class DrainResult:
    """A backlog produced at once and the decisions timed until the last one arrived."""

    messages: int
    decided: int
    produce_s: float
    seconds: float  # from the first send to the last decision
    msgs_per_s: float
    cached: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages, "decided": self.decided,
            "produce_s": round(self.produce_s, 3), "seconds": round(self.seconds, 3),
            "msgs_per_s": round(self.msgs_per_s, 2), "cached": self.cached,
        }  # fmt: skip


async def drain(
    bootstrap: str, names: TopicSet, texts: Sequence[str], *, prefix: str, timeout_s: float
) -> DrainResult:
    """Produce `texts` as fast as the producer goes; time until every decision is back."""
    return await drain_records(bootstrap, names, encode_messages(prefix, texts), timeout_s)


async def drain_records(
    bootstrap: str, names: TopicSet, messages: Sequence[tuple[bytes, bytes, str]], timeout_s: float
) -> DrainResult:
    """Produce `messages` ((key, value, message_id) each) as fast as the producer goes; time
    until every decision is back."""
    wanted = {mid for _, _, mid in messages}
    consumer = make_consumer(bootstrap)
    await consumer.start()
    producer = make_producer(bootstrap)
    await producer.start()
    seen: set[str] = set()
    cached = 0
    last = start = time.monotonic()
    try:
        await assign_at_end(consumer, [names.out_topic])

        async def collect() -> None:
            nonlocal last, cached
            while len(seen) < len(wanted):
                batches = await consumer.getmany(timeout_ms=100)
                now = time.monotonic()
                for records in batches.values():
                    for record in records:
                        decision = read_decision(record.value)
                        if decision is None or decision.final:
                            continue
                        mid = decision.message_id
                        if mid in wanted and mid not in seen:
                            seen.add(mid)
                            cached += decision.cached
                            last = now

        collector = asyncio.create_task(collect(), name="bench-drain-collect")
        start = time.monotonic()
        futures = [
            await producer.send(names.in_topic, value, key=key) for key, value, _ in messages
        ]
        await producer.flush()
        await asyncio.gather(*futures)
        produced = time.monotonic() - start
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(collector, timeout_s)
    finally:
        await producer.stop()
        await consumer.stop()
    seconds = max(last - start, 1e-9)
    return DrainResult(len(messages), len(seen), produced, seconds, len(seen) / seconds, cached)


async def warm_up(bootstrap: str, names: TopicSet, texts: Sequence[str]) -> None:
    """A few messages through the whole path first (model, group, connections all warm)."""
    result = await drain(bootstrap, names, texts[:WARMUP_MESSAGES], prefix="warm", timeout_s=60)
    if result.decided < result.messages:
        raise RuntimeError(f"warm-up: {result.decided}/{result.messages} decided")
