"""The loop's pure parts: verdicts parsed, context chosen within its bounds, review records and
final decisions as their schemas say, a policy's review settings, the held-message states."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from moderator.errors import InvalidRecord, PolicyError
from moderator.metrics import Metrics
from moderator.policy.review_rules import DEFAULT, review_rules
from moderator.policy.rules import Policy, read_spec
from moderator.records import ChatMessage, Outcome, Timing, Verdict, decision_record, parse_verdict
from moderator.review.finals import encode_final, final_key
from moderator.review.held import FINAL_KEEP_S, HeldStore, RedisUnavailable
from moderator.review.hold import (
    Review,
    encode_review,
    held_message,
    hold_label,
    ring_entry,
    select_context,
)
from tests.contract import check_decision, check_review, validator

CHAT = ChatMessage("m-9", "c-1", "u-1", "you will regret this", 1_000)


def verdict(**fields: Any) -> bytes:
    return orjson.dumps({"message_id": "m-1", "verdict": "block", "moderator_id": "mod-1",
                         "at_ms": 5, **fields})  # fmt: skip


def test_a_verdict_is_parsed_with_its_defaults() -> None:
    assert parse_verdict(verdict(), max_bytes=1000) == Verdict("m-1", "block", "mod-1", None,
                                                               "channel", 5)  # fmt: skip
    got = parse_verdict(verdict(scope="global", reason="a threat", extra=1), max_bytes=1000)
    assert (got.scope, got.reason) == ("global", "a threat")


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (b"{nope", "invalid_json"),
        (b"[]", "not_object"),
        (verdict(verdict="obliterate"), "invalid_verdict"),
        (verdict(verdict="review"), "invalid_verdict"),
        (verdict(scope="planet"), "invalid_verdict"),
        (verdict(message_id=""), "empty_field"),
        (verdict(moderator_id=7), "wrong_type"),
        (verdict(at_ms="now"), "wrong_type"),
        (verdict(reason=3), "wrong_type"),
        (verdict(override_expires_at_ms="7d"), "wrong_type"),
        (
            orjson.dumps({"message_id": "m", "verdict": "allow", "moderator_id": "x"}),
            "missing_field",
        ),
        (None, "empty_value"),
        (verdict(reason="x" * 2000), "too_large"),
    ],
)
def test_a_bad_verdict_is_refused_with_its_code(value: bytes | None, code: str) -> None:
    with pytest.raises(InvalidRecord) as info:
        parse_verdict(value, max_bytes=1000)
    assert info.value.code == code


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (verdict(message_id=""), "'message_id' must not be empty"),
        (verdict(moderator_id=""), "'moderator_id' must not be empty"),
        (verdict(verdict="obliterate"), "'verdict' must be one of allow, nudge, block"),
        (verdict(scope="planet"), "'scope' must be one of global, channel"),
        (verdict(reason=3), "'reason' must be a string, got integer"),
        (verdict(at_ms="now"), "'at_ms' must be an integer, got string"),
        (verdict(at_ms=None), "the required field 'at_ms' is missing"),
        (
            verdict(override_expires_at_ms="7d"),
            "'override_expires_at_ms' must be an integer, got string",
        ),
    ],
)
def test_a_refused_verdict_says_which_field_and_what_it_got(value: bytes, message: str) -> None:
    """The message is what the dead letter's header carries to whoever wrote the verdict."""
    with pytest.raises(InvalidRecord) as info:
        parse_verdict(value, max_bytes=1000)
    assert info.value.message == message


def test_what_the_parser_takes_the_verdict_schema_takes_and_the_reverse() -> None:
    schema = validator("verdict")
    assert schema.is_valid(orjson.loads(verdict(scope="channel", reason=None)))
    for bad in (verdict(verdict="review"), verdict(scope="planet"), verdict(at_ms="now")):
        assert not schema.is_valid(orjson.loads(bad))


def entries(*texts: str) -> list[bytes]:
    return [
        ring_entry(ChatMessage(f"m-{i}", "c-1", "u-2", t, i), 10_000) for i, t in enumerate(texts)
    ]


def test_context_is_the_last_messages_oldest_first_within_the_count() -> None:
    got = select_context(entries("a", "b", "c", "d"), "m-9", limit=3, max_bytes=100)
    assert [c["text"] for c in got] == ["b", "c", "d"]
    assert select_context(entries("a"), "m-9", limit=0, max_bytes=100) == []


def test_context_stops_at_the_byte_bound_counting_utf8_bytes() -> None:
    got = select_context(entries("aaaa", "ééé", "bb"), "m-9", limit=5, max_bytes=8)
    assert [c["text"] for c in got] == ["ééé", "bb"]  # 6 + 2 bytes; "aaaa" would make 12


