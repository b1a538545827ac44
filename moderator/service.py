"""The moderator service: Kafka in, pipeline, decisions out, offsets committed after acks.

Records are fetched in batches (moderator/kafka/intake.py); each batch becomes one pipeline task,
whose outcomes are handed to the publisher (moderator/kafka/publisher.py) in fetch order, so
decisions for a partition leave in input order. An input offset is committed only when the
deliveries of its decision and of every earlier record of its partition were acknowledged by the
broker. A crash or a rebalance may repeat decisions, never lose one. This module starts the parts in
order, owns the tasks between them (one supervisor) and stops them in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self, TypeVar

from aiokafka import AIOKafkaProducer

from moderator.config import Settings
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache, cache_for
from moderator.decide.classifier import Classifier
from moderator.decide.degrade import fallback_for
from moderator.decide.screen import reader_for
from moderator.kafka.connect import Stoppable, start_client, stop_within
from moderator.kafka.intake import Fetched, Intake
from moderator.kafka.ledger import Entry
from moderator.kafka.publisher import Publisher
from moderator.metric_wings import KafkaMetrics
from moderator.metrics import Metrics, MetricsServer, listen
from moderator.pipeline import Pipeline
from moderator.policy.channels import PolicyBook, follow_policies
from moderator.records import Outcome
from moderator.review.finals import TimeoutSweeper
from moderator.review.hold import Review, review_for
from moderator.review.overrides import Overrides, overrides_for
from moderator.review.verdicts import VerdictIntake
from moderator.shadow.scorer import Shadow, shadow_for
from moderator.shadow.switch import ModelSwitch
from moderator.tasks import Supervisor, cancel
from moderator.users.escalation import Escalation

log = logging.getLogger(__name__)

MAX_PRODUCER_REQUEST_BYTES = 16 * 1024 * 1024  # dead letters carry the original value, any size

T = TypeVar("T")


class Moderator:
    """One moderator process's worth of consuming, scoring and publishing.

    Use as `async with Moderator(settings) as m: await m.run()`; `stop()` is idempotent and
    finishes in-flight work within `settings.shutdown_timeout_s`. What `start()` starts goes on
    one exit stack, so a failed start and `stop()` close the same things, in reverse order; the
    background tasks have one supervisor, whose first failure stops the moderator.
    """

    def __init__(self, settings: Settings, *, classifier: Classifier | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics(budget_s=settings.budget_ms / 1000)
        self._classifier = classifier
        self._stack = contextlib.AsyncExitStack()
        self._tasks = Supervisor("the moderator", on_failure=self._failed)
        self._metrics_server: MetricsServer | None = None
        self._cache: ScoreCache | None = None
        self._pipeline: Pipeline | None = None
        self._overrides: Overrides | None = None
        self._publisher: Publisher | None = None
        self._intake: Intake | None = None
        self._fetch_task: asyncio.Task[None] | None = None
        self._units: asyncio.Queue[tuple[list[Fetched], asyncio.Task[list[Outcome]]]] = (
            asyncio.Queue()
        )  # each fetched batch and its pipeline task, in fetch order
        self._ready = asyncio.Event()
        self._stopped = asyncio.Event()
        self._started = self._running = self._stopping = False
        self._stop_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_server.port if self._metrics_server is not None else None

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped a background task, if one did."""
        return self._tasks.failure

    @property
    def overrides(self) -> Overrides | None:
        """None when MODERATOR_OVERRIDE_TOPIC is empty."""
        return self._overrides

    @property
    def cache(self) -> ScoreCache:
        assert self._cache is not None, "start() first"
        return self._cache

    async def start(self) -> None:
        """Start everything, in dependency order; on failure, stop what was started."""
        if self._started:
            return
        self._started = True
        try:
            await self._start()
            if self._tasks.failure is not None:  # while starting: no stop was scheduled
                raise self._tasks.failure
        except BaseException:
            await self.stop()
            raise
        self._running = True

    async def _start(self) -> None:
        """The parts, in the order they start; each goes on the exit stack as it starts."""
        s, m, tasks = self.settings, self.metrics, self._tasks
        self._metrics_server = self._serve_metrics()
        classifier = await self._load_model()
        reader = await asyncio.to_thread(reader_for, classifier, max_windows=s.max_windows)
        policies = PolicyBook.load(s.policy, classifier.labels)
        self._cache = cache = cache_for(s, m.decide)
        await self._own(cache, cache.start())
        scorer = MicroBatcher(
            classifier, max_batch=s.max_batch, metrics=m.decide, concurrency=s.scoring_layout[1]
        )
        await self._own(scorer, scorer.start())
        tasks.watch(_started(scorer.task))
        producer = _producer(s)
        overrides = self._overrides = overrides_for(s, m.review, producer)
        review = review_for(s, m.review, cache, classifier.labels)  # held messages, rings, records
        users = Escalation(m.users, s.redis_url, timeout_ms=s.user_state_timeout_ms)
        await self._own(users, users.start())
        intake = self._intake = Intake(
            s, m.kafka, on_assigned=self._assigned, on_abandoned=self._abandoned
        )
        self._publisher = publisher = _publisher(s, m.kafka, producer, intake.acked, tasks)
        await self._own(publisher, start_client(producer, s.kafka_options(), "the producer"))
        shadow = await self._start_shadow(producer)  # after the producer: stopped before it
        self._pipeline = Pipeline(
            classifier, policies, scorer, cache, m.decide, max_record_bytes=s.max_record_bytes,
            budget_ms=s.budget_ms, fallback=fallback_for(s), reader=reader, review=review,
            overrides=overrides, users=users, shadow=shadow,
        )  # fmt: skip
        rollout = ModelSwitch(s, m, self._pipeline, shadow, cache, tasks.watch)
        await self._own(rollout, rollout.start())  # its record in effect before the first fetch
        feed = await follow_policies(
            policies, s.policy_topic, s.kafka_options(), m.policy, s.topic_replication
        )
        if feed is not None:  # caught up: then ready
            self._stack.push_async_callback(stop_within, feed)
            tasks.watch(_started(feed.task))
        if overrides is not None:  # caught up too: then ready; stopped before the producer
            await self._own(overrides, overrides.start())
            tasks.watch(_started(overrides.task))
        await self._start_review(review, producer)
        await self._own(intake, intake.start())
        self._stack.push_async_callback(tasks.aclose)
        self._fetch_task = tasks.spawn(self._fetch_loop(), name="moderator-fetch")
        tasks.spawn(self._publish_loop(), name="moderator-publish")
        tasks.spawn(intake.commit_loop(), name="moderator-commit")
        tasks.spawn(intake.lag_loop(), name="moderator-lag")
        self._stack.push_async_callback(self._drain)  # the first thing `stop()` does
        log.info(
            "moderating %s → %s (dead letters → %s) as group %s with model %s, policy %s",
            s.in_topic,
            s.out_topic,
            s.dlq_topic,
            s.group_id,
            classifier.info.ident,
            policies.default.ident,
            extra={"group_id": s.group_id},
        )

    async def _start_review(self, review: Review, producer: AIOKafkaProducer) -> None:
        """Verdicts applied to held messages, and held messages past their time decided."""
        s, m, held = self.settings, self.metrics, review.store
        verdicts = VerdictIntake(s, m.review, held, producer, self._overrides)  # applies verdicts
        await self._own(verdicts, verdicts.start())
        self._tasks.watch(_started(verdicts.task))
        sweeper = TimeoutSweeper(held, producer, out_topic=s.out_topic, metrics=m.review)
        self._tasks.spawn(sweeper.run(), name="moderator-timeouts")  # held messages past their time

    async def _start_shadow(self, producer: AIOKafkaProducer) -> Shadow | None:
        """The shadow model MODERATOR_SHADOW_MODEL names, if any, its workers watched."""
        shadow = await shadow_for(self.settings, self.metrics.shadow, producer)
        if shadow is not None:
            await self._own(shadow, shadow.start())
            self._tasks.watch(_started(shadow.task))
        return shadow

    def _serve_metrics(self) -> MetricsServer:
        s = self.settings
        server = listen(s.metrics_host, s.metrics_port, self.metrics)
        server.start()
        self._stack.callback(server.stop)
        # Liveness: /healthz fails when this task stops being run (a blocked event loop).
        beat = asyncio.create_task(server.heartbeat(), name="moderator-heartbeat")
        self._stack.push_async_callback(cancel, beat)
        return server

    async def _load_model(self) -> Classifier:
        """The classifier (loaded unless given), warmed up, its identity in the metrics."""
        s = self.settings
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
        return classifier

    async def _own(self, part: Stoppable, starting: Awaitable[None]) -> None:
        """Await `starting` (`part`'s start); `part` is stopped with the moderator, even if its
        start failed (a half-started client holds connections too). The publisher stops its
        producer."""
        self._stack.push_async_callback(stop_within, part)
        await starting

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until partitions are assigned and consuming has begun."""
        await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def run(self) -> None:
        """Run until `stop()` is called; raises if a background task failed."""
        await self._stopped.wait()
        if self._tasks.failure is not None:
            raise self._tasks.failure

    async def stop(self) -> None:
        """Stop fetching, finish and publish what is in flight, commit, close. Idempotent."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        self._set_ready(False)
        await self._stack.aclose()
        self._stopped.set()
        log.info("moderator stopped")

    async def _drain(self) -> None:
        """Stop fetching; unless a task failed, finish and commit the work in flight."""
        await self._tasks.cancel(self._fetch_task)
        if self._tasks.failure is None and self._intake is not None:
            await self._intake.drain()

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

    def _failed(self, exc: BaseException) -> None:
        """The supervisor's report of the first failure (logged already): stop without draining."""
        if self._intake is not None:
            self._intake.interrupt()  # what is in flight may never be acknowledged now
        if self._running and not self._stopping:
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

    def _assigned(self) -> None:
        if not self._stopping:
            self._set_ready(True)

    def _abandoned(self, entries: list[Entry]) -> None:
        if self._publisher is not None:
            self._publisher.abandon(entries)

    # -- fetch → decide → publish ----------------------------------------------------------

    async def _fetch_loop(self) -> None:
        """Each fetched batch becomes one pipeline task; several are decided at once."""
        assert self._intake is not None
        assert self._pipeline is not None
        while True:
            fetched = await self._intake.fetch()
            unit = self._pipeline.process([f.record for f in fetched])
            task = self._tasks.spawn(unit, name="moderator-unit", may_end=True)
            self._intake.time_decided(task)
            self._units.put_nowait((fetched, task))

    async def _publish_loop(self) -> None:
        """Hand each batch's outcomes to the publisher in fetch order, once decided."""
        assert self._publisher is not None
        while True:
            batch, unit = await self._units.get()
            await self._publisher.publish(batch, await unit)


def _producer(s: Settings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **s.kafka_options(),
        acks="all",
        linger_ms=0,
        max_request_size=MAX_PRODUCER_REQUEST_BYTES,
        client_id="moderator",
    )


def _publisher(
    s: Settings,
    metrics: KafkaMetrics,
    producer: AIOKafkaProducer,
    on_acked: Callable[[Entry], None],
    supervisor: Supervisor,
) -> Publisher:
    return Publisher(
        producer,
        out_topic=s.out_topic,
        dlq_topic=s.dlq_topic,
        review_topic=s.review_topic,
        publish_attempts=s.publish_attempts,
        metrics=metrics,
        on_acked=on_acked,
        supervisor=supervisor,
    )


def _started(task: asyncio.Task[T] | None) -> asyncio.Task[T]:
    assert task is not None, "a part's task exists once it has started"
    return task
