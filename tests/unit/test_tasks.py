"""The supervisor of background tasks and the one cancel helper (moderator/tasks.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from moderator.tasks import Supervisor, cancel


async def forever() -> None:
    await asyncio.Event().wait()


async def fail_when(event: asyncio.Event, error: Exception) -> None:
    await event.wait()
    raise error


class Reports:
    """What a supervisor reports to its owner."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.supervisor = Supervisor("the test", on_failure=self.failures.append)


async def test_the_first_failure_stops_the_rest_and_is_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = Reports()
    go = asyncio.Event()
    first, second = RuntimeError("first"), ValueError("second, in the same loop turn")
    failing = r.supervisor.spawn(fail_when(go, first), name="failing")
    also_failing = r.supervisor.spawn(fail_when(go, second), name="also-failing")
    running = r.supervisor.spawn(forever(), name="running")
    caplog.set_level(logging.DEBUG, logger="moderator.tasks")
    go.set()
    await asyncio.wait({failing, also_failing, running}, timeout=5)

    assert r.failures == [first]
    assert r.supervisor.failure is first
    assert running.cancelled(), "the failure stopped the task still running"
    assert also_failing.done()
    critical = [rec for rec in caplog.records if rec.levelno == logging.CRITICAL]
    assert [rec.getMessage() for rec in critical] == ["failing failed; stopping the test"]
    await r.supervisor.aclose()
    assert r.failures == [first], "closing after a failure reports nothing more"


async def test_a_task_that_must_run_fails_by_returning_one_that_may_end_does_not() -> None:
    r = Reports()

    async def done() -> None:
        return None

    errand = r.supervisor.spawn(done(), name="errand", may_end=True)
    await asyncio.wait({errand}, timeout=5)
    assert r.failures == []
    loop = r.supervisor.spawn(done(), name="loop")
    await asyncio.wait({loop}, timeout=5)
    assert len(r.failures) == 1
    assert isinstance(r.failures[0], RuntimeError)
    assert "loop ended unexpectedly" in str(r.failures[0])


async def test_a_task_stopped_on_purpose_is_no_failure_whatever_it_ends_with() -> None:
    """A loop that raises its call's error when cancelled (3.11's wait_for) is not a bug report."""
    r = Reports()

    async def raises_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise OSError("connection reset while cancelled") from None

    task = r.supervisor.spawn(raises_when_cancelled(), name="fetch")
    other = r.supervisor.spawn(forever(), name="other")
    await asyncio.sleep(0)
    await r.supervisor.cancel(task)
    assert task.done()
    assert not other.done(), "only the task named was stopped"
    await r.supervisor.aclose()
    assert other.cancelled()
    assert r.failures == []


async def test_a_watched_task_cancelled_by_its_own_part_is_no_failure() -> None:
    r = Reports()
    task = r.supervisor.watch(asyncio.create_task(forever()))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert r.failures == []


async def test_cancel_waits_for_the_end_and_cancels_again_a_task_that_swallowed_it() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 1:
                    continue  # as a retry loop that took the cancellation for its call's error
                raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel(task, None), 5)
    assert task.cancelled()
    assert swallowed == 2


async def test_cancel_retrieves_errors_without_raising_them() -> None:
    async def broken() -> None:
        raise RuntimeError("reported by whoever watched it")

    task = asyncio.create_task(broken())
    await asyncio.wait({task})
    await cancel(task)  # does not raise
    assert isinstance(task.exception(), RuntimeError)


async def test_cancel_does_not_swallow_the_callers_own_cancellation() -> None:
    stopping = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopping.set()
            await asyncio.Event().wait()  # cleanup still running when the caller is cancelled
            raise

    inner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel(inner))
    await stopping.wait()
    caller.cancel()
    await asyncio.wait({caller}, timeout=5)
    assert caller.cancelled()
    await cancel(inner)
