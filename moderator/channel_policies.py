"""Policies per channel, changed live through a compacted Kafka topic (default `chat.policies`).

Key: a channel id, or `*` for the default; value: the policy as JSON, which may be partial
(what it leaves out comes from the default, `policy.merge_specs`); a tombstone (null value)
removes it. Every instance reads the whole topic from the beginning outside any consumer group
(each needs all of it), is ready only once it has caught up, and then applies each change as it
arrives. A record that does not validate is rejected with one log line and a metric; the
previous policy stays.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from moderator.compacted import follow, read_to_end, record_key, stop_following
from moderator.connect import start_client
from moderator.errors import PolicyError
from moderator.metric_wings import PolicyMetrics
from moderator.policy import Policy, merge_specs
from moderator.topics import compacted_reader

log = logging.getLogger(__name__)

DEFAULT_KEY = "*"


class PolicyBook:
    """Which policy decides a channel's messages: its own, merged over the default."""

    def __init__(self, base: Policy) -> None:
        self.base = base  # the policy file, or the packaged default
        self.default = base  # `*` from the topic merged over `base`, if there is one
        self._specs: dict[str, dict[str, Any]] = {}  # as written to the topic, by key
        self._channels: dict[str, Policy] = {}

    @classmethod
    def load(cls, path: Path | None, model_labels: Iterable[str]) -> PolicyBook:
        """The policy file (or the packaged default) as the base; warns about labels the model
        lacks."""
        book = cls(Policy.load(path))
        book.base.check_labels(model_labels)
        return book

    def __len__(self) -> int:
        return len(self._channels)

    def for_channel(self, channel_id: str) -> Policy:
        return self._channels.get(channel_id, self.default)

    def own(self, channel_id: str) -> Policy | None:
        """The channel's own policy (merged over the default); None when the default decides."""
        return self._channels.get(channel_id)

    def apply(self, key: str, value: bytes | None) -> str:
        """Apply one topic record; return what happened (`applied`, `removed`). Raises
        PolicyError, leaving everything as it was, for a policy that does not validate."""
        if value is None:
            self._specs.pop(key, None)
            if key == DEFAULT_KEY:
                self._set_default(self.base)
            else:
                self._channels.pop(key, None)
            return "removed"
        try:
            spec = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise PolicyError(f"policy for {key!r}: not JSON: {exc}") from None
        if not isinstance(spec, dict):
            raise PolicyError(f"policy for {key!r}: a policy is a JSON object")
        if key == DEFAULT_KEY:
            default = _over(self.base, spec, key)
            self._set_default(default)
        else:
            self._channels[key] = _over(self.default, spec, key)
        self._specs[key] = spec
        return "applied"

    def _set_default(self, default: Policy) -> None:
        """A new default: every channel's policy is merged over it again."""
        channels = {}
        for key, spec in self._specs.items():
            if key == DEFAULT_KEY:
                continue
            try:
                channels[key] = _over(default, spec, key)
            except PolicyError as exc:  # valid over the old default, not over the new one
                log.error("%s; channel %r falls back to the default", exc, key)
        self.default = default
        self._channels = channels


def _over(below: Policy, spec: Mapping[str, Any], key: str) -> Policy:
    return layered(below.spec, spec, f"policy for {key!r}")


def layered(below: Mapping[str, Any], spec: Mapping[str, Any], source: str) -> Policy:
    """`spec` merged over `below`; it names itself, so every decision says which policy it was."""
    for required in ("name", "version"):
        if required not in spec:
            raise PolicyError(f"{source}: missing {required!r} (every policy names itself)")
    return Policy.from_mapping(merge_specs(below, spec), source=source)


class PolicyFeed:
    """Keeps a PolicyBook in step with the policies topic. `start()` returns once caught up."""

    def __init__(
        self,
        book: PolicyBook,
        topic: str,
        kafka_options: Mapping[str, Any],
        metrics: PolicyMetrics,
        replication: int = 1,
    ) -> None:
        self.book = book
        self.replication = replication
        self.topic = topic
        self.options = dict(kafka_options)
        self.metrics = metrics
        self._consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Create the topic if missing, read it to its end offsets, then follow it."""
        self._consumer = consumer = await compacted_reader(
            self.options, self.topic, replication=self.replication, what="policies"
        )
        await start_client(consumer, self.options, "the policies consumer")
        started = time.perf_counter()
        if not await read_to_end(consumer, self.topic, self._apply_record):
            log.warning(
                "no policies topic %s: every channel gets %s", self.topic, self.book.default.ident
            )
        log.info(
            "policies: %d channel policies, default %s, read from %s in %.2f s",
            len(self.book),
            self.book.default.ident,
            self.topic,
            time.perf_counter() - started,
        )
        self.task = asyncio.create_task(
            follow(consumer, self._apply_record), name="moderator-policies"
        )

    async def stop(self) -> None:
        await stop_following(self.task, self._consumer)

    def _apply_record(self, record: ConsumerRecord[bytes, bytes]) -> None:
        value, key = record.value, record_key(record)
        if not key:
            self.metrics.rejected.inc()
            log.error("policy record without a key (a channel id, or %r) ignored", DEFAULT_KEY)
            return
        try:
            result = self.book.apply(key, value)
        except PolicyError as exc:
            self.metrics.rejected.inc()
            log.error("%s; the previous policy stays", exc)
            return
        self.metrics.updates[result].inc()
        self.metrics.policies.set(len(self.book))
        shown = self.book.default if key == DEFAULT_KEY else self.book.for_channel(key)
        log.info("policy for %r %s: %s", key, result, shown.ident)


async def follow_policies(
    book: PolicyBook,
    topic: str,
    kafka_options: Mapping[str, Any],
    metrics: PolicyMetrics,
    replication: int = 1,
) -> PolicyFeed | None:
    """Unless `topic` is empty (no policies topic), the feed of per-channel policies into `book`,
    already caught up with its topic (its owner watches `feed.task`)."""
    if not topic:
        return None
    feed = PolicyFeed(book, topic, kafka_options, metrics, replication)
    await feed.start()
    return feed
