"""Stopping a client is bounded: a close that hangs must not keep a finished process alive."""

from __future__ import annotations

import asyncio
import logging
from unittest.mock import patch

import pytest

from moderator import loop
from moderator.kafka.connect import stop_within
from tests.waiting import eventually


class Hangs:
    """A client whose stop() never returns, like aiokafka's consumer in aio-libs/aiokafka#773."""

    def __init__(self) -> None:
        self.cancelled = False

    async def stop(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Fails:
    async def stop(self) -> None:
        raise RuntimeError("boom")


async def test_a_stop_that_hangs_is_given_up_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Hangs()
    with caplog.at_level(logging.WARNING, logger="moderator.kafka.connect"):
        await asyncio.wait_for(stop_within(client, timeout_s=0.05), timeout=5)
    assert client.cancelled, "the hanging stop() was cancelled, not left running"
    assert [r.getMessage() for r in caplog.records] == [
        "Hangs did not stop within 0.05 s; going on without it"
    ]


async def test_a_stop_that_fails_is_logged_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="moderator.kafka.connect"):
        await stop_within(Fails())
    assert "error while stopping Fails" in caplog.text


class IgnoresCancellation:
    """A stop() that keeps waiting when cancelled (aiokafka's consumer, its broker gone), until
    the test releases it."""

    def __init__(self) -> None:
        self.released = False
        self.ended = False

    async def stop(self) -> None:
        while not self.released:  # a flag, not an Event: it is released after its loop closed
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue
        self.ended = True


async def test_a_stop_that_ignores_cancellation_is_left_behind_not_waited_for() -> None:
    client = IgnoresCancellation()
    try:
        await asyncio.wait_for(stop_within(client, timeout_s=0.05), timeout=5)
    finally:
        client.released = True
        await eventually(lambda: client.ended, "the stop() left behind ends once released")


def test_a_process_whose_leftover_task_ignores_cancellation_still_ends() -> None:
    client = IgnoresCancellation()

    async def main() -> int:
        await stop_within(client, timeout_s=0.05)
        return 7

    with patch.object(loop, "LEFTOVER_TIMEOUT_S", 0.1):
        try:
            assert loop.run(main()) == 7
        finally:
            client.released = True
