"""The Kafka clients the load generator uses, set up for latency.

Producer: `linger_ms=0` (a record goes out as soon as the sender task runs, nothing waits to fill
a batch) and `acks=1` (the leader's write is enough; the embedded broker has one replica anyway,
and waiting for more would measure replication, not the processor). Consumers have no group and
read assigned partitions from their end, with a small `fetch_max_wait_ms` so an idle fetch returns
quickly instead of holding a decision for the broker's default 500 ms.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

log = logging.getLogger(__name__)

PRODUCER_LINGER_MS = 0
PRODUCER_ACKS = 1
CONSUMER_FETCH_MAX_WAIT_MS = 5
METADATA_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TopicSet:
    """Fresh inbound, decisions and dead-letter topics, and a consumer group, for one run."""

    in_topic: str
    out_topic: str
    dlq_topic: str
    group_id: str

    @classmethod
    def fresh(cls, prefix: str, tag: str) -> TopicSet:
        suffix = f"{tag}.{uuid.uuid4().hex[:8]}"
        return cls(f"{prefix}.in.{suffix}", f"{prefix}.out.{suffix}", f"{prefix}.dlq.{suffix}",
                   f"{prefix}-{suffix}")  # fmt: skip


def make_producer(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="loadgen",
        linger_ms=PRODUCER_LINGER_MS,
        acks=PRODUCER_ACKS,
        max_batch_size=256 * 1024,  # a full batch makes send() wait: leave room at high rates
    )


def make_consumer(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="loadgen",
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=CONSUMER_FETCH_MAX_WAIT_MS,
    )


async def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="loadgen")
    await admin.start()
    try:
        await admin.delete_topics(topics)
    finally:
        await admin.close()


async def assign_at_end(consumer: AIOKafkaConsumer, topics: Iterable[str]) -> list[TopicPartition]:
    """Assign every partition of `topics` and resolve their end offsets now.

    `seek_to_end` is lazy; asking for each position makes the consumer fetch the end offsets
    before returning, so records produced after this call are all read and none before.
    """
    topics = list(topics)
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    partitions: list[TopicPartition] = []
    for topic in topics:
        while True:
            found = consumer.partitions_for_topic(topic)
            if found:
                partitions.extend(TopicPartition(topic, p) for p in sorted(found))
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no partitions known for topic {topic!r}")
            await consumer.topics()  # refreshes metadata
            await asyncio.sleep(0.05)
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for tp in partitions:
        await consumer.position(tp)
    return partitions
