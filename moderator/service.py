"""The moderator service: Kafka in, pipeline, decisions out, offsets committed after acks.

Records are fetched in batches; each batch becomes one pipeline task, and the publisher
(moderator/publisher.py) sends the outcomes in fetch order, so decisions for a partition leave
in input order. The offset ledger (moderator/ledger.py) commits an input offset only when the
deliveries of its decision and of every earlier record of its partition were acknowledged by
the broker. A crash or a rebalance may repeat decisions, never lose one. This module wires the
parts together and owns the fetch loop, the commits and the rebalance hand-over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from moderator.batcher import MicroBatcher
from moderator.cache import ScoreCache
from moderator.channel_policies import PolicyBook, PolicyFeed, follow_policies
from moderator.classifier import Classifier
from moderator.config import Settings
from moderator.connect import start_client, stop_within
from moderator.degrade import fallback_for
from moderator.ledger import Entry, OffsetLedger
from moderator.metrics import Metrics, MetricsServer, listen
from moderator.pipeline import Pipeline
from moderator.publisher import Fetched, Publisher
from moderator.records import Outcome

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100
FINAL_COMMIT_MIN_S = 5.0  # what a hand-over or shutdown commit gets, past the deadline too
MAX_PRODUCER_REQUEST_BYTES = 16 * 1024 * 1024  # dead letters carry the original value, any size


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands partitions over: finish and commit revoked work first, then take new partitions."""

    def __init__(
        self,
        release: Callable[[set[TopicPartition]], Awaitable[bool]],
        adopt: Callable[[set[TopicPartition]], None],
    ) -> None:
        self.release = release
        self.adopt = adopt

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.release(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.adopt(set(assigned))


class Moderator:
    """One moderator process's worth of consuming, scoring and publishing.

    Use as `async with Moderator(settings) as m: await m.run()`; `stop()` is idempotent and
    finishes in-flight work within `settings.shutdown_timeout_s`.
    """

    def __init__(self, settings: Settings, *, classifier: Classifier | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics(budget_s=settings.budget_ms / 1000)
        self._classifier = classifier
        self._metrics_server: MetricsServer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._publisher: Publisher | None = None
        self._cache: ScoreCache | None = None
        self._scorer: MicroBatcher | None = None
        self._pipeline: Pipeline | None = None
        self._feed: PolicyFeed | None = None
        self._ledger = OffsetLedger()
        self._unit_tasks: set[asyncio.Task[list[Outcome]]] = set()
        self._room = asyncio.Event()
        self._room.set()
        self._fetch_task: asyncio.Task[None] | None = None
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
    def cache(self) -> ScoreCache:
        assert self._cache is not None, "start() first"
        return self._cache

    async def start(self) -> None:
        """Start everything, in dependency order; on failure, stop what was started."""
        if self._started:
            return
        self._started = True
        s = self.settings
        try:
            self._metrics_server = listen(s.metrics_host, s.metrics_port, self.metrics)
            self._metrics_server.start()
            if self._classifier is None:
                s.check_model_dir()
                self._classifier = await asyncio.to_thread(
                    Classifier, s.model_dir, threads=s.scoring_layout[0]
                )
            classifier = self._classifier
            if shapes := await asyncio.to_thread(classifier.warm_up, s.max_batch):
                log.info("model warmed on %d input shapes before taking traffic", shapes)
            info = classifier.info
            self.metrics.model.info(
                {"name": info.name, "version": info.version, "threads": str(classifier.threads)}
            )
            policies = PolicyBook.load(s.policy, classifier.labels)
            self._cache = ScoreCache(
                s.redis_url,
                metrics=self.metrics,
                ttl_s=s.cache_ttl_s,
                l1_size=s.l1_cache_size,
                timeout_ms=s.redis_timeout_ms,
            )
            await self._cache.start()
            self._scorer = MicroBatcher(classifier, max_batch=s.max_batch, metrics=self.metrics,
                                        concurrency=s.scoring_layout[1])  # fmt: skip
            await self._scorer.start()
            self._pipeline = Pipeline(
                classifier,
                policies,
                self._scorer,
                self._cache,
                self.metrics,
                max_record_bytes=s.max_record_bytes,
                budget_ms=s.budget_ms,
                fallback=fallback_for(s),
            )
            producer = AIOKafkaProducer(
                **s.kafka_options(),
                acks="all",
                linger_ms=0,
                max_request_size=MAX_PRODUCER_REQUEST_BYTES,
                client_id="moderator",
            )
            self._publisher = Publisher(  # owns the producer from here on: stops it
                producer,
                out_topic=s.out_topic,
                dlq_topic=s.dlq_topic,
                publish_attempts=s.publish_attempts,
                metrics=self.metrics,
                on_acked=self._acked,
                on_failure=self._on_task_done,
            )
            await start_client(producer, s.kafka_options(), "the producer")
            self._feed = await follow_policies(  # caught up: then ready
                policies, s.policy_topic, s.kafka_options(), self.metrics, self._on_task_done
            )
            self._consumer = AIOKafkaConsumer(
                **s.kafka_options(),
                group_id=s.group_id,
                enable_auto_commit=False,
                auto_offset_reset=s.auto_offset_reset,
                fetch_max_wait_ms=s.fetch_max_wait_ms,
                **s.consumer_timeouts(),
                client_id="moderator",
            )
            await start_client(self._consumer, s.kafka_options(), "the consumer")
            self._consumer.subscribe(
                [s.in_topic], listener=_Rebalance(release=self._release, adopt=self._adopt)
            )
            self._publisher.start()
            self._fetch_task = self._watch(self._fetch_loop(), "fetch")
            self._watch(self._commit_loop(), "commit")
            self._watch(self._lag_loop(), "lag")
            if self._scorer.task is not None:
                self._scorer.task.add_done_callback(self._on_task_done)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "moderating %s → %s (dead letters → %s) as group %s with model %s, policy %s",
            s.in_topic, s.out_topic, s.dlq_topic, s.group_id, classifier.info.ident,
            policies.default.ident, extra={"group_id": s.group_id},
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
        if self._fetch_task is not None:
            self._fetch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch_task
        if self._failure is None and self._consumer is not None:
            drained = await self._release(self._ledger.partitions, forget=False)
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
        for closer in (self._consumer, self._feed, self._scorer, self._publisher, self._cache):
            if closer is not None:
                await stop_within(closer)
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

    def _watch(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Start a background task that must run until `stop()`: its end stops the service."""
        task = asyncio.create_task(coro, name=f"moderator-{name}")
        self._tasks.append(task)
        task.add_done_callback(self._on_task_done)
        return task

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
        assert self._publisher is not None
        max_records = max(self.settings.max_batch * 4, 64)
        while True:
            await self._room.wait()
            batches = await self._consumer.getmany(
                timeout_ms=FETCH_TIMEOUT_MS,
                max_records=min(max_records, self.settings.max_in_flight - self._ledger.in_flight),
            )
            fetched: list[Fetched] = []
            for tp, part in batches.items():
                if not self._ledger.owns(tp):
                    if tp not in self._consumer.assignment():
                        continue  # fetched just before a revocation: its new owner redoes it
                    self._adopt({tp})  # records may arrive before the listener has run
                fetched.extend(Fetched(self._ledger.track(tp, r.offset), r) for r in part)
            if not fetched:
                continue
            self.metrics.consumed.inc(len(fetched))
            self._in_flight_changed()
            task = asyncio.create_task(
                self._pipeline.process([f.record for f in fetched]), name="moderator-unit"
            )
            self._unit_tasks.add(task)
            task.add_done_callback(self._unit_tasks.discard)
            self._publisher.submit(fetched, task)

    def _acked(self, entry: Entry) -> None:
        self._ledger.ack(entry)
        self._in_flight_changed()

    def _in_flight_changed(self) -> None:
        """Mirror the ledger's in-flight count in the gauge and pause or resume fetching."""
        in_flight = self._ledger.in_flight
        self.metrics.in_flight.set(in_flight)
        if in_flight >= self.settings.max_in_flight:
            self._room.clear()
        else:
            self._room.set()

    # -- committing ------------------------------------------------------------------------

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        assert self._consumer is not None
        offsets = self._ledger.to_commit(only)
        if not offsets:
            return
        try:
            await self._consumer.commit(
                {tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}
            )
        except CommitFailedError as exc:
            self.metrics.commits.labels("failed").inc()
            log.warning("commit failed because the group rebalanced; work will be redone: %s", exc)
            return
        except KafkaError as exc:
            self.metrics.commits.labels("failed").inc()
            log.warning("commit failed (%s); retrying at the next interval", exc)
            return
        self.metrics.commits.labels("ok").inc()
        self._ledger.mark_committed(offsets)

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            await self._commit()

    def _adopt(self, assigned: set[TopicPartition]) -> None:
        self._ledger.assign(assigned)
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in assigned))
        if not self._stopping:
            self._set_ready(True)

    async def _release(self, revoked: set[TopicPartition], *, forget: bool = True) -> bool:
        """Finish the work of `revoked` partitions and commit it, before giving them up."""
        deadline = time.monotonic() + self.settings.shutdown_timeout_s
        drained = False
        while True:
            drained = not self._ledger.pending(revoked)
            if drained or time.monotonic() > deadline or self._failure is not None:
                break
            await asyncio.sleep(0.005)
        # aiokafka looks for the group coordinator until it finds one: with the broker gone, an
        # unbounded commit would hang the shutdown forever. Not committing only means redoing.
        remaining_s = max(deadline - time.monotonic(), FINAL_COMMIT_MIN_S)
        try:
            await asyncio.wait_for(self._commit(revoked), remaining_s)
        except TimeoutError:
            self.metrics.commits.labels("failed").inc()
            log.warning("commit not done within %.0f s (broker unreachable?); the work since "
                        "the last commit will be redone", remaining_s)  # fmt: skip
        if forget:
            given_up = self._ledger.abandon(revoked)
            if self._publisher is not None:
                self._publisher.abandon(given_up)
            self._in_flight_changed()
            for tp in revoked:
                with contextlib.suppress(KeyError):
                    self.metrics.consumer_lag.remove(tp.topic, str(tp.partition))
            if revoked:
                log.info("released %s", sorted((tp.topic, tp.partition) for tp in revoked))
        return drained

    async def _lag_loop(self) -> None:
        assert self._consumer is not None
        while True:
            await asyncio.sleep(1.0)
            for tp in self._ledger.partitions:
                highwater = self._consumer.highwater(tp)
                if highwater is None:
                    continue
                done = self._ledger.committed(tp)
                if done is None:
                    done = await self._consumer.committed(tp) or 0
                self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(
                    max(highwater - done, 0)
                )
