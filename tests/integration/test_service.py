"""The moderator end to end against the real broker, the real Redis and the real model."""

from __future__ import annotations

import asyncio
import itertools
import logging
import urllib.request
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from devstack.embedded import EmbeddedRedis
from moderator.config import Settings
from moderator.decide.cache import cache_key
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.pipeline import Pipeline
from moderator.policy.rules import DEFAULT_ACTIONS, Policy
from moderator.records import (
    DLQ_ERROR_CODE,
    DLQ_ERROR_MESSAGE,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
    DLQ_SOURCE_TIMESTAMP,
    DLQ_SOURCE_TOPIC,
    Outcome,
)
from moderator.service import Moderator
from tests.contract import check_dead_letter_headers
from tests.integration.kafka_io import (
    chat,
    consume,
    decisions_by_id,
    distinct_ids,
    produce,
    read_to_end,
)
from tests.waiting import eventually

pytestmark = pytest.mark.integration

TEXTS = [
    "gg wp everyone",
    "that clutch was insane",
    "lol who let him cook",
    "you are a worthless idiot",
    "can someone explain the rules of this mode?",
    "i'm going to find where you live and hurt you",
    "",
    "nice one!! 🔥🔥",
]


def assert_decision_schema(d: dict[str, Any], labels: tuple[str, ...]) -> None:
    """The outbound decision schema, field by field."""
    assert set(d) - {"language", "review"} == {
        "message_id", "channel_id", "user_id", "action", "reason", "severity", "scores", "model",
        "policy", "cached", "degraded", "latency_ms", "over_budget", "decided_at_ms", "span",
        "truncated", "final", "strikes", "escalated",
    }  # fmt: skip
    assert d["final"] is False, "the one decision per input; a held message's final comes later"
    assert ("review" in d) == (d["action"] == "review"), "a held message's due time and fallback"
    assert (d["strikes"], d["escalated"]) == (0, False), "the default policy counts no strikes"
    assert d["severity"] in (None, "low", "medium", "high")
    unread = (d["reason"] or "").startswith(("unsupported_language:", "truncated"))
    assert (d["severity"] is None) == (d["action"] == "allow" or d["degraded"] or unread)
    for name in ("message_id", "channel_id", "user_id", "model", "policy"):
        assert isinstance(d[name], str)
        assert d[name]
    assert d["action"] in DEFAULT_ACTIONS
    assert d["reason"] is None or isinstance(d["reason"], str)
    assert isinstance(d["scores"], dict)
    assert set(d["scores"]) <= set(labels)
    assert all(0.0 <= v <= 1.0 for v in d["scores"].values())
    assert isinstance(d["cached"], bool)
    assert isinstance(d["degraded"], bool)
    assert isinstance(d["over_budget"], bool)
    assert set(d["latency_ms"]) == {"queue", "score", "total"}
    assert all(v >= 0 for v in d["latency_ms"].values())
    assert isinstance(d["decided_at_ms"], int)


def http_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body: bytes = response.read()
        return body


