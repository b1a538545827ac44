"""Inbound, outbound and dead-letter record formats (documented in the README), and the types
every stage passes them in: what the pipeline reads of a fetched record (`InboundRecord`) and what
the publisher sends for it (`Outcome`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, ParamSpec, Protocol

import orjson

from moderator.errors import InvalidRecord

REQUIRED_IDS = ("message_id", "channel_id", "user_id")

# The moderator's header names; a producer's headers under this prefix are not carried over.
OWN_HEADER_PREFIX = "moderator."
# Dead-letter headers: the record's key and value stay untouched, the error travels in headers.
DLQ_ERROR_CODE = "moderator.error.code"
DLQ_ERROR_MESSAGE = "moderator.error.message"
DLQ_SOURCE_TOPIC = "moderator.source.topic"
DLQ_SOURCE_PARTITION = "moderator.source.partition"
DLQ_SOURCE_OFFSET = "moderator.source.offset"
DLQ_SOURCE_TIMESTAMP = "moderator.source.timestamp_ms"
# Only on dead letters diverted because the broker refused a record (moderator/kafka/refusal.py).
DLQ_DECISION = "moderator.decision"  # the decision the broker refused, as JSON
DLQ_VALUE_OMITTED = "moderator.value.omitted_bytes"  # the refused dead letter's value size


class InboundRecord(Protocol):
    """The fields of an aiokafka `ConsumerRecord` the moderator reads."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class Outcome(NamedTuple):
    """What to publish for one inbound record: a decision, or a dead letter."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    action: str | None = None  # a decision's action
    error_code: str | None = None  # a dead letter's reason (its `moderator.error.code`)
    review: bytes | None = None  # a `review` decision's review record (moderator/review/hold.py)
    review_key: bytes | None = None  # its key: the message id
    decision: dict[str, Any] | None = None  # a decision's record, `value` before encoding

    @property
    def dead_letter(self) -> bool:
        return self.error_code is not None


class ChatMessage(NamedTuple):
    """A validated inbound chat message."""

    message_id: str
    channel_id: str
    user_id: str
    text: str
    sent_at_ms: int


def parse_message(value: bytes | None, *, timestamp_ms: int, max_bytes: int) -> ChatMessage:
    """Validate one inbound record value, or raise `InvalidRecord` with a reason code.

    `timestamp_ms` (the record's broker timestamp) stands in for a missing `sent_at_ms`.
    Unknown fields are allowed and ignored.
    """
    data = _json_object(value, max_bytes=max_bytes)
    ids = []
    for name in REQUIRED_IDS:
        ids.append(required_string(data, name))
        if not ids[-1]:
            raise InvalidRecord("empty_field", f"'{name}' must not be empty")
    text = required_string(data, "text")
    sent_at_ms = data.get("sent_at_ms")
    if sent_at_ms is None:
        sent_at_ms = timestamp_ms
    elif type(sent_at_ms) is not int:
        raise InvalidRecord(
            "wrong_type", f"'sent_at_ms' must be an integer, got {json_type(sent_at_ms)}"
        )
    return ChatMessage(ids[0], ids[1], ids[2], text, sent_at_ms)


def _json_object(value: bytes | None, *, max_bytes: int) -> dict[str, Any]:
    """`value` as a JSON object, or InvalidRecord naming what it is instead."""
    if value is None:
        raise InvalidRecord("empty_value", "the record has no value (a tombstone?)")
    if len(value) > max_bytes:
        raise InvalidRecord(
            "too_large", f"the record is {len(value)} bytes, over the {max_bytes}-byte limit"
        )
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRecord(
            "not_utf8", f"the value is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord("invalid_json", f"the value is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidRecord("not_object", f"the value is JSON {type(data).__name__}, not an object")
    return data


def required_string(data: Mapping[str, Any], name: str) -> str:
    """`data[name]`, or InvalidRecord: `missing_field`, or `wrong_type` if not a string."""
    if name not in data:
        raise InvalidRecord("missing_field", f"the required field '{name}' is missing")
    value = data[name]
    if not isinstance(value, str):
        raise InvalidRecord("wrong_type", f"'{name}' must be a string, got {json_type(value)}")
    return value


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


VERDICTS = ("allow", "nudge", "block")  # what a human may decide about a held message
SCOPES = ("global", "channel")  # where the verdict's override applies
# A verdict that names no scope overrides its message's channel only: one click must not become a
# platform-wide rule (issue 43). A verdict record written for the old default (`global`) must now
# say `"scope": "global"`.
DEFAULT_SCOPE = "channel"


class Verdict(NamedTuple):
    """A moderator's verdict on a held message (moderator/schemas/verdict.schema.json)."""

    message_id: str
    verdict: str
    moderator_id: str
    reason: str | None
    scope: str
    at_ms: int
    override_expires_at_ms: int | None = None  # when the override it makes stops applying


def parse_verdict(value: bytes | None, *, max_bytes: int) -> Verdict:
    """Validate one verdict record, or raise `InvalidRecord` (the inbound codes, and
    `invalid_verdict` for a value outside its field's choices)."""
    data = _json_object(value, max_bytes=max_bytes)
    ids = [required_string(data, name) for name in ("message_id", "moderator_id")]
    for name, given in zip(("message_id", "moderator_id"), ids, strict=True):
        if not given:
            raise InvalidRecord("empty_field", f"'{name}' must not be empty")
    message_id, moderator_id = ids
    verdict = required_string(data, "verdict")
    if verdict not in VERDICTS:
        raise InvalidRecord("invalid_verdict", f"'verdict' must be one of {', '.join(VERDICTS)}")
    reason = data.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidRecord("wrong_type", f"'reason' must be a string, got {json_type(reason)}")
    scope = data.get("scope", DEFAULT_SCOPE)
    if scope not in SCOPES:
        raise InvalidRecord("invalid_verdict", f"'scope' must be one of {', '.join(SCOPES)}")
    at_ms = data.get("at_ms")
    if at_ms is None:
        raise InvalidRecord("missing_field", "the required field 'at_ms' is missing")
    if type(at_ms) is not int:
        raise InvalidRecord("wrong_type", f"'at_ms' must be an integer, got {json_type(at_ms)}")
    expires = data.get("override_expires_at_ms")
    if expires is not None and type(expires) is not int:
        raise InvalidRecord(
            "wrong_type", f"'override_expires_at_ms' must be an integer, got {json_type(expires)}"
        )
    return Verdict(message_id, verdict, moderator_id, reason, scope, at_ms, expires)


class Timing(NamedTuple):
    """Milliseconds a message spent waiting, being scored, and in the moderator overall."""

    queue_ms: float
    score_ms: float
    total_ms: float


def decision_record(
    msg: ChatMessage,
    *,
    action: str,
    reason: str | None,
    severity: str | None = None,
    scores: Mapping[str, float],
    model: str,
    policy: str,
    cached: bool,
    degraded: bool,
    timing: Timing,
    decided_at_ms: int,
    over_budget: bool,
    span: tuple[int, int],
    truncated: bool = False,
    language: str | None = None,
    final: bool = False,
    strikes: int = 0,
    escalated: bool = False,
) -> dict[str, Any]:
    """The outbound decision record (moderator/schemas/decision.schema.json), as its JSON reads
    back. `final`: the one decision that ends a held message's review (moderator/review/held.py)."""
    record: dict[str, Any] = {
        "message_id": msg.message_id,
        "channel_id": msg.channel_id,
        "user_id": msg.user_id,
        "action": action,
        "reason": reason,
        "severity": severity,
        "scores": {label: round(score, 4) for label, score in scores.items()},
        "model": model,
        "policy": policy,
        "cached": cached,
        "degraded": degraded,
        "latency_ms": {
            "queue": round(timing.queue_ms, 3),
            "score": round(timing.score_ms, 3),
            "total": round(timing.total_ms, 3),
        },
        "over_budget": over_budget,
        "decided_at_ms": decided_at_ms,
        "span": list(span),
        "truncated": truncated,
        "final": final,
        "strikes": strikes,  # the user's, in the policy's window (moderator/users/escalation.py)
        "escalated": escalated,
    }
    if language is not None:  # only when the gate named a language the model does not read
        record["language"] = language
    return record


_P = ParamSpec("_P")


def _as_json(record: Callable[_P, dict[str, Any]]) -> Callable[_P, bytes]:
    def encoded(*args: _P.args, **kwargs: _P.kwargs) -> bytes:
        return orjson.dumps(record(*args, **kwargs))

    return encoded


# The outbound decision record as JSON, from decision_record's arguments.
encode_decision = _as_json(decision_record)


def dlq_headers(
    error: InvalidRecord, *, topic: str, partition: int, offset: int, timestamp_ms: int
) -> list[tuple[str, bytes]]:
    """Headers that say why a record was dead-lettered and where it came from."""
    return [
        (DLQ_ERROR_CODE, error.code.encode()),
        (DLQ_ERROR_MESSAGE, error.message.encode()),
        (DLQ_SOURCE_TOPIC, topic.encode()),
        (DLQ_SOURCE_PARTITION, str(partition).encode()),
        (DLQ_SOURCE_OFFSET, str(offset).encode()),
        (DLQ_SOURCE_TIMESTAMP, str(timestamp_ms).encode()),
    ]


def dead_letter(record: InboundRecord, err: InvalidRecord) -> Outcome:
    """`record` for the dead-letter topic: its key and value untouched, `err` and its source in
    headers (also the shape of a decision the broker refused, moderator/kafka/refusal.py)."""
    headers = dlq_headers(
        err,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
    )
    headers += carried_headers(record)
    return Outcome(record.key, record.value, headers, error_code=err.code)


def carried_headers(record: InboundRecord) -> list[tuple[str, bytes]]:
    """The producer's headers (a `traceparent`, a tenant id), to travel on with the decision or
    dead letter; any named `moderator.*` are dropped, so the moderator's own always win."""
    return [
        (name, value)
        for name, value in record.headers or ()
        if not name.startswith(OWN_HEADER_PREFIX)
    ]
