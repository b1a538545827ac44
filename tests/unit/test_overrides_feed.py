"""The overrides' writer and feed (moderator/review/overrides.py `Overrides`) without a broker: a
verdict's override written to the topic (keyed as the book keys it) and obeyed here at once, each
record read from the topic counted by what it did, the start said, and the settings that name
the topic. The topic itself, with the real broker: tests/integration/test_overrides.py.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, cast

import pytest
from aiokafka import AIOKafkaProducer

from moderator.config import Settings
from moderator.decide.text import Text
from moderator.kafka.compacted import Ready
from moderator.metrics import Metrics
from moderator.records import ChatMessage, Verdict
from moderator.review import overrides as overrides_module
from moderator.review.overrides import Override, Overrides, overrides_for, text_digest

TOPIC = "chat.overrides"
TEXT = "you are a worthless idiot"


class Producer:
    """`send_and_wait`, recording what was written."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    async def send_and_wait(self, topic: str, value: bytes, *, key: bytes) -> None:
        self.sent.append((topic, value, key))


class Record(NamedTuple):
    """What the table reads of a record of the topic."""

    key: bytes | None
    value: bytes | None


def verdict(action: str = "block", scope: str = "global") -> Verdict:
    return Verdict("m-1", action, "mod-1", "insult", scope, 1_700_000_000_000)


class Feed:
    """Overrides on a `Producer`, with their metrics."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.producer = Producer()
        producer = cast(AIOKafkaProducer, self.producer)
        self.overrides = Overrides(TOPIC, {}, self.metrics.review, producer=producer)

    def updates(self, result: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "moderator_override_updates_total", {"result": result}
        )

    def in_effect(self) -> float | None:
        return self.metrics.registry.get_sample_value("moderator_overrides")


async def test_a_verdicts_override_is_written_keyed_as_the_book_keys_it_and_obeyed_at_once() -> (
    None
):
    feed = Feed()
    await feed.overrides.record_verdict(text=TEXT, channel_id="c-1", verdict=verdict("nudge"))
    [(topic, value, key)] = feed.producer.sent
    written = Override.parse(key.decode(), value)
    assert (topic, written.key, written.action) == (TOPIC, text_digest(TEXT), "nudge")
    assert (written.moderator_id, written.message_id, written.reason) == ("mod-1", "m-1", "insult")
    assert feed.overrides.lookup(TEXT, "c-2") == "nudge"  # here, before the topic is read back
    assert (feed.updates("applied"), feed.in_effect()) == (1, 1)
    await feed.overrides.record_verdict(
        text=TEXT, channel_id="c-1", verdict=verdict("allow", "channel")
    )
    assert feed.producer.sent[-1][2] == f"{text_digest(TEXT)}:c-1".encode()
    assert (feed.overrides.lookup(TEXT, "c-1"), feed.overrides.lookup(TEXT, "c-2")) == (
        "allow",
        "nudge",
    )
    assert (feed.updates("applied"), feed.in_effect()) == (2, 2)


async def test_an_empty_text_makes_no_override_and_writes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    feed = Feed()
    with caplog.at_level(logging.INFO, logger="moderator.review.overrides"):
        await feed.overrides.record_verdict(
            text="\u200b \u200b", channel_id="c-1", verdict=verdict()
        )
    assert feed.producer.sent == []
    assert feed.updates("applied") == 0
    assert [r.getMessage() for r in caplog.records] == [
        "verdict on m-1: an empty text makes no override"
    ]


async def test_writing_an_override_needs_a_producer() -> None:
    overrides = Overrides(TOPIC, {}, Metrics().review)
    with pytest.raises(RuntimeError, match="needs a producer"):
        await overrides.record_verdict(text=TEXT, channel_id="c-1", verdict=verdict())


def test_each_record_read_is_counted_by_what_it_did(caplog: pytest.LogCaptureFixture) -> None:
    feed = Feed()
    override = Override(text_digest(TEXT), "global", None, "block", "mod-1", "m-1", None, 1)
    later = override._replace(action="nudge", expires_at_ms=10**15)
    expired = override._replace(expires_at_ms=1)
    with caplog.at_level(logging.ERROR, logger="moderator.review.overrides"):
        feed.overrides.table.take(Record(override.key.encode(), override.encode()))
        feed.overrides.table.take(Record(override.key.encode(), b"{not json"))
        assert (feed.updates("applied"), feed.updates("rejected"), feed.in_effect()) == (1, 1, 1)
        assert feed.overrides.lookup(TEXT, "c-1") == "block", "the earlier override stays"
        feed.overrides.table.take(Record(later.key.encode(), later.encode()))
        feed.overrides.table.take(Record(override.key.encode(), None))  # a tombstone
        assert (feed.updates("removed"), feed.in_effect()) == (1, 0)
        feed.overrides.table.take(Record(expired.key.encode(), expired.encode()))
        assert (feed.updates("removed"), feed.in_effect()) == (2, 0), "read expired: dropped"
    [error] = [r.getMessage() for r in caplog.records]
    assert error.startswith(f"override {override.key!r}: not JSON")
    assert error.endswith("; ignored (an earlier override for it stays)")


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (True, ["overrides: 0 read from chat.overrides in 0.25 s"]),
        (
            False,
            [
                "no overrides topic chat.overrides: no overrides",
                "overrides: 0 read from chat.overrides in 0.25 s",
            ],
        ),
    ],
)
async def test_the_start_says_what_was_read_and_a_missing_topic(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    found: bool,
    said: list[str],
) -> None:
    overrides = Feed().overrides

    async def start() -> Ready:
        return Ready(found, 0.25)

    monkeypatch.setattr(overrides.table, "start", start)
    with caplog.at_level(logging.INFO, logger="moderator.review.overrides"):
        await overrides.start()
    assert [r.getMessage() for r in caplog.records] == said


def test_the_settings_name_the_topic_or_none() -> None:
    producer = cast(AIOKafkaProducer, Producer())
    metrics = Metrics().review
    assert overrides_for(Settings(override_topic=""), metrics, producer) is None
    s = Settings(override_topic="mod.overrides", topic_replication=3)
    overrides = overrides_for(s, metrics, producer)
    assert overrides is not None
    assert (overrides.topic, overrides.producer, overrides.metrics) == (
        "mod.overrides",
        producer,
        metrics,
    )
    table: Any = overrides.table
    assert (table.topic, table.options, table.replication) == (
        "mod.overrides",
        s.kafka_options(),
        3,
    )


def test_an_override_expiring_between_lookups_leaves_the_gauge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed = Feed()
    override = Override(text_digest(TEXT), "global", None, "block", "mod-1", "m-1", None, 1, 2_000)
    monkeypatch.setattr(overrides_module, "wall_ms", lambda: 1_999)
    feed.overrides.table.take(Record(override.key.encode(), override.encode()))
    chat = ChatMessage("m-2", "c-1", "u-1", TEXT, 0)
    assert (feed.overrides.decide([chat]), feed.in_effect()) == (["block"], 1)
    monkeypatch.setattr(overrides_module, "wall_ms", lambda: 2_000)
    assert (feed.overrides.decide([chat]), feed.in_effect()) == ([None], 0)


def test_decide_takes_one_text_per_message() -> None:
    feed = Feed()
    override = Override(text_digest(TEXT), "global", None, "block", "mod-1", "m-1", None, 1)
    feed.overrides.table.take(Record(override.key.encode(), override.encode()))
    chat = ChatMessage("m-2", "c-1", "u-1", TEXT, 0)
    with pytest.raises(ValueError, match="zip"):
        feed.overrides.decide([chat, chat], [Text(TEXT)])