async def metric(port: int, line_prefix: str) -> float:
    """Sum of the samples on /metrics whose line starts with `line_prefix`."""
    body = await asyncio.to_thread(http_get, port, "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(line_prefix):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def metric_at_least(port: int, line_prefix: str, value: float) -> bool:
    return await metric(port, line_prefix) >= value


async def test_n_messages_in_n_valid_decisions_out(
    settings: Settings, moderator: Moderator, classifier: Classifier
) -> None:
    n = 300
    inputs = [chat(i, TEXTS[i % len(TEXTS)] + f" #{i // len(TEXTS)}") for i in range(n)]
    await produce(settings.kafka_bootstrap, settings.in_topic, inputs)
    records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n))

    decisions = decisions_by_id(records)
    assert set(decisions) == {f"m-{i}" for i in range(n)}
    for record in records:
        decision = orjson.loads(record.value)
        assert_decision_schema(decision, classifier.labels)
        assert record.key == decision["channel_id"].encode()
    assert decisions["m-0"]["model"] == classifier.info.ident
    assert decisions["m-0"]["policy"] == Policy.load().ident

    # Without faults, the decisions of one input partition leave in its offset order: read where
    # each input landed, then check every output partition's decisions per input partition (the
    # input's several channels included, not only one channel at a time).
    fetched = await consume(
        settings.kafka_bootstrap, settings.in_topic, until=lambda r: len(r) >= n
    )
    where = {orjson.loads(r.value)["message_id"]: (r.partition, r.offset) for r in fetched}
    assert len(where) == n
    seen: dict[tuple[int, int], list[tuple[int, str]]] = {}  # (out, in partition) → inputs
    for record in records:
        decision = orjson.loads(record.value)
        in_partition, in_offset = where[decision["message_id"]]
        seen.setdefault((record.partition, in_partition), []).append(
            (in_offset, decision["channel_id"])
        )
    for sequence in seen.values():
        assert sequence == sorted(sequence), "a partition's decisions left out of input order"
    assert max(len({channel for _, channel in seq}) for seq in seen.values()) > 1, (
        "some partition carries several channels, so the order is checked across channels"
    )

    port = moderator.metrics_port
    assert port is not None
    # Acks are counted in a done-callback: wait for the count, then check it is exact.
    await eventually(
        lambda: metric_at_least(port, "moderator_decisions_total", n), f"{n} decisions counted"
    )
    assert await metric(port, "moderator_decisions_total") == n
    assert await metric(port, "moderator_messages_consumed_total") == n
    assert await asyncio.to_thread(http_get, port, "/readyz") == b"ready\n"


async def test_empty_text_is_allowed_without_scoring(
    settings: Settings, moderator: Moderator
) -> None:
    await produce(settings.kafka_bootstrap, settings.in_topic, [chat(1, "   \u200b  ")])
    records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(1))
    decision = decisions_by_id(records)["m-1"]
    assert decision["action"] == "allow"
    assert decision["reason"] == "empty_text"
    assert decision["scores"] == {}


FRIENDLY = [
    "that last round was so close lol",
    "anyone know when the next stream starts?",
    "my cat just walked across the keyboard haha",
    "gg everyone, see you tomorrow",
    "the new patch made the sniper way better",
    "brb getting some snacks",
    "welcome to the chat, new folks!",
    "that song in the background is a banger",
]
HOSTILE = "you are a worthless piece of shit, go die"


async def test_a_long_message_is_read_whole_and_a_foreign_one_goes_to_review(
    settings: Settings, moderator: Moderator, classifier: Classifier
) -> None:
    padding = " ".join(FRIENDLY * 3)
    # The shipped model flags the line alone and padded with friendly chat inside one window:
    # what is checked here is that it is read in the middle of a long message.
    for alone in (HOSTILE, f"{' '.join(FRIENDLY[:3])} {HOSTILE} {' '.join(FRIENDLY[3:6])}"):
        (ids,) = classifier.encode([alone])
        assert len(ids) < classifier.info.max_length
        scores = classifier.as_dict(classifier.score_ids([ids])[0])
        assert Policy.load().decide(scores).action != "allow", alone
    long = f"{padding} {HOSTILE} {padding}"
    start = long.index(HOSTILE)
    foreign = "eres un pedazo de mierda, te voy a encontrar"
    await produce(settings.kafka_bootstrap, settings.in_topic, [chat(1, long), chat(2, foreign)])
    records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(2))
    decisions = decisions_by_id(records)
    for decision in decisions.values():
        assert_decision_schema(decision, classifier.labels)
    read = decisions["m-1"]
    assert read["action"] != "allow"
    assert read["reason"] in classifier.labels
    span_start, span_end = read["span"]
    assert span_start < start + len(HOSTILE), "the acting window holds the hostile line"
    assert start < span_end, "the acting window holds the hostile line"
    assert span_end - span_start < len(long)
    assert read["truncated"] is False
    assert "language" not in read
    reviewed = decisions["m-2"]
    assert reviewed["action"] == "review"
    assert reviewed["reason"] == "unsupported_language:es"
    assert reviewed["language"] == "es"
    assert reviewed["span"] == [0, len(foreign)]
    assert reviewed["review"]["fallback"] == "allow", "the default policy's review_fallback"
    port = moderator.metrics_port
    assert port is not None
    assert await metric(port, 'moderator_unsupported_language_total{language="es"}') == 1
    assert await metric(port, 'moderator_unsupported_language_total{language="de"}') == 0
    assert await metric(port, "moderator_message_windows_count") == 2  # scored messages
    assert await metric(port, "moderator_message_windows_sum") > 2  # the long one's windows


