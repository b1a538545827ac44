"""The broker's own produce-to-consume hop, measured alone: the floor under end-to-end latency.

A short probe on a scratch topic: records are produced open-loop at a modest rate with the same
client settings as the load, read back by a consumer with the same settings as the decisions
consumer, and timed from their scheduled send time to their arrival. An end-to-end run crosses
the broker twice (message in, decision out), so twice this hop is a floor the processor adds to.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError

from loadgen.kafka import assign_at_end, delete_topics, make_consumer, make_producer
from loadgen.schedule import Arrivals, arrival_offsets
from loadgen.stats import new_histogram, percentile_ms, record_s
from moderator.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

HOP_RATE_PER_S = 200.0
HOP_DURATION_S = 2.0
HOP_DRAIN_S = 3.0
_SEQ = struct.Struct(">Q")


@dataclass(frozen=True)
class HopResult:
    """Latency of one broker hop: produced at `rate_per_s`, `received` of `sent` came back."""

    rate_per_s: float
    sent: int
    received: int
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @property
    def lost(self) -> int:
        return self.sent - self.received

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate_per_s": self.rate_per_s,
            "sent": self.sent,
            "received": self.received,
            "lost": self.lost,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
        }


async def measure_hop(
    bootstrap: str,
    *,
    rate_per_s: float = HOP_RATE_PER_S,
    duration_s: float = HOP_DURATION_S,
    drain_s: float = HOP_DRAIN_S,
    topic: str | None = None,
) -> HopResult:
    """Produce to a scratch topic and consume it back; the scratch topic is deleted after."""
    topic = topic or f"loadgen.hop.{uuid.uuid4().hex[:12]}"
    histogram = new_histogram()
    due: dict[int, float] = {}
    received = 0
    sent = 0
    sending_done = False
    all_back = asyncio.Event()
    await ensure_topics(bootstrap, {topic: 1})
    try:
        async with AsyncExitStack() as stack:
            consumer = make_consumer(bootstrap)
            await consumer.start()
            stack.push_async_callback(consumer.stop)
            await assign_at_end(consumer, [topic])
            producer = make_producer(bootstrap)
            await producer.start()
            stack.push_async_callback(producer.stop)

            async def consume() -> None:
                nonlocal received
                while True:
                    batches = await consumer.getmany(timeout_ms=100)
                    now = time.monotonic()
                    for records in batches.values():
                        for record in records:
                            (seq,) = _SEQ.unpack(record.value)
                            sent_due = due.pop(seq, None)
                            if sent_due is not None:
                                record_s(histogram, now - sent_due)
                                received += 1
                    if sending_done and not due:
                        all_back.set()

            consumer_task = asyncio.create_task(consume(), name="loadgen-hop-consumer")
            try:
                start = time.monotonic()
                offsets = arrival_offsets(
                    rate_per_s, duration_s, Arrivals.CONSTANT, random.Random(0)
                )
                for seq, offset in enumerate(offsets):
                    due_s = start + offset
                    delay = due_s - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    due[seq] = due_s
                    await producer.send(topic, _SEQ.pack(seq))
                    sent += 1
                await producer.flush()
                sending_done = True
                if not due:
                    all_back.set()
                waiter = asyncio.create_task(all_back.wait(), name="loadgen-hop-drain")
                await asyncio.wait(
                    {waiter, consumer_task}, timeout=drain_s, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
                if consumer_task.done():
                    consumer_task.result()  # a dead consumer is an error, not a lost hop
            finally:
                consumer_task.cancel()
                await asyncio.gather(consumer_task, return_exceptions=True)
    finally:
        try:
            await delete_topics(bootstrap, [topic])
        except KafkaError as exc:
            log.warning("could not delete the hop probe's scratch topic %s: %r", topic, exc)
    return HopResult(
        rate_per_s=rate_per_s,
        sent=sent,
        received=received,
        p50_ms=percentile_ms(histogram, 50.0),
        p90_ms=percentile_ms(histogram, 90.0),
        p99_ms=percentile_ms(histogram, 99.0),
        max_ms=percentile_ms(histogram, 100.0),
    )
