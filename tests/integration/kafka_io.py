"""Producing to and reading from the real broker in tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from tests.contract import check_decision
from tests.waiting import eventually


def chat(i: int, text: str, *, channels: int = 5, **extra: Any) -> tuple[bytes, bytes]:
    """(key, value) of a valid inbound chat message."""
    channel = f"c-{i % channels}"
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": f"u-{i % 7}",
             "text": text, "sent_at_ms": int(time.time() * 1000), **extra}  # fmt: skip
    return channel.encode(), orjson.dumps(value)


def client_options(kafka: str | Mapping[str, Any]) -> dict[str, Any]:
    """A bootstrap string, or the connection options of `Settings.kafka_options()`."""
    return {"bootstrap_servers": kafka} if isinstance(kafka, str) else dict(kafka)


async def produce(
    kafka: str | Mapping[str, Any], topic: str, records: Iterable[tuple[bytes | None, bytes]]
) -> None:
    producer = AIOKafkaProducer(**client_options(kafka), acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k) for k, v in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def consume(
    kafka: str | Mapping[str, Any],
    topic: str,
    *,
    until: Callable[[list[ConsumerRecord[bytes, bytes]]], bool],
    timeout_s: float = 60.0,
) -> list[ConsumerRecord[bytes, bytes]]:
    """`topic`'s records from the beginning, read until `until(records)` holds; fails the test,
    saying how many were read, if it does not within `timeout_s`."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    if until(records):
        return records
    async with _reader(kafka, topic) as consumer:

        async def read_more() -> bool:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
            # Asked again only when records came: `until` may check every record so far.
            return bool(batch) and until(records)

        await eventually(read_more, lambda: f"{topic} holds what is awaited (read {len(records)})",
                         timeout_s=timeout_s, poll_s=0)  # fmt: skip
    return records


async def read_to_end(
    kafka: str | Mapping[str, Any], topic: str, *, timeout_s: float = 60.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record `topic` holds now: read past each partition's end offset as this is called.
    For "nothing more came": the test first waits on what proves the point was reached (a
    counter, a commit, a record after it), rather than reading for a guessed while."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    async with _reader(kafka, topic) as consumer:
        partitions = consumer.assignment()
        assert partitions, f"{topic} has no partitions"
        ends = await consumer.end_offsets(list(partitions))

        async def at_end() -> bool:
            if all([await consumer.position(tp) >= end for tp, end in ends.items()]):
                return True
            # Whole fetches kept: Tansu's end offset is its last batch's first offset + 1
            # (test_embedded_broker.py), so the fetch that passes it brings the rest of that batch.
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
            return False

        await eventually(at_end, lambda: f"{topic} read to its end offsets {ends} "
                         f"(read {len(records)})", timeout_s=timeout_s, poll_s=0)  # fmt: skip
    return records


@asynccontextmanager
async def _reader(
    kafka: str | Mapping[str, Any], topic: str
) -> AsyncIterator[AIOKafkaConsumer[bytes, bytes]]:
    """A consumer of every partition of `topic`, from the beginning, in no group."""
    consumer = AIOKafkaConsumer(
        topic, **client_options(kafka), auto_offset_reset="earliest", enable_auto_commit=False,
        group_id=None, fetch_max_wait_ms=50,
    )  # fmt: skip
    try:  # started inside: a reader cancelled while it starts is still closed
        await consumer.start()
        yield consumer
    finally:
        await consumer.stop()


def decisions_by_id(records: Iterable[ConsumerRecord[bytes, bytes]]) -> dict[str, dict[str, Any]]:
    """Each message's first decision, every decision checked against the decision schema."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        decision = check_decision(orjson.loads(record.value))
        out.setdefault(decision["message_id"], decision)
    return out


def distinct_ids(n: int) -> Callable[[list[ConsumerRecord[bytes, bytes]]], bool]:
    """Stop condition: `n` distinct message ids seen. It checks each record once, as `consume`
    adds them (checking every record on every fetch grows with the square of the records read)."""
    ids: set[str] = set()
    checked = 0

    def enough(records: list[ConsumerRecord[bytes, bytes]]) -> bool:
        nonlocal checked
        if len(records) < checked:  # another list: start over
            ids.clear()
            checked = 0
        ids.update(decisions_by_id(records[checked:]))
        checked = len(records)
        return len(ids) >= n

    return enough
