"""Moderators' overrides through the overrides topic, against the real broker, Redis and model: a
record written by a stock client (confluent-kafka) is replayed before ready and obeyed without
the model; a channel's override stays in its channel; `moderator override delete` removes one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.records import Verdict
from moderator.review.overrides import Override, text_digest
from moderator.service import Moderator
from tests.contract import validator
from tests.integration.kafka_io import consume, decisions_by_id, distinct_ids, produce
from tests.waiting import eventually

pytestmark = pytest.mark.integration

INSULT = "you are a worthless idiot"  # the default policy blocks it (insult, high)
CALM = "potato salad for everyone"  # the default policy allows it


@pytest.fixture
def ovr_settings(settings: Settings) -> Settings:
    return settings.replace(override_topic=f"chat.overrides.{uuid.uuid4().hex[:8]}")


def override(text: str, action: str, channel: str | None = None) -> Override:
    return Override(
        digest=text_digest(text),
        scope="global" if channel is None else "channel",
        channel_id=channel,
        action=action,
        moderator_id="mod-ann",
        message_id=f"held-{uuid.uuid4().hex[:6]}",
        reason="context matters",
        at_ms=int(time.time() * 1000),
    )


def produce_stock(bootstrap: str, topic: str, records: list[tuple[str, bytes | None]]) -> None:
    """Write with librdkafka, as a moderators' tool in another language would."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failed: list[Any] = []
    for key, value in records:
        producer.produce(
            topic, value=value, key=key.encode(), on_delivery=lambda e, _: failed.append(e)
        )
    assert producer.flush(30) == 0, "every record delivered"
    assert failed == [None] * len(records), "acknowledged, none refused"


def chat(i: int, channel: str, text: str) -> tuple[bytes, bytes]:
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": "u-1", "text": text,
             "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    return channel.encode(), orjson.dumps(value)


def sample(service: Moderator, name: str, **labels: str) -> float:
    return service.metrics.registry.get_sample_value(f"moderator_{name}", labels) or 0.0


async def decided(settings: Settings, n: int) -> dict[str, dict[str, Any]]:
    records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n))
    return decisions_by_id(records)


async def test_an_override_from_a_stock_client_is_replayed_before_ready_and_obeyed(
    ovr_settings: Settings, classifier: Classifier
) -> None:
    s = ovr_settings
    everywhere, own = override(INSULT, "allow"), override(CALM, "block", channel="c-strict")
    for o in (everywhere, own):
        validator("override").validate(orjson.loads(o.encode()))
    await asyncio.to_thread(
        produce_stock, s.kafka_bootstrap, s.override_topic,
        [(everywhere.key, everywhere.encode()), (own.key, own.encode())],
    )  # fmt: skip
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        assert sample(service, "overrides") == 2, "both replayed before ready"
        # The verdict was on a message elsewhere: this one is in another channel, written with
        # what normalisation folds (spaces, a zero-width space).
        await produce(
            s.kafka_bootstrap, s.in_topic, [chat(0, "c-lobby", "you  are a worthless idi\u200bot")]
        )
        first = await decided(s, 1)
        model_rows = sample(service, "batch_size_count")
        await produce(s.kafka_bootstrap, s.in_topic, [
            chat(1, "c-strict", CALM), chat(2, "c-other", CALM), chat(3, "c-other", INSULT + "!")
        ])  # fmt: skip
        got = await decided(s, 4)
        assert sample(service, "override_decisions_total", action="allow") == 1
        assert sample(service, "override_decisions_total", action="block") == 1
    d = first["m-0"]
    assert (d["channel_id"], d["action"], d["reason"], d["severity"]) == (
        "c-lobby", "allow", "override", None
    )  # fmt: skip
    assert (d["scores"], d["cached"], d["latency_ms"]["score"]) == ({}, False, 0)
    assert model_rows == 0, "decided without a model call"
    assert (got["m-1"]["action"], got["m-1"]["reason"]) == ("block", "override"), "its channel"
    assert (got["m-2"]["action"], got["m-2"]["reason"]) == ("allow", None), "only its channel"
    assert got["m-2"]["scores"], "scored by the model"
    assert (got["m-3"]["action"], got["m-3"]["reason"]) == ("block", "insult"), "another text"


