"""The moderator service: Kafka in, pipeline, decisions out, offsets committed after acks.

Records are fetched in batches; each batch becomes one pipeline task, and a single publisher
sends the outcomes in fetch order, so decisions for a partition leave in input order. An input
offset is committed only when the deliveries of its decision and of every earlier record of its
partition were acknowledged by the broker; a failed delivery is re-sent with backoff and holds
the partition's commit until it succeeds, or, when the broker refuses the record itself, until
its diversion to the dead-letter topic succeeds (moderator/refusal.py). A crash or a rebalance
may repeat decisions, never lose one.

Which refusals are the record's own: once refused, a record is re-sent in a batch of its own
(the broker refuses whole batches, so batch-mates of a bad record are refused with it), and a
refusal counts toward `publish_attempts` only if the topic took other records meanwhile. A
topic that refuses everything (a bad schema, a broker fault) is held like an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from moderator.batcher import BatchScorer
from moderator.cache import VerdictCache
from moderator.classifier import Classifier
from moderator.config import Settings
from moderator.connect import start_client
from moderator.degrade import Fallback
from moderator.metrics import Metrics, MetricsServer
from moderator.pipeline import InboundRecord, Outcome, Pipeline
from moderator.policy import Policy
from moderator.refusal import describe, divert, is_refusal

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100
MAX_PRODUCER_REQUEST_BYTES = 16 * 1024 * 1024  # dead letters carry the original value, any size
RETRY_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
RETRY_JITTER = 0.5  # each back-off is drawn from [0.5x, 1.5x]


@dataclass(eq=False)
class _Delivery:
    """One published outcome whose acknowledgement gates the commit of its record's offset."""

    record: InboundRecord
    topic: str
    outcome: Outcome
    future: asyncio.Future[Any]
    sent_at: float = field(default_factory=time.monotonic)  # the current attempt's
    attempts: int = 0
    alone: bool = False  # re-send in a batch of its own (it was refused once)
    refusals: int = 0  # refusals of it alone while its topic took other records
    abandoned: bool = False  # its partition moved to another member, which redoes the input
    settled: bool = False  # no longer counted in flight


@dataclass(eq=False)
class _Unit:
    """One fetched batch on its way through the pipeline."""

    records: list[InboundRecord]
    task: asyncio.Task[list[Outcome]]
    fetched_at: float = field(default_factory=time.perf_counter)


