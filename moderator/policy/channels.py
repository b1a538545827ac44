"""Policies per channel, changed live through a compacted Kafka topic (default `chat.policies`).

Key: a channel id, or `*` for the default; value: the policy as JSON, which may be partial
(what it leaves out comes from the default, `rules.merge_specs`); a tombstone (null value)
removes it. Every instance reads the whole topic from the beginning outside any consumer group
(each needs all of it), is ready only once it has caught up, and then applies each change as it
arrives. A record that does not validate is rejected with one log line and a metric; the
previous policy stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from moderator.errors import PolicyError
from moderator.kafka.compacted import Table
from moderator.metric_wings import PolicyMetrics
from moderator.policy.rules import Policy, merge_specs

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
    """Keeps a PolicyBook in step with the policies topic, read as a compacted.Table. `start()`
    returns once caught up."""

    def __init__(
        self,
        book: PolicyBook,
        topic: str,
        kafka_options: Mapping[str, Any],
        metrics: PolicyMetrics,
        replication: int = 1,
    ) -> None:
        self.book = book
        self.metrics = metrics
        self.table = Table(
            book,
            topic,
            kafka_options,
            what="policies",
            refusal=PolicyError,
            apply=self._apply,
            on_change=self._changed,
            on_refused=self._refused,
            replication=replication,
        )

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The topic followed, once started."""
        return self.table.task

    async def start(self) -> None:
        """Create the topic if missing, read it to its end offsets, then follow it."""
        ready = await self.table.start()
        topic, default = self.table.topic, self.book.default.ident
        if not ready.found:
            log.warning("no policies topic %s: every channel gets %s", topic, default)
        log.info(
            "policies: %d channel policies, default %s, read from %s in %.2f s",
            len(self.book),
            default,
            topic,
            ready.took_s,
        )

    async def stop(self) -> None:
        await self.table.stop()

    def _apply(self, key: str, value: bytes | None) -> str:
        if not key:  # refused before the book: it would take "" for a channel
            raise PolicyError("policy record without a key")
        return self.book.apply(key, value)

    def _refused(self, key: str, exc: Exception) -> None:
        self.metrics.rejected.inc()
        if not key:
            log.error("policy record without a key (a channel id, or %r) ignored", DEFAULT_KEY)
        else:
            log.error("%s; the previous policy stays", exc)

    def _changed(self, key: str, result: str) -> None:
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
