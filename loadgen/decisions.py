"""Reading records of the decisions topic: the one decoder the load generator, the benchmarks
and the chaos scenarios share."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson


class Decision(NamedTuple):
    """What a harness needs of one decision record (moderator/schemas/decision.schema.json)."""

    message_id: str
    action: str
    cached: bool
    degraded: bool
    total_ms: float | None  # latency_ms.total: the moderator's own view of the latency
    decided_at_ms: int | None
    final: bool = False  # the final decision of a held message: no duplicate of the first
    reason: str | None = None  # what decided (a final one: `verdict:<moderator>`, `review_timeout`)
    model: str | None = None  # name@version of the model that decided it


def read_decision(value: bytes | None) -> Decision | None:
    """The decision in `value`, or None when it is not one (not a JSON object with a string
    `message_id`): a harness counts those, it never crashes on them."""
    try:
        data = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("message_id"), str):
        return None
    decided_at = data.get("decided_at_ms")
    return Decision(
        message_id=data["message_id"],
        action=str(data.get("action")),
        cached=data.get("cached") is True,
        degraded=data.get("degraded") is True,
        total_ms=_total_ms(data.get("latency_ms")),
        decided_at_ms=decided_at if _is_int(decided_at) else None,
        final=data.get("final") is True,
        reason=reason if isinstance(reason := data.get("reason"), str) else None,
        model=model if isinstance(model := data.get("model"), str) else None,
    )


def _total_ms(latency: Any) -> float | None:
    if isinstance(latency, dict):
        total = latency.get("total")
        if isinstance(total, int | float) and not isinstance(total, bool):
            return float(total)
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
