"""A burst through the real broker with pacing on (moderator/kafka/pacing.py): ten times the
base rate for a few seconds, then back. Every message is decided once, and every offset the
group has committed, whenever it is looked at, is one whose decision (and every earlier one of
its partition) is already on the output topic: lingering to batch never commits ahead of acks.
No latency is asserted (the machine is shared); what the pacer chose is printed for the record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import RecordMetadata, TopicPartition

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.service import Moderator
from tests.integration.conftest import PARTITIONS
from tests.integration.kafka_io import chat, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.integration

BASE_PER_S = 20
PHASES = ((BASE_PER_S, 2.0), (BASE_PER_S * 10, 4.0), (BASE_PER_S, 2.0))  # (msg/s, seconds)
TICK_S = 0.05


async def produce_paced(settings: Settings) -> dict[str, tuple[int, int]]:
    """Send the phases at their rates; each message id's (partition, offset) on the input."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    sent: dict[str, asyncio.Future[RecordMetadata]] = {}
    try:
        i = 0
        for per_s, seconds in PHASES:
            per_tick = round(per_s * TICK_S) or 1
            for _ in range(round(seconds / TICK_S)):
                for _ in range(per_tick):
                    key, value = chat(i, f"burst line {i % 97} gg", channels=8)
                    sent[f"m-{i}"] = await producer.send(settings.in_topic, value, key=key)
                    i += 1
                await asyncio.sleep(TICK_S)
        acked = dict(zip(sent, await asyncio.gather(*sent.values()), strict=True))
    finally:
        await producer.stop()
    return {mid: (meta.partition, meta.offset) for mid, meta in acked.items()}


async def committed_then_decided(settings: Settings) -> tuple[dict[int, int], set[str]]:
    """The group's committed offsets, then the ids decided on the output topic after that."""
    reader = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap,
                              group_id=settings.group_id, enable_auto_commit=False)  # fmt: skip
    try:  # started inside: the watcher is cancelled wherever it is, reader.start() included
        await reader.start()
        committed = {p: await reader.committed(TopicPartition(settings.in_topic, p)) or 0
                     for p in range(PARTITIONS)}  # fmt: skip
    finally:
        await reader.stop()
    out = await read_to_end(settings.kafka_bootstrap, settings.out_topic)
    return committed, {orjson.loads(r.value)["message_id"] for r in out}


async def test_a_tenfold_burst_is_decided_once_each_and_committed_only_after_its_acks(
    settings: Settings, classifier: Classifier
) -> None:
    settings = settings.replace(fetch_linger_max_ms=10.0)
    snapshots: list[tuple[dict[int, int], set[str]]] = []

    async def watch() -> None:
        while True:
            snapshots.append(await committed_then_decided(settings))
            await asyncio.sleep(0.3)

    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        watcher = asyncio.create_task(watch())
        try:
            placed = await produce_paced(settings)
            final = await read_to_end(settings.kafka_bootstrap, settings.out_topic)

            async def all_decided() -> bool:
                nonlocal final
                final = await read_to_end(settings.kafka_bootstrap, settings.out_topic)
                return {orjson.loads(r.value)["message_id"] for r in final} >= set(placed)

            await eventually(all_decided, "every message of the burst decided", timeout_s=120)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        assert service.failure is None
        sample = service.metrics.registry.get_sample_value
        fetched = sample("moderator_fetched_batch_size_sum")
        fetches = sample("moderator_fetched_batch_size_count") or 0.0
        assert fetched == sample("moderator_messages_consumed_total") == len(placed)
        # Round trips are per fetched batch, not per message: a batch the pacer grew shares them.
        trips = {part: sample("moderator_redis_round_trips_total", {"part": part}) or 0.0
                 for part in ("cache_read", "review")}  # fmt: skip
        for step in ("before", "after"):
            trips[f"users_{step}"] = (
                sample("moderator_user_state_round_trips_total", {"step": step}) or 0.0
            )
        assert trips["cache_read"] > 0, "the score cache read Redis"
        assert all(n <= fetches for n in trips.values()), (trips, fetches)
        linger, target = sample("moderator_fetch_linger_ms"), sample("moderator_fetch_target")
        print(f"\n{len(placed)} messages in {fetches:.0f} fetches; last linger {linger} ms, "
              f"target {target}; Redis round trips {trips}")  # fmt: skip

    times = Counter(orjson.loads(r.value)["message_id"] for r in final)
    assert set(times) == set(placed), "nothing lost, nothing invented"
    assert max(times.values()) == 1, "each message decided once"
    assert len(snapshots) >= 3, "commits were looked at during the burst"
    for committed, decided in snapshots:
        for mid, (partition, offset) in placed.items():
            if offset < committed[partition]:
                assert mid in decided, f"{mid} committed (partition {partition}) before its ack"
