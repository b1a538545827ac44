"""The moderation loop against the real broker, Redis and model: a review decision goes out with
its channel's context, a verdict ends it with one final decision and becomes an override that the
same text in its channel obeys (not in another: a verdict names no scope), a timeout ends it with
the policy's fallback, and verdicts that apply to nothing go to the dead-letter topic."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from devstack.embedded import EmbeddedRedis
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.policy.rules import read_spec
from moderator.service import Moderator
from tests.contract import check_dead_letter_headers, check_decision, check_review
from tests.integration.kafka_io import consume, produce, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.integration

Records = list[ConsumerRecord[bytes, bytes]]
HOLD = "potato"  # the test policy sends any message with it to review (a deny term)


def loop_settings(settings: Settings, tmp_path: Path, **policy: Any) -> Settings:
    """`settings` on review and verdict topics of their own, with the default policy plus a deny
    term that holds messages for review, and `policy`'s review settings."""
    spec = read_spec()
    spec["deny"] = [{"term": HOLD, "category": "test", "action": "review"}]
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({**spec, **policy}))
    run = settings.group_id.rsplit("-", 1)[-1]
    return settings.replace(
        policy=path, review_topic=f"chat.review.{run}", verdict_topic=f"chat.verdicts.{run}"
    )


def message(i: int, channel: str, text: str) -> tuple[bytes, bytes]:
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": f"u-{i}", "text": text,
             "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    return channel.encode(), orjson.dumps(value)


def verdict(message_id: str, action: str, moderator: str = "mod-1", **extra: Any) -> bytes:
    return orjson.dumps({"message_id": message_id, "verdict": action, "moderator_id": moderator,
                         "at_ms": int(time.time() * 1000), **extra})  # fmt: skip


