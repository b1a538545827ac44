"""The audit trail: one JSON entry (moderator/schemas/audit.schema.json) per act of a human on the
loop, on an append-only topic (`MODERATOR_AUDIT_TOPIC`, default `chat.audit`, one partition so it
reads in the order things were done): who (`actor`, the console's verified moderator or the name
`moderator override` is run under), what (`event` and the verdict or override as it was), when
(`at_ms`), and through what (`via`). Written before the act it records, so no act takes effect
unaudited; an act that then fails leaves an entry with nothing after it (at least once, never
less).

Why a topic of its own: the overrides topic is compacted (a revoked override leaves no trace once
its tombstone is cleaned) and the verdict topic keeps what its retention keeps; this one is
created with `retention.ms=-1` (nothing deleted until an operator sets a limit: a few hundred
bytes an entry) and is never compacted, and it is the one place an auditor reads. The moderators
neither read nor write it: an outage of it stops no decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

EVENTS = (
    "verdict",  # a verdict sent (the override it makes, with its scope and expiry, follows from it)
    "override_revoked",  # a tombstone: the override no longer decides
    "override_expiry",  # the override's `expires_at_ms` set or changed
)
VIA = ("console", "cli")
TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}


def entry(event: str, *, actor: str, via: str, at_ms: int, **what: Any) -> dict[str, Any]:
    """One audit entry; `what` is the subject (`verdict` or `override`, as records)."""
    if event not in EVENTS or via not in VIA:
        raise ValueError(f"audit entry {event!r} via {via!r}: not one of {EVENTS} / {VIA}")
    return {"event": event, "actor": actor, "via": via, "at_ms": at_ms, **what}


async def record(
    producer: AIOKafkaProducer, topic: str, key: str, value: Mapping[str, Any]
) -> None:
    """Write one entry (keyed by its subject: the override key or the message id), acknowledged
    by every in-sync replica when the producer says `acks=all`; raises KafkaError otherwise."""
    await producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())


def parse(record: ConsumerRecord[bytes, bytes]) -> dict[str, Any] | None:
    """An entry as read back, or None for a record that is not one (left out of listings)."""
    try:
        data = orjson.loads(record.value or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("event") not in EVENTS:
        return None
    return data
