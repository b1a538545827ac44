"""Moderator processes against the embedded broker and Redis, and timed backlog drains.

Every run gets fresh topics (4 partitions), a fresh consumer group and, when the cache is on, a
fresh Redis server, so nothing carries over from one run to the next. The moderator runs as
`python -m moderator run` (the command users run), its settings passed in the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from loadgen.child import StdoutReader, is_ready, moderator_env
from loadgen.kafka import TopicSet, assign_at_end, make_consumer, make_producer
from moderator.embedded import EmbeddedRedis, terminate
from moderator.topics import ensure_topics

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
    workers: int = 1
    cache: bool = False  # True: L1 (default size) + a fresh Redis; False: no cache at all
    module: str = "moderator"  # run as `python -m MODULE run` (a diagnostic may wrap it)

    def env(self, bootstrap: str, names: TopicSet, redis_url: str) -> dict[str, str]:
        no_cache = {} if self.cache else {"l1_cache_size": "0"}
        return moderator_env(
            bootstrap, names, model_dir=self.model_dir, threads=self.threads,
            redis_url=redis_url, degraded_mode="off",  # every message waits for the model
            **no_cache,
        )  # fmt: skip


@dataclass
class ModeratorProcess:
    """A running `moderator run` (one process, or a supervisor with `workers` children)."""

    proc: subprocess.Popen[bytes]
    workers: int
    stdout: StdoutReader

    @property
    def metrics_ports(self) -> list[int]:
        return self.stdout.metrics_ports

    def pids(self) -> list[int]:
        """The processes that moderate: the workers' pids, or the single process's."""
        if self.workers <= 1:
            return [self.proc.pid]
        return child_pids(self.proc.pid)

    def output(self) -> str:
        return "".join(self.stdout.lines[-40:])


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            found.extend(int(p) for p in text)
    return sorted(found)


@contextlib.contextmanager
def moderator(
    cfg: ModeratorConfig, bootstrap: str, names: TopicSet, *, stderr: IO[str] | None = None
) -> Iterator[ModeratorProcess]:
    """Start `moderator run` (with a fresh Redis when the cache is on); stop it on exit."""
    with contextlib.ExitStack() as stack:
        redis_url = ""
        if cfg.cache:
            redis_url = stack.enter_context(EmbeddedRedis()).url
        command = [sys.executable, "-m", cfg.module, "run"]
        if cfg.workers > 1:
            command += ["--workers", str(cfg.workers)]
        proc = subprocess.Popen(
            command,
            env=cfg.env(bootstrap, names, redis_url),
            stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        mp = ModeratorProcess(proc, cfg.workers, StdoutReader(proc.stdout))
        try:
            _wait_ready(mp, cfg.workers)
            yield mp
        finally:
            _stop(proc)


def _wait_ready(mp: ModeratorProcess, workers: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if mp.proc.poll() is not None:
            raise RuntimeError(f"moderator exited with {mp.proc.returncode}:\n{mp.output()}")
        ports = list(mp.metrics_ports)
        if len(ports) >= workers and all(is_ready(p) for p in ports):
            return
        time.sleep(0.1)
    raise RuntimeError(f"moderator not ready within {READY_TIMEOUT_S:.0f} s:\n{mp.output()}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc, 30)


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
    messages = encode_messages(prefix, texts)
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
                        decision = orjson.loads(record.value)
                        mid = decision.get("message_id")
                        if mid in wanted and mid not in seen:
                            seen.add(mid)
                            cached += bool(decision.get("cached"))
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
