"""Producing to and reading from the real broker in tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from tests.contract import check_decision


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
    """Read `topic` from the beginning until `until(records)` holds (or the timeout passes)."""
    consumer = AIOKafkaConsumer(
        topic, **client_options(kafka), auto_offset_reset="earliest", enable_auto_commit=False,
        group_id=None, fetch_max_wait_ms=50,
    )  # fmt: skip
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(records) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            for part in batch.values():
                records.extend(part)
    finally:
        await consumer.stop()
    return records


def decisions_by_id(records: Iterable[ConsumerRecord[bytes, bytes]]) -> dict[str, dict[str, Any]]:
    """Each message's first decision, every decision checked against the decision schema."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        decision = check_decision(orjson.loads(record.value))
        out.setdefault(decision["message_id"], decision)
    return out


def distinct_ids(n: int) -> Callable[[list[ConsumerRecord[bytes, bytes]]], bool]:
    """Stop condition: `n` distinct message ids seen."""
    return lambda records: len(decisions_by_id(records)) >= n