def produce_stock(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """As a moderator's tool would: the stock confluent-kafka producer."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0, "the verdicts were not all delivered"


def sample(service: Moderator, name: str, **labels: str) -> float:
    return service.metrics.registry.get_sample_value(f"moderator_{name}", labels) or 0.0


def finals(records: Records) -> list[dict[str, Any]]:
    decisions = [check_decision(orjson.loads(r.value)) for r in records]
    return [d for d in decisions if d["final"]]


def has_final(message_id: str) -> Callable[[Records], bool]:
    return lambda records: any(d["message_id"] == message_id for d in finals(records))


def decoded(record: ConsumerRecord[bytes, bytes]) -> dict[str, Any]:
    return check_decision(orjson.loads(record.value))


def has_decision(message_id: str) -> Callable[[Records], bool]:
    return lambda records: any(decoded(r)["message_id"] == message_id for r in records)


async def test_a_held_message_goes_out_with_context_and_one_verdict_ends_it(
    settings: Settings, classifier: Classifier, tmp_path: Path
) -> None:
    s = loop_settings(settings, tmp_path)
    channel = "c-loop"
    texts = ["gg wp", "that clutch was insane", f"i want a {HOLD} now"]
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(10)
        await produce(
            s.kafka_bootstrap, s.in_topic, [message(i, channel, t) for i, t in enumerate(texts)]
        )
        reviews = await consume(s.kafka_bootstrap, s.review_topic, until=lambda r: len(r) >= 1)
        review = check_review(orjson.loads(reviews[0].value))
        assert reviews[0].key == b"m-2"
        assert (review["message_id"], review["action"], review["text"]) == (
            "m-2",
            "review",
            texts[2],
        )
        assert [c["text"] for c in review["context"]] == texts[:2], (
            "the channel's messages before it"
        )
        assert review["context_missing"] is False
        assert review["review_fallback"] == "allow"

        # A moderator allows it, with the stock client: one final decision.
        await asyncio.to_thread(
            produce_stock, s.kafka_bootstrap, s.verdict_topic, [(b"m-2", verdict("m-2", "allow"))]
        )
        out = await consume(s.kafka_bootstrap, s.out_topic, until=has_final("m-2"))
        (final,) = finals(out)
        assert (final["message_id"], final["action"], final["reason"]) == (
            "m-2",
            "allow",
            "verdict:mod-1",
        )
        first = next(
            check_decision(orjson.loads(r.value)) for r in out if r.value and b'"m-2"' in r.value
        )
        assert (first["action"], first["final"]) == ("review", False)
        assert first["review"] == {
            "due_at_ms": review["expires_at_ms"],
            "fallback": review["review_fallback"],
        }, "the decision plans with the held message's own deadline and fallback"
        assert (final["scores"], final["policy"]) == (first["scores"], first["policy"])
        assert (
            sample(service, "verdicts_total", model_action="review", verdict="allow", label="deny")
            == 1
        )

        # The verdict is an override for its channel (it names no scope): the same text there
        # gets the human's action without the model, though the policy's deny term would hold it
        # again; in another channel the deny term holds it.
        await produce(s.kafka_bootstrap, s.in_topic,
                      [message(3, channel, texts[2]), message(4, "c-other", texts[2])])  # fmt: skip
        both = (has_decision("m-3"), has_decision("m-4"))
        out = await consume(s.kafka_bootstrap, s.out_topic, until=lambda r: all(b(r) for b in both))
        again = next(d for d in map(decoded, out) if d["message_id"] == "m-3")
        assert (again["action"], again["reason"], again["scores"]) == ("allow", "override", {})
        elsewhere = next(d for d in map(decoded, out) if d["message_id"] == "m-4")
        assert (elsewhere["action"], elsewhere["reason"]) == ("review", "deny:policy:test")

        # A second verdict for it, one for a message never held, and a malformed one.
        await produce(s.kafka_bootstrap, s.verdict_topic, [
            (b"m-2", verdict("m-2", "block", "mod-2")),
            (b"m-404", verdict("m-404", "block")),
            (b"m-2", b"{not json"),
            (b"m-2", verdict("m-2", "obliterate")),
        ])  # fmt: skip
        await eventually(lambda: sample(service, "verdict_outcomes_total", outcome="late") == 1,
                         "the second verdict for m-2 is counted late", timeout_s=30)  # fmt: skip
        dead = await consume(s.kafka_bootstrap, s.dlq_topic, until=lambda r: len(r) >= 3)
        # Every verdict was read (one late, three dead letters): what is on the topic now is all
        # they made.
        out = await read_to_end(s.kafka_bootstrap, s.out_topic)
    codes = sorted(check_dead_letter_headers(r.headers)["moderator.error.code"] for r in dead)
    assert codes == ["invalid_json", "invalid_verdict", "verdict_not_held"]
    for record in dead:
        headers = check_dead_letter_headers(record.headers)
        assert headers["moderator.source.topic"] == s.verdict_topic
        assert headers["moderator.error.message"]
    assert [d["reason"] for d in finals(out)] == ["verdict:mod-1"], "no second final decision"
    assert sample(service, "verdict_outcomes_total", outcome="applied") == 1


async def test_a_held_message_with_no_verdict_times_out_to_its_fallback(
    settings: Settings, classifier: Classifier, tmp_path: Path
) -> None:
    s = loop_settings(settings, tmp_path, review_timeout_s=1, review_fallback="block")
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(10)
        await produce(s.kafka_bootstrap, s.in_topic, [message(0, "c-slow", f"{HOLD} salad")])
        out = await consume(s.kafka_bootstrap, s.out_topic, until=has_final("m-0"))
        (final,) = finals(out)
        assert (final["action"], final["reason"]) == ("block", "review_timeout")
        (held,) = [decoded(r) for r in out if not decoded(r)["final"]]
        assert held["review"]["fallback"] == final["action"], "the fallback it announced"
        assert held["review"]["due_at_ms"] <= final["decided_at_ms"], "never before it was due"
        await eventually(lambda: sample(service, "review_timeouts_total") == 1,
                         "the timeout is counted", timeout_s=30)  # fmt: skip
        # A verdict after the timeout applies to nothing.
        await produce(s.kafka_bootstrap, s.verdict_topic, [(b"m-0", verdict("m-0", "allow"))])
        dead = await consume(s.kafka_bootstrap, s.dlq_topic, until=lambda r: len(r) >= 1)
    assert check_dead_letter_headers(dead[0].headers)["moderator.error.code"] == "verdict_not_held"


async def test_without_redis_the_review_record_still_goes_out_and_the_message_is_held_here(
    settings: Settings, classifier: Classifier, tmp_path: Path, fresh_redis: EmbeddedRedis
) -> None:
    s = loop_settings(settings.replace(redis_url=fresh_redis.url), tmp_path)
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(10)
        fresh_redis.stop()
        await produce(s.kafka_bootstrap, s.in_topic, [message(0, "c-x", "hello"),
                                                     message(1, "c-x", f"{HOLD} pie")])  # fmt: skip
        reviews = await consume(s.kafka_bootstrap, s.review_topic, until=lambda r: len(r) >= 1)
        review = check_review(orjson.loads(reviews[0].value))
        assert (review["message_id"], review["context"], review["context_missing"]) == (
            "m-1",
            [],
            True,
        )
        assert sample(service, "review_fallbacks_total") >= 1
        await produce(s.kafka_bootstrap, s.verdict_topic, [(b"m-1", verdict("m-1", "block"))])
        out = await consume(s.kafka_bootstrap, s.out_topic, until=has_final("m-1"))
    (final,) = finals(out)
    assert (final["action"], final["reason"]) == ("block", "verdict:mod-1")
