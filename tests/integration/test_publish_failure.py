"""Publishing decisions fails for real: the broker refuses them, and nothing is committed past.

The embedded Tansu broker validates records against JSON schemas given at start-up; the schema
of this test's decisions topic refuses any decision whose `message_id` starts with `refused-`,
so those produce requests fail on the broker with INVALID_RECORD. The moderator must re-send
them with a growing back-off, keep deciding the rest, and never commit the offset of an input
whose decision was not acknowledged, not even when it shuts down. After
`MODERATOR_PUBLISH_ATTEMPTS` refusals it diverts the input to the dead-letter topic instead
(`publish_failed`), and commits past it only once that dead letter is acknowledged; with 0 it
re-sends forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from chaos.observer import committed_offsets
from chaos.procs import Broker
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import DEFAULT_ACTIONS
from moderator.service import Moderator
from tests.contract import check_dead_letter_headers, check_decision
from tests.integration.kafka_io import chat, consume, decisions_by_id, distinct_ids, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.integration

PARTITIONS = 2
REFUSE_PREFIX = "refused-"


REFUSE_TWICE_PREFIX = "refused-twice-"  # refused by the dead-letter topic's schema too


def refusing_schema(prefix: str) -> dict[str, object]:
    """A Tansu schema refusing JSON-object values whose `message_id` starts with `prefix`."""
    return {
        "type": "object",
        "properties": {
            "value": {
                "type": "object",
                "properties": {"message_id": {"not": {"pattern": f"^{prefix}"}}},
            }
        },
    }


@pytest.fixture
def refusing_broker(settings: Settings, tmp_path: Path) -> Iterator[Broker]:
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for topic, prefix in ((settings.out_topic, REFUSE_PREFIX),
                          (settings.dlq_topic, REFUSE_TWICE_PREFIX)):  # fmt: skip
        (schemas / f"{topic}.json").write_bytes(orjson.dumps(refusing_schema(prefix)))
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
        kafka_bootstrap=refusing_broker.bootstrap,
        redis_url="",
        shutdown_timeout_s=2.0,
        publish_attempts=0,  # re-send forever
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
    caplog.set_level(logging.WARNING, logger="moderator")

    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        partitions = await send_all(bootstrap, settings.in_topic, records)
        refused_partition = partitions[20]
        refused_offset = partitions[:20].count(refused_partition)
        end = {p: partitions.count(p) for p in range(PARTITIONS)}

        decided = await consume(bootstrap, settings.out_topic,
                                until=lambda got: len(decisions_by_id(got)) >= 60)  # fmt: skip
        # Let the retries run through a few back-offs (0.1, 0.25, 0.5, 1 s ...).
        retries = service.metrics.registry.get_sample_value
        await eventually(lambda: (retries("moderator_publish_retries_total") or 0) >= 4,
                         "the refused decision was re-sent 4 times", timeout_s=30)  # fmt: skip
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


def refused_input(message_id: str, text: str) -> tuple[bytes, bytes]:
    value = {"message_id": message_id, "channel_id": "c-1", "user_id": "u-1", "text": text,
             "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    return b"c-1", orjson.dumps(value)


class Trickle:
    """Steady chat traffic, valid and invalid (a JSON object missing fields, which the dead-letter
    topic's schema takes): a refusal counts only while its topic takes other records."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        self.topic = topic
        self.ends: dict[int, int] = {}
        self.valid = 0
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Trickle:
        await self.producer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        for n in itertools.count():
            key, value = chat(1000 + n, f"trickle {n}", channels=4)
            bad = orjson.dumps({"message_id": f"bad-{n}"})  # → missing_field
            for k, v in ((key, value), (key, bad)):
                meta = await (await self.producer.send(self.topic, value=v, key=k))
                self.ends[meta.partition] = meta.offset + 1
            self.valid += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), 0.05)
            if self.stopping.is_set():
                return

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.stopping.set()  # not a cancel: every record sent is counted in `ends`
        try:
            await asyncio.wait_for(self.task, 30)
        finally:
            await self.producer.stop()


