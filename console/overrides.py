"""The moderators' overrides in the review console: the scope a verdict may have, the live list
of overrides (the overrides topic followed from its start into the moderators' own
`OverrideBook`, so the page shows what the moderators obey), revoking one, and the audit entry of
each verdict the console sends (moderator/review/audit.py).

Scope: a verdict overrides its message's channel unless it says `global`, and a global one is
taken only from the moderators `global_moderators` names (403 for anyone else) and only with
`confirm_global: true`, which the page sends after a dialog that names the consequence (400
without it). Revoking a global override needs the same role. A revocation goes through
moderator/review/override_edits.py, as `moderator override delete` does: the audit entry first, then
the tombstone. Every POST here passes console/csrf.py like every other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from console.board import Board
from console.feed import Feed
from console.posted import posted
from console.records import SCOPES, Verdict
from moderator.kafka.compacted import record_key
from moderator.kafka.connect import stop_within
from moderator.kafka.topics import ensure_topics
from moderator.records import DEFAULT_SCOPE
from moderator.review import audit, override_edits
from moderator.review.overrides import InvalidOverride, Override, OverrideBook, wall_ms

log = logging.getLogger(__name__)

CONFIRM = "confirm_global"  # the second, explicit step a global verdict needs
MAX_EXPIRY_S = 366 * 86400  # a longer-lived override is one without an expiry
RETRY_S = 2.0
POLL_MS = 500


class Refused(NamedTuple):
    """Why a verdict's scope or expiry is not taken: the HTTP status and the page's message."""

    status: int
    error: str


def verdict_scope(
    body: Mapping[str, Any], who: str, global_moderators: frozenset[str]
) -> tuple[str, int | None] | Refused:
    """(scope, override expiry in seconds or None) of a verdict post by `who`, or why not."""
    scope = body.get("scope") or DEFAULT_SCOPE
    if scope not in SCOPES:
        return Refused(400, f"scope: one of {', '.join(SCOPES)} (default {DEFAULT_SCOPE})")
    if scope == "global":
        if who not in global_moderators:
            return Refused(403, f"{who} may not make a global override: only the moderators "
                           "MODERATOR_CONSOLE_GLOBAL_MODERATORS names may")  # fmt: skip
        if body.get(CONFIRM) is not True:
            return Refused(400, f"a global override applies in every channel: confirm it "
                           f"({CONFIRM}: true)")  # fmt: skip
    expires = body.get("expires_in_s")
    if expires is not None and (type(expires) is not int or not 0 < expires <= MAX_EXPIRY_S):
        return Refused(400, f"expires_in_s: whole seconds from 1 to {MAX_EXPIRY_S}, or null")
    return scope, expires


def listed(override: Override) -> dict[str, Any]:
    """What the page shows of an override (the topic holds its text's digest, not the text)."""
    return {**override._asdict(), "key": override.key}


class OverrideDesk:
    """The overrides topic followed, the routes that list and revoke, and the verdict audit.
    `start()` returns at once (the console serves before the broker answers)."""

    def __init__(
        self,
        board: Board,
        feed: Feed,
        kafka_options: Mapping[str, Any],
        *,
        override_topic: str,
        audit_topic: str,
        global_moderators: frozenset[str],
        send_timeout_s: float,
    ) -> None:
        self.board = board
        self.feed = feed  # its producer writes revocations and audit entries
        self.options = dict(kafka_options)
        self.topic = override_topic
        self.audit_topic = audit_topic
        self.global_moderators = global_moderators
        self.send_timeout_s = send_timeout_s
        self.book = OverrideBook()
        self.identity: Callable[[Request], str | None] = lambda request: None
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._started = False  # the consumer: stopped only if it started
        self._auditing: set[asyncio.Future[Any]] = set()

    def routes(self, identity: Callable[[Request], str | None]) -> list[Route]:
        """The routes, identifying requests with `identity` (the console's)."""
        self.identity = identity
        return [
            Route("/api/overrides", self.listing),
            Route("/api/overrides/revoke", self.revoke, methods=["POST"]),
        ]

    # -- the topic -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self.topic:
            self._task = asyncio.create_task(self._follow(), name="console-overrides")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None and self._started:
            await stop_within(self._consumer, 5.0)

    async def _follow(self) -> None:
        """The topic from its start, for good; a broker error is logged and retried."""
        self._consumer = consumer = AIOKafkaConsumer(
            **self.options, group_id=None, enable_auto_commit=False,
            client_id="moderator-console-overrides",
        )  # fmt: skip
        while True:
            try:
                await consumer.start()
                self._started = True
                break
            except KafkaError as exc:
                log.warning("the overrides consumer: the broker does not answer (%r)", exc)
                await asyncio.sleep(RETRY_S)
        await self._ensure_audit_topic()
        while not (partitions := consumer.partitions_for_topic(self.topic)):
            with contextlib.suppress(KafkaError):
                await consumer.topics()  # the topic may come later (the moderators create it)
            await asyncio.sleep(RETRY_S)
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=POLL_MS)
            except KafkaError as exc:
                log.warning("reading %s: %r", self.topic, exc)
                await asyncio.sleep(RETRY_S)
                continue
            records = [r for rs in batch.values() for r in rs]
            for record in records:
                self._apply(record)
            if records:
                self.board.tell("overrides", {"count": len(self.book)})

    async def _ensure_audit_topic(self) -> None:
        """Create the audit topic, append-only and kept, before anything is written to it (a
        broker's auto-created topic would delete entries after its default retention)."""
        if not self.audit_topic:
            return
        configs = {self.audit_topic: audit.TOPIC_CONFIG}
        try:
            await ensure_topics(self.options, {self.audit_topic: 1}, configs=configs)
        except KafkaError as exc:  # not allowed to create topics: it may exist all the same
            log.warning("could not make sure the audit topic %s exists: %r", self.audit_topic, exc)

    def _apply(self, record: ConsumerRecord[bytes, bytes]) -> None:
        try:
            self.book.apply(record_key(record), record.value)
        except InvalidOverride as exc:  # the moderators refuse it too, and say so
            log.warning("%s; not listed", exc)

    # -- the routes ----------------------------------------------------------------------------

    def live(self) -> list[Override]:
        now = wall_ms()
        return sorted((o for o in self.book.entries() if o.live(now)), key=lambda o: -o.at_ms)

    async def listing(self, request: Request) -> Response:
        who = self.identity(request)
        if who is None:
            return JSONResponse({"error": "log in first"}, status_code=401)
        return JSONResponse({
            "overrides": [listed(o) for o in self.live()],
            "may_global": who in self.global_moderators,
            "topic": self.topic,
        })  # fmt: skip

    async def revoke(self, request: Request) -> Response:
        """Revoke the override a `key` names (its CSRF token checked by CsrfGuard)."""
        got = await posted(self.identity, request)  # its CSRF token checked by CsrfGuard
        if isinstance(got, Response):
            return got
        who, body = got
        key = body.get("key") if isinstance(body, dict) else None
        found = next((o for o in self.live() if o.key == key), None)
        if found is None:
            return JSONResponse({"error": "no such override (revoked or expired)"}, status_code=404)
        if found.scope == "global" and who not in self.global_moderators:
            return JSONResponse({"error": f"{who} may not revoke a global override: only the "
                                 "moderators MODERATOR_CONSOLE_GLOBAL_MODERATORS names may"},
                                status_code=403)  # fmt: skip
        if self.feed.producer is None:
            return JSONResponse({"error": "the broker does not answer"}, status_code=503)
        try:
            await asyncio.wait_for(
                override_edits.revoke(self.feed.producer, self.topic, found.key, found, actor=who,
                       via="console", audit_topic=self.audit_topic),
                self.send_timeout_s,
            )  # fmt: skip
        except (KafkaError, TimeoutError) as exc:
            log.error("console: %s could not revoke %s: %r", who, found.key, exc)
            return JSONResponse({"error": f"not revoked: {exc!r}"}, status_code=503)
        self.book.apply(found.key, None)  # the tombstone comes back through _follow too
        self.board.tell("overrides", {"count": len(self.book)})
        log.info("console: %s revoked the override %s", who, found.key)
        return JSONResponse({"revoked": listed(found)})

    # -- the audit -----------------------------------------------------------------------------

    async def audit_verdict(self, verdict: Verdict) -> None:
        """Queue the verdict's audit entry in the producer that sends the verdict next, so it
        is ahead of it; its delivery is watched (a failure is logged, never silent). A verdict
        is not held back for its entry: the verdict topic records it too."""
        producer = self.feed.producer
        if not self.audit_topic or producer is None:
            return
        entry = audit.entry("verdict", actor=verdict.moderator_id, via="console",
                            at_ms=wall_ms(), verdict=verdict._asdict(),
                            confirmed_global=verdict.scope == "global")  # fmt: skip
        try:
            sent = await asyncio.wait_for(
                producer.send(
                    self.audit_topic, orjson.dumps(entry), key=verdict.message_id.encode()
                ),
                self.send_timeout_s,
            )
        except (KafkaError, TimeoutError) as exc:
            log.error("console: the audit entry of %s was not queued: %r", verdict.message_id, exc)
            return
        self._auditing.add(sent)
        sent.add_done_callback(self._audited)

    def _audited(self, sent: asyncio.Future[Any]) -> None:
        self._auditing.discard(sent)
        if not sent.cancelled() and sent.exception() is not None:
            log.error("console: an audit entry was not delivered: %r", sent.exception())
