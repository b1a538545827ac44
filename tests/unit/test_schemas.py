"""The JSON Schemas in moderator/schemas/ say what the code writes and accepts."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
import pytest

from moderator.errors import InvalidRecord
from moderator.policy.rules import DEFAULT_ACTIONS
from moderator.records import (
    ChatMessage,
    Timing,
    decision_record,
    dlq_headers,
    encode_decision,
    parse_message,
)
from moderator.review.hold import with_review
from tests.contract import SCHEMAS, check_dead_letter_headers, check_decision, validator

MSG = ChatMessage("m-1", "c-1", "u-1", "gg wp", 1732240000000)


FIELDS: dict[str, Any] = dict(
    action="block", reason="insult", scores={"toxicity": 0.97, "insult": 0.991234},
    model="chat-minilm@7359ab", policy="default@4", cached=False, degraded=False,
    timing=Timing(1.25, 3.5, 5.0), decided_at_ms=1732240000005, over_budget=False, span=(0, 2),
)  # fmt: skip


def decision(**overrides: Any) -> dict[str, Any]:
    return dict(orjson.loads(encode_decision(MSG, **{**FIELDS, **overrides})))


def held(**overrides: Any) -> dict[str, Any]:
    """A `review` decision as the moderator publishes it once the message is held."""
    kept = {"expires_at_ms": 1732240600005, "review_fallback": "allow"}
    record = decision_record(MSG, **{**FIELDS, "action": "review", **overrides})
    return dict(orjson.loads(with_review(record, kept)))


@pytest.mark.parametrize("name", SCHEMAS)
def test_every_schema_is_a_valid_json_schema(name: str) -> None:
    validator(name)  # check_schema raises on a malformed schema


def test_the_encoded_decision_matches_its_schema() -> None:
    check_decision(decision())
    check_decision(decision(action="allow", reason=None, cached=True))
    check_decision(decision(scores={}, degraded=True, reason="overload", action="allow"))
    check_decision(decision(scores={}, reason="empty_text", action="allow"))
    check_decision(held(reason="truncated", span=(700, 1210), truncated=True))
    check_decision(held(reason="unsupported_language:de", language="de"))
    check_decision(decision(action="block", reason="muted", strikes=4))
    check_decision(held(reason="insult", strikes=3, escalated=True))
    check_decision(decision(action="block", reason="link:evil.example.com"))


def test_every_default_action_is_in_the_decision_schema() -> None:
    enum = validator("decision").schema["properties"]["action"]["enum"]
    assert list(DEFAULT_ACTIONS) == enum  # in the same order: least severe first
    check_decision(held(reason="threat", severity="medium"))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("action", "ban"),
        ("cached", "no"),
        ("model", "chat-minilm"),
        ("scores", {"insult": 1.5}),
        ("span", [3]),
        ("span", [-1, 4]),
        ("truncated", None),
        ("language", "German"),
        ("strikes", -1),
        ("escalated", None),
    ],
)
def test_the_decision_schema_rejects_what_consumers_could_not_read(field: str, value: Any) -> None:
    bad = decision()
    bad[field] = value
    with pytest.raises(jsonschema.ValidationError):
        check_decision(bad)


def test_the_decision_schema_names_every_field_the_code_writes() -> None:
    written = set(decision())
    assert written == set(validator("decision").schema["required"])
    optional = set(held(language="de")) - written
    assert optional == set(validator("decision").schema["properties"]) - written
    assert optional == {"language", "review"}
    extra = decision()
    extra["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        check_decision(extra)


def test_a_review_decision_and_only_it_says_when_its_final_decision_is_due() -> None:
    with pytest.raises(jsonschema.ValidationError, match="'review' is a required property"):
        check_decision(decision(action="review", reason="threat"))  # not held: no due time
    for other in (decision(), decision(action="allow", reason=None), held(final=True)):
        other["review"] = {"due_at_ms": 1, "fallback": "allow"}
        with pytest.raises(jsonschema.ValidationError):
            check_decision(other)
    for bad in ({"due_at_ms": "soon", "fallback": "allow"}, {"due_at_ms": 1, "fallback": "review"},
                {"due_at_ms": 1}, {"due_at_ms": 1, "fallback": "allow", "at": 0}):  # fmt: skip
        with pytest.raises(jsonschema.ValidationError):
            check_decision({**held(), "review": bad})


def test_a_review_fallback_is_any_default_action_but_review() -> None:
    fallback = validator("decision").schema["properties"]["review"]["properties"]["fallback"]
    assert fallback["enum"] == [a for a in DEFAULT_ACTIONS if a != "review"]


def test_dead_letter_headers_match_their_schema() -> None:
    error = InvalidRecord("invalid_json", "the value is not valid JSON")
    headers = dlq_headers(error, topic="chat.messages", partition=3, offset=17, timestamp_ms=5)
    assert check_dead_letter_headers(headers)["moderator.error.code"] == "invalid_json"
    with pytest.raises(jsonschema.ValidationError):
        check_dead_letter_headers([(n, b"nope" if n.endswith("offset") else v) for n, v in headers])


VALID = [
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": ""},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": "hi", "sent_at_ms": 5},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": "hi", "extra": [1]},
]
INVALID = [
    {"message_id": "m", "channel_id": "c", "user_id": "u"},
    {"message_id": "", "channel_id": "c", "user_id": "u", "text": "hi"},
    {"message_id": 1, "channel_id": "c", "user_id": "u", "text": "hi"},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": None},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": "hi", "sent_at_ms": 1.5},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": "hi", "sent_at_ms": "5"},
    {"message_id": "m", "channel_id": "c", "user_id": "u", "text": "hi", "sent_at_ms": True},
]


@pytest.mark.parametrize("value", VALID + INVALID)
def test_the_input_schema_accepts_exactly_what_the_parser_accepts(value: dict[str, Any]) -> None:
    raw = orjson.dumps(value)
    try:
        parse_message(raw, timestamp_ms=1, max_bytes=10_000)
        parsed = True
    except InvalidRecord:
        parsed = False
    schema_ok = validator("chat-message").is_valid(value)
    assert parsed == schema_ok == (value in VALID)
