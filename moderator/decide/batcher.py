"""Micro-batching: score whatever is already waiting, on a few threads, off the event loop.

Nothing waits for a batch to fill: a lone message is scored at once. While batches run, new
arrivals queue; the next round takes them all, sorts them by length and cuts them into batches
that pad little (`batch_sizes`), each run on the next free scoring thread.

Why several one-thread batches rather than one batch over several threads: a batch split over
intra-op threads waits at every operator for its slowest thread, and on a few cores shared with
the event loop and the broker client one of them is often descheduled; separate batches never
wait for each other. Why so little padding: on one thread a padded token costs as much as a real
one, while a batch saves only a fixed ~4 tokens' worth of per-call work per extra member.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from moderator.decide.classifier import Classifier, Scores, TokenIds
from moderator.metric_wings import DecideMetrics
from moderator.tasks import cancel
from moderator.threads import name_thread

log = logging.getLogger(__name__)

SCORER_THREAD_NAME = "scorer"  # the model's thread, as `top -H` and /proc/<pid>/task show it


class ModelResult(NamedTuple):
    """The model's scores for one submitted sequence, and how long it took."""

    scores: Scores  # one row: [n_labels]
    queued_s: float  # from submission to the start of its batch
    score_s: float  # the batch's model time


class _Job(NamedTuple):
    ids: TokenIds
    future: asyncio.Future[ModelResult]
    submitted: float


class MicroBatcher:
    """Runs `classifier.score_ids` on `concurrency` threads of its own; `submit()` is the async
    front door."""

    def __init__(
        self,
        classifier: Classifier,
        *,
        max_batch: int,
        metrics: DecideMetrics,
        concurrency: int = 1,
    ) -> None:
        self.classifier = classifier
        self.max_batch = max_batch
        self.metrics = metrics
        self.concurrency = concurrency
        self._pending: list[_Job] = []
        self._wakeup = asyncio.Event()
        self._free = asyncio.Semaphore(concurrency)
        self._running: dict[asyncio.Future[Scores], list[_Job]] = {}  # batches on a thread
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._failed: Exception | None = None

    async def start(self) -> None:
        if self._task is not None:
            return
        self._executor = ThreadPoolExecutor(
            self.concurrency,
            thread_name_prefix=SCORER_THREAD_NAME,
            initializer=functools.partial(name_thread, SCORER_THREAD_NAME),
        )
        self._task = asyncio.create_task(self._run(), name="batch-scorer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        # A model failure that ended it was reported through `task` to its owner already.
        await cancel(task)
        for future, batch in list(self._running.items()):
            future.cancel()  # a batch already on its thread finishes there, unheard
            _cancel(batch)
        for job in self._pending:
            job.future.cancel()
        self._pending.clear()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The scoring task, so the owner can watch that it never dies silently."""
        return self._task

    def submit(self, ids: TokenIds) -> asyncio.Future[ModelResult]:
        """Queue one sequence for the model; the future resolves with its row of scores."""
        if self._task is None:
            raise RuntimeError("MicroBatcher.submit() before start()")
        future: asyncio.Future[ModelResult] = asyncio.get_running_loop().create_future()
        self._pending.append(_Job(ids, future, time.perf_counter()))
        self._wakeup.set()
        return future

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._failed is not None:
                raise self._failed
            jobs, self._pending = self._pending, []
            jobs = [j for j in jobs if not j.future.cancelled()]
            jobs.sort(key=lambda j: len(j.ids))
            start = 0
            try:
                for size in batch_sizes([len(j.ids) for j in jobs], self.max_batch):
                    await self._free.acquire()
                    if self._failed is not None:
                        raise self._failed
                    batch, start = jobs[start : start + size], start + size
                    self._start_batch(batch)
            except BaseException:  # stopped or failed: nobody will score the rest of the round
                _cancel(jobs[start:])
                raise

    def _start_batch(self, batch: list[_Job]) -> None:
        """One batch on a free scoring thread; the executor's future is all it needs (a Task per
        batch cost a loop step and a coroutine per batch for nothing). `_scored` ends it."""
        began = time.perf_counter()
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, self.classifier.score_ids, [j.ids for j in batch]
        )
        self._running[future] = batch
        future.add_done_callback(functools.partial(self._scored, batch, began))

    def _scored(self, batch: list[_Job], began: float, future: asyncio.Future[Scores]) -> None:
        """A batch's end. A model failure (a bug or a broken model) fails its callers and then
        the batcher's task, loudly."""
        self._running.pop(future, None)
        self._free.release()
        if future.cancelled():
            _cancel(batch)
            return
        exc = future.exception()
        if exc is not None:
            failure = exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(failure)
            self._failed = failure
            self._wakeup.set()
            return
        took = time.perf_counter() - began
        self.metrics.batch_size.observe(len(batch))
        for row, job in zip(future.result(), batch, strict=True):
            if not job.future.done():
                job.future.set_result(ModelResult(row, began - job.submitted, took))


async def gathered(calls: list[asyncio.Future[ModelResult]]) -> ModelResult:
    """One result for a message's windows: a row per window, the longest wait and model time
    (its windows mostly share batches)."""
    results = await asyncio.gather(*calls)
    return ModelResult(
        np.stack([r.scores for r in results]),
        max(r.queued_s for r in results),
        max(r.score_s for r in results),
    )


def _cancel(jobs: Sequence[_Job]) -> None:
    for job in jobs:
        job.future.cancel()


# A batch pads every member to its longest. On one thread each padded token costs about what a
# real one does (~0.2 ms for MiniLM-L6, ~0.7 ms for DistilBERT, AVX2), while each extra member
# saves a fixed per-call cost worth about 4 tokens for both shapes (timed with one-thread calls
# of 1 to 8 sequences of 8 to 64 tokens; BENCHMARKS.md section 5 shows the effect end to end).
PAD_TOKENS = 4


def batch_sizes(lengths: Sequence[int], max_batch: int) -> list[int]:
    """Sizes of the batches to cut from sequences of these `lengths` (sorted ascending): at most
    `max_batch` each; a sequence joins the batch before it only if the padding that adds,
    members x extra length, is at most PAD_TOKENS."""
    sizes: list[int] = []
    size = longest = 0
    for length in lengths:
        if size and (size >= max_batch or size * (length - longest) > PAD_TOKENS):
            sizes.append(size)
            size = 0
        size += 1
        longest = length
    if size:
        sizes.append(size)
    return sizes
