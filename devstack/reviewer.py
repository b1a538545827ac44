"""A scripted human moderator, for `moderator demo` and the chaos scenario of the moderation loop.

It does what a moderators' tool does: reads the review topic, and answers held messages with
verdicts produced by the stock client (confluent-kafka, as the README's example), each
acknowledged before the next is sent. Which held messages get a verdict is the caller's `Rule`:
the n-th distinct held message (from 0, in the order their review records are read) gets the
verdicts it returns, in order (none: it is left to its timeout; a second one is a late verdict,
which may change only the override). A review record read again (a decision redone after a
crash publishes it again) is counted, never answered twice: a tool shows a message once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NamedTuple, Self

import confluent_kafka
import orjson
from aiokafka import AIOKafkaConsumer

from loadgen.kafka import assign_at_end
from moderator.records import DEFAULT_SCOPE

log = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 30.0


class Answer(NamedTuple):
    """One verdict to give: `verdict` (allow, nudge, block) by `moderator_id`, its override for
    the held message's channel only unless `scope` says `global` (as a moderator's tool should:
    one verdict is not a platform-wide rule)."""

    verdict: str
    moderator_id: str
    scope: str = DEFAULT_SCOPE


class Sent(NamedTuple):
    """A verdict the broker acknowledged, and when (wall-clock ms)."""

    message_id: str
    verdict: str
    moderator_id: str
    first: bool  # the first verdict sent for its message
    acked_ms: float


Rule = Callable[[int, dict[str, Any]], Sequence[Answer]]


@dataclass
class Reviewer:
    """`async with Reviewer(bootstrap, review_topic, verdict_topic, rule) as r:`; then read
    `r.held` (message id → its first review record), `r.sent`, `r.records`, `r.failed`."""

    bootstrap: str
    review_topic: str
    verdict_topic: str
    rule: Rule
    held: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    records: int = field(default=0, init=False)  # review records handled, repeats included
    sent: list[Sent] = field(default_factory=list, init=False)
    failed: list[str] = field(default_factory=list, init=False)  # not taken by the broker
    _consumer: AIOKafkaConsumer | None = field(default=None, init=False, repr=False)
    _producer: confluent_kafka.Producer | None = field(default=None, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def __aenter__(self) -> Self:
        self._producer = confluent_kafka.Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "client.id": "scripted-moderator"}
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=50, client_id="scripted-moderator",
        )  # fmt: skip
        await self._consumer.start()
        await assign_at_end(self._consumer, [self.review_topic])
        self._task = asyncio.create_task(self._run(), name="scripted-moderator")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()
        if self._producer is not None:
            await asyncio.to_thread(self._producer.flush, DELIVERY_TIMEOUT_S)
            self._producer = None  # librdkafka's client closes when it is collected

    def check(self) -> None:
        """Raise the reader's error if it died (a dead reviewer would fake lost verdicts)."""
        if self._task is not None and self._task.done():
            self._task.result()
            raise RuntimeError("the scripted moderator stopped")

    def answered(self) -> set[str]:
        """Held messages that got at least one verdict."""
        return {s.message_id for s in self.sent}

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for record in records:
                    await self._read(record.value)

    async def _read(self, value: bytes | None) -> None:
        review: dict[str, Any] = orjson.loads(value or b"{}")
        message_id = review.get("message_id")
        if isinstance(message_id, str) and message_id not in self.held:
            n = len(self.held)
            self.held[message_id] = review
            for i, answer in enumerate(self.rule(n, review)):
                await self._send(message_id, answer, first=i == 0)
        # Counted once its verdicts are sent: a caller that waits for `records` to reach what it
        # produced sees every answer (counted first, the last one's send could still be in flight).
        self.records += 1

    async def _send(self, message_id: str, answer: Answer, *, first: bool) -> None:
        value = orjson.dumps({"message_id": message_id, "verdict": answer.verdict,
                              "moderator_id": answer.moderator_id, "scope": answer.scope,
                              "at_ms": int(time.time() * 1000)})  # fmt: skip
        error = await asyncio.to_thread(self._produce, message_id.encode(), value)
        if error is not None:
            log.warning("verdict for %s not delivered: %s", message_id, error)
            self.failed.append(message_id)
            return
        self.sent.append(Sent(message_id, answer.verdict, answer.moderator_id, first,
                              time.time() * 1000))  # fmt: skip

    def _produce(self, key: bytes, value: bytes) -> str | None:
        """Produce one verdict and wait for the broker's answer: None, or what went wrong."""
        assert self._producer is not None
        errors: list[object] = []
        self._producer.produce(
            self.verdict_topic, key=key, value=value, on_delivery=lambda err, _: errors.append(err)
        )
        left = self._producer.flush(DELIVERY_TIMEOUT_S)
        if left or not errors:
            return "no acknowledgement"
        return None if errors[0] is None else str(errors[0])
