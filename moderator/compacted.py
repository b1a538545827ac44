"""Reading a compacted topic whole, outside any consumer group: what every instance does with the
policies and the overrides topics (each needs all of it) before it is ready, then follows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from moderator.connect import stop_within
from moderator.tasks import cancel

POLL_MS = 200  # a change is applied within about this long after it is written
OnRecord = Callable[[ConsumerRecord[bytes, bytes]], None]


def record_key(record: ConsumerRecord[bytes, bytes]) -> str:
    """A record's key as text; "" when it has none."""
    return (record.key or b"").decode("utf-8", "replace")


async def read_to_end(consumer: AIOKafkaConsumer, topic: str, on_record: OnRecord) -> bool:
    """Assign every partition of `topic` to `consumer` and feed `on_record` each record from the
    beginning up to the end offsets taken now; False when there is no such topic."""
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        return False
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    ends = await consumer.end_offsets(tps)
    while await _behind(consumer, ends):
        await poll(consumer, on_record)
    return True


async def poll(consumer: AIOKafkaConsumer, on_record: OnRecord) -> None:
    """One fetch (waiting at most POLL_MS), each record fed to `on_record` in order."""
    for records in (await consumer.getmany(timeout_ms=POLL_MS)).values():
        for record in records:
            on_record(record)


async def follow(consumer: AIOKafkaConsumer | None, on_record: OnRecord) -> None:
    """After `read_to_end`: feed `on_record` each new record for good; with no topic to follow
    (`consumer` None or assigned nothing), idle until cancelled."""
    if consumer is None or not consumer.assignment():
        await asyncio.Event().wait()
    while True:
        assert consumer is not None
        await poll(consumer, on_record)


async def stop_following(
    task: asyncio.Task[None] | None, consumer: AIOKafkaConsumer | None
) -> None:
    """Cancel `follow`'s task, then stop its consumer."""
    await cancel(task)
    if consumer is not None:
        await stop_within(consumer)


async def _behind(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]) -> bool:
    """Whether `consumer` has yet to read up to `ends` on any partition."""
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return True
    return False
