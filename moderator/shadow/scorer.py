"""The shadow: a second model that reads what the primary decided, never in its way.

`offer` is all the primary's path does: a non-blocking put on a bounded queue, after the
primary's decisions are made; a full queue sheds the message and counts it
(`moderator_shadow_skipped_total`), so a slow shadow costs skipped comparisons, never latency or
a commit. A worker takes what waits, a batch at a time, and has it read in the shadow's own
process (moderator/shadow/process.py: the idle scheduling class, `shadow_threads` ONNX threads)
the way `moderator score` does (screen, windows, language gate from the shadow's own manifest,
the model, then the channel's policy: decide/screen.py), so none of its reading takes the
primary's CPU time or its interpreter lock. What the hand-over costs the primary is paid per
batch (pickling, the pool's two helper threads waking, a future): the worker lingers up to
`LINGER_S` after a message arrives, or until a whole batch waits, so that at chat rates a batch
carries several (the shadow has no latency budget; only its queue bounds how far behind it may
fall). Each pair is counted (moderator/shadow/agreement.py);
a disagreement is handed to the producer the primary's decisions use, and not awaited: its
delivery is counted when it lands.

A shadow that fails to read a batch logs it (at most once a minute) and counts the batch as
skipped: a broken candidate must not stop the primary. A child that dies (killed, out of
memory) is replaced by a new one at the next batch, its batch skipped. Only a bug in the
worker's own loop ends its task, which the service watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import orjson
from aiokafka.errors import KafkaError

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Judged, Reader, reader_for
from moderator.kafka.connect import Sender
from moderator.kafka.topics import ensure_topics
from moderator.metric_models import ShadowMetrics
from moderator.metric_wings import DEFAULT_ACTIONS
from moderator.policy.rules import Policy
from moderator.shadow import process
from moderator.shadow.agreement import TOPIC_CONFIG, Primary, compare, disagreement_record
from moderator.shadow.process import THREAD_NAME, read_texts
from moderator.tasks import cancel

log = logging.getLogger(__name__)

WARN_EVERY_S = 60.0
LINGER_S = 0.25  # 12 messages a batch at 50 msgs/s: a twelfth of the hand-overs
BATCH = 32  # messages at most in a batch the shadow reads (its windows padded to the longest)
STOP_WAIT_S = 10.0  # a stop waits this long for the child's batch, then kills the child

__all__ = ["THREAD_NAME", "Shadow", "read", "shadow_for"]


def read(reader: Reader, items: Sequence[Primary]) -> list[Judged]:
    """The shadow's decision on each message under its channel's policy, read in this process
    (the child reads the same way: moderator/shadow/process.py)."""
    return read_texts(reader, pairs(items))


def pairs(items: Sequence[Primary]) -> list[tuple[Policy, str]]:
    """What the shadow reads of each message: its channel's policy and its text."""
    return [(item.policy, item.chat.text) for item in items]


class Shadow:
    """The shadow model's queue, reading process and comparisons: `start()` starts the process
    (its model loaded) and the worker, `stop()` (idempotent) ends them and drops what waits."""

    def __init__(
        self,
        reader: Reader,
        metrics: ShadowMetrics,
        *,
        producer: Sender | None,
        topic: str,
        queue_size: int,
        threads: int = 1,
        cpus: frozenset[int] = frozenset(),
        max_batch: int = BATCH,
        linger_s: float = LINGER_S,
        stop_wait_s: float = STOP_WAIT_S,
    ) -> None:
        self.reader = reader
        self.model = reader.classifier.info.ident
        self.metrics = metrics
        self.producer = producer if topic else None
        self.topic = topic
        self.threads = threads
        self.cpus = cpus
        self.max_batch = max_batch
        self.linger_s = linger_s
        self.stop_wait_s = stop_wait_s
        self._queue: asyncio.Queue[Primary] = asyncio.Queue(queue_size)
        self._full = asyncio.Event()
        self._process: ProcessPoolExecutor | None = None
        self._pid: int | None = None  # the child's, once it is up
        self._warned_at = -WARN_EVERY_S
        self.task: asyncio.Task[None] | None = None
        metrics.precreate(DEFAULT_ACTIONS, reader.classifier.labels)

    def use(self, reader: Reader) -> None:
        """Read with `reader` from now on (a rollout switched the models: moderator/shadow/
        switch.py); a batch under way finishes with the model it began with, and the child
        loads the new one at its next batch."""
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
        if self._queue.qsize() >= self.max_batch - 1:
            self._full.set()

    async def start(self) -> None:
        """Spawn the reading process and wait until its model is loaded, then start the worker."""
        if self.task is not None:
            return
        await self._spawn()
        self.task = asyncio.create_task(self._work(), name="moderator-shadow")

    async def stop(self) -> None:
        task, self.task = self.task, None
        await cancel(task)
        await self._end_process()

    async def _spawn(self) -> None:
        self._process = process.reading_process(
            self.reader.classifier.model_dir,
            threads=self.threads,
            max_windows=self.reader.windows.max_windows,
            warm=self.max_batch,
            cpus=self.cpus,
        )
        self._pid = await asyncio.get_running_loop().run_in_executor(self._process, process.pid)

    async def _end_process(self) -> None:
        """Shut the child down; a batch it is reading finishes first (off the event loop), for
        `stop_wait_s` at most: the child is in the idle class, so on a host whose cores are
        busy it may not run for minutes, and a stop that waited on it would hang its caller
        (a rollout, a shutdown). Past that the child is killed; the batch was only a shadow's."""
        pool, self._process = self._process, None
        pid, self._pid = self._pid, None
        if pool is None:
            return
        ending = asyncio.ensure_future(
            asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)
        )
        try:
            await asyncio.wait_for(asyncio.shield(ending), self.stop_wait_s)
        except TimeoutError:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await ending

    async def _work(self) -> None:
        """Take what waits (a batch at most), read it in the shadow's process, compare and send."""
        running = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            if self.linger_s > 0 and self._queue.qsize() < self.max_batch - 1:
                self._full.clear()  # set by `offer` once a whole batch waits
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.linger_s)
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self.metrics.queued.set(self._queue.qsize())
            reader = self.reader
            try:
                if self._process is None:  # the last child died: a new one for this batch
                    await self._spawn()
                self.metrics.batches.inc()
                judged = await running.run_in_executor(
                    self._process, process.read_in_child, reader.classifier.model_dir, pairs(batch)
                )
            except BrokenProcessPool:
                self.metrics.skipped.inc(len(batch))
                self._warn("the shadow model's process ended; a new one reads the next batch")
                await self._end_process()
                continue
            except Exception:  # noqa: BLE001 - a broken shadow is counted, never the primary's end
                self.metrics.skipped.inc(len(batch))
                self._warn(f"the shadow model {self.model} failed on a batch (skipped)")
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

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.exception(message)


async def shadow_for(settings: Settings, metrics: ShadowMetrics, producer: Sender) -> Shadow | None:
    """The shadow `MODERATOR_SHADOW_MODEL` names, loaded on a thread (its manifest and graph
    checked before the service starts; rollouts name it by it), None if unset; the child process
    `start()` spawns reads with its own copy."""
    s = settings
    if s.shadow_model is None:
        return None

    def load() -> Reader:
        assert s.shadow_model is not None
        return reader_for(Classifier(s.shadow_model, threads=1), max_windows=s.max_windows)

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
        cpus=s.shadow_cpus,
    )
