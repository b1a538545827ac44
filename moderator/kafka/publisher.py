"""Publishing outcomes: in the order given, re-sent until the broker acknowledges them.

The service hands over the outcomes of each fetched batch in fetch order, and they are sent in
that order, so decisions for a partition leave in input order; every acknowledgement is
reported (`on_acked`) so the offset ledger can move. A failed delivery is re-sent with backoff,
scheduled from its own delivery callback, until it succeeds, or, when the broker refuses the
record itself, until its diversion to the dead-letter topic succeeds (moderator/kafka/refusal.py).

Which refusals are the record's own: once refused, a record is re-sent in a batch of its own
(the broker refuses whole batches, so batch-mates of a bad record are refused with it), and a
refusal counts toward `publish_attempts` only if the topic took other records between that
attempt and its re-send. A topic that refuses everything (a bad schema, a broker fault) is held
like an outage.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from moderator.kafka.connect import Producer
from moderator.kafka.intake import Fetched
from moderator.kafka.ledger import Entry
from moderator.kafka.refusal import RETRY_BACKOFF_S, RETRY_JITTER, describe, divert, is_refusal
from moderator.metric_wings import KafkaMetrics
from moderator.records import InboundRecord, Outcome
from moderator.tasks import Supervisor, cancel

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Delivery:
    """One outcome on its way to the broker, across re-sends and a diversion."""

    entry: Entry
    record: InboundRecord
    topic: str
    outcome: Outcome
    sent_at: float = field(default_factory=time.monotonic)  # the current attempt's
    attempts: int = 0
    alone: bool = False  # re-send in a batch of its own (it was refused once)
    refusals: int = 0  # refusals of it alone while its topic took other records
    future: asyncio.Future[Any] | None = None  # the current attempt's acknowledgement
    retry: asyncio.Task[None] | None = None  # a re-send waiting out its backoff


class Publisher:
    """Owns the producer: sends outcomes in order, re-sends, diverts, reports acks.

    `on_acked(entry)` is called once per acknowledged outcome. Each re-send waiting out its
    backoff is a task of the publisher's, watched by the owner's `supervisor` (a bug in one
    stops the service).
    """

    def __init__(
        self,
        producer: Producer,
        *,
        out_topic: str,
        dlq_topic: str,
        publish_attempts: int,
        review_topic: str = "",
        metrics: KafkaMetrics,
        on_acked: Callable[[Entry], None],
        supervisor: Supervisor,
        backoff_s: Sequence[float] = RETRY_BACKOFF_S,
    ) -> None:
        self.producer = producer
        self.out_topic = out_topic
        self.dlq_topic = dlq_topic
        self.review_topic = review_topic
        self.publish_attempts = publish_attempts
        self.metrics = metrics
        self._on_acked = on_acked
        self._supervisor = supervisor
        self._backoff_s = tuple(backoff_s)
        self._unacked: dict[Entry, list[_Delivery]] = {}  # a decision, and its review record
        self._last_ack: dict[str, float] = {}  # topic → when the broker last took a record
        self._partitioner = DefaultPartitioner()
        self._retries: set[asyncio.Task[None]] = set()
        self._stopped = False

    async def publish(self, batch: Sequence[Fetched], outcomes: Sequence[Outcome]) -> None:
        """Send `outcomes`, one per record of `batch`, in order, after those given before; each
        is re-sent until acknowledged (or its entry is abandoned). A `review` decision's review
        record goes right after it; its entry is acknowledged once both are."""
        for (entry, record), outcome in zip(batch, outcomes, strict=True):
            topic = self.dlq_topic if outcome.dead_letter else self.out_topic
            deliveries = [_Delivery(entry, record, topic, outcome)]
            if outcome.review is not None:
                review = Outcome(outcome.review_key, outcome.review, outcome.headers)
                deliveries.append(_Delivery(entry, record, self.review_topic, review))
            if not entry.abandoned:  # every part registered before any can be acknowledged
                self._unacked[entry] = list(deliveries)
            for delivery in deliveries:
                self._watch(delivery, await self._send(delivery.topic, delivery.outcome))

    def abandon(self, entries: Iterable[Entry]) -> None:
        """Stop re-sending outcomes of entries given up (their partition moved elsewhere)."""
        for entry in entries:
            for delivery in self._unacked.pop(entry, ()):
                if delivery.retry is not None:
                    delivery.retry.cancel()
                if delivery.future is not None and not delivery.future.done():
                    delivery.future.cancel()

    async def stop(self) -> None:
        """Cancel every pending re-send, then stop the producer. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        await cancel(*self._retries)
        await self.producer.stop()

    # -- sending ---------------------------------------------------------------------------

    def _watch(self, delivery: _Delivery, future: asyncio.Future[Any]) -> None:
        delivery.future = future
        future.add_done_callback(functools.partial(self._on_delivered, delivery))

    async def _send(
        self, topic: str, outcome: Outcome, *, alone: bool = False
    ) -> asyncio.Future[Any]:
        """Hand one record to the producer; a failure to enqueue is a failed delivery."""
        try:
            if alone:
                future: asyncio.Future[Any] = await self._send_alone(topic, outcome)
            else:
                future = await self.producer.send(
                    topic, value=outcome.value, key=outcome.key, headers=outcome.headers or None
                )
        except KafkaError as exc:
            future = asyncio.get_running_loop().create_future()
            future.set_exception(exc)
        return future

    async def _send_alone(self, topic: str, outcome: Outcome) -> asyncio.Future[Any]:
        """One record in a closed batch of its own, to the partition `send` would pick, so the
        broker's answer is about this record alone."""
        batch = self.producer.create_batch()
        batch.append(key=outcome.key, value=outcome.value, timestamp=None,
                     headers=outcome.headers)  # fmt: skip
        batch.close()
        partitions = sorted(await self.producer.partitions_for(topic))
        partition = self._partitioner(outcome.key, partitions, partitions)
        future: asyncio.Future[Any] = await self.producer.send_batch(
            batch, topic, partition=partition
        )
        return future

    # -- acknowledgements and re-sends -----------------------------------------------------

    def _on_delivered(self, delivery: _Delivery, future: asyncio.Future[Any]) -> None:
        exc = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if exc is not None:
            if not delivery.entry.abandoned and not self._stopped:
                self._schedule_retry(delivery, exc)
            return
        self._last_ack[delivery.topic] = time.monotonic()
        if (reason := delivery.outcome.error_code) is not None:  # a dead letter
            self.metrics.dead_letters[reason].inc()
        elif delivery.outcome.action is None:  # a review record
            self.metrics.review_records.inc()
        else:
            self.metrics.decisions[delivery.outcome.action].inc()
        parts = self._unacked.get(delivery.entry, [])
        if delivery in parts:
            parts.remove(delivery)
        if not parts:  # the last part of its outcome (or its entry was given up)
            self._unacked.pop(delivery.entry, None)
            self._on_acked(delivery.entry)

    def _schedule_retry(self, delivery: _Delivery, exc: BaseException) -> None:
        backoff_s = self._backoff_s[min(delivery.attempts, len(self._backoff_s) - 1)]
        # Jitter: deliveries that failed together (one produce batch) must not be re-sent
        # together forever.
        backoff_s *= random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)  # noqa: S311
        delivery.attempts += 1
        log.warning(
            "publishing to %s failed (%s); retry %d in %.2fs",
            delivery.topic, exc, delivery.attempts, backoff_s,
        )  # fmt: skip
        self.metrics.publish_retries.inc()
        task = self._supervisor.spawn(
            self._retry(delivery, exc, backoff_s), name="moderator-resend", may_end=True
        )
        delivery.retry = task
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def _retry(self, delivery: _Delivery, exc: BaseException, backoff_s: float) -> None:
        await asyncio.sleep(backoff_s)
        delivery.retry = None
        if delivery.entry.abandoned:  # given up while it waited
            return
        if is_refusal(exc):
            # Its own refusal only if it went alone and the topic took other records meanwhile.
            if delivery.alone and self._last_ack.get(delivery.topic, 0) > delivery.sent_at:
                delivery.refusals += 1
                limit = self.publish_attempts
                if limit and delivery.refusals >= limit:
                    self._divert(delivery, exc)
            else:
                delivery.alone = True
        delivery.sent_at = time.monotonic()
        sent = await self._send(delivery.topic, delivery.outcome, alone=delivery.alone)
        self._watch(delivery, sent)

    def _divert(self, delivery: _Delivery, exc: BaseException) -> None:
        """Swap a refused outcome for its dead letter (moderator/kafka/refusal.py), if it has
        one."""
        r = delivery.record
        where = f"{r.topic}[{r.partition}]@{r.offset}"
        ids = {"topic": r.topic, "partition": r.partition, "offset": r.offset}  # for JSON logs
        diverted = divert(delivery.outcome, r, exc, delivery.refusals)
        if diverted is None:
            if delivery.refusals == self.publish_attempts:  # said once
                self.metrics.publish_refused["receipt"].inc()
                log.error(
                    "the broker refused the dead-letter receipt for %s %d times (%s); re-sending "
                    "it until it is taken, and holding the partition's commits",
                    where, delivery.refusals, describe(exc), extra=ids,
                )  # fmt: skip
            return
        kind = "dead_letter" if delivery.outcome.dead_letter else "decision"
        log.error(
            "the broker refused the %s for %s %d times (%s); diverting it to %s",
            kind.replace("_", " "), where, delivery.refusals, describe(exc), self.dlq_topic,
            extra=ids,
        )  # fmt: skip
        self.metrics.publish_refused[kind].inc()
        delivery.outcome = diverted
        delivery.topic = self.dlq_topic
        delivery.attempts = delivery.refusals = 0
        delivery.alone = False  # a new record: batched like any other until refused
