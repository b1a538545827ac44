"""Single flight over the micro-batcher: one model call per score cache key at a time.

A message whose text is being scored already (in its batch or an earlier one) joins that call
instead of starting another, and counts as an in-flight hit; the result is cached once, when the
call lands. A text longer than one window is one call too: each window a row of the batcher,
gathered into one result.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence

from moderator.decide.batcher import MicroBatcher, ModelResult, gathered
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import TokenIds
from moderator.metric_wings import DecideMetrics

Call = asyncio.Future[ModelResult]


class ModelCalls:
    """The model calls under way, by cache key, on `batcher`; results cached in `cache`."""

    def __init__(self, batcher: MicroBatcher, cache: ScoreCache, metrics: DecideMetrics) -> None:
        self.batcher = batcher
        self.cache = cache
        self.metrics = metrics
        self._calls: dict[bytes, asyncio.Future[ModelResult]] = {}

    def call(self, key: bytes, rows: Sequence[TokenIds]) -> tuple[Call, bool]:
        """The call scoring the text of cache key `key` (its windows `rows`), and whether this
        caller started it (False: it joined one already under way)."""
        future = self._calls.get(key)
        if future is not None:
            self.metrics.inflight_hit.inc()
            return future, False
        if len(rows) == 1:
            future = self.batcher.submit(rows[0])
        else:
            future = asyncio.ensure_future(gathered([self.batcher.submit(r) for r in rows]))
        self._calls[key] = future
        future.add_done_callback(functools.partial(self._done, key))
        return future, True

    def _done(self, key: bytes, future: asyncio.Future[ModelResult]) -> None:
        """A model result landed: cache it (once per model call) and end its single flight."""
        self._calls.pop(key, None)
        if not future.cancelled() and future.exception() is None:
            self.cache.put_many([(key, future.result().scores)])
