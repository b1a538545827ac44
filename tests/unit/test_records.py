from __future__ import annotations

import orjson
import pytest

from moderator.errors import InvalidRecord
from moderator.records import ChatMessage, Timing, encode_decision, parse_message

LIMIT = 65536


def parse(value: bytes | None) -> ChatMessage:
    return parse_message(value, timestamp_ms=123, max_bytes=LIMIT)


def good(**changes: object) -> bytes:
    base: dict[str, object] = {"message_id": "m-1", "channel_id": "c-1", "user_id": "u-1",
                               "text": "gg wp", "sent_at_ms": 1732240000000}  # fmt: skip
    base.update(changes)
    return orjson.dumps({k: v for k, v in base.items() if v is not ...})


def test_a_valid_record_parses_and_unknown_fields_are_ignored() -> None:
    msg = parse(good(extra={"nested": [1, 2]}))
    assert msg == ChatMessage("m-1", "c-1", "u-1", "gg wp", 1732240000000)


def test_missing_sent_at_falls_back_to_the_broker_timestamp() -> None:
    assert parse(good(sent_at_ms=...)).sent_at_ms == 123


def test_an_empty_text_is_valid() -> None:
    assert parse(good(text="")).text == ""


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (None, "empty_value"),
        (b"x" * (LIMIT + 1), "too_large"),
        (b'{"text": "\xff"}', "not_utf8"),
        (b"{", "invalid_json"),
        (b'{"message_id": "\\udc00"}', "invalid_json"),
        (b'"just a string"', "not_object"),
        (good(user_id=...), "missing_field"),
        (good(text=...), "missing_field"),
        (good(channel_id=5), "wrong_type"),
        (good(text=["a"]), "wrong_type"),
        (good(sent_at_ms="yesterday"), "wrong_type"),
        (good(sent_at_ms=True), "wrong_type"),
        (good(sent_at_ms=1.5), "wrong_type"),
        (good(message_id=""), "empty_field"),
    ],
)
def test_invalid_records_raise_with_a_reason_code(value: bytes | None, code: str) -> None:
    with pytest.raises(InvalidRecord) as info:
        parse(value)
    assert info.value.code == code
    assert info.value.message


def test_the_decision_carries_the_design_schema() -> None:
    msg = ChatMessage("m-1", "c-1", "u-1", "gg", 1000)
    value = encode_decision(
        msg, action="nudge", reason="insult", scores={"insult": 0.712345, "threat": 0.01},
        model="chat-minilm@abc", policy="default@1", cached=True, degraded=False,
        timing=Timing(1.23456, 2.5, 4.0), decided_at_ms=1060, over_budget=True,
    )  # fmt: skip
    decision = orjson.loads(value)
    assert decision == {
        "message_id": "m-1", "channel_id": "c-1", "user_id": "u-1", "action": "nudge",
        "reason": "insult", "scores": {"insult": 0.7123, "threat": 0.01},
        "model": "chat-minilm@abc", "policy": "default@1", "cached": True, "degraded": False,
        "latency_ms": {"queue": 1.235, "score": 2.5, "total": 4.0}, "over_budget": True,
        "decided_at_ms": 1060,
    }  # fmt: skip
