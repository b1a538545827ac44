"""Reads a scenario's inbound, decisions and dead-letter topics into a `Ledger`, as they fill.

A consumer without a group, positioned at the end of the three topics before any traffic, so it
sees every record of the scenario exactly as the chat service and the moderators' peers would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from chaos.ledger import Ledger
from loadgen.kafka import TopicSet, assign_at_end
from moderator.records import (
    DLQ_DECISION,
    DLQ_ERROR_CODE,
    DLQ_SOURCE_OFFSET,
    DLQ_SOURCE_PARTITION,
)

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 64 * 1024 * 1024  # hostile records include 1 MiB texts


class Observer:
    """`async with Observer(bootstrap, names) as obs:` then read `obs.ledger`."""

    def __init__(self, bootstrap: str, names: TopicSet) -> None:
        self.bootstrap = bootstrap
        self.names = names
        self.ledger = Ledger()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id="chaos-observer",
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            fetch_max_bytes=FETCH_MAX_BYTES,
            max_partition_fetch_bytes=FETCH_MAX_BYTES,
        )
        await self._consumer.start()
        n = self.names
        await assign_at_end(self._consumer, [n.in_topic, n.out_topic, n.dlq_topic])
        self._task = asyncio.create_task(self._read(), name="chaos-observer")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    def check(self) -> None:
        """Raise the reader's error if it died (a dead observer would fake a loss)."""
        if self._task is not None and self._task.done():
            self._task.result()
            raise RuntimeError("the observer stopped")

    async def _read(self) -> None:
        assert self._consumer is not None
        n = self.names
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            now_ms = time.time() * 1000
            for tp, records in batches.items():
                for r in records:
                    if tp.topic == n.in_topic:
                        self.ledger.on_input(r.value, r.partition, r.offset)
                    elif tp.topic == n.out_topic:
                        self.ledger.on_decision(r.value, now_ms)
                    elif tp.topic == n.dlq_topic:
                        headers = dict(r.headers or ())
                        code = headers.get(DLQ_ERROR_CODE, b"?").decode()
                        self.ledger.on_dead_letter(r.key, code, _source(headers), now_ms,
                                                   headers.get(DLQ_DECISION))  # fmt: skip

    async def wait_for(
        self, done: Callable[[Ledger], bool], timeout_s: float, *, quiet_s: float = 0.0
    ) -> bool:
        """Wait until `done(ledger)` holds (then `quiet_s` more); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            if done(self.ledger):
                await asyncio.sleep(quiet_s)
                return True
            await asyncio.sleep(0.05)
        return False

    async def all_decided(self, timeout_s: float, *, quiet_s: float = 1.0) -> bool:
        """Wait until every valid input seen has a decision (then `quiet_s` for late repeats)."""
        return await self.wait_for(lambda lg: not lg.lost(), timeout_s, quiet_s=quiet_s)


def _source(headers: dict[str, bytes]) -> tuple[int, int] | None:
    try:
        return int(headers[DLQ_SOURCE_PARTITION]), int(headers[DLQ_SOURCE_OFFSET])
    except (KeyError, ValueError):
        return None


async def committed_offsets(
    bootstrap: str, group_id: str, topic: str, partitions: int
) -> dict[int, int | None]:
    """The group's committed offset of each partition of `topic` (None: nothing committed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
        client_id="chaos-offsets",
    )  # fmt: skip
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()