def test_context_leaves_out_the_held_message_and_repeats() -> None:
    ring = entries("a", "b") + entries("a", "b")  # a redelivered batch pushed them again
    ring += [ring_entry(CHAT, 100)]
    got = select_context(ring, CHAT.message_id, limit=5, max_bytes=100)
    assert [c["message_id"] for c in got] == ["m-0", "m-1"]


def test_a_ring_entry_cuts_its_text_to_the_bound_on_a_character() -> None:
    entry = orjson.loads(ring_entry(ChatMessage("m", "c", "u", "é" * 10, 1), 5))
    assert entry["text"] == "éé"


def review_decision(**fields: Any) -> Outcome:
    decision = {"action": "review", "reason": "deny:policy:test", "severity": "medium",
                "scores": {"threat": 0.6}, "model": "m@1", "policy": "p@1", "span": [0, 20],
                "truncated": False, **fields}  # fmt: skip
    return Outcome(None, orjson.dumps(decision), [], action="review", decision=decision)


def test_a_held_message_makes_a_review_record_and_a_final_decision_its_schemas_take() -> None:
    policy = Policy.from_mapping(
        {**read_spec(), "review_timeout_s": 2.5, "review_fallback": "nudge"}
    )
    held = held_message(CHAT, policy, review_decision(), now_ms=10_000)
    assert (held["expires_at_ms"], held["review_fallback"], held["label"]) == (
        12_500,
        "nudge",
        "deny",
    )
    context = [orjson.loads(e) for e in entries("hi")]
    record = check_review(orjson.loads(encode_review(held, context, context_missing=False)))
    assert (record["text"], record["context"], record["strikes"]) == (CHAT.text, context, 0)
    final = check_decision(orjson.loads(encode_final(held, "block", "verdict:mod-1")))
    assert (final["final"], final["action"], final["reason"]) == (True, "block", "verdict:mod-1")
    assert (final["scores"], final["policy"], final["span"]) == ({"threat": 0.6}, "p@1", [0, 20])
    assert final_key(held) == b"c-1", "an unkeyed message's decisions are keyed by its channel"


def test_what_held_a_message_is_its_label_or_reason_head_or_escalation() -> None:
    assert hold_label({"reason": "threat"}) == "threat"
    assert hold_label({"reason": "unsupported_language:fr"}) == "unsupported_language"
    assert hold_label({"reason": "threat", "escalated": True}) == "escalated"
    assert hold_label({"reason": None}) == "none"


def test_review_settings_default_and_are_validated() -> None:
    assert review_rules({}, ("allow", "nudge", "review", "block"), "p") == DEFAULT
    assert review_rules(read_spec(), ("allow", "block"), "p") == DEFAULT, "the default file's"
    for bad in ({"review_timeout_s": 0}, {"review_timeout_s": True}, {"review_timeout_s": 1e9},
                {"review_fallback": "review"}, {"review_fallback": "smite"}):  # fmt: skip
        with pytest.raises(PolicyError, match="review_"):
            Policy.from_mapping({**read_spec(), **bad}, source="p")


class NoRedis:
    """The score cache's face while Redis is down (enabled) or off (disabled)."""

    def __init__(self, enabled: bool) -> None:
        self.redis_enabled = enabled
        self.client = None

    def failed(self, exc: BaseException) -> None:
        raise AssertionError("no call is made without a client")


def held(i: int, expires_at_ms: int) -> dict[str, Any]:
    return {"message_id": f"m-{i}", "expires_at_ms": expires_at_ms, "held_at_ms": 0}


async def test_without_redis_a_held_message_is_decided_once_here() -> None:
    metrics = Metrics()
    store = HeldStore(NoRedis(enabled=True), metrics.review, group="g", timeout_s=0.1)
    assert await store.hold([held(1, 100), held(2, 100)], {}, [], ring_size=5, ring_ttl_s=5) is None
    assert metrics.registry.get_sample_value("moderator_review_fallbacks_total") == 2
    assert (await store.apply("m-1", "v/0/1")).status == "applied"
    assert (await store.apply("m-1", "v/0/1")).status == "again", "a redelivered verdict"
    assert (await store.apply("m-1", "v/0/2")).status == "late"
    with pytest.raises(RedisUnavailable):  # unknown here: Redis might hold it, wait for it
        await store.apply("m-404", "v/0/3")
    assert await store.claim_due(99) == []
    assert [h["message_id"] for h in await store.claim_due(100)] == ["m-2"], "m-1 was decided"
    assert await store.claim_due(200) == [], "claimed once"
    await store.settle(["m-2"])
    assert (await store.apply("m-2", "v/0/4")).status == "timed_out"


