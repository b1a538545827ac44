"""The records the console reads and writes (loop contract, README "Records"): review records
parsed leniently into what the page shows, verdicts read as the moderators read them, and a
verdict encoded for the verdict topic.

The console is a reader of topics other programs write: a record it cannot use is skipped with a
warning (the moderator dead-letters bad verdicts; the console has no dead-letter topic of its own).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from moderator.errors import InvalidRecord

# The moderator's own verdict type and choices, re-exported for the console's modules.
from moderator.records import SCOPES as SCOPES
from moderator.records import VERDICTS as VERDICTS
from moderator.records import Verdict as Verdict
from moderator.records import parse_verdict

# What the page shows of a held message's context and text: the moderator bounds them already
# (review_context, review_context_bytes); these only keep a hostile record from flooding pages.
MAX_CONTEXT = 20
MAX_TEXT = 4096


class BadRecord(ValueError):
    """A record the console cannot use (the message says why)."""


def encode_verdict(verdict: Verdict) -> bytes:
    """`verdict` as its topic's JSON (verdict.schema.json)."""
    return orjson.dumps(verdict._asdict())


def now_ms() -> int:
    return int(time.time() * 1000)


def _obj(value: bytes | None) -> dict[str, Any]:
    if value is None:
        raise BadRecord("no value (a tombstone)")
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRecord("not a JSON object")
    return data


def _text(data: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = data.get(name)
    if isinstance(value, str) and (value or not required):
        return value
    if value is None and not required:
        return ""
    raise BadRecord(f"{name!r} must be a non-empty string")


def read_verdict(value: bytes | None, *, max_bytes: int) -> Verdict:
    """The verdict as the moderators read it (`moderator.records.parse_verdict`, with their
    `max_record_bytes`); one they would dead-letter raises `BadRecord`, and the console skips it."""
    try:
        return parse_verdict(value, max_bytes=max_bytes)
    except InvalidRecord as exc:
        raise BadRecord(f"{exc.code}: {exc.message}") from None


def label_of(reason: str | None) -> str:
    """The label a held message is filtered and counted by: its reason's head
    (`unsupported_language:de` → `unsupported_language`, `deny:policy:slur` → `deny`)."""
    return (reason or "unknown").split(":", 1)[0] or "unknown"


def parse_review(value: bytes | None, timestamp_ms: int) -> dict[str, Any]:
    """What the page shows of a review record; `timestamp_ms` (the record's) stands in for a
    missing `held_at_ms`."""
    data = _obj(value)
    held = data.get("held_at_ms")
    held_at = held if isinstance(held, int) else timestamp_ms
    expires, fallback = data.get("expires_at_ms"), data.get("review_fallback")
    scores = data.get("scores")
    context = data.get("context")
    return {
        "message_id": _text(data, "message_id"),
        "channel_id": _text(data, "channel_id"),
        "user_id": _text(data, "user_id"),
        "text": _text(data, "text", required=False)[:MAX_TEXT],
        "sent_at_ms": data.get("sent_at_ms") if isinstance(data.get("sent_at_ms"), int) else None,
        "reason": data.get("reason") if isinstance(data.get("reason"), str) else None,
        "label": label_of(data.get("reason") if isinstance(data.get("reason"), str) else None),
        "severity": data.get("severity") if isinstance(data.get("severity"), str) else None,
        "scores": {
            str(k): float(v)
            for k, v in (scores.items() if isinstance(scores, dict) else ())
            if isinstance(v, int | float) and not isinstance(v, bool)
        },
        "model": str(data.get("model") or ""),
        "policy": str(data.get("policy") or ""),
        "language": data.get("language") if isinstance(data.get("language"), str) else None,
        "strikes": data.get("strikes") if isinstance(data.get("strikes"), int) else 0,
        "context": [_context_line(c) for c in context[-MAX_CONTEXT:] if isinstance(c, dict)]
        if isinstance(context, list)
        else [],
        "held_at_ms": held_at,
        "expires_at_ms": expires if isinstance(expires, int) else None,
        # what the timeout then decides (the policy's review_fallback), for "then allow" on a card
        "review_fallback": fallback if isinstance(fallback, str) and fallback else None,
    }


def _context_line(line: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "message_id": str(line.get("message_id") or ""),
        "user_id": str(line.get("user_id") or ""),
        "text": str(line.get("text") or "")[:MAX_TEXT],
        "sent_at_ms": line.get("sent_at_ms") if isinstance(line.get("sent_at_ms"), int) else None,
    }


class Decision(NamedTuple):
    """What the overview reads of a decision record."""

    message_id: str
    channel_id: str
    action: str
    final: bool
    reason: str | None
    at_ms: int


def parse_decision(value: bytes | None, timestamp_ms: int) -> Decision:
    data = _obj(value)
    decided = data.get("decided_at_ms")
    return Decision(
        message_id=_text(data, "message_id"),
        channel_id=_text(data, "channel_id"),
        action=_text(data, "action"),
        final=data.get("final") is True,
        reason=data.get("reason") if isinstance(data.get("reason"), str) else None,
        at_ms=decided if isinstance(decided, int) else timestamp_ms,
    )


def _side(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    side = data.get(name)
    if not isinstance(side, dict):
        raise BadRecord(f"{name!r} must be an object")
    model, action, reason, top = (side.get(k) for k in ("model", "action", "reason", "top"))
    if not (isinstance(model, str) and model and isinstance(action, str) and action):
        raise BadRecord(f"{name!r} needs a model and an action")
    top = top if isinstance(top, dict) else {}
    score = top.get("score")
    if not isinstance(score, int | float) or isinstance(score, bool):
        score = None  # the model was not asked (a deny term, an empty text)
    return {
        "model": model,
        "action": action,
        "reason": reason if isinstance(reason, str) else None,
        "top": None if score is None else {"label": str(top.get("label") or ""), "score": score},
    }


def parse_disagreement(value: bytes | None, timestamp_ms: int) -> dict[str, Any]:
    """What the disagreements view shows of a shadow record (shadow.schema.json), before it is
    joined with its message and verdict (console/disagreements.py); `timestamp_ms` (the record's)
    stands in for a missing `at_ms`. One without its ids or either decision raises BadRecord."""
    data = _obj(value)
    at_ms, language = data.get("at_ms"), data.get("language")
    return {
        "message_id": _text(data, "message_id"),
        "channel_id": _text(data, "channel_id"),
        "policy": str(data.get("policy") or ""),
        "language": language if isinstance(language, str) else None,
        "primary": _side(data, "primary"),
        "shadow": _side(data, "shadow"),
        "at_ms": at_ms if isinstance(at_ms, int) and not isinstance(at_ms, bool) else timestamp_ms,
        "message": None,
        "verdict": None,
        "agrees": None,
    }
