"""`moderator policy put | get | delete | list`: the policies topic as an operator reads and
writes it, outside any moderator (the moderators follow it with channel_policies.PolicyFeed)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from moderator.channel_policies import DEFAULT_KEY, PolicyBook
from moderator.compacted import read_to_end, record_key
from moderator.connect import start_client, stop_within
from moderator.errors import PolicyError
from moderator.policy import Policy
from moderator.topics import COMPACTED, ensure_topics


@dataclass(eq=False)
class TopicState:
    """The policies topic as a moderator reading it from the start would have it."""

    book: PolicyBook
    live: dict[str, dict[str, Any]] = field(default_factory=dict)  # last JSON record per key
    refused: dict[str, str] = field(default_factory=dict)  # keys whose last record it refuses

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


async def read_state(kafka_options: Mapping[str, Any], topic: str, base: Policy) -> TopicState:
    """Every record of the topic applied in order over `base` (the policy file), as the
    moderators apply them: a refused record leaves the previous policy in place."""
    consumer = AIOKafkaConsumer(
        **kafka_options, group_id=None, enable_auto_commit=False, client_id="moderator-policy-cli"
    )
    state = TopicState(PolicyBook(base))

    def keep(r: ConsumerRecord[bytes, bytes]) -> None:
        key = record_key(r)
        if not key:
            return  # the moderators ignore a record without a key too
        state.live.pop(key, None)
        if r.value is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                state.live[key] = orjson.loads(r.value)
        try:
            state.book.apply(key, r.value)
            state.refused.pop(key, None)
        except PolicyError as exc:
            state.refused[key] = str(exc)

    try:  # closed on every path: a failed start too ("Unclosed AIOKafkaConsumer" otherwise)
        await start_client(consumer, kafka_options, "reading the policies")
        await read_to_end(consumer, topic, keep)
        return state
    finally:
        await stop_within(consumer)


async def write(
    kafka_options: Mapping[str, Any],
    topic: str,
    key: str,
    spec: Mapping[str, Any] | None,
    replication: int = 1,
) -> None:
    """Publish `spec` for `key` (None: a tombstone), acknowledged by every in-sync replica."""
    await ensure_topics(
        kafka_options, {topic: 1}, configs={topic: COMPACTED}, replication=replication
    )
    producer = AIOKafkaProducer(**kafka_options, acks="all", client_id="moderator-policy-cli")
    try:
        await start_client(producer, kafka_options, "publishing the policy")
        value = None if spec is None else orjson.dumps(spec)
        await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await stop_within(producer)
