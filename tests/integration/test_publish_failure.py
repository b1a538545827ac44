"""Publishing decisions fails for real: the broker refuses them, and nothing is committed past.

The embedded Tansu broker validates records against JSON schemas given at start-up; the schema
of this test's decisions topic refuses any decision whose `message_id` starts with `refused-`,
so those produce requests fail on the broker with INVALID_RECORD. The moderator must keep
re-sending them with a growing back-off, keep deciding the rest, and never commit the offset of
an input whose decision was not acknowledged, not even when it shuts down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from loadgen.chaos.observer import committed_offsets
from loadgen.chaos.procs import Broker
from moderator.classifier import Classifier
from moderator.config import Settings
from moderator.service import Moderator
from moderator.topics import ensure_topics
from tests.integration.kafka_io import chat, consume, decisions_by_id

pytestmark = pytest.mark.integration

PARTITIONS = 2
REFUSE_PREFIX = "refused-"


def refusing_schema() -> dict[str, object]:
    return {
        "type": "object",
        "properties": {
            "value": {
                "type": "object",
                "properties": {"message_id": {"not": {"pattern": f"^{REFUSE_PREFIX}"}}},
            }
        },
    }


@pytest.fixture
def refusing_broker(settings: Settings, tmp_path: Path) -> Iterator[Broker]:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{settings.out_topic}.json").write_bytes(orjson.dumps(refusing_schema()))
    with Broker(schema_dir=schemas) as broker:
        yield broker


async def send_all(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """Produce in order; return each record's partition (offsets follow per partition)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value=v, key=k) for k, v in records]
        return [(await f).partition for f in futures]
    finally:
        await producer.stop()


async def test_refused_decisions_are_retried_with_backoff_and_never_committed(
    refusing_broker: Broker,
    settings: Settings,
    classifier: Classifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings.replace(
        kafka_bootstrap=refusing_broker.bootstrap, redis_url="", shutdown_timeout_s=2.0
    )
    bootstrap = settings.kafka_bootstrap
    topics = {settings.in_topic: PARTITIONS, settings.out_topic: PARTITIONS, settings.dlq_topic: 1}
    await ensure_topics(bootstrap, topics)
    # One channel holds the refused message in the middle of its stream; the others are clean.
    records = [chat(i, f"before {i}", channels=4) for i in range(20)]
    refused_key = b"c-1"
    refused = orjson.dumps({"message_id": f"{REFUSE_PREFIX}1", "channel_id": "c-1",
                            "user_id": "u-1", "text": "this one is refused",
                            "sent_at_ms": int(time.time() * 1000)})  # fmt: skip
    records.append((refused_key, refused))
    records += [chat(i, f"after {i}", channels=4) for i in range(20, 60)]
    caplog.set_level(logging.WARNING, logger="moderator.service")

    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        partitions = await send_all(bootstrap, settings.in_topic, records)
        refused_partition = partitions[20]
        refused_offset = partitions[:20].count(refused_partition)
        end = {p: partitions.count(p) for p in range(PARTITIONS)}

        decided = await consume(bootstrap, settings.out_topic,
                                until=lambda got: len(decisions_by_id(got)) >= 60)  # fmt: skip
        # Let the retries run through a few back-offs (0.1, 0.25, 0.5, 1 s ...).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            retries = service.metrics.registry.get_sample_value(
                "moderator_publish_retries_total"
            )  # fmt: skip
            if retries is not None and retries >= 4:
                break
            await asyncio.sleep(0.2)
        held = await committed_offsets(bootstrap, settings.group_id, settings.in_topic, PARTITIONS)
        assert service.failure is None, "a refused decision is an outage, not a crash"
    after_stop = await committed_offsets(
        bootstrap, settings.group_id, settings.in_topic, PARTITIONS
    )  # fmt: skip

    ids = set(decisions_by_id(decided))
    assert ids == {f"m-{i}" for i in range(60)}, "every other decision was published"
    assert f"{REFUSE_PREFIX}1" not in ids

    for offsets in (held, after_stop):
        # The refused input's partition never commits past it; the others commit everything.
        assert (offsets[refused_partition] or 0) <= refused_offset, offsets
        for p in range(PARTITIONS):
            if p != refused_partition:
                assert offsets[p] == end[p], offsets

    # (attempt, back-off) of each re-send; back-offs grow with the attempt (with jitter).
    resends = [
        (int(str(args[2])), float(str(args[3])))
        for record in caplog.records
        if record.getMessage().startswith("publishing to")
        and isinstance(args := record.args, tuple)
    ]
    by_attempt: dict[int, list[float]] = {}
    for attempt, backoff_s in resends:
        by_attempt.setdefault(attempt, []).append(backoff_s)
    assert max(by_attempt) >= 4, resends
    assert max(by_attempt[4]) > max(by_attempt[1]), f"retries back off: {resends}"
    assert any("shutdown deadline passed" in r.getMessage() for r in caplog.records)
