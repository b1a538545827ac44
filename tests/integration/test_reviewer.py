"""The scripted moderator of the demo and the chaos scenario, against the real broker: it answers
each held message once, as its rule says, with verdicts the verdict schema accepts, keyed by the
message id, in order, and counts a review record read again without answering it twice."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest

from devstack.embedded import EmbeddedKafka
from devstack.reviewer import Answer, Reviewer
from moderator.kafka.topics import ensure_topics
from tests.contract import check_verdict
from tests.integration.kafka_io import consume, produce
from tests.waiting import eventually

pytestmark = pytest.mark.integration


def review(message_id: str) -> tuple[bytes, bytes]:
    value = {"message_id": message_id, "action": "review", "text": "hola a todos"}
    return message_id.encode(), orjson.dumps(value)


def rule(n: int, record: dict[str, Any]) -> list[Answer]:
    """The first held message gets two verdicts, the second none, the third one."""
    return [[Answer("block", "mod-1"), Answer("allow", "mod-2")], [], [Answer("nudge", "mod-1")]][n]


async def test_each_held_message_is_answered_once_as_the_rule_says(kafka: EmbeddedKafka) -> None:
    run = uuid.uuid4().hex[:8]
    review_topic, verdict_topic = f"chat.review.{run}", f"chat.verdicts.{run}"
    # One review partition: the rule answers the n-th held message in the order they are read.
    await ensure_topics(kafka.bootstrap, {review_topic: 1, verdict_topic: 2})
    async with Reviewer(kafka.bootstrap, review_topic, verdict_topic, rule) as desk:
        records = [review("m-1"), review("m-2"), review("m-1"), review("m-3")]
        await produce(kafka.bootstrap, review_topic, records)

        def all_read() -> bool:
            desk.check()
            return desk.records >= len(records)

        await eventually(all_read, "the reviewer read every review record", timeout_s=30)
    assert desk.records == len(records)
    assert list(desk.held) == ["m-1", "m-2", "m-3"]
    assert [(s.message_id, s.verdict, s.moderator_id, s.first) for s in desk.sent] == [
        ("m-1", "block", "mod-1", True),
        ("m-1", "allow", "mod-2", False),
        ("m-3", "nudge", "mod-1", True),
    ]
    assert desk.failed == []
    got = await consume(kafka.bootstrap, verdict_topic, until=lambda r: len(r) >= 3)
    verdicts = [(r.key, check_verdict(orjson.loads(r.value))) for r in got]
    assert sorted((key, v["message_id"], v["verdict"]) for key, v in verdicts) == [
        (b"m-1", "m-1", "allow"),
        (b"m-1", "m-1", "block"),
        (b"m-3", "m-3", "nudge"),
    ]
    m1 = [v["verdict"] for key, v in verdicts if key == b"m-1"]
    assert m1 == ["block", "allow"], "one message's verdicts in the order given"