MALFORMED: list[tuple[bytes, str]] = [
    (b"{not json", "invalid_json"),
    (b"\xff\xfe\x00garbage", "not_utf8"),
    (b"[1, 2, 3]", "not_object"),
    (orjson.dumps({"channel_id": "c", "user_id": "u", "text": "hi"}), "missing_field"),
    (
        orjson.dumps({"message_id": 7, "channel_id": "c", "user_id": "u", "text": "hi"}),
        "wrong_type",
    ),
    (
        orjson.dumps({"message_id": "m", "channel_id": "c", "user_id": "u", "text": None}),
        "wrong_type",
    ),
    (
        orjson.dumps({"message_id": "", "channel_id": "c", "user_id": "u", "text": "x"}),
        "empty_field",
    ),
    (
        orjson.dumps({"message_id": "m", "channel_id": "c", "user_id": "u", "text": "x" * 70_000}),
        "too_large",
    ),
    (
        b'{"message_id": "m", "channel_id": "c", "user_id": "u", "text": "\\ud800"}',
        "invalid_json",
    ),
]


async def test_malformed_records_are_dead_lettered_and_the_stream_goes_on(
    settings: Settings, moderator: Moderator
) -> None:
    records: list[tuple[bytes | None, bytes]] = []
    expected: dict[bytes, str] = {}
    valid = 0
    for i, (value, code) in enumerate(MALFORMED):
        records.append((b"bad-%d" % i, value))
        expected[value] = code
        records.append(chat(1000 + i, f"hello there number {i}"))
        valid += 1
    await produce(settings.kafka_bootstrap, settings.in_topic, records)

    dead = await consume(
        settings.kafka_bootstrap, settings.dlq_topic, until=lambda r: len(r) >= len(MALFORMED)
    )
    assert len(dead) == len(MALFORMED)
    # Where each bad record really is on the input topic, read back from the broker.
    inputs = await consume(
        settings.kafka_bootstrap, settings.in_topic, until=lambda r: len(r) >= len(records)
    )
    source = {r.value: r for r in inputs if r.key is not None and r.key.startswith(b"bad-")}
    assert len(source) == len(MALFORMED)
    for record in dead:
        headers = dict(record.headers)
        check_dead_letter_headers(record.headers)
        assert record.value in expected, "the dead letter's value is the untouched input"
        assert headers[DLQ_ERROR_CODE].decode() == expected[record.value]
        assert headers[DLQ_ERROR_MESSAGE]
        original = source[record.value]
        assert headers[DLQ_SOURCE_TOPIC] == settings.in_topic.encode()
        assert headers[DLQ_SOURCE_PARTITION] == str(original.partition).encode()
        assert headers[DLQ_SOURCE_OFFSET] == str(original.offset).encode()
        assert headers[DLQ_SOURCE_TIMESTAMP] == str(original.timestamp).encode()
        assert record.key is not None
        assert record.key.startswith(b"bad-")

    decided = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(valid))
    assert set(decisions_by_id(decided)) == {f"m-{1000 + i}" for i in range(valid)}

    port = moderator.metrics_port
    assert port is not None
    await eventually(
        lambda: metric_at_least(port, "moderator_dead_letters_total", len(MALFORMED)),
        "every dead letter counted",
    )
    assert await metric(port, "moderator_dead_letters_total") == len(MALFORMED)
    assert await metric(port, 'moderator_dead_letters_total{reason="invalid_json"}') == 2


