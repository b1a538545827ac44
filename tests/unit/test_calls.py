"""Single flight over the micro-batcher (moderator/decide/calls.py), on the real model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from moderator.decide.batcher import MicroBatcher, ModelResult
from moderator.decide.cache import ScoreCache
from moderator.decide.calls import ModelCalls
from moderator.decide.classifier import Classifier
from moderator.metrics import Metrics


@pytest.fixture
async def calls(classifier: Classifier) -> AsyncIterator[ModelCalls]:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    await batcher.start()
    try:
        yield ModelCalls(batcher, cache, metrics.decide)
    finally:
        await batcher.stop()


async def test_one_window_is_one_row_and_several_windows_a_row_each(
    calls: ModelCalls, classifier: Classifier
) -> None:
    ids = classifier.encode(["good game", "see you all tomorrow"])
    one, started = calls.call(b"one", ids[:1])
    assert started
    two, _ = calls.call(b"two", ids)
    assert (await one).scores.shape == (len(classifier.labels),)
    assert (await two).scores.shape == (2, len(classifier.labels))


async def test_a_landed_call_is_cached_and_no_longer_joined(
    calls: ModelCalls, classifier: Classifier
) -> None:
    ids = classifier.encode(["good game"])
    first, started = calls.call(b"k", ids)
    joined, joined_started = calls.call(b"k", ids)
    assert (started, joined_started, joined is first) == (True, False, True)
    result = await first
    assert (await calls.cache.get_many([b"k"]))[0] is not None
    again, again_started = calls.call(b"k", ids)
    assert again_started, "a new call once the first has landed"
    assert again is not first
    np.testing.assert_allclose((await again).scores, result.scores, atol=1e-6)


async def test_a_failed_call_is_not_cached_and_its_callback_raises_nothing(
    calls: ModelCalls,
) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    failed: asyncio.Future[ModelResult] = loop.create_future()
    calls._calls[b"k"] = failed  # a call under way whose model batch then fails
    failed.add_done_callback(lambda f: calls._done(b"k", f))
    failed.set_exception(RuntimeError("the model failed"))
    with pytest.raises(RuntimeError):
        await failed
    await asyncio.sleep(0)  # the done callbacks run
    assert errors == []
    assert b"k" not in calls._calls
    assert (await calls.cache.get_many([b"k"]))[0] is None
