"""A shadow model in a running moderator, against the real broker, the real Redis and two real
models (the shipped one deciding, devstack/candidate.py's beside it): every input still gets exactly
its primary's decision, and the shadow's disagreements reach the shadow topic, read back with a
stock confluent-kafka consumer, and the metrics."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from devstack.candidate import candidate_model
from devstack.embedded import EmbeddedRedis
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Reader, decide_texts, reader_for
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage
from moderator.service import Moderator
from moderator.shadow.agreement import Primary, compare
from moderator.shadow.scorer import read
from tests.contract import check_shadow
from tests.integration.kafka_io import (
    chat,
    consume,
    decisions_by_id,
    distinct_ids,
    produce,
    read_to_end,
)
from tests.waiting import eventually, eventually_blocking

pytestmark = pytest.mark.integration

# Chat lines the two models agree on and lines they do not (the test checks it has both): a
# toxic line, friendly profanity, Spanish the primary sends to review and the candidate reads.
TEXTS = [
    "gg wp everyone",
    "you are a fucking idiot",
    "holy shit that was a great play",
    "eres un idiota y te voy a matar, cállate",
    "hola amigos, ¿cómo están todos hoy en el juego?",
    "what the fuck lol",
    "nice shot dude",
    "can someone explain the rules of this mode?",
]
N = 4 * len(TEXTS)


def read_shadow_topic(bootstrap: str, topic: str, n: int) -> list[dict[str, Any]]:
    """`topic`'s first `n` records with a stock confluent-kafka consumer, each checked against
    its schema and its key: every partition assigned from the beginning, no group to join."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    records: list[dict[str, Any]] = []

    def read_more() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            value = check_shadow(orjson.loads(message.value()))
            assert message.key() == value["channel_id"].encode()
            records.append(value)
        return len(records) >= n

    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        eventually_blocking(
            read_more,
            lambda: f"{n} records on {topic}, read {len(records)}",
            timeout_s=60,
            poll_s=0,
        )
    finally:
        consumer.close()
    return records


async def test_the_shadow_scores_the_stream_beside_the_primary_and_reports_its_disagreements(
    settings: Settings, classifier: Classifier, fresh_redis: EmbeddedRedis, tmp_path: Path
) -> None:
    """A Redis of its own: no score cached by another test's batches (a batch pads its members,
    which moves int8 scores a little) decides a message here."""
    shadow_reader: Reader = reader_for(Classifier(candidate_model(tmp_path / "candidate")))
    shadow_topic = f"chat.shadow.{settings.group_id}"
    # The queue holds the whole stream, so nothing is shed; one message per model call, as the
    # offline readings below.
    s = settings.replace(
        shadow_model=shadow_reader.classifier.model_dir,
        shadow_topic=shadow_topic,
        shadow_queue=N,
        redis_url=fresh_redis.url,
        max_batch=1,
    )
    inputs = [chat(i, TEXTS[i % len(TEXTS)], channels=3) for i in range(N)]
    sent = {orjson.loads(v)["message_id"]: orjson.loads(v) for _, v in inputs}
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        registry = service.metrics.registry
        await produce(s.kafka_bootstrap, s.in_topic, inputs)
        records = await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(N))
        decisions = decisions_by_id(records)
        await eventually(
            lambda: sum_of(registry, "moderator_shadow_decisions_total") == N, "N pairs compared"
        )

        # Exactly the primary's decision, once per input: what the primary reads offline.
        policy = Policy.load()
        everything = await read_to_end(s.kafka_bootstrap, s.out_topic)
        published = [orjson.loads(r.value) for r in everything]
        once = Counter(d["message_id"] for d in published if not d["final"])
        assert once == dict.fromkeys(sent, 1)
        primary = reader_for(classifier)
        expected = [decide_texts(primary, policy, [sent[i]["text"]])[0] for i in sent]
        for message_id, want in zip(sent, expected, strict=True):
            got = decisions[message_id]
            assert got["model"] == classifier.info.ident
            assert (got["action"], got["reason"]) == (want.ruling.action, want.ruling.reason)

        # The shadow's reading of each, compared with the primary's decision as published.
        items = [primary_of(decisions[i], sent[i]["text"], policy) for i in sent]
        pairs = {i.chat.message_id: compare(i, read(shadow_reader, [i])[0]) for i in items}
        disagreed = {i for i, pair in pairs.items() if not pair.agreed}
        assert 0 < len(disagreed) < N, "the stream makes the models agree and disagree"
        assert sum_of(registry, "moderator_shadow_disagreements_total") == len(disagreed)
        assert sum_of(registry, "moderator_shadow_skipped_total") == 0
        by_label = Counter((p.primary, p.shadow, p.label) for p in pairs.values())
        assert counted(registry, "moderator_shadow_decisions_total", "label") == by_label
        by_language = Counter((p.primary, p.shadow, p.language) for p in pairs.values())
        assert counted(registry, "moderator_shadow_languages_total", "language") == by_language
        assert by_language["review", "nudge", "es"] + by_language["review", "allow", "es"] > 0

        n = len(disagreed)
        shadow_records = await asyncio.to_thread(
            read_shadow_topic, s.kafka_bootstrap, shadow_topic, n
        )
        delivered = "moderator_shadow_records_total"
        await eventually(
            lambda: sum_of(registry, delivered, result="sent") == n, "their deliveries counted"
        )
        assert len(await read_to_end(s.kafka_bootstrap, shadow_topic)) == n, "one per message"
        assert sum_of(registry, "moderator_shadow_records_total", result="failed") == 0
    assert {r["message_id"] for r in shadow_records} == disagreed
    for r in shadow_records:
        decision = decisions[r["message_id"]]
        assert r["primary"]["model"] == classifier.info.ident
        assert (r["primary"]["action"], r["primary"]["reason"]) == (
            decision["action"],
            decision["reason"],
        )
        assert r["shadow"]["model"] == shadow_reader.classifier.info.ident
        assert r["shadow"]["action"] == pairs[r["message_id"]].shadow


def primary_of(decision: dict[str, Any], text: str, policy: Policy) -> Primary:
    """The primary's decision as the decisions topic says it."""
    chat_message = ChatMessage(
        decision["message_id"], decision["channel_id"], decision["user_id"], text, 0
    )
    ruling = Ruling(decision["action"], decision["reason"])
    return Primary(
        chat_message,
        policy,
        decision["model"],
        ruling,
        decision["scores"],
        decision.get("language"),
    )


def sum_of(registry: Any, name: str, **labels: str) -> float:
    """A metric summed over the series that have `labels`."""
    total = 0.0
    for family in registry.collect():
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                total += s.value
    return total


def counted(registry: Any, name: str, label: str) -> Counter[tuple[str, str, str]]:
    return Counter(
        {
            (s.labels["primary_action"], s.labels["shadow_action"], s.labels[label]): int(s.value)
            for family in registry.collect()
            for s in family.samples
            if s.name == name and s.value
        }
    )
