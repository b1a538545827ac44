"""The one way an override is removed or changed by hand: `moderator override delete | expire`
and the review console (console/overrides.py) both call `revoke` and `set_expiry`, so both write
the audit entry (moderator/review/audit.py) first, then the override record, each acknowledged by
the broker before the next (a failure raises KafkaError: nothing unaudited took effect)."""

from __future__ import annotations

import re

from aiokafka import AIOKafkaProducer

from moderator.review import audit
from moderator.review.overrides import Override, wall_ms

_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


async def revoke(
    producer: AIOKafkaProducer,
    topic: str,
    key: str,
    override: Override | None,
    *,
    actor: str,
    via: str,
    audit_topic: str,
) -> None:
    """Remove the override at `key` (`override`: what it was, None for a refused record): its
    audit entry, then a tombstone, each acknowledged; raises KafkaError when either was not."""
    if audit_topic:
        what = override._asdict() if override is not None else None
        entry = audit.entry(
            "override_revoked", actor=actor, via=via, at_ms=wall_ms(), key=key, override=what
        )
        await audit.record(producer, audit_topic, key, entry)
    await producer.send_and_wait(topic, None, key=key.encode())


async def set_expiry(
    producer: AIOKafkaProducer,
    topic: str,
    override: Override,
    expires_at_ms: int | None,
    *,
    actor: str,
    via: str,
    audit_topic: str,
) -> Override:
    """Write `override` again with `expires_at_ms` (None: never), after its audit entry."""
    changed = override._replace(expires_at_ms=expires_at_ms)
    if audit_topic:
        entry = audit.entry(
            "override_expiry",
            actor=actor,
            via=via,
            at_ms=wall_ms(),
            key=changed.key,
            override=changed._asdict(),
            previous_expires_at_ms=override.expires_at_ms,
        )
        await audit.record(producer, audit_topic, changed.key, entry)
    await producer.send_and_wait(topic, changed.encode(), key=changed.key.encode())
    return changed


def duration_s(text: str) -> int:
    """`30s`, `15m`, `12h`, `7d` in seconds (at least 1); ValueError otherwise."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or int(found[1]) < 1:
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 12h or 7d")
    return int(found[1]) * _UNIT_S[found[2]]