async def test_a_repeated_text_is_a_cache_hit_with_the_same_scores(
    settings: Settings, moderator: Moderator, classifier: Classifier
) -> None:
    await produce(settings.kafka_bootstrap, settings.in_topic, [chat(1, "you absolute clown!!")])
    first = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(1))
    # The same text after normalisation: case, spacing, a zero-width space, repeated "!".
    await produce(
        settings.kafka_bootstrap, settings.in_topic, [chat(2, "  YOU absolute\u200b clown!!!!!!! ")]
    )
    both = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(2))
    decisions = decisions_by_id(both)
    assert decisions_by_id(first)["m-1"]["cached"] is False
    assert decisions["m-2"]["cached"] is True
    assert decisions["m-2"]["scores"] == decisions["m-1"]["scores"]
    assert decisions["m-2"]["action"] == decisions["m-1"]["action"]

    # A new process has an empty L1: the verdict now comes from Redis.
    # The Redis write is in the background: wait until Redis holds the verdict.
    key = cache_key(classifier.info.sha256, classifier.encode(["you absolute clown!!"])[0])
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        await eventually(lambda: redis.exists(key), "the verdict is in Redis")
    finally:
        await redis.aclose()
    fresh = settings.replace(group_id=settings.group_id + "-2")
    async with Moderator(fresh, classifier=classifier) as second:
        await second.wait_ready(30)
        assert await second.cache.wait_redis(5)
        await produce(
            settings.kafka_bootstrap, settings.in_topic, [chat(3, "you ABSOLUTE clown!!!")]
        )
        again = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(3))
        port = second.metrics_port
        assert port is not None
        await eventually(
            lambda: metric_at_least(
                port, 'moderator_cache_requests_total{level="redis",result="hit"}', 1
            ),
            "a Redis hit counted",
        )
    assert decisions_by_id(again)["m-3"]["cached"] is True
    assert decisions_by_id(again)["m-3"]["scores"] == decisions["m-1"]["scores"]


async def test_redis_stopped_mid_stream_does_not_stop_decisions_and_recovers(
    settings: Settings, fresh_redis: EmbeddedRedis, classifier: Classifier
) -> None:
    settings = settings.replace(redis_url=fresh_redis.url)
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(5)
        await produce(
            settings.kafka_bootstrap,
            settings.in_topic,
            [chat(i, f"first wave {i}") for i in range(50)],
        )
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(50))
        fresh_redis.stop()
        await produce(
            settings.kafka_bootstrap,
            settings.in_topic,
            [chat(i, f"second wave {i}") for i in range(50, 150)],
        )
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(150)
        )
        assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(150)}
        assert not service.cache.redis_available
        port = service.metrics_port
        assert port is not None
        assert await metric(port, "moderator_redis_up") == 0
        assert await metric(port, "moderator_redis_errors_total") >= 1

        # Redis comes back on the same port: the background probe closes the breaker by itself.
        fresh_redis.start()
        assert await service.cache.wait_redis(15)
        assert await metric(port, "moderator_redis_up") == 1


async def test_a_consumer_stopped_mid_stream_and_restarted_loses_nothing(
    settings: Settings, classifier: Classifier
) -> None:
    n = 600
    first = Moderator(settings, classifier=classifier)
    await first.start()
    await first.wait_ready(30)
    producing = asyncio.create_task(
        produce(settings.kafka_bootstrap, settings.in_topic, [chat(i, f"line {i} of the stream")
                                                             for i in range(n)])
    )  # fmt: skip
    await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(50))
    await first.stop()  # mid-stream: some decided, some in flight, some not fetched yet
    await producing
    async with Moderator(settings, classifier=classifier) as second:
        await second.wait_ready(30)
        records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n))
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(n)}


