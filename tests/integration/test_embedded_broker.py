"""What the embedded Tansu broker does differently from Kafka, where the README documents it."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from devstack.embedded import EmbeddedKafka
from moderator.kafka.topics import ensure_topics
from tests.waiting import eventually

pytestmark = pytest.mark.integration

RECORDS = 12


async def test_tansu_reports_the_last_batch_start_as_the_end_offset(kafka: EmbeddedKafka) -> None:
    """The README's MODERATOR_AUTO_OFFSET_RESET row: a fresh group with `latest` starts at the
    end offset ListOffsets reports, which Tansu 0.6.0 gives as the last batch's base offset + 1,
    so it re-reads the rest of that batch. When this fails, Tansu is fixed: drop the note."""
    topic = f"hwm.{uuid.uuid4().hex[:8]}"
    await ensure_topics(kafka.bootstrap, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=100)
    await producer.start()
    try:
        sent = [await producer.send(topic, f"v{i}".encode()) for i in range(RECORDS)]
        offsets = [(await future).offset for future in sent]
    finally:
        await producer.stop()
    assert offsets == list(range(RECORDS))
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka.bootstrap, group_id=f"fresh-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="latest", enable_auto_commit=False,
    )  # fmt: skip
    await consumer.start()
    try:
        assert (await consumer.end_offsets([tp]))[tp] == 1, "one batch: its base offset + 1"
        again: list[int] = []

        async def reread() -> bool:  # the group's join comes first; then the rest of the batch
            fetched = await consumer.getmany(timeout_ms=500)
            again.extend(r.offset for records in fetched.values() for r in records)
            return len(again) >= RECORDS - 1

        await eventually(reread, lambda: f"the batch was read again (got {again})", poll_s=0)
        assert again == list(range(1, RECORDS)), "a fresh `latest` group re-reads the batch"
        assert consumer.highwater(tp) == RECORDS, "a fetch reports the true high-water mark"
    finally:
        await consumer.stop()
