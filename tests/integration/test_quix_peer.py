"""The bench's Quix Streams peer against the real embedded broker: every message decided, as the
model and the policy decide it in-process."""

from __future__ import annotations

from pathlib import Path

import orjson
from aiokafka import TopicPartition

from bench import quix_peer
from bench.stack import PARTITIONS, create_topics, drain_records, encode_messages
from devstack.embedded import EmbeddedKafka
from loadgen.kafka import TopicSet, make_consumer
from tests.waiting import eventually


async def read_all(bootstrap: str, topic: str, n: int) -> list[dict[str, object]]:
    """The first `n` records of `topic` (every partition from its start), decoded."""
    consumer = make_consumer(bootstrap)
    await consumer.start()
    out: list[dict[str, object]] = []
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

        async def read_more() -> bool:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(orjson.loads(r.value) for r in records if r.value is not None)
            return len(out) >= n

        await eventually(read_more, lambda: f"{topic} holds {n} records (read {len(out)})",
                         timeout_s=30, poll_s=0)  # fmt: skip
    finally:
        await consumer.stop()
    return out


async def test_peer_decides_every_message_end_to_end(kafka: EmbeddedKafka, model_dir: Path) -> None:
    names = TopicSet.fresh("peer", "it")
    await create_topics(kafka.bootstrap, names)
    texts = ["good game everyone", "you are a worthless piece of shit, go die", "", "gg wp"]
    records = encode_messages("peer-it", texts)
    child = quix_peer.start(kafka.bootstrap, names.in_topic, names.out_topic, names.group_id,
                            model_dir, threads=1)  # fmt: skip
    try:
        result = await drain_records(kafka.bootstrap, names, records, timeout_s=90)
    finally:
        child.terminate()
        child.wait(30)
    assert result.decided == len(records)
    got = {d["message_id"]: d for d in await read_all(kafka.bootstrap, names.out_topic, 4)}
    decide = quix_peer.Decider(model_dir, threads=1)
    for _, value, mid in records:
        expected = decide(orjson.loads(value))
        assert (got[mid]["action"], got[mid]["reason"]) == (expected["action"], expected["reason"])
    assert {d["action"] for d in got.values()} != {"allow"}  # the insult is flagged
    assert got["peer-it-2"]["reason"] == "empty_text"