async def test_refused_records_are_diverted_to_the_dead_letter_topic_then_committed(
    refusing_broker: Broker,
    settings: Settings,
    classifier: Classifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A decision refused `publish_attempts` times (alone, while other decisions go through)
    becomes a `publish_failed` dead letter with the original input; a dead letter refused too
    becomes a receipt without the value. The partition commits past them only after the broker
    took the replacement."""
    attempts = 3
    settings = settings.replace(
        kafka_bootstrap=refusing_broker.bootstrap, redis_url="", publish_attempts=attempts
    )
    bootstrap = settings.kafka_bootstrap
    topics = {settings.in_topic: PARTITIONS, settings.out_topic: PARTITIONS, settings.dlq_topic: 1}
    await ensure_topics(bootstrap, topics)
    once = refused_input(f"{REFUSE_PREFIX}1", "this decision is refused")
    twice = refused_input(f"{REFUSE_TWICE_PREFIX}1", "and so is its dead letter")
    records = [chat(i, f"before {i}", channels=4) for i in range(20)]
    records += [once, *(chat(i, f"middle {i}", channels=4) for i in range(20, 40)), twice]
    records += [chat(i, f"after {i}", channels=4) for i in range(40, 60)]
    refused = {0: records.index(once), 1: records.index(twice)}
    caplog.set_level(logging.WARNING, logger="moderator")

    async def commits() -> dict[int, int | None]:
        return await committed_offsets(bootstrap, settings.group_id, settings.in_topic, PARTITIONS)

    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        async with Trickle(bootstrap, settings.in_topic) as trickle:
            partitions = await send_all(bootstrap, settings.in_topic, records)
            where = {n: (partitions[i], partitions[:i].count(partitions[i]))
                     for n, i in refused.items()}  # fmt: skip
            # Poll the commits; note when each refused input was first seen committed past.
            passed_ms: dict[int, float] = {}

            async def both_passed() -> bool:
                offsets = await commits()
                seen_ms = time.time() * 1000
                for n, (partition, offset) in where.items():
                    if (offsets[partition] or 0) > offset:
                        passed_ms.setdefault(n, seen_ms)
                return len(passed_ms) == len(where)

            await eventually(both_passed, "the refused inputs no longer hold their partitions",
                             timeout_s=60)  # fmt: skip
        end = dict(trickle.ends)

        async def all_committed() -> bool:
            return await commits() == end

        await eventually(all_committed, lambda: f"everything after them is committed too: {end}",
                         timeout_s=30)  # fmt: skip
        assert service.failure is None
        value = service.metrics.registry.get_sample_value
        assert value("moderator_publish_refused_total", {"outcome": "decision"}) == 2
        assert value("moderator_publish_refused_total", {"outcome": "dead_letter"}) == 1
        assert value("moderator_publish_refused_total", {"outcome": "receipt"}) == 0
        assert value("moderator_dead_letters_total", {"reason": "publish_failed"}) == 2

    decided = decisions_by_id(
        await consume(bootstrap, settings.out_topic, until=distinct_ids(60 + trickle.valid))
    )  # fmt: skip
    assert {f"m-{i}" for i in range(60)} <= set(decided)
    assert not {mid for mid in decided if mid.startswith(REFUSE_PREFIX)}
    assert len(decided) == 60 + trickle.valid, "every other message was decided"
    # Both dead letters were acknowledged (counted above): the topic holds all there will be.
    everything = await read_to_end(bootstrap, settings.dlq_topic)
    dead = [r for r in everything if ("moderator.error.code", b"publish_failed") in r.headers]
    assert len(dead) == 2, "one dead letter per refused input, no more"
    by_offset = {int(dict(r.headers)["moderator.source.offset"]): r for r in dead}
    for n, (key, original) in ((0, once), (1, twice)):
        partition, offset = where[n]
        letter = by_offset[offset]
        headers = check_dead_letter_headers(letter.headers)
        assert f"refused it {attempts} times" in headers["moderator.error.message"]
        assert headers["moderator.source.topic"] == settings.in_topic
        assert headers["moderator.source.partition"] == str(partition)
        # The record's timestamp is taken when it is handed to the producer, before its ack
        # (tests/unit/test_publish_retry.py checks the ack itself).
        assert passed_ms[n] >= letter.timestamp, "committed before its dead letter was sent"
        if n == 0:
            assert letter.key == key
            assert letter.value == original, "the dead letter carries the input untouched"
            decision = check_decision(orjson.loads(headers["moderator.decision"]))
            assert decision["message_id"] == f"{REFUSE_PREFIX}1"
            assert decision["action"] in DEFAULT_ACTIONS
        else:
            assert letter.key == f"{settings.in_topic}/{partition}/{offset}".encode()
            assert orjson.loads(letter.value) == {"value_omitted_bytes": len(original)}
            assert headers["moderator.value.omitted_bytes"] == str(len(original))
            assert "moderator.decision" not in headers
            assert "value (" in headers["moderator.error.message"]
    diverted = [r.getMessage() for r in caplog.records if "diverting it to" in r.getMessage()]
    assert len(diverted) == 3, diverted
