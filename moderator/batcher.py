"""Micro-batching: score whatever is already waiting, in one thread, off the event loop.

Nothing waits for a batch to fill: a lone message is scored at once. While a batch runs, new
arrivals queue; the next round takes them all, sorts them by length and splits them into batches
of at most `max_batch`, so each batch pads only to a similar length.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from moderator.classifier import Classifier, Scores, TokenIds
from moderator.metrics import Metrics

log = logging.getLogger(__name__)

SCORER_THREAD_NAME = "scorer"  # the model's thread, as `top -H` and /proc/<pid>/task show it
_PR_SET_NAME = 15


def _name_thread() -> None:
    """Name the scoring thread for the OS (Linux), so per-thread CPU tells the model's share from
    the event loop's; elsewhere, or if libc refuses, the thread keeps its default name."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(_PR_SET_NAME, SCORER_THREAD_NAME.encode(), 0, 0, 0)


class Scored(NamedTuple):
    scores: Scores  # one row: [n_labels]
    queued_s: float  # from submission to the start of its batch
    score_s: float  # the batch's model time


class _Job(NamedTuple):
    ids: TokenIds
    future: asyncio.Future[Scored]
    submitted: float


class BatchScorer:
    """Runs `classifier.score_ids` on a dedicated thread; `score()` is the async front door."""

    def __init__(self, classifier: Classifier, *, max_batch: int, metrics: Metrics) -> None:
        self.classifier = classifier
        self.max_batch = max_batch
        self.metrics = metrics
        self._pending: list[_Job] = []
        self._wakeup = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is not None:
            return
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix=SCORER_THREAD_NAME, initializer=_name_thread
        )
        self._task = asyncio.create_task(self._run(), name="batch-scorer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
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

    def score(self, ids: TokenIds) -> asyncio.Future[Scored]:
        """Queue one sequence for scoring; the future resolves with its row of scores."""
        if self._task is None:
            raise RuntimeError("BatchScorer.score() before start()")
        future: asyncio.Future[Scored] = asyncio.get_running_loop().create_future()
        self._pending.append(_Job(ids, future, time.perf_counter()))
        self._wakeup.set()
        return future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            jobs, self._pending = self._pending, []
            jobs = [j for j in jobs if not j.future.cancelled()]
            jobs.sort(key=lambda j: len(j.ids))
            for start in range(0, len(jobs), self.max_batch):
                batch = jobs[start : start + self.max_batch]
                began = time.perf_counter()
                try:
                    scores = await loop.run_in_executor(
                        self._executor, self.classifier.score_ids, [j.ids for j in batch]
                    )
                except Exception as exc:
                    # A model failure is a bug or a broken model: fail the callers loudly.
                    for job in batch:
                        if not job.future.done():
                            job.future.set_exception(exc)
                    raise
                took = time.perf_counter() - began
                self.metrics.batch_size.observe(len(batch))
                for row, job in zip(scores, batch, strict=True):
                    if not job.future.done():
                        job.future.set_result(Scored(row, began - job.submitted, took))
