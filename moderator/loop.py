"""Pick the event loop: uvloop where it is installed, asyncio's own otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default) when uvloop is not importable."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


# What the tasks still running when `main` returns get to finish their cancellation.
LEFTOVER_TIMEOUT_S = 5.0


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, on uvloop when available, except that tasks left when `main` returns get
    `LEFTOVER_TIMEOUT_S` to end once cancelled: a task that ignores cancellation (a client's
    stop that was given up on) must not keep a finished process alive."""
    factory = loop_factory()
    loop = factory() if factory is not None else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = asyncio.all_tasks(loop)
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_TIMEOUT_S))