async def test_with_redis_disabled_an_unknown_message_is_simply_not_held() -> None:
    store = HeldStore(NoRedis(enabled=False), Metrics().review, group="g", timeout_s=0.1)
    assert (await store.apply("m-404", "v/0/3")).status == "not_held"


async def test_without_redis_what_was_decided_is_forgotten_as_redis_would_forget_it() -> None:
    store = HeldStore(NoRedis(enabled=False), Metrics().review, group="g", timeout_s=0.1)
    await store.hold([held(1, 10**13)], {}, [], ring_size=5, ring_ttl_s=5)
    assert (await store.apply("m-1", "v/0/1")).status == "applied"
    now_ms = int(time.time() * 1000)
    await store.claim_due(now_ms)
    assert (await store.apply("m-1", "v/0/2")).status == "late", "kept a while"
    await store.claim_due(now_ms + FINAL_KEEP_S * 1000 + 1000)
    assert (await store.apply("m-1", "v/0/3")).status == "not_held", "then forgotten"


async def test_a_review_decision_says_the_deadline_and_fallback_its_held_message_keeps() -> None:
    policy = Policy.from_mapping(
        {**read_spec(), "review_timeout_s": 90, "review_fallback": "block"}
    )
    record = decision_record(CHAT, action="review", reason="threat", severity="medium",
                             scores={"threat": 0.6}, model="m@1", policy=policy.ident,
                             cached=False, degraded=False, timing=Timing(0.0, 1.0, 1.0),
                             decided_at_ms=5, over_budget=False, span=(0, 20))  # fmt: skip
    value = orjson.dumps(record)
    allowed = ChatMessage("m-10", "c-1", "u-1", "gg", 2)
    store = HeldStore(NoRedis(enabled=True), Metrics().review, group="g", timeout_s=0.1)
    review = Review(store, Metrics().review, context=5, context_bytes=4096, labels=())
    held_out, allowed_out = await review.after_decisions(
        [(CHAT, policy, Outcome(None, value, [], action="review", decision=record)),
         (allowed, policy, Outcome(None, b'{"action": "allow"}', [], action="allow"))]
    )  # fmt: skip
    decision = check_decision(orjson.loads(held_out.value or b""))
    record = check_review(orjson.loads(held_out.review or b""))
    (kept,) = await store.claim_due(record["expires_at_ms"])  # what the timeout will use
    assert decision["review"] == {"due_at_ms": kept["expires_at_ms"], "fallback": "block"}
    assert kept["expires_at_ms"] - kept["held_at_ms"] == 90_000, "the channel policy's timeout"
    assert record["expires_at_ms"] == decision["review"]["due_at_ms"]
    assert {**decision, "review": None} == {**orjson.loads(value), "review": None}, "else as was"
    assert allowed_out.value == b'{"action": "allow"}', "only a review decision gains the field"


class RecordingStore:
    """A held store that notes which channels' rings each review step pushed, in order."""

    def __init__(self) -> None:
        self.pushed: list[list[str]] = []

    async def hold(self, held: Any, pushes: Any, reads: Any, **_: Any) -> dict[str, list[bytes]]:
        self.pushed.append(sorted(pushes))
        return {}


def one_decided(channel_id: str) -> list[tuple[ChatMessage, Any, Outcome]]:
    chat = ChatMessage(f"m-{channel_id}", channel_id, "u-1", "hi", 1)
    return [(chat, None, Outcome(None, b"{}", [], action="allow"))]


async def test_review_steps_run_in_fetch_order_whichever_batch_is_scored_first() -> None:
    store = RecordingStore()
    review = Review(store, Metrics().review, context=5, context_bytes=4096, labels=())  # type: ignore[arg-type]
    first, second, third, fourth = (review.turn() for _ in range(4))
    later = asyncio.create_task(review.after_decisions(one_decided("b"), second))
    await asyncio.sleep(0)  # one turn: `later` runs until it waits (tasks start in the order made)
    assert not later.done()
    assert store.pushed == []  # the second batch, scored first, waits for the first
    await review.after_decisions(one_decided("a"), first)
    await later
    assert store.pushed == [["a"], ["b"]]
    third.finish()  # a batch that failed before its review step does not hold the next one up
    await asyncio.wait_for(review.after_decisions(one_decided("c"), fourth), 30)
    assert store.pushed == [["a"], ["b"], ["c"]]
