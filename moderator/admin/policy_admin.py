"""`moderator policy put | get | delete | list`: the policies topic as an operator reads and
writes it, outside any moderator (the moderators follow it with policy/channels.PolicyFeed)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from moderator.errors import PolicyError
from moderator.kafka import compacted
from moderator.kafka.compacted import TopicState
from moderator.policy.channels import DEFAULT_KEY, PolicyBook
from moderator.policy.rules import Policy

CLIENT_ID = "moderator-policy-cli"


@dataclass(eq=False)
class PolicyState(TopicState[PolicyBook]):
    """The policies topic as a moderator reading it from the start would have it."""

    live: dict[str, dict[str, Any]] = field(default_factory=dict)  # last JSON record per key

    def take(self, key: str, value: bytes | None) -> None:
        """Apply one record as the moderators do (a refused one leaves the previous policy),
        keeping what was written."""
        if not key:
            return  # the moderators ignore a record without a key too
        self.live.pop(key, None)
        if value is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                self.live[key] = orjson.loads(value)
        super().take(key, value)

    def in_effect(self, key: str) -> Policy | None:
        """The policy a moderator applies for `key` (`*`: the default); None when the channel
        has none of its own (the default decides)."""
        if key == DEFAULT_KEY:
            return self.book.default
        return self.book.own(key)

    def listed(self, key: str) -> str:
        """`name@version` of what decides `key`; for a last record the moderators refuse, what
        was written, why it is refused, and what decides `key` instead (its earlier policy, or
        the default)."""
        spec, effect = self.live.get(key, {}), self.in_effect(key)
        if key in self.refused:
            why = self.refused[key]
        elif effect is None:  # valid when written, not over the default the topic holds now
            why = f"not valid over the default {self.book.default.ident}"
        else:
            return effect.ident
        written = f"{spec.get('name', '?')}@{spec.get('version', '?')}"
        return f"{written}\tREJECTED: {why} (in effect: {(effect or self.book.default).ident})"


async def read_state(kafka_options: Mapping[str, Any], topic: str, base: Policy) -> PolicyState:
    """Every record of the topic applied in order over `base` (the policy file), as the
    moderators apply them: a refused record leaves the previous policy in place."""
    state = PolicyState(PolicyBook(base), PolicyError)
    return await compacted.read_state(
        kafka_options, topic, state, client_id=CLIENT_ID, role="reading the policies"
    )


async def write(
    kafka_options: Mapping[str, Any],
    topic: str,
    key: str,
    spec: Mapping[str, Any] | None,
    replication: int = 1,
) -> None:
    """Publish `spec` for `key` (None: a tombstone), acknowledged by every in-sync replica."""
    value = None if spec is None else orjson.dumps(spec)
    role = "publishing the policy"
    records = [(key, value)]
    await compacted.publish(
        kafka_options, topic, records, client_id=CLIENT_ID, role=role, replication=replication
    )
