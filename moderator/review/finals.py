"""Final decisions: the at most one decision that ends a held message's review, after a verdict
(moderator/review/verdicts.py) or its timeout (`TimeoutSweeper`, here).

A final decision is a decision record (`final: true`) that repeats the held message's ids,
scores, model, policy, span and key (the original decision's, so it lands with its channel's);
its action is the verdict or the policy's `review_fallback`, its reason `verdict:<moderator_id>`
or `review_timeout`. It is sent directly on the moderator's producer and re-sent until the
broker acknowledges it: only then is the verdict's offset committed, or the timed-out message
settled (moderator/review/held.py), so a crash in between repeats it, never loses it. A timeout's
final decision has no input record to dead-letter in its place: one the broker refuses for good
is re-sent until taken (a verdict's is diverted, moderator/review/verdicts.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence

from aiokafka.errors import KafkaError

from moderator.kafka.connect import Sender
from moderator.kafka.refusal import RETRY_BACKOFF_S, RETRY_JITTER, describe, is_refusal
from moderator.metric_wings import ReviewMetrics
from moderator.records import ChatMessage, Timing, encode_decision
from moderator.review.held import Held, HeldStore

log = logging.getLogger(__name__)

TIMEOUT_REASON = "review_timeout"
VERDICT_REASON = "verdict"  # reason `verdict:<moderator_id>`
SWEEP_EVERY_S = 1.0  # a held message gets its fallback within about this long of its timeout


class Refused(Exception):
    """The broker refused a record itself, `attempts` times."""


def final_key(held: Held) -> bytes:
    """The original decision's key, as `held_message` kept it."""
    return str(held["key"]).encode("latin-1")


def encode_final(held: Held, action: str, reason: str) -> bytes:
    """The final decision for `held`: `action` for `reason`, decided now."""
    chat = ChatMessage(*(held[name] for name in ChatMessage._fields))
    return encode_decision(
        chat,
        action=action,
        reason=reason,
        severity=None,
        scores=held["scores"] or {},
        model=held["model"],
        policy=held["policy"],
        cached=False,
        degraded=False,
        timing=Timing(0.0, 0.0, 0.0),
        decided_at_ms=int(time.time() * 1000),
        over_budget=False,
        span=tuple(held["span"]),
        truncated=held["truncated"],
        language=held["language"],
        final=True,
    )


async def deliver(
    producer: Sender,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]] = (),
    *,
    refusals: int = 0,
) -> None:
    """Send one record and wait for its acknowledgement, re-sending with back-off through
    outages; raises Refused once the broker refused it itself `refusals` times (0: never)."""
    attempt = refused = 0
    while True:
        try:
            sent = await producer.send(topic, value=value, key=key, headers=list(headers) or None)
            await sent
            return
        except KafkaError as exc:
            if is_refusal(exc):
                refused += 1
                if refusals and refused >= refusals:
                    raise Refused(describe(exc)) from exc
            backoff_s = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
            backoff_s *= random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)  # noqa: S311
            attempt += 1
            log.warning(
                "publishing to %s failed (%s); retry %d in %.2fs", topic, exc, attempt, backoff_s
            )
            await asyncio.sleep(backoff_s)


class TimeoutSweeper:
    """Every instance, every SWEEP_EVERY_S: claims the held messages whose timeout passed (one
    instance each, moderator/review/held.py), publishes each one's fallback final decision, and
    settles them once acknowledged."""

    def __init__(
        self, store: HeldStore, producer: Sender, *, out_topic: str, metrics: ReviewMetrics
    ) -> None:
        self.store = store
        self.producer = producer
        self.out_topic = out_topic
        self.metrics = metrics
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(SWEEP_EVERY_S)

    async def sweep(self) -> int:
        """Time out what is due now; the number timed out."""
        due = await self.store.claim_due(int(time.time() * 1000))
        for held in due:
            value = encode_final(held, held["review_fallback"], TIMEOUT_REASON)
            await deliver(self.producer, self.out_topic, final_key(held), value)
            self.metrics.review_timeouts.inc()
            log.debug("held message %s timed out: %s", held["message_id"], held["review_fallback"])
        await self.store.settle([held["message_id"] for held in due])
        return len(due)
