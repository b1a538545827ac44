"""Hostile input through the real broker: every junk record dead-lettered with a reason, every
valid message (zalgo, right-to-left, NUL inside the text, ...) decided, the stream goes on."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from aiokafka import AIOKafkaProducer

from chaos.hostile import CASES, DECISION, MIB, burst
from moderator.config import Settings
from moderator.policy.rules import DEFAULT_ACTIONS
from moderator.records import DLQ_ERROR_CODE, DLQ_ERROR_MESSAGE, DLQ_SOURCE_OFFSET, DLQ_SOURCE_TOPIC
from moderator.service import Moderator
from tests.integration.kafka_io import consume, decisions_by_id
from tests.waiting import eventually

pytestmark = pytest.mark.integration

JUNK = 2500
VALID = 250


async def produce_raw(settings: Settings, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap, acks="all", linger_ms=5,
        max_request_size=8 * MIB,
    )  # fmt: skip
    await producer.start()
    try:
        futures = [await producer.send(settings.in_topic, value=v, key=k) for k, v in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def test_a_junk_burst_is_dead_lettered_and_valid_messages_are_decided(
    settings: Settings, moderator: Moderator
) -> None:
    records = burst(JUNK, VALID, seed=11)
    junk = {r.key: r for r in records if not CASES[r.case].valid}
    valid = {r.key.decode(): r for r in records if CASES[r.case].valid}
    assert len(junk) == JUNK
    assert len(valid) == VALID
    await produce_raw(settings, [(r.key, r.value) for r in records])

    dead = await consume(settings.kafka_bootstrap, settings.dlq_topic,
                         until=lambda got: len(got) >= JUNK, timeout_s=90)  # fmt: skip
    decided = await consume(
        settings.kafka_bootstrap, settings.out_topic,
        until=lambda got: len(decisions_by_id(got)) >= VALID, timeout_s=90,
    )  # fmt: skip

    codes: Counter[str] = Counter()
    assert len(dead) == JUNK, "each junk record is dead-lettered exactly once"
    for record in dead:
        assert record.key in junk, "no valid message is dead-lettered"
        sent = junk[record.key]
        headers = dict(record.headers)
        code = headers[DLQ_ERROR_CODE].decode()
        assert code in CASES[sent.case].expect, (sent.case, code)
        assert headers[DLQ_ERROR_MESSAGE].strip(), "a human-readable reason"
        assert headers[DLQ_SOURCE_TOPIC].decode() == settings.in_topic
        assert int(headers[DLQ_SOURCE_OFFSET]) >= 0
        assert record.value == sent.value, "the dead letter carries the original bytes"
        codes[code] += 1
    assert {r.key for r in dead} == set(junk)

    decisions = decisions_by_id(decided)
    assert set(decisions) == set(valid), "every valid message decided, nothing else"
    for mid, decision in decisions.items():
        assert decision["action"] in DEFAULT_ACTIONS, (valid[mid].case, decision)
    assert decisions_by_id(
        [r for r in decided if r.key is not None]
    ).keys() == decisions.keys()  # fmt: skip

    # The burst covered every kind of junk and of nasty-but-valid chat.
    assert {r.case for r in records} == set(CASES)
    assert {"not_utf8", "invalid_json", "not_object", "wrong_type", "missing_field",
            "empty_field", "too_large", "empty_value"} <= set(codes)  # fmt: skip
    assert DECISION not in codes

    port = moderator.metrics_port
    assert port is not None
    total = moderator.metrics.registry.get_sample_value

    def dead_letters_counted() -> float:
        return sum(total("moderator_dead_letters_total", {"reason": c}) or 0 for c in codes)

    # Acks are counted in a done-callback: wait for the count, then check it is exact.
    await eventually(lambda: dead_letters_counted() >= JUNK, "every dead letter counted")
    assert dead_letters_counted() == JUNK
    assert moderator.failure is None