def _failed(future: asyncio.Future[Any]) -> bool:
    return future.cancelled() or future.exception() is not None


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, service: Moderator) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.service._release(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.service._adopt(set(assigned))


class Moderator:
    """One moderator process's worth of consuming, scoring and publishing.

    Use as `async with Moderator(settings) as m: await m.run()`; `stop()` is idempotent and
    finishes in-flight work within `settings.shutdown_timeout_s`.
    """

    def __init__(self, settings: Settings, *, classifier: Classifier | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self._classifier = classifier
        self._metrics_server: MetricsServer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._cache: VerdictCache | None = None
        self._scorer: BatchScorer | None = None
        self._pipeline: Pipeline | None = None
        self._units: asyncio.Queue[_Unit] = asyncio.Queue()
        self._unit_tasks: set[asyncio.Task[list[Outcome]]] = set()
        self._deliveries: dict[TopicPartition, deque[_Delivery]] = {}
        self._unpublished: dict[TopicPartition, int] = {}
        self._committable: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_ack: dict[str, float] = {}  # topic → when the broker last took a record
        self._partitioner = DefaultPartitioner()
        self._in_flight = 0
        self._room = asyncio.Event()
        self._room.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._stopping = False
        self._started = False
        self._failure: BaseException | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server is not None else None

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped a background task, if one did."""
        return self._failure

    @property
    def cache(self) -> VerdictCache:
        assert self._cache is not None, "start() first"
        return self._cache

    async def start(self) -> None:
        """Start everything, in dependency order; on failure, stop what was started."""
        if self._started:
            return
        self._started = True
        s = self.settings
        try:
            self._metrics_server = MetricsServer(s.metrics_host, s.metrics_port, self.metrics)
            self._metrics_server.start()
            if self._classifier is None:
                s.check_model_dir()
                self._classifier = await asyncio.to_thread(
                    Classifier, s.model_dir, threads=s.effective_threads
                )
            classifier = self._classifier
            self.metrics.model.info(
                {
                    "name": classifier.info.name,
                    "version": classifier.info.version,
                    "threads": str(classifier.threads),
                }
            )
            policy = Policy.load(s.policy)
            policy.check_labels(classifier.labels)
            self._cache = VerdictCache(
                s.redis_url,
                metrics=self.metrics,
                ttl_s=s.cache_ttl_s,
                l1_size=s.l1_cache_size,
                timeout_ms=s.redis_timeout_ms,
            )
            await self._cache.start()
            self._scorer = BatchScorer(classifier, max_batch=s.max_batch, metrics=self.metrics)
            await self._scorer.start()
            self._pipeline = Pipeline(
                classifier,
                policy,
                self._scorer,
                self._cache,
                self.metrics,
                max_record_bytes=s.max_record_bytes,
                budget_ms=s.budget_ms,
                fallback=(
                    None if s.degraded_mode == "off" else Fallback.load(s.degraded_mode, s.denylist)
                ),
            )
            self._producer = AIOKafkaProducer(
                **s.kafka_options(),
                acks="all",
                linger_ms=0,
                max_request_size=MAX_PRODUCER_REQUEST_BYTES,
                client_id="moderator",
            )
            await start_client(self._producer, s.kafka_options(), "the producer")
            self._consumer = AIOKafkaConsumer(
                **s.kafka_options(),
                group_id=s.group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=s.fetch_max_wait_ms,
                **s.consumer_timeouts(),
                client_id="moderator",
            )
            await start_client(self._consumer, s.kafka_options(), "the consumer")
            self._consumer.subscribe([s.in_topic], listener=_Rebalance(self))
            for name, coro in (
                ("fetch", self._fetch_loop()),
                ("publish", self._publish_loop()),
                ("commit", self._commit_loop()),
                ("lag", self._lag_loop()),
            ):
                self._watch(asyncio.create_task(coro, name=f"moderator-{name}"))
            if self._scorer.task is not None:
                self._scorer.task.add_done_callback(self._on_task_done)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "moderating %s → %s (dead letters → %s) as group %s with model %s, policy %s",
            s.in_topic, s.out_topic, s.dlq_topic, s.group_id, classifier.info.ident, policy.ident,
        )  # fmt: skip

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until partitions are assigned and consuming has begun."""
        await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def run(self) -> None:
        """Run until `stop()` is called; raises if a background task failed."""
        await self._stopped.wait()
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        """Stop fetching, finish and publish what is in flight, commit, close. Idempotent."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        self._set_ready(False)
        fetch = next((t for t in self._tasks if t.get_name() == "moderator-fetch"), None)
        if fetch is not None:
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
        if self._failure is None and self._consumer is not None:
            drained = await self._release(set(self._deliveries), forget=False)
            if not drained:
                log.warning("shutdown deadline passed with work in flight; it will be redone")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for unit_task in list(self._unit_tasks):
            unit_task.cancel()
        for closer in (self._consumer, self._scorer, self._producer, self._cache):
            if closer is not None:
                try:
                    await closer.stop()
                except Exception:
                    log.exception("error while stopping %s", type(closer).__name__)
        if self._metrics_server is not None:
            self._metrics_server.stop()
        self._stopped.set()
        log.info("moderator stopped")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _watch(self, task: asyncio.Task[None]) -> None:
        self._tasks.append(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or self._stopping:
            return
        exc = task.exception() or RuntimeError(f"task {task.get_name()} ended unexpectedly")
        log.critical("%s failed; stopping the moderator", task.get_name(), exc_info=exc)
        self._failure = exc
        self._stop_task = asyncio.get_running_loop().create_task(self.stop())

    def _set_ready(self, ready: bool) -> None:
        if ready:
            self._ready.set()
        else:
            self._ready.clear()
        if self._metrics_server is not None:
            if ready:
                self._metrics_server.ready.set()
            else:
                self._metrics_server.ready.clear()

    # -- consuming -------------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        assert self._consumer is not None
        assert self._pipeline is not None
        max_records = max(self.settings.max_batch * 4, 64)
        while True:
            await self._room.wait()
            batches = await self._consumer.getmany(
                timeout_ms=FETCH_TIMEOUT_MS,
                max_records=min(max_records, self.settings.max_in_flight - self._in_flight),
            )
            records: list[InboundRecord] = []
            for tp, part in batches.items():
                if tp not in self._deliveries:
                    if tp not in self._consumer.assignment():
                        continue  # fetched just before a revocation: its new owner redoes it
                    self._adopt({tp})  # records may arrive before the listener has run
                self._unpublished[tp] = self._unpublished.get(tp, 0) + len(part)
                records.extend(part)
            if not records:
                continue
            self.metrics.consumed.inc(len(records))
            self._add_in_flight(len(records))
            task = asyncio.create_task(self._pipeline.process(records), name="moderator-unit")
            self._unit_tasks.add(task)
            task.add_done_callback(self._unit_tasks.discard)
            self._units.put_nowait(_Unit(records, task))

    def _add_in_flight(self, n: int) -> None:
        self._in_flight += n
        self.metrics.in_flight.set(self._in_flight)
        if self._in_flight >= self.settings.max_in_flight:
            self._room.clear()
        else:
            self._room.set()

    # -- publishing ------------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        while True:
            unit = await self._units.get()
            outcomes = await unit.task  # a pipeline failure is a bug: it stops the service
            for record, outcome in zip(unit.records, outcomes, strict=True):
                tp = TopicPartition(record.topic, record.partition)
                topic = self.settings.dlq_topic if outcome.dead_letter else self.settings.out_topic
                future = await self._send(topic, outcome)
                delivery = _Delivery(record, topic, outcome, future)
                queue = self._deliveries.get(tp)
                if queue is not None:
                    queue.append(delivery)
                else:
                    delivery.abandoned = True
                future.add_done_callback(functools.partial(self._on_delivered, delivery))
                if tp in self._unpublished:
                    self._unpublished[tp] -= 1

    async def _send(
        self, topic: str, outcome: Outcome, *, alone: bool = False
    ) -> asyncio.Future[Any]:
        """Hand one record to the producer; a failure to enqueue is a failed delivery."""
        assert self._producer is not None
        try:
            if alone:
                future: asyncio.Future[Any] = await self._send_alone(topic, outcome)
            else:
                future = await self._producer.send(
                    topic, value=outcome.value, key=outcome.key, headers=outcome.headers or None
                )
        except KafkaError as exc:
            future = asyncio.get_running_loop().create_future()
            future.set_exception(exc)
        return future

    async def _send_alone(self, topic: str, outcome: Outcome) -> asyncio.Future[Any]:
        """One record in a closed batch of its own, to the partition `send` would pick, so the
        broker's answer is about this record alone."""
        assert self._producer is not None
        batch = self._producer.create_batch()
        batch.append(key=outcome.key, value=outcome.value, timestamp=None,
                     headers=outcome.headers)  # fmt: skip
        batch.close()
        partitions = sorted(await self._producer.partitions_for(topic))
        partition = self._partitioner(outcome.key, partitions, partitions)
        future: asyncio.Future[Any] = await self._producer.send_batch(
            batch, topic, partition=partition
        )
        return future

    def _on_delivered(self, delivery: _Delivery, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            if delivery.abandoned:
                self._settle(delivery)
            return  # the committer re-sends it
        self._last_ack[delivery.topic] = time.monotonic()
        if delivery.outcome.dead_letter:
            self.metrics.dead_letters.labels(delivery.outcome.label).inc()
        else:
            self.metrics.decisions.labels(delivery.outcome.label).inc()
        self._settle(delivery)

    def _settle(self, delivery: _Delivery) -> None:
        """Stop counting `delivery` in flight, once: acknowledged, or abandoned unacknowledged."""
        if not delivery.settled:
            delivery.settled = True
            self._add_in_flight(-1)

    def _retry(self, delivery: _Delivery) -> None:
        exc = delivery.future.exception() if not delivery.future.cancelled() else None
        if exc is not None and is_refusal(exc):
            # Its own refusal only if it went alone and the topic took other records meanwhile.
            if delivery.alone and self._last_ack.get(delivery.topic, 0) > delivery.sent_at:
                delivery.refusals += 1
                limit = self.settings.publish_attempts
                if limit and delivery.refusals >= limit and self._divert(delivery, exc):
                    self._resend(delivery, 0.0)  # a different record now: send it at once
                    return
            delivery.alone = True
        backoff_s = RETRY_BACKOFF_S[min(delivery.attempts, len(RETRY_BACKOFF_S) - 1)]
        # Jitter: deliveries that failed together (one produce batch) must not be re-sent
        # together forever.
        backoff_s *= random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)  # noqa: S311
        delivery.attempts += 1
        log.warning(
            "publishing to %s failed (%s); retry %d in %.2fs",
            delivery.topic, exc, delivery.attempts, backoff_s,
        )  # fmt: skip
        self.metrics.publish_retries.inc()
        self._resend(delivery, backoff_s)

    def _resend(self, delivery: _Delivery, backoff_s: float) -> None:
        async def resend() -> None:
            await asyncio.sleep(backoff_s)
            delivery.sent_at = time.monotonic()
            sent = await self._send(delivery.topic, delivery.outcome, alone=delivery.alone)
            await sent

        delivery.future = asyncio.ensure_future(resend())
        delivery.future.add_done_callback(functools.partial(self._on_delivered, delivery))

    def _divert(self, delivery: _Delivery, exc: BaseException) -> bool:
        """Swap a refused outcome for its dead letter (moderator/refusal.py); False if none."""
        r = delivery.record
        where = f"{r.topic}[{r.partition}]@{r.offset}"
        diverted = divert(delivery.outcome, r, exc, delivery.refusals)
        if diverted is None:
            if delivery.refusals == self.settings.publish_attempts:  # said once
                self.metrics.publish_refused.labels("receipt").inc()
                log.error(
                    "the broker refused the dead-letter receipt for %s %d times (%s); re-sending "
                    "it until it is taken, and holding the partition's commits",
                    where, delivery.refusals, describe(exc),
                )  # fmt: skip
            return False
        kind = "dead_letter" if delivery.outcome.dead_letter else "decision"
        log.error(
            "the broker refused the %s for %s %d times (%s); diverting it to %s",
            kind.replace("_", " "), where, delivery.refusals, describe(exc),
            self.settings.dlq_topic,
        )  # fmt: skip
        self.metrics.publish_refused.labels(kind).inc()
        delivery.outcome = diverted
        delivery.topic = self.settings.dlq_topic
        delivery.attempts = delivery.refusals = 0
        delivery.alone = False  # a new record: batched like any other until refused
        return True

    # -- committing ------------------------------------------------------------------------

    def _advance(self) -> None:
        """Move each partition's committable offset past its acknowledged prefix, and re-send
        every failed delivery (not only the first: one refused for good must not hold the
        re-sends of those behind it)."""
        for tp, queue in self._deliveries.items():
            while queue and queue[0].future.done() and not _failed(queue[0].future):
                self._committable[tp] = queue.popleft().record.offset + 1
            for delivery in queue:
                if delivery.future.done() and _failed(delivery.future):
                    self._retry(delivery)

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        assert self._consumer is not None
        self._advance()
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self._committable.items()
            if self._committed.get(tp) != offset and (only is None or tp in only)
        }
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except CommitFailedError as exc:
            self.metrics.commits.labels("failed").inc()
            log.warning("commit failed because the group rebalanced; work will be redone: %s", exc)
            return
        except KafkaError as exc:
            self.metrics.commits.labels("failed").inc()
            log.warning("commit failed (%s); retrying at the next interval", exc)
            return
        self.metrics.commits.labels("ok").inc()
        for tp, meta in offsets.items():
            self._committed[tp] = meta.offset

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            await self._commit()

    def _adopt(self, assigned: set[TopicPartition]) -> None:
        for tp in assigned:
            self._deliveries.setdefault(tp, deque())
            self._unpublished.setdefault(tp, 0)
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in assigned))
        if not self._stopping:
            self._set_ready(True)

    async def _release(self, revoked: set[TopicPartition], *, forget: bool = True) -> bool:
        """Finish the work of `revoked` partitions and commit it, before giving them up."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        drained = False
        while True:
            self._advance()
            drained = all(
                not self._unpublished.get(tp) and not self._deliveries.get(tp) for tp in revoked
            )
            if drained or time.monotonic() > deadline or self._failure is not None:
                break
            await asyncio.sleep(0.005)
        await self._commit(revoked)
        if forget:
            for tp in revoked:
                self._abandon(self._deliveries.pop(tp, ()))
                self._unpublished.pop(tp, None)
                self._committable.pop(tp, None)
                self._committed.pop(tp, None)
                with contextlib.suppress(KeyError):
                    self.metrics.consumer_lag.remove(tp.topic, str(tp.partition))
            if revoked:
                log.info("released %s", sorted((tp.topic, tp.partition) for tp in revoked))
        return drained

    def _abandon(self, deliveries: Iterable[_Delivery]) -> None:
        """Give up deliveries of a partition now owned elsewhere: no more re-sends, and no longer
        in flight (or fetching would stay capped by work that will never be acknowledged here)."""
        for delivery in deliveries:
            delivery.abandoned = True
            if not delivery.future.done():
                delivery.future.cancel()  # its callback settles it
            elif _failed(delivery.future):
                self._settle(delivery)

    async def _lag_loop(self) -> None:
        assert self._consumer is not None
        while True:
            await asyncio.sleep(1.0)
            for tp in list(self._deliveries):
                highwater = self._consumer.highwater(tp)
                if highwater is None:
                    continue
                done = self._committed.get(tp)
                if done is None:
                    done = await self._consumer.committed(tp) or 0
                self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                    max(highwater - done, 0)
                )
