"""Waiting on a condition, with a deadline, instead of sleeping a guessed while."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

WAIT_S = 15.0
POLL_S = 0.02


async def eventually(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]],
    what: str,
    *,
    timeout_s: float = WAIT_S,
) -> None:
    """Return as soon as `condition()` holds; fail naming `what` if it does not within
    `timeout_s`. A condition that never holds fails the test, it never passes it by timing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting until {what}")
        await asyncio.sleep(POLL_S)
