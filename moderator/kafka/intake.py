"""The input side of a moderator: the group consumer, the offset ledger, commits, hand-overs.

Fetching pauses while `max_in_flight` records are unacknowledged. The offset ledger
(moderator/kafka/ledger.py) commits an input offset only when the deliveries of its outcome and of
every earlier record of its partition were acknowledged. A partition the group takes away is
handed over only after its work in flight is acknowledged and committed (or the shutdown
timeout passed), so its next owner redoes as little as possible and loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from moderator.config import Settings
from moderator.kafka.connect import start_client
from moderator.kafka.ledger import Entry, OffsetLedger
from moderator.kafka.pacing import Pacer
from moderator.metric_wings import KafkaMetrics
from moderator.records import InboundRecord

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100
FINAL_COMMIT_MIN_S = 5.0  # what a hand-over or shutdown commit gets, past the deadline too


class Fetched(NamedTuple):
    """One record of a fetched batch and its place in the offset ledger."""

    entry: Entry
    record: InboundRecord


class Intake:
    """Fetches within the in-flight cap, tracks what was fetched, commits what was acknowledged
    and hands partitions over. `on_assigned()` is called when partitions arrive; `on_abandoned`
    gets the entries of partitions given up, so whoever is publishing them can stop."""

    def __init__(
        self,
        settings: Settings,
        metrics: KafkaMetrics,
        *,
        on_assigned: Callable[[], None],
        on_abandoned: Callable[[list[Entry]], None],
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._consumer: AIOKafkaConsumer | None = None
        self._on_assigned = on_assigned
        self._on_abandoned = on_abandoned
        self._ledger = OffsetLedger()
        self.pacer = Pacer(
            budget_ms=settings.budget_ms,
            max_linger_ms=settings.fetch_linger_max_ms,
            max_target=settings.max_batch * 2,
        )
        self._room = asyncio.Event()  # set while fewer than max_in_flight are unacknowledged
        self._room.set()
        self._moved = asyncio.Event()  # set when the in-flight count moves, or by `interrupt`
        self._interrupted = False

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "start() first"
        return self._consumer

    async def start(self) -> None:
        """Connect, and join the group on the input topic."""
        s = self.settings
        self._consumer = consumer = AIOKafkaConsumer(
            **s.kafka_options(),
            group_id=s.group_id,
            enable_auto_commit=False,
            auto_offset_reset=s.auto_offset_reset,
            fetch_max_wait_ms=s.fetch_max_wait_ms,
            fetch_min_bytes=s.fetch_min_bytes,
            **s.consumer_timeouts(),
            client_id="moderator",
        )
        await start_client(consumer, s.kafka_options(), "the consumer")
        consumer.subscribe([s.in_topic], listener=_Rebalance(self))

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    # -- fetching --------------------------------------------------------------------------

    async def fetch(self) -> list[Fetched]:
        """The next records fetched (never none), each tracked in the ledger; waits while the
        in-flight cap is reached. Once one record is in, it lingers for more as long as the
        pacer's plan says the arrival rate and the budget afford (moderator/kafka/pacing.py)."""
        while True:
            got = await self._gather()
            # Tracked only now: a fetch cancelled while it lingers (a shutdown) leaves nothing in
            # flight that nobody will finish, and the records of a partition revoked meanwhile
            # are left to its new owner (never tracked, so never committed past).
            fetched = [Fetched(self._ledger.track(tp, r.offset), r)
                       for tp, r in got if self._ledger.owns(tp)]  # fmt: skip
            if fetched:
                break
        m = self.metrics
        m.fetched_batch.observe(len(fetched))
        m.consumed.inc(len(fetched))
        self._in_flight_changed()
        return fetched

    async def _gather(self) -> list[tuple[TopicPartition, InboundRecord]]:
        """One poll's records, and more while the pacer's plan lingers for them."""
        while True:
            await self._room.wait()
            if got := await self._get(FETCH_TIMEOUT_MS, 0):
                break
        plan = self.pacer.plan()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + plan.wait_ms / 1000
        while len(got) < plan.target and (left_s := deadline - loop.time()) > 0:
            if self._ledger.in_flight + len(got) >= self.settings.max_in_flight:
                break
            got.extend(await self._get(max(round(left_s * 1000), 1), len(got)))
        self.pacer.arrived(len(got), loop.time())
        m = self.metrics
        m.fetch_linger_ms.set(plan.wait_ms)
        m.fetch_target.set(plan.target)
        m.arrival_rate.set(self.pacer.rate)
        return got

    async def _get(self, timeout_ms: int, held: int) -> list[tuple[TopicPartition, InboundRecord]]:
        """What one `getmany` returns within `timeout_ms` (maybe nothing), within the in-flight
        cap less the `held` records this fetch has gathered already."""
        max_records = max(self.settings.max_batch * 4, 64)
        batches = await self.consumer.getmany(
            timeout_ms=timeout_ms,
            max_records=min(
                max_records, self.settings.max_in_flight - self._ledger.in_flight - held
            ),
        )
        got: list[tuple[TopicPartition, InboundRecord]] = []
        for tp, part in batches.items():
            if not self._ledger.owns(tp):
                if tp not in self.consumer.assignment():
                    continue  # fetched just before a revocation: its new owner redoes it
                self.adopt({tp})  # records may arrive before the listener has run
            got.extend((tp, r) for r in part)
        return got

    def time_decided(self, unit: asyncio.Future[Any]) -> None:
        """Time from now (a fetch's return) to `unit`'s end (its batch decided), for the pacer:
        the p99 of what follows a fetch is what leaves its linger room in the budget."""
        loop = asyncio.get_running_loop()
        fetched_at = loop.time()
        unit.add_done_callback(lambda _: self.pacer.decided((loop.time() - fetched_at) * 1000))

    def acked(self, entry: Entry) -> None:
        """`entry`'s outcome is on the broker."""
        self._ledger.ack(entry)
        self._in_flight_changed()

    def interrupt(self) -> None:
        """Stop waiting for work in flight: a task failed, so it may never be acknowledged."""
        self._interrupted = True
        self._moved.set()

    def _in_flight_changed(self) -> None:
        """Mirror the ledger's in-flight count in the gauge, pause or resume fetching, and wake
        a release waiting for its partitions' work."""
        self._moved.set()
        in_flight = self._ledger.in_flight
        self.metrics.in_flight.set(in_flight)
        if in_flight >= self.settings.max_in_flight:
            self._room.clear()
        else:
            self._room.set()

    # -- committing and handing over -------------------------------------------------------

    async def _commit(self, only: set[TopicPartition] | None = None) -> None:
        offsets = self._ledger.to_commit(only)
        if not offsets:
            return
        try:
            await self.consumer.commit(
                {tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}
            )
        except CommitFailedError as exc:
            self.metrics.commit_failed.inc()
            log.warning("commit failed because the group rebalanced; work will be redone: %s", exc)
            return
        except KafkaError as exc:
            self.metrics.commit_failed.inc()
            log.warning("commit failed (%s); retrying at the next interval", exc)
            return
        self.metrics.commit_ok.inc()
        self._ledger.mark_committed(offsets)

    async def commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            await self._commit()

    def adopt(self, assigned: set[TopicPartition]) -> None:
        self._ledger.assign(assigned)
        log.info("assigned %s", sorted((tp.topic, tp.partition) for tp in assigned))
        self._on_assigned()

    async def drain(self) -> None:
        """Finish and commit the work in flight of every partition, keeping them (shutdown)."""
        if not await self.release(self._ledger.partitions, forget=False):
            log.warning("shutdown deadline passed with work in flight; it will be redone")

    async def release(self, revoked: set[TopicPartition], *, forget: bool = True) -> bool:
        """Finish the work of `revoked` partitions and commit it, before giving them up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.shutdown_timeout_s
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while self._ledger.pending(revoked) and not self._interrupted:
                    self._moved.clear()
                    await self._moved.wait()
        drained = not self._ledger.pending(revoked)
        # aiokafka looks for the group coordinator until it finds one: with the broker gone, an
        # unbounded commit would hang the shutdown forever. Not committing only means redoing.
        remaining_s = max(deadline - loop.time(), FINAL_COMMIT_MIN_S)
        try:
            await asyncio.wait_for(self._commit(revoked), remaining_s)
        except TimeoutError:
            self.metrics.commit_failed.inc()
            log.warning(
                "commit not done within %.0f s (broker unreachable?); the work since the last "
                "commit will be redone",
                remaining_s,
            )
        if forget:
            self._on_abandoned(self._ledger.abandon(revoked))
            self._in_flight_changed()
            for tp in revoked:
                self.metrics.consumer_lag.remove((tp.topic, str(tp.partition)))
            if revoked:
                log.info("released %s", sorted((tp.topic, tp.partition) for tp in revoked))
        return drained

    async def lag_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for tp in self._ledger.partitions:
                highwater = self.consumer.highwater(tp)
                if highwater is None:
                    continue
                done = self._ledger.committed(tp)
                if done is None:
                    done = await self.consumer.committed(tp) or 0
                lag = self.metrics.consumer_lag[tp.topic, str(tp.partition)]
                lag.set(max(highwater - done, 0))


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands partitions over: finish and commit revoked work first, then take new partitions."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.intake.release(set(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.intake.adopt(set(assigned))