async def test_instances_joining_and_leaving_under_load_lose_nothing(
    settings: Settings, classifier: Classifier
) -> None:
    settings = settings.replace(in_topic=settings.in_topic + ".wide")
    await ensure_topics(settings.kafka_bootstrap, {settings.in_topic: 4})
    n = 1200

    async def steady_stream() -> None:
        for start in range(0, n, 100):
            batch = [chat(i, f"rebalance line {i}") for i in range(start, start + 100)]
            await produce(settings.kafka_bootstrap, settings.in_topic, batch)
            await asyncio.sleep(0.5)

    async with Moderator(settings, classifier=classifier) as first:
        await first.wait_ready(30)
        producing = asyncio.create_task(steady_stream())
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))
        second = Moderator(settings, classifier=classifier)
        third = Moderator(settings, classifier=classifier)
        await second.start()
        await third.start()
        await asyncio.gather(second.wait_ready(60), third.wait_ready(60))
        await second.stop()  # leaves mid-stream: its partitions move back
        await producing
        await third.stop()
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n), timeout_s=90
        )
        assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(n)}
    # The instance left standing drained everything it held when it stopped.
    assert first.metrics.registry.get_sample_value("moderator_in_flight") == 0


async def test_a_new_model_never_serves_the_old_models_scores_from_redis(
    settings: Settings, moderator: Moderator, classifier: Classifier
) -> None:
    """Redis outlives deploys: entries another model wrote for the same text are not used, while
    entries under this model's digest are (so the first half cannot pass by Redis being unused)."""
    assert await moderator.cache.wait_redis(5)
    old_text, warm_text = "an old model scored this line", "this model already scored this line"
    old_ids, warm_ids = classifier.encode([old_text, warm_text])
    planted = orjson.dumps([0.999] * len(classifier.labels))
    another_model = "0" * 64
    assert another_model != classifier.info.sha256
    redis = aioredis.Redis.from_url(settings.redis_url)
    try:
        await redis.set(cache_key(another_model, old_ids), planted, ex=60)
        await redis.set(cache_key(classifier.info.sha256, warm_ids), planted, ex=60)
    finally:
        await redis.aclose()
    await produce(settings.kafka_bootstrap, settings.in_topic,
                  [chat(1, old_text), chat(2, warm_text)])  # fmt: skip
    decisions = decisions_by_id(
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(2))
    )
    assert decisions["m-2"]["cached"] is True, "an entry under this model's digest is served"
    assert set(decisions["m-2"]["scores"].values()) == {0.999}
    assert decisions["m-1"]["cached"] is False, "the other model's entry is not"
    assert set(decisions["m-1"]["scores"].values()) != {0.999}
    assert decisions["m-1"]["model"] == classifier.info.ident


