"""Waiting on a condition, with a deadline, instead of sleeping a guessed while: the one module
tests wait with. A condition that never holds fails the test naming what it waited for; none
passes by timing, and none waits longer than its condition takes to hold."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")
WAIT_S = 15.0
POLL_S = 0.02

# What was waited for: a callable is read only on failure, so it can say what was seen by then.
What = str | Callable[[], str]


@overload
async def eventually(
    condition: Callable[[], Awaitable[T]],
    what: What,
    *,
    timeout_s: float = ...,
    poll_s: float = ...,
) -> T: ...


@overload
async def eventually(
    condition: Callable[[], T], what: What, *, timeout_s: float = ..., poll_s: float = ...
) -> T: ...


async def eventually(
    condition: Callable[[], object],
    what: What,
    *,
    timeout_s: float = WAIT_S,
    poll_s: float = POLL_S,
) -> object:
    """`condition()`'s first truthy value (awaited, if it is awaitable: a condition may read a
    topic or Redis); fails naming `what` once `timeout_s` has passed. `poll_s=0` only yields to
    the loop between checks, for conditions that the loop's own tasks make true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(_timed_out(timeout_s, what))
        await asyncio.sleep(poll_s)


def eventually_blocking(
    condition: Callable[[], T], what: What, *, timeout_s: float = WAIT_S, poll_s: float = POLL_S
) -> T:
    """`eventually` for code with no event loop to yield to (Selenium, a test client, a
    synchronous Kafka client): the thread sleeps between checks."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(timeout_s, what))
        time.sleep(poll_s)


def _timed_out(timeout_s: float, what: What) -> str:
    said = what if isinstance(what, str) else what()
    return f"timed out after {timeout_s} s waiting until {said}"
