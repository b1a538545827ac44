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


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, on uvloop when available."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