async def test_a_slow_redis_opens_the_breaker_is_logged_once_and_decisions_flow(
    settings: Settings,
    fresh_redis: EmbeddedRedis,
    classifier: Classifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis up but not answering (CLIENT PAUSE: the server holds every command): calls time out,
    the breaker opens, one warning says so, the model decides meanwhile, and the breaker closes
    once Redis answers again."""
    settings = settings.replace(redis_url=fresh_redis.url)
    caplog.set_level(logging.WARNING, logger="moderator.decide.cache")
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(5)
        admin = aioredis.Redis.from_url(fresh_redis.url)
        try:
            await admin.execute_command("CLIENT", "PAUSE", "5000", "ALL")
        finally:
            await admin.aclose()
        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [chat(i, f"while redis is slow {i}") for i in range(40)])  # fmt: skip
        await eventually(lambda: not service.cache.redis_available, "the breaker opened")
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(40)
        )
        assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(40)}
        assert not any(d["cached"] for d in decisions_by_id(records).values())
        errors = service.metrics.registry.get_sample_value("moderator_redis_errors_total")
        assert (errors or 0) >= 1, "a timed-out call opened the breaker"
        assert await service.cache.wait_redis(15), "the breaker closes once Redis answers"
    warnings = [r for r in caplog.records if r.name == "moderator.decide.cache"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "TimeoutError" in warnings[0].getMessage()


async def test_auto_offset_reset_latest_leaves_the_retained_backlog_alone(
    settings: Settings, classifier: Classifier
) -> None:
    """A new group id with MODERATOR_AUTO_OFFSET_RESET=latest decides only what arrives after it
    joined; the default, earliest, would re-moderate the whole retained topic."""
    # One record per produce request: Tansu 0.6.0 answers "latest" (ListOffsets) with one past
    # the last batch's first offset, which lands inside a batch of several records.
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in (chat(i, f"backlog line {i}") for i in range(20)):
            await producer.send_and_wait(settings.in_topic, value, key=key)
    finally:
        await producer.stop()
    latest = settings.replace(auto_offset_reset="latest")
    async with Moderator(latest, classifier=classifier) as service:
        await service.wait_ready(30)
        # The start position is looked up at the first fetch: send fresh lines until one is
        # decided, so none can fall before it unseen.
        rounds = itertools.count()

        async def fresh_lines_decided() -> dict[str, dict[str, Any]]:
            round_ = next(rounds)
            fresh = [chat(1000 + round_ * 10 + i, f"fresh line {i}") for i in range(10)]
            await produce(settings.kafka_bootstrap, settings.in_topic, fresh)
            return decisions_by_id(await read_to_end(settings.kafka_bootstrap, settings.out_topic))

        decided = await eventually(fresh_lines_decided, "fresh lines were decided", timeout_s=60)
    assert not {f"m-{i}" for i in range(20)} & set(decided)


async def test_producer_headers_travel_with_the_decision_and_the_dead_letter(
    moderator: Moderator, settings: Settings
) -> None:
    """A `traceparent` and a tenant id reach the decision and the dead letter; a producer's
    header in the moderator's own `moderator.*` namespace does not (its own values win)."""
    theirs = [("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
              ("tenant", b"acme")]  # fmt: skip
    spoofed = [("moderator.error.code", b"forged"), ("moderator.verdict", b"allow")]
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        key, value = chat(1, "gg wp")
        await producer.send_and_wait(settings.in_topic, value, key=key, headers=theirs + spoofed)
        await producer.send_and_wait(settings.in_topic, b"{broken", key=b"c-1",
                                     headers=theirs + spoofed)  # fmt: skip
    finally:
        await producer.stop()
    out = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(1))
    dead = await consume(settings.kafka_bootstrap, settings.dlq_topic, until=lambda r: bool(r))
    assert list(out[0].headers) == theirs
    letter = check_dead_letter_headers(dead[0].headers)
    assert letter["moderator.error.code"] == "invalid_json"
    assert (letter["traceparent"], letter["tenant"]) == ("00-4bf92f3577b34da6a3ce929d0e0e4736-"
                                                         "00f067aa0ba902b7-01", "acme")  # fmt: skip
    assert "moderator.verdict" not in letter
    assert [name for name, _ in dead[0].headers].count("moderator.error.code") == 1


async def test_a_pipeline_bug_stops_the_moderator_is_reported_once_and_loses_nothing(
    settings: Settings,
    classifier: Classifier,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in a batch's pipeline task is the supervisor's first failure: it stops every other
    task and the moderator (`run()` raises it), is logged once, and nothing is published or
    committed for the batch, so the next moderator decides it."""

    async def broken(self: Pipeline, records: object) -> list[Outcome]:
        raise RuntimeError("a bug in the pipeline")

    caplog.set_level(logging.CRITICAL, logger="moderator")
    with monkeypatch.context() as patched:
        patched.setattr(Pipeline, "process", broken)
        service = Moderator(settings, classifier=classifier)
        await service.start()
        await service.wait_ready(30)
        await produce(settings.kafka_bootstrap, settings.in_topic, [chat(1, "never decided here")])
        with pytest.raises(RuntimeError, match="a bug in the pipeline"):
            await asyncio.wait_for(service.run(), 60)
    assert isinstance(service.failure, RuntimeError)
    reports = [r.getMessage() for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert reports == ["moderator-unit failed; stopping the moderator"]
    published = [
        sample.value
        for family in service.metrics.registry.collect()
        for sample in family.samples
        if sample.name in ("moderator_decisions_total", "moderator_dead_letters_total")
    ]
    assert sum(published) == 0
    async with Moderator(settings, classifier=classifier) as second:
        await second.wait_ready(30)
        records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(1))
    assert set(decisions_by_id(records)) == {"m-1"}
