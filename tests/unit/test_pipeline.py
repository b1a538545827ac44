"""The pipeline without Kafka or Redis: records in, outcomes out, in order."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import NamedTuple

import orjson
import pytest

from moderator.config import DEGRADED_MODES, Settings
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache, cache_key
from moderator.decide.classifier import Classifier
from moderator.decide.degrade import Fallback, fallback_for
from moderator.decide.screen import Reader
from moderator.metrics import Metrics
from moderator.pipeline import Pipeline
from moderator.policy.channels import PolicyBook
from moderator.policy.rules import Policy, read_spec
from moderator.records import DLQ_ERROR_CODE
from moderator.review.held import HeldStore
from moderator.review.hold import Review
from moderator.shadow.scorer import Shadow


class Record(NamedTuple):
    value: bytes | None
    key: bytes | None = b"c-1"
    topic: str = "chat.messages"
    partition: int = 0
    offset: int = 0
    timestamp: int = 1_000
    headers: tuple[tuple[str, bytes], ...] = ()


def message(i: int, text: str) -> Record:
    value = orjson.dumps(
        {"message_id": f"m-{i}", "channel_id": "c-1", "user_id": "u", "text": text}
    )
    return Record(value, offset=i)


@pytest.fixture
async def pipeline(classifier: Classifier) -> AsyncIterator[Pipeline]:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    await batcher.start()
    await cache.start()
    try:
        yield Pipeline(classifier, Policy.load(), batcher, cache, metrics.decide,
                       max_record_bytes=65536, budget_ms=50)  # fmt: skip
    finally:
        await cache.stop()
        await batcher.stop()


async def test_outcomes_come_back_in_record_order(pipeline: Pipeline) -> None:
    records = [message(0, "gg"), Record(b"{broken", offset=1), message(2, ""), message(3, "hi all")]
    outcomes = await pipeline.process(records)
    assert [o.dead_letter for o in outcomes] == [False, True, False, False]
    assert dict(outcomes[1].headers)[DLQ_ERROR_CODE] == b"invalid_json"
    assert outcomes[1].value == b"{broken"
    decided = [orjson.loads(o.value or b"") for o in outcomes if not o.dead_letter]
    assert {(d["strikes"], d["escalated"]) for d in decided} == {(0, False)}, "no users' rules"
    ids = [orjson.loads(o.value or b"")["message_id"] for o in outcomes if not o.dead_letter]
    assert ids == ["m-0", "m-2", "m-3"]
    assert orjson.loads(outcomes[2].value or b"")["reason"] == "empty_text"


async def test_repeats_in_one_batch_are_scored_once(pipeline: Pipeline) -> None:
    records = [message(i, "GG  wp!!!" if i % 2 else "gg wp!!") for i in range(6)]
    outcomes = await pipeline.process(records)
    decisions = [orjson.loads(o.value or b"") for o in outcomes]
    assert [d["cached"] for d in decisions] == [False] + [True] * 5
    assert all(d["scores"] == decisions[0]["scores"] for d in decisions)
    batches = pipeline.metrics.registry.get_sample_value("moderator_batch_size_sum")
    assert batches == 1, "one model call for six copies of one text"
    # ...and the verdict is now in the in-process cache for the next batch.
    again = orjson.loads((await pipeline.process([message(9, "Gg Wp!!!!")]))[0].value or b"")
    assert again["cached"] is True


def old_message(i: int, text: str) -> Record:
    value = orjson.dumps({"message_id": f"m-{i}", "channel_id": "c-1", "user_id": "u",
                          "text": text, "sent_at_ms": 1_000})  # fmt: skip
    return Record(value, offset=i)


async def test_late_misses_get_a_fast_degraded_decision(pipeline: Pipeline) -> None:
    await pipeline.process([message(0, "nice shot")])  # now cached
    pipeline.fallback = Fallback.load("lexical")
    records = [old_message(1, "nice shot"), old_message(2, "KYS loser"), old_message(3, "gg")]
    decisions = [orjson.loads(o.value or b"") for o in await pipeline.process(records)]
    assert decisions[0]["degraded"] is False, "a cache hit is cheap: it keeps the real verdict"
    assert decisions[0]["cached"] is True
    assert decisions[1]["degraded"] is True
    assert (decisions[1]["action"], decisions[1]["reason"]) == ("block", "denylist")
    assert decisions[1]["scores"] == {}
    assert (decisions[2]["action"], decisions[2]["degraded"]) == ("allow", True)
    assert all(d["over_budget"] for d in decisions)
    assert pipeline.metrics.registry.get_sample_value("moderator_batch_size_count") == 1


@pytest.mark.parametrize(
    ("mode", "text", "verdict"),
    [
        ("allow", "kys", ("allow", "overload")),
        ("block", "gg", ("block", "overload")),
        ("lexical", "go  KILL   yourself!!", ("block", "denylist")),
        ("lexical", "let's kill the boss", ("allow", None)),
        ("lexical", "skys the limit", ("allow", None)),
    ],
)
def test_fallback_modes(mode: str, text: str, verdict: tuple[str, str | None]) -> None:
    assert Fallback.load(mode).decide(text)[:2] == verdict


def test_the_degraded_mode_setting_picks_the_fallback() -> None:
    assert fallback_for(Settings()) is None, "off: every message waits for the model"
    for mode in DEGRADED_MODES[1:]:
        fallback = fallback_for(Settings(degraded_mode=mode))
        assert fallback is not None
        assert fallback.mode == mode


async def test_verdicts_are_cached_under_the_model_digest_not_its_version(
    pipeline: Pipeline, classifier: Classifier
) -> None:
    # A hand-written manifest may reuse `name@version` for other weights; the digest differs.
    await pipeline.process([message(0, "gg wp")])
    (ids,) = classifier.encode(["gg wp"])
    assert pipeline.cache.l1.get(cache_key(classifier.info.sha256, ids)) is not None
    assert pipeline.cache.l1.get(cache_key(classifier.info.ident, ids)) is None
    other = cache_key("0" * 64, ids)
    assert other != cache_key(classifier.info.sha256, ids)


async def test_a_policy_change_needs_no_cache_invalidation(
    pipeline: Pipeline, classifier: Classifier
) -> None:
    # The cache holds scores, not actions: a pipeline with another policy (a restart with a new
    # policy file, the cache still warm) decides the cached scores by its own thresholds.
    first = orjson.loads((await pipeline.process([message(0, "gg wp all")]))[0].value or b"")
    assert first["cached"] is False
    strict = Policy.from_mapping(
        {"name": "strict", "version": 2, "labels": {a: {"block": 0.0} for a in classifier.labels}}
    )
    lenient = Policy.from_mapping(
        {"name": "lenient", "version": 1, "labels": {a: {"block": 1.0} for a in classifier.labels}}
    )
    for policy, action in ((strict, "block"), (lenient, "allow"), (strict, "block")):
        batcher = pipeline.model.calls.batcher
        other = Pipeline(classifier, policy, batcher, pipeline.cache, pipeline.metrics,
                         max_record_bytes=65536, budget_ms=50)  # fmt: skip
        again = orjson.loads((await other.process([message(1, "GG WP all")]))[0].value or b"")
        assert again["cached"] is True, "the verdict came from the cache"
        assert again["scores"] == first["scores"]
        assert (again["action"], again["policy"]) == (action, policy.ident)
    calls = pipeline.metrics.registry.get_sample_value("moderator_batch_size_count")
    assert calls == 1, "the model scored the text once, whatever the policy"


async def test_end_to_end_latency_is_measured_from_the_send_time(pipeline: Pipeline) -> None:
    """`moderator_end_to_end_seconds` is what each decision's budget is judged by: an ancient
    message lands past every finite bucket, a fresh one within them."""
    now_ms = int(time.time() * 1000)
    fresh = orjson.dumps({"message_id": "m-1", "channel_id": "c-1", "user_id": "u",
                          "text": "gg", "sent_at_ms": now_ms})  # fmt: skip
    await pipeline.process([old_message(0, "gg"), Record(fresh, offset=1)])
    sample = pipeline.metrics.registry.get_sample_value
    assert sample("moderator_end_to_end_seconds_count") == 2
    assert sample("moderator_end_to_end_seconds_bucket", {"le": "60.0"}) == 1
    assert sample("moderator_end_to_end_seconds_bucket", {"le": "0.05"}) in (0, 1)  # a bound
    assert sample("moderator_end_to_end_seconds_sum") > 1_000_000  # the 1970 one, in seconds


def test_any_budget_is_a_bucket_bound_of_the_end_to_end_histogram() -> None:
    metrics = Metrics(budget_s=0.035)
    metrics.decide.end_to_end.observe(0.03)
    bucket = metrics.registry.get_sample_value(
        "moderator_end_to_end_seconds_bucket", {"le": "0.035"}
    )
    assert bucket == 1


LONG = (
    (
        "hey everyone, hope you are all having a great day, the stream was fun yesterday "
        "and I loved the new song you played at the end. "
    )
    * 8
    + "you are a worthless piece of shit, go die. "
    + "gg, see you all tomorrow! " * 20
)


async def test_a_long_message_is_scored_window_by_window_and_cached_whole(
    pipeline: Pipeline, reader: Reader
) -> None:
    windows = reader.windows.windows(LONG)
    assert len(windows.ids) > 2
    first = orjson.loads((await pipeline.process([message(0, LONG)]))[0].value or b"")
    assert first["cached"] is False
    assert first["span"] in [list(span) for span in windows.spans]
    assert first["truncated"] is False
    assert set(first["scores"]) == set(pipeline.model.classifier.labels)
    sample = pipeline.metrics.registry.get_sample_value
    assert sample("moderator_batch_size_sum") == len(windows.ids), "a row per window"
    assert sample("moderator_message_windows_sum") == len(windows.ids)
    again = orjson.loads((await pipeline.process([message(1, LONG)]))[0].value or b"")
    assert again["cached"] is True
    assert (again["span"], again["scores"], again["action"]) == (
        first["span"],
        first["scores"],
        first["action"],
    )
    assert sample("moderator_batch_size_sum") == len(windows.ids), "the second came from the cache"


async def test_an_unsupported_language_is_reviewed_and_counted(
    classifier: Classifier, reader: Reader
) -> None:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    await batcher.start()
    try:
        pipeline = Pipeline(classifier, Policy.load(), batcher, cache, metrics.decide,
                            max_record_bytes=65536, budget_ms=50, reader=reader)  # fmt: skip
        sample = metrics.registry.get_sample_value
        assert sample("moderator_unsupported_language_total", {"language": "de"}) == 0
        outcomes = await pipeline.process(
            [message(0, "eres un pedazo de mierda, te voy a encontrar")]
        )
    finally:
        await batcher.stop()
    decision = orjson.loads(outcomes[0].value or b"")
    assert decision["action"] == "review"
    assert decision["reason"] == "unsupported_language:es"
    assert decision["language"] == "es"
    assert sample("moderator_unsupported_language_total", {"language": "es"}) == 1
    assert sample("moderator_unsupported_language_total", {"language": "de"}) == 0


async def test_a_review_decision_plans_with_its_channels_own_review_settings(
    classifier: Classifier,
) -> None:
    base = {**read_spec(), "deny": [{"term": "potato", "category": "test", "action": "review"}]}
    book = PolicyBook(Policy.from_mapping(base))
    own = {"name": "slow", "version": 1, "review_timeout_s": 30, "review_fallback": "block"}
    book.apply("c-2", orjson.dumps(own))
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)  # no Redis
    store = HeldStore(cache, metrics.review, group="g", timeout_s=0.1)  # held in this process
    review = Review(store, metrics.review, context=0, context_bytes=0, labels=classifier.labels)
    pipeline = Pipeline(classifier, book, batcher, cache, metrics.decide, max_record_bytes=65536,
                        budget_ms=50, review=review)  # fmt: skip
    records = [Record(orjson.dumps({"message_id": f"m-{c}", "channel_id": c, "user_id": "u",
                                    "text": "potato salad"}), offset=i)
               for i, c in enumerate(["c-1", "c-2"])]  # fmt: skip
    outcomes = await pipeline.process(records)
    got = {}
    for outcome in outcomes:
        decision, record = orjson.loads(outcome.value or b""), orjson.loads(outcome.review or b"")
        assert decision["review"] == {
            "due_at_ms": record["expires_at_ms"],
            "fallback": record["review_fallback"],
        }
        timeout_ms = record["expires_at_ms"] - record["held_at_ms"]
        got[decision["channel_id"]] = (timeout_ms, decision["review"]["fallback"])
    assert got == {"c-1": (600_000, "allow"), "c-2": (30_000, "block")}, "each channel's policy"


def fresh_message(i: int, text: str, **fields: object) -> Record:
    now_ms = int(time.time() * 1000)
    value = orjson.dumps({"message_id": f"m-{i}", "channel_id": "c-1", "user_id": "u",
                          "text": text, "sent_at_ms": now_ms, **fields})  # fmt: skip
    return Record(value, offset=i)


async def test_each_decision_says_where_its_time_went(pipeline: Pipeline) -> None:
    """A scored message: its queue and model time as the batcher measured them (the stage
    histograms hold the same), within its total. A message decided without the model (here an
    empty text) spent no time being scored: all its time is queue."""
    outcomes = await pipeline.process(
        [fresh_message(0, "what a lovely evening"), fresh_message(1, "")]
    )
    scored, empty = (orjson.loads(o.value or b"") for o in outcomes)
    sample = pipeline.metrics.registry.get_sample_value
    latency = scored["latency_ms"]
    assert latency["score"] > 0
    assert latency["score"] == pytest.approx(
        1000 * sample("moderator_stage_seconds_sum", {"stage": "score"}), abs=1e-3
    )
    assert latency["queue"] == pytest.approx(
        1000 * sample("moderator_stage_seconds_sum", {"stage": "queue"}), abs=1e-3
    )
    assert latency["queue"] + latency["score"] <= latency["total"] + 1e-3
    assert sample("moderator_stage_seconds_count", {"stage": "score"}) == 1, "the model's only"
    assert sample("moderator_stage_seconds_count", {"stage": "total"}) == 2, "every decision"
    assert empty["latency_ms"]["score"] == 0
    assert empty["latency_ms"]["queue"] == empty["latency_ms"]["total"] > 0


async def test_a_fresh_decision_is_within_budget_and_an_old_one_is_counted_over(
    pipeline: Pipeline,
) -> None:
    pipeline.budget_ms = 60_000  # a minute: the fresh message cannot miss it
    outcomes = await pipeline.process([fresh_message(0, "gg"), old_message(1, "gg")])
    fresh, old = (orjson.loads(o.value or b"") for o in outcomes)
    assert (fresh["over_budget"], old["over_budget"]) == (False, True)
    assert pipeline.metrics.registry.get_sample_value("moderator_over_budget_total") == 1
    now_ms = int(time.time() * 1000)
    assert now_ms - 60_000 < fresh["decided_at_ms"] <= now_ms


async def test_a_message_sent_in_the_future_counts_zero_latency(pipeline: Pipeline) -> None:
    """A client clock ahead of ours must not make a negative latency (the histogram's sum would
    fall)."""
    ahead = int(time.time() * 1000) + 3_600_000
    await pipeline.process([fresh_message(0, "gg", sent_at_ms=ahead)])
    sample = pipeline.metrics.registry.get_sample_value
    assert sample("moderator_end_to_end_seconds_sum") == 0
    assert sample("moderator_end_to_end_seconds_count") == 1


async def test_degraded_decisions_are_counted_by_action(pipeline: Pipeline) -> None:
    pipeline.fallback = Fallback.load("lexical")
    outcomes = await pipeline.process(
        [old_message(0, "KYS loser"), old_message(1, "gg"), old_message(2, "well played")]
    )
    sample = pipeline.metrics.registry.get_sample_value
    assert [orjson.loads(o.value or b"")["span"] for o in outcomes] == [[0, 9], [0, 2], [0, 11]]
    assert sample("moderator_degraded_decisions_total", {"action": "block"}) == 1
    assert sample("moderator_degraded_decisions_total", {"action": "allow"}) == 2


async def test_copies_joining_a_model_call_count_as_inflight_hits(pipeline: Pipeline) -> None:
    await pipeline.process([message(i, "see you all tomorrow") for i in range(4)])
    sample = pipeline.metrics.registry.get_sample_value
    assert sample("moderator_cache_requests_total", {"level": "inflight", "result": "hit"}) == 3


async def test_an_unkeyed_record_is_keyed_by_its_channel(pipeline: Pipeline) -> None:
    keyed, unkeyed = message(0, "gg"), message(1, "gg")._replace(key=None)
    outcomes = await pipeline.process([keyed._replace(key=b"mine"), unkeyed])
    assert [o.key for o in outcomes] == [b"mine", b"c-1"]


async def test_the_shadow_is_handed_each_decision_as_it_was_published(
    pipeline: Pipeline, reader: Reader
) -> None:
    """Its model id, scores and language are the published decision's (the shadow compares
    against them); an unstarted shadow keeps what it was offered in its queue."""
    shadow = Shadow(reader, Metrics().shadow, producer=None, topic="", queue_size=100)
    pipeline.shadow = shadow
    outcomes = await pipeline.process([message(0, "what a lovely evening"), message(1, "")])
    handed = [shadow._queue.get_nowait() for _ in range(shadow._queue.qsize())]
    published = [orjson.loads(o.value or b"") for o in outcomes]
    assert [(p.chat.message_id, p.model, p.language) for p in handed] == [
        (d["message_id"], d["model"], d.get("language")) for d in published
    ]
    assert handed[0].scores == pytest.approx(published[0]["scores"], abs=1e-4)
    assert set(handed[0].scores) == set(pipeline.model.classifier.labels)
    assert published[1]["cached"] is False, "decided without the model, from no cache"


async def test_total_time_runs_from_the_fetch_and_latency_from_the_send(
    pipeline: Pipeline,
) -> None:
    started = time.perf_counter()
    (outcome,) = await pipeline.process([old_message(0, "good morning all")])
    elapsed_ms = (time.perf_counter() - started) * 1000
    decision = orjson.loads(outcome.value or b"")
    assert 0 < decision["latency_ms"]["total"] <= elapsed_ms
    observed = pipeline.metrics.registry.get_sample_value("moderator_end_to_end_seconds_sum")
    assert observed == pytest.approx((decision["decided_at_ms"] - 1_000) / 1000, rel=1e-9)


async def test_a_fallback_given_at_construction_decides_late_misses(
    classifier: Classifier,
) -> None:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    pipeline = Pipeline(classifier, Policy.load(), batcher, cache, metrics.decide,
                        max_record_bytes=65536, budget_ms=50,
                        fallback=Fallback.load("lexical"))  # fmt: skip
    (outcome,) = await pipeline.process([old_message(0, "KYS loser")])
    decision = orjson.loads(outcome.value or b"")
    assert (decision["action"], decision["reason"], decision["degraded"]) == (
        "block",
        "denylist",
        True,
    )


async def test_only_a_miss_older_than_the_budget_is_decided_by_the_fallback(
    pipeline: Pipeline,
) -> None:
    pipeline.fallback = Fallback.load("lexical")
    ten_s_ago = int(time.time() * 1000) - 10_000
    outcomes = await pipeline.process(
        [
            fresh_message(0, "have a great evening friends"),
            fresh_message(1, "what a fine day to play", sent_at_ms=ten_s_ago),
        ]
    )
    fresh, late = (orjson.loads(o.value or b"") for o in outcomes)
    assert (fresh["degraded"], late["degraded"]) == (False, True)


async def test_the_producers_headers_travel_with_the_decision(pipeline: Pipeline) -> None:
    record = message(0, "gg")._replace(headers=(("traceparent", b"00-abc-01"),))
    (outcome,) = await pipeline.process([record])
    assert ("traceparent", b"00-abc-01") in list(outcome.headers)
