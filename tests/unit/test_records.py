from __future__ import annotations

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from moderator.errors import InvalidRecord
from moderator.records import (
    DLQ_ERROR_CODE,
    DLQ_ERROR_MESSAGE,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
    DLQ_SOURCE_TIMESTAMP,
    DLQ_SOURCE_TOPIC,
    ChatMessage,
    Timing,
    dead_letter,
    dlq_headers,
    encode_decision,
    parse_message,
)

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
        msg, action="nudge", reason="insult", severity="medium",
        scores={"insult": 0.712345, "threat": 0.01},
        model="chat-minilm@abc", policy="default@1", cached=True, degraded=False,
        timing=Timing(1.23456, 2.5, 4.0), decided_at_ms=1060, over_budget=True, span=(0, 2),
    )  # fmt: skip
    decision = orjson.loads(value)
    assert decision == {
        "message_id": "m-1", "channel_id": "c-1", "user_id": "u-1", "action": "nudge",
        "reason": "insult", "severity": "medium", "scores": {"insult": 0.7123, "threat": 0.01},
        "model": "chat-minilm@abc", "policy": "default@1", "cached": True, "degraded": False,
        "latency_ms": {"queue": 1.235, "score": 2.5, "total": 4.0}, "over_budget": True,
        "decided_at_ms": 1060, "span": [0, 2], "truncated": False, "final": False,
        "strikes": 0, "escalated": False,
    }  # fmt: skip
    foreign = encode_decision(
        msg, action="review", reason="unsupported_language:es", scores={}, model="m@1",
        policy="p@1", cached=False, degraded=False, timing=Timing(1, 2, 3), decided_at_ms=1,
        over_budget=False, span=(0, 2), truncated=True, language="es",
    )  # fmt: skip
    assert orjson.loads(foreign)["language"] == "es"  # only when the gate named one
    assert orjson.loads(foreign)["truncated"] is True


def test_a_record_exactly_at_the_size_limit_parses_and_one_byte_over_is_too_large() -> None:
    head = good(text="")
    at_limit = head.replace(b'"text":""', b'"text":"' + b"x" * (LIMIT - len(head)) + b'"')
    assert len(at_limit) == LIMIT
    assert parse(at_limit).text == "x" * (LIMIT - len(head))
    over = at_limit.replace(b'"text":"', b'"text":"y', 1)
    assert len(over) == LIMIT + 1
    with pytest.raises(InvalidRecord) as info:
        parse(over)
    assert info.value.code == "too_large"
    assert str(LIMIT + 1) in info.value.message
    assert str(LIMIT) in info.value.message


def test_the_dead_letter_headers_carry_the_source_exactly() -> None:
    error = InvalidRecord("invalid_json", "the value is not valid JSON")
    headers = dlq_headers(
        error,
        topic="chat.in",
        partition=3,
        offset=9_007_199_254_740_993,
        timestamp_ms=1732240000123,
    )
    assert headers == [
        (DLQ_ERROR_CODE, b"invalid_json"),
        (DLQ_ERROR_MESSAGE, b"the value is not valid JSON"),
        (DLQ_SOURCE_TOPIC, b"chat.in"),
        (DLQ_SOURCE_PARTITION, b"3"),
        (DLQ_SOURCE_OFFSET, b"9007199254740993"),
        (DLQ_SOURCE_TIMESTAMP, b"1732240000123"),
    ]


def test_a_dead_letter_keeps_the_record_and_carries_the_producers_headers_not_forged_ones() -> None:
    headers = [("traceparent", b"00-abc-01"), ("moderator.error.code", b"forged"), ("tenant", b"t")]
    record = ConsumerRecord(
        topic="chat.in",
        partition=1,
        offset=7,
        timestamp=1732240000123,
        timestamp_type=0,
        key=b"c-1",
        value=b"{broken",
        checksum=None,
        serialized_key_size=3,
        serialized_value_size=7,
        headers=headers,
    )
    letter = dead_letter(record, InvalidRecord("invalid_json", "the value is not valid JSON"))
    assert (letter.key, letter.value, letter.dead_letter) == (b"c-1", b"{broken", True)
    assert (letter.action, letter.error_code) == (None, "invalid_json")
    assert letter.headers == [
        (DLQ_ERROR_CODE, b"invalid_json"),
        (DLQ_ERROR_MESSAGE, b"the value is not valid JSON"),
        (DLQ_SOURCE_TOPIC, b"chat.in"),
        (DLQ_SOURCE_PARTITION, b"1"),
        (DLQ_SOURCE_OFFSET, b"7"),
        (DLQ_SOURCE_TIMESTAMP, b"1732240000123"),
        ("traceparent", b"00-abc-01"),
        ("tenant", b"t"),
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "the record has no value (a tombstone?)"),
        (b"[1]", "the value is JSON list, not an object"),
        (good(channel_id=5), "'channel_id' must be a string, got integer"),
        (good(text=["a"]), "'text' must be a string, got array"),
        (good(text=None), "'text' must be a string, got null"),
        (good(text={}), "'text' must be a string, got object"),
        (good(user_id=False), "'user_id' must be a string, got boolean"),
        (good(sent_at_ms="yesterday"), "'sent_at_ms' must be an integer, got string"),
        (good(sent_at_ms=1.5), "'sent_at_ms' must be an integer, got number"),
    ],
)
def test_the_message_of_a_bad_record_names_the_field_and_the_json_type_it_got(
    value: bytes | None, message: str
) -> None:
    with pytest.raises(InvalidRecord) as info:
        parse(value)
    assert info.value.message == message


def test_latencies_are_rounded_to_the_microsecond() -> None:
    msg = parse(good())
    raw = encode_decision(msg, action="allow", reason=None, scores={}, model="m@1", policy="p@1",
                          cached=False, degraded=False, timing=Timing(1.23456, 2.34567, 3.45678),
                          decided_at_ms=1, over_budget=False, span=(0, 1))  # fmt: skip
    assert orjson.loads(raw)["latency_ms"] == {"queue": 1.235, "score": 2.346, "total": 3.457}