async def test_a_recorded_verdict_is_obeyed_here_at_once_and_by_a_new_instance(
    ovr_settings: Settings, classifier: Classifier
) -> None:
    s = ovr_settings
    verdict = Verdict("m-held", "nudge", "mod-bo", None, "channel", int(time.time() * 1000))
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        assert service.overrides is not None
        await service.overrides.record_verdict(text=CALM, channel_id="c-1", verdict=verdict)
        await produce(s.kafka_bootstrap, s.in_topic, [chat(0, "c-1", CALM)])
        got = await decided(s, 1)
    assert (got["m-0"]["action"], got["m-0"]["reason"]) == ("nudge", "override")
    async with Moderator(s.replace(group_id=s.group_id + "-2"), classifier=classifier) as again:
        await again.wait_ready(30)
        assert again.overrides is not None
        assert again.overrides.lookup(CALM, "c-1") == "nudge"
        assert again.overrides.lookup(CALM, "c-2") is None


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--kafka-bootstrap", settings.kafka_bootstrap,
             "--override-topic", settings.override_topic]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "moderator", "override", *args, *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def test_the_override_command_lists_and_deletes_and_the_moderators_follow(
    ovr_settings: Settings, classifier: Classifier
) -> None:
    s = ovr_settings
    empty = await asyncio.to_thread(_cli, s, "list")
    assert (empty.returncode, empty.stdout) == (0, ""), empty.stderr
    assert f"no overrides on {s.override_topic}" in empty.stderr
    everywhere, own = override(INSULT, "allow"), override(INSULT, "nudge", channel="c-kind")
    await produce(s.kafka_bootstrap, s.override_topic,
                  [(o.key.encode(), o.encode()) for o in (everywhere, own)])  # fmt: skip
    listed = await asyncio.to_thread(_cli, s, "list")
    rows = sorted(line.split("\t") for line in listed.stdout.splitlines())
    digest = text_digest(INSULT)
    assert [r[:5] for r in rows] == [
        [digest, "channel", "c-kind", "nudge", "mod-ann"],
        [digest, "global", "-", "allow", "mod-ann"],
    ]
    assert all(r[5].endswith("Z") for r in rows), "when, in UTC"
    bad = override(CALM, "block")._replace(action="obliterate")
    await produce(s.kafka_bootstrap, s.override_topic, [(bad.key.encode(), bad.encode())])
    refused = await asyncio.to_thread(_cli, s, "list")
    assert refused.stdout == listed.stdout, "stdout: the overrides in effect only"
    assert f"{bad.key}: REFUSED by the moderators: override {bad.key!r}: action" in refused.stderr
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        ovr = service.overrides
        assert ovr is not None
        gone = await asyncio.to_thread(_cli, s, "delete", digest, "--channel", "c-kind")
        assert gone.returncode == 0, gone.stderr
        assert "removed" in gone.stdout
        await eventually(
            lambda: ovr.lookup(INSULT, "c-kind") == "allow",
            "the channel's override is gone: the global one applies there",
        )
        gone = await asyncio.to_thread(_cli, s, "delete", "--text", INSULT)
        assert gone.returncode == 0, gone.stderr
        await eventually(lambda: ovr.lookup(INSULT, "c-kind") is None,
                         "no override left for the text")  # fmt: skip
        await produce(s.kafka_bootstrap, s.in_topic, [chat(0, "c-kind", INSULT)])
        got = await decided(s, 1)
        assert sample(service, "override_updates_total", result="removed") == 2
        assert sample(service, "override_updates_total", result="rejected") == 1
        assert ovr.lookup(CALM, "c-kind") is None, "the refused record decides nothing"
    assert (got["m-0"]["action"], got["m-0"]["reason"]) == ("block", "insult"), "the model again"
    nothing = await asyncio.to_thread(_cli, s, "delete", "--text", INSULT)
    assert nothing.returncode == 0
    assert "nothing removed" in nothing.stdout
    assert (await asyncio.to_thread(_cli, s, "list")).stdout == ""


async def test_verdicts_export_joins_the_review_and_verdict_topics(
    settings: Settings, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    review, verdicts = f"chat.review.{run}", f"chat.verdicts.{run}"
    texts = [("i will find you", "threat"), ("gg ez", "insult")]
    held = [{"message_id": f"h-{i}", "text": t, "reason": r} for i, (t, r) in enumerate(texts)]
    s = settings.kafka_bootstrap
    await produce(s, review, [(h["message_id"].encode(), orjson.dumps(h)) for h in held])
    given = [("h-0", "block"), ("h-1", "allow"), ("h-0", "allow")]
    await asyncio.to_thread(produce_stock, s, verdicts, [
        (m, orjson.dumps({"message_id": m, "verdict": v, "moderator_id": "mod-ann", "at_ms": 1}))
        for m, v in given
    ])  # fmt: skip
    out = tmp_path / "verdicts.tsv"
    done = await asyncio.to_thread(subprocess.run, [
        sys.executable, "-m", "moderator", "verdicts", "export", "--out", str(out),
        "--kafka-bootstrap", s, "--review-topic", review, "--verdict-topic", verdicts,
    ], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(out.read_text().splitlines()) == ["gg ez\t", "i will find you\ttoxicity,threat"]
    assert "1 later verdicts on a decided message (not exported)" in done.stderr
