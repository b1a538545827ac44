"""Background tasks: one way to stop them (`cancel`) and one way to watch them (`Supervisor`).

Not `asyncio.TaskGroup`: a task group lives inside one `async with` block of one task and, on a
failure, cancels that task; the service's tasks outlive the call that started them and are
stopped from another task (a signal handler's, a test's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a cancelled task gets before it is cancelled again: Python 3.11's `asyncio.wait_for`,
# cancelled in the loop turn its call fails, raises the call's error instead, and a loop that
# retries on that error has swallowed the cancellation (`reraise_cancel`).
RECANCEL_S = 0.1


async def cancel(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel `tasks` (None is skipped) and wait until every one has ended.

    Their errors are not raised here: whoever watched a task reported its failure already (its
    error is retrieved, so asyncio does not log it again). The caller's own cancellation is not
    swallowed, unlike `with suppress(CancelledError): await task`.
    """
    given = [task for task in tasks if task is not None]
    pending = set(given)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
    for task in given:
        if not task.cancelled():
            task.exception()


def reraise_cancel(exc: BaseException) -> None:
    """Re-raise a cancellation that `exc` hid.

    Python 3.11's `asyncio.wait_for`, cancelled in the same loop turn as its call fails (Redis
    and Kafka both refusing at start-up), raises the call's error instead of `CancelledError`:
    a loop that retries on that error would outlive `stop()` and hang the process.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


class Supervisor:
    """The background tasks of one owner, watched the same way: the first that fails (raises, or
    ends while it should run until stopped) cancels the others and is reported once, logged and
    passed to `on_failure`. Later failures are consequences, and only logged at debug level."""

    def __init__(self, owner: str, on_failure: Callable[[BaseException], object]) -> None:
        self.owner = owner
        self._on_failure = on_failure
        self._tasks: dict[asyncio.Task[Any], bool] = {}  # task → may it end by itself
        self._failure: BaseException | None = None

    @property
    def failure(self) -> BaseException | None:
        """The first failure, if one happened."""
        return self._failure

    def spawn(
        self, coro: Coroutine[Any, Any, T], *, name: str, may_end: bool = False
    ) -> asyncio.Task[T]:
        """Run `coro` as a watched task (see `watch`)."""
        task = asyncio.create_task(coro, name=name)
        self.watch(task, may_end=may_end)
        return task

    def watch(self, task: asyncio.Task[T], *, may_end: bool = False) -> asyncio.Task[T]:
        """Watch a task started elsewhere (by a part that owns it). Unless `may_end`, it must run
        until stopped, and ending without an error is a failure too. A cancelled task (by its
        owner, or by `cancel`/`aclose`) never is."""
        self._tasks[task] = may_end
        task.add_done_callback(self._done)
        return task

    async def cancel(self, *tasks: asyncio.Task[Any] | None) -> None:
        """Stop these tasks on purpose: whatever they end with is no failure."""
        for task in tasks:
            if task is not None:
                self._tasks.pop(task, None)
        await cancel(*tasks)

    async def aclose(self) -> None:
        """Cancel every task still watched and wait for their ends."""
        await self.cancel(*self._tasks)

    def _done(self, task: asyncio.Task[Any]) -> None:
        may_end = self._tasks.pop(task, None)
        if may_end is None or task.cancelled():  # stopped on purpose
            return
        exc = task.exception()
        if exc is None:
            if may_end:
                return
            exc = RuntimeError(f"{task.get_name()} ended unexpectedly")
        if self._failure is not None:
            log.debug("%s failed after %s had failed", task.get_name(), self.owner, exc_info=exc)
            return
        self._failure = exc
        log.critical("%s failed; stopping %s", task.get_name(), self.owner, exc_info=exc)
        for other in self._tasks:
            other.cancel()
        self._on_failure(exc)
