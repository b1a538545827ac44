"""The shadow: a second model that reads what the primary decided, never in its way.

`offer` is all the primary's path does: a non-blocking put on a bounded queue, after the
primary's decisions are made; a full queue sheds the message and counts it
(`moderator_shadow_skipped_total`), so a slow shadow costs skipped comparisons, never latency or
a commit. Workers take what waits, a batch at a time, and read it on the shadow's own threads
(`shadow_threads`, one ONNX thread each) the way `moderator score` does (screen, windows,
language gate from the shadow's own manifest, the model, then the channel's policy:
decide/screen.py), so its tokenizing and language detection stay off the event loop too (their
Python parts still take turns with it for the GIL: the benchmark is to say what that costs). Each
pair is counted (moderator/shadow/agreement.py); a disagreement is handed to the producer the
primary's decisions use, and not awaited: its delivery is counted when it lands.

A shadow that fails to read a batch logs it (at most once a minute) and counts the batch as
skipped: a broken candidate must not stop the primary. Only a bug in the workers' own loop ends
their task, which the service watches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import orjson
from aiokafka.errors import KafkaError

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Judged, Reader, decide_texts, reader_for
from moderator.kafka.connect import Sender
from moderator.kafka.topics import ensure_topics
from moderator.metric_models import ShadowMetrics
from moderator.metric_wings import DEFAULT_ACTIONS
from moderator.shadow.agreement import TOPIC_CONFIG, Primary, compare, disagreement_record
from moderator.tasks import cancel
from moderator.threads import lower_priority, name_thread

log = logging.getLogger(__name__)

THREAD_NAME = "shadow"  # the shadow's threads' names, in Python and for the OS (top -H, /proc)
WARN_EVERY_S = 60.0


def _shadow_thread() -> None:
    """A shadow thread: named for the OS, and at the lowest priority, so a shadow short of CPU
    sheds (its queue) instead of taking a core from the primary (moderator/threads.py)."""
    name_thread(THREAD_NAME)
    lower_priority()


def read(reader: Reader, items: Sequence[Primary]) -> list[Judged]:
    """The shadow's decision on each message under its channel's policy (the messages of one
    policy scored in one model call). Pure and synchronous: it runs on a shadow thread."""
    out: list[Judged | None] = [None] * len(items)
    by_policy: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        by_policy.setdefault(id(item.policy), []).append(i)
    for indices in by_policy.values():
        policy = items[indices[0]].policy
        texts = [items[i].chat.text for i in indices]
        for i, judged in zip(indices, decide_texts(reader, policy, texts), strict=True):
            out[i] = judged
    return [judged for judged in out if judged is not None]


class Shadow:
    """The shadow model's queue, threads and comparisons: `start()` starts the workers, `stop()`
    (idempotent) ends them and drops what still waits."""

    def __init__(
        self,
        reader: Reader,
        metrics: ShadowMetrics,
        *,
        producer: Sender | None,
        topic: str,
        queue_size: int,
        threads: int = 1,
        max_batch: int = 8,
    ) -> None:
        self.reader = reader
        self.model = reader.classifier.info.ident
        self.metrics = metrics
        self.producer = producer if topic else None
        self.topic = topic
        self.threads = threads
        self.max_batch = max_batch
        self._queue: asyncio.Queue[Primary] = asyncio.Queue(queue_size)
        self._executor: ThreadPoolExecutor | None = None
        self._warned_at = -WARN_EVERY_S
        self.task: asyncio.Task[None] | None = None
        metrics.precreate(DEFAULT_ACTIONS, reader.classifier.labels)

    def use(self, reader: Reader) -> None:
        """Read with `reader` from now on (a rollout switched the models: moderator/shadow/
        switch.py); a batch under way finishes with the model it began with."""
        self.reader, self.model = reader, reader.classifier.info.ident
        self.metrics.precreate(DEFAULT_ACTIONS, reader.classifier.labels)

    def offer(self, items: Sequence[Primary]) -> None:
        """Queue messages the primary decided; what does not fit is skipped and counted."""
        for item in items:
            try:
                self._queue.put_nowait(item)
            except asyncio.QueueFull:
                self.metrics.skipped.inc()
        self.metrics.queued.set(self._queue.qsize())

    async def start(self) -> None:
        if self.task is not None:
            return
        self._executor = ThreadPoolExecutor(
            self.threads, thread_name_prefix=THREAD_NAME, initializer=_shadow_thread
        )
        self.task = asyncio.create_task(self._run(), name="moderator-shadow")

    async def stop(self) -> None:
        task, self.task = self.task, None
        await cancel(task)
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    async def _run(self) -> None:
        await asyncio.gather(*(self._work() for _ in range(self.threads)))

    async def _work(self) -> None:
        """Take what waits (a batch at most), read it on a shadow thread, compare and send."""
        running = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self.metrics.queued.set(self._queue.qsize())
            reader = self.reader
            try:
                judged = await running.run_in_executor(self._executor, read, reader, batch)
            except Exception:  # noqa: BLE001 - a broken shadow is counted, never the primary's end
                self.metrics.skipped.inc(len(batch))
                self._warn()
                continue
            for primary, shadow in zip(batch, judged, strict=True):
                await self._compared(primary, shadow, reader.classifier.info.ident)

    async def _compared(self, primary: Primary, shadow: Judged, model: str) -> None:
        pair = compare(primary, shadow)
        m = self.metrics
        m.by_label[pair.primary, pair.shadow, pair.label].inc()
        m.by_language[pair.primary, pair.shadow, pair.language].inc()
        if pair.agreed:
            return
        m.disagreed[pair.label, pair.language].inc()
        if self.producer is not None:
            value = orjson.dumps(
                disagreement_record(primary, shadow, model, int(time.time() * 1000))
            )
            await self._send(primary.chat.channel_id.encode(), value)

    async def _send(self, key: bytes, value: bytes) -> None:
        """Hand one record to the producer; its delivery is counted when it lands, never
        awaited (only a full producer buffer waits here, on the shadow's own worker)."""
        assert self.producer is not None
        try:
            delivery = await self.producer.send(self.topic, value, key=key, headers=None)
        except KafkaError:
            self.metrics.records_failed.inc()
            return
        delivery.add_done_callback(self._delivered)

    def _delivered(self, delivery: asyncio.Future[object]) -> None:
        if delivery.cancelled() or delivery.exception() is not None:
            self.metrics.records_failed.inc()
        else:
            self.metrics.records_sent.inc()

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.exception("the shadow model %s failed on a batch (skipped)", self.model)


async def shadow_for(settings: Settings, metrics: ShadowMetrics, producer: Sender) -> Shadow | None:
    """The shadow `MODERATOR_SHADOW_MODEL` names, loaded and warmed on a thread; None if unset."""
    s = settings
    if s.shadow_model is None:
        return None

    def load() -> Reader:
        assert s.shadow_model is not None
        classifier = Classifier(s.shadow_model, threads=1)
        classifier.warm_up(s.max_batch)
        return reader_for(classifier, max_windows=s.max_windows)

    reader = await asyncio.to_thread(load)
    if s.shadow_topic:  # kept RETENTION_DAYS; a broker that refuses may have it all the same
        topics, configs = {s.shadow_topic: s.topic_partitions}, {s.shadow_topic: TOPIC_CONFIG}
        try:
            await ensure_topics(
                s.kafka_options(), topics, configs=configs, replication=s.topic_replication
            )
        except KafkaError as exc:
            log.warning("could not make sure the shadow topic %s exists: %r", s.shadow_topic, exc)
    log.info("shadow model %s beside the primary", reader.classifier.info.ident)
    return Shadow(
        reader,
        metrics,
        producer=producer,
        topic=s.shadow_topic,
        queue_size=s.shadow_queue,
        threads=s.shadow_threads,
        max_batch=s.max_batch,
    )
