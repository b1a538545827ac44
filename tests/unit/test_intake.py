"""The intake's own rules without a broker (moderator/kafka/intake.py): what the consumer is
started with, the fetch cap, which fetched records are tracked, what is committed and when, and
how partitions are handed over.

Only aiokafka's consumer is replaced, by one answering the calls the intake makes from what the
test queued; the intake, its offset ledger and metrics are the service's own. The same hand-overs
with the real broker: tests/integration/test_scaling.py and test_service.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, NamedTuple

import pytest
from aiokafka.errors import CommitFailedError, KafkaConnectionError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from moderator.config import Settings
from moderator.errors import KafkaConnectError
from moderator.kafka import intake as intake_module
from moderator.kafka.intake import Fetched, Intake
from moderator.kafka.ledger import Entry
from moderator.kafka.pacing import MIN_SAMPLES, RATE_TAU_S
from moderator.metrics import Metrics
from tests.waiting import eventually

IN = "chat.messages"
UNREACHABLE = "kafka.invalid:9092"
TP0, TP1, TP2, TP3 = (TopicPartition(IN, p) for p in range(4))


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int = 1_000
    key: bytes | None = b"c-1"
    value: bytes | None = b'{"message_id":"m"}'
    headers: tuple[tuple[str, bytes], ...] = ()


Batches = dict[TopicPartition, list[Record]]


def records(tp: TopicPartition, *offsets: int) -> list[Record]:
    return [Record(tp.topic, tp.partition, offset) for offset in offsets]


class Consumer:
    """The calls the intake makes of `AIOKafkaConsumer`, answered from what the test queued."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.started = self.stopped = False
        self.topics: list[str] = []
        self.listener: Any = None
        self.batches: asyncio.Queue[Batches] = asyncio.Queue()
        self.fetches: list[tuple[int, int]] = []  # (timeout_ms, max_records) of each getmany
        self.assigned: set[TopicPartition] = set()
        self.commits: list[dict[TopicPartition, OffsetAndMetadata]] = []
        self.commit_errors: deque[BaseException] = deque()  # raised by the next commits
        self.commit_hangs = False
        self.times_out = False  # getmany returns {} past its timeout (else it waits for a batch)
        self.highwaters: dict[TopicPartition, int] = {}
        self.broker_committed: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        if self.options["bootstrap_servers"] == UNREACHABLE:
            raise KafkaConnectionError(f"Unable to bootstrap from {UNREACHABLE}")
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def subscribe(self, topics: list[str], *, listener: Any) -> None:
        self.topics, self.listener = topics, listener

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batches:
        if max_records < 1:  # as aiokafka's
            raise ValueError("`max_records` must be a positive Integer")
        self.fetches.append((timeout_ms, max_records))
        if not self.times_out:
            return await self.batches.get()
        try:  # as aiokafka's: nothing within the timeout is an empty answer
            return await asyncio.wait_for(self.batches.get(), timeout_ms / 1000)
        except TimeoutError:
            return {}

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if self.commit_hangs:
            await asyncio.Event().wait()  # a broker that never answers
        if self.commit_errors:
            raise self.commit_errors.popleft()
        self.commits.append(offsets)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.highwaters.get(tp)

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.broker_committed.get(tp)


class Harness:
    """An intake started on a `Consumer`, with what it reported."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, **settings: Any) -> None:
        self.settings = Settings(**settings)
        self.metrics = Metrics()
        self.assigned_calls = 0
        self.abandoned: list[list[Entry]] = []
        self.intake = Intake(
            self.settings,
            self.metrics.kafka,
            on_assigned=self.on_assigned,
            on_abandoned=self.abandoned.append,
        )
        self.consumers: list[Consumer] = []
        monkeypatch.setattr(intake_module, "AIOKafkaConsumer", self.make_consumer)

    def make_consumer(self, **options: Any) -> Consumer:
        self.consumers.append(Consumer(**options))
        return self.consumers[-1]

    def on_assigned(self) -> None:
        self.assigned_calls += 1

    @property
    def consumer(self) -> Consumer:
        [consumer] = self.consumers
        return consumer

    async def start(self, *owned: TopicPartition) -> None:
        await self.intake.start()
        self.consumer.assigned = set(owned)
        await self.consumer.listener.on_partitions_assigned(set(owned))

    async def fetch(self, batches: Batches) -> list[Fetched]:
        self.consumer.batches.put_nowait(batches)
        return await self.intake.fetch()

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(f"moderator_{name}", labels)

    def committed(self) -> list[dict[TopicPartition, int]]:
        return [{tp: o.offset for tp, o in c.items()} for c in self.consumer.commits]


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Harness:
    return Harness(monkeypatch, max_batch=20, max_in_flight=100)


def offsets(fetched: list[Fetched]) -> list[tuple[TopicPartition, int]]:
    return [(f.entry.tp, f.entry.offset) for f in fetched]


async def turns() -> None:
    """Let the loop turn over a few times: a task that should be waiting runs until it waits (a
    wait whose deadline is already past ends within these turns)."""
    for _ in range(10):
        await asyncio.sleep(0)


# -- starting ------------------------------------------------------------------------------


async def test_the_consumer_joins_the_group_on_the_input_topic_with_auto_commit_off(
    harness: Harness,
) -> None:
    s = harness.settings
    await harness.intake.start()
    assert harness.consumer.started
    assert harness.consumer.options == {
        **s.kafka_options(),
        "group_id": s.group_id,
        "enable_auto_commit": False,  # an offset is committed only once its work is acknowledged
        "auto_offset_reset": s.auto_offset_reset,
        "fetch_max_wait_ms": s.fetch_max_wait_ms,
        "fetch_min_bytes": s.fetch_min_bytes,
        **s.consumer_timeouts(),
        "client_id": "moderator",
    }
    assert harness.consumer.topics == [s.in_topic]
    assert harness.intake.consumer is harness.consumer


async def test_a_consumer_that_cannot_connect_says_which_and_where(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(monkeypatch, kafka_bootstrap=UNREACHABLE)
    with pytest.raises(KafkaConnectError) as raised:
        await h.intake.start()
    assert str(raised.value).startswith(f"the consumer could not connect to Kafka at {UNREACHABLE}")


async def test_stop_stops_the_consumer_and_is_harmless_before_start(harness: Harness) -> None:
    await harness.intake.stop()  # never started: nothing to stop
    await harness.intake.start()
    await harness.intake.stop()
    assert harness.consumer.stopped


def test_the_consumer_is_there_only_once_started(harness: Harness) -> None:
    with pytest.raises(AssertionError):
        _ = harness.intake.consumer


# -- fetching ------------------------------------------------------------------------------


async def test_a_fetch_asks_for_four_batches_at_least_64_within_the_in_flight_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = Harness(monkeypatch, max_batch=8, max_in_flight=100)
    await small.start(TP0)
    await small.fetch({TP0: records(TP0, *range(50))})
    await small.fetch({TP0: records(TP0, 50)})
    # max(8 * 4, 64) = 64, then the 50 left under the cap of 100
    assert small.consumer.fetches == [(100, 64), (100, 50)]

    large = Harness(monkeypatch, max_batch=20, max_in_flight=100)
    await large.start(TP0)
    await large.fetch({TP0: records(TP0, 0)})
    assert large.consumer.fetches == [(100, 80)]  # 20 * 4


async def test_fetched_records_are_tracked_in_fetch_order_and_counted(harness: Harness) -> None:
    await harness.start(TP0, TP1)
    fetched = await harness.fetch({TP0: records(TP0, 5, 6), TP1: records(TP1, 9)})
    assert offsets(fetched) == [(TP0, 5), (TP0, 6), (TP1, 9)]
    assert [f.record.offset for f in fetched] == [5, 6, 9]
    assert harness.sample("messages_consumed_total") == 3
    assert harness.sample("in_flight") == 3


async def test_an_empty_fetch_is_never_returned(harness: Harness) -> None:
    await harness.start(TP0)
    harness.consumer.batches.put_nowait({})
    fetched = await harness.fetch({TP0: records(TP0, 1)})
    assert offsets(fetched) == [(TP0, 1)]
    assert len(harness.consumer.fetches) == 2


async def test_records_of_a_partition_already_revoked_are_dropped(harness: Harness) -> None:
    await harness.start(TP0)
    fetched = await harness.fetch({TP1: records(TP1, 3), TP0: records(TP0, 4)})
    assert offsets(fetched) == [(TP0, 4)]  # TP1's new owner redoes its record
    assert harness.sample("in_flight") == 1


async def test_records_arriving_before_their_assignment_is_announced_adopt_it(
    harness: Harness,
) -> None:
    await harness.start(TP0)
    assert harness.assigned_calls == 1
    harness.consumer.assigned.add(TP1)  # the group gave it, the listener has not run yet
    fetched = await harness.fetch({TP1: records(TP1, 3)})
    assert offsets(fetched) == [(TP1, 3)]
    assert harness.assigned_calls == 2
    await harness.fetch({TP1: records(TP1, 4)})
    assert harness.assigned_calls == 2  # adopted once


async def test_fetching_waits_at_the_in_flight_cap_until_an_ack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capped = Harness(monkeypatch, max_in_flight=2)
    await capped.start(TP0)
    first = await capped.fetch({TP0: records(TP0, 0, 1)})
    capped.consumer.batches.put_nowait({TP0: records(TP0, 2)})
    waiting = asyncio.create_task(capped.intake.fetch())
    await asyncio.sleep(0)  # one turn: the fetch runs until it waits
    assert not waiting.done()
    assert len(capped.consumer.fetches) == 1  # no fetch at the cap
    capped.intake.acked(first[0].entry)
    assert offsets(await waiting) == [(TP0, 2)]
    assert capped.consumer.fetches[1] == (100, 1)  # room for one
    assert capped.sample("in_flight") == 2


def busy(h: Harness, rate: float = 1000.0) -> None:
    """Feed `h`'s pacer a busy stream (`rate` records/s) and quick batches: it plans a linger."""
    for _ in range(MIN_SAMPLES):
        h.intake.pacer.decided(5.0)
    h.intake.pacer.arrived(0, 0.0)
    h.intake.pacer.arrived(round(rate), RATE_TAU_S)


async def test_a_busy_stream_lingers_to_gather_the_pacers_target(harness: Harness) -> None:
    await harness.start(TP0, TP1)
    harness.consumer.times_out = True
    busy(harness)  # 1000/s: 10 more within the cap's 10 ms
    plan = harness.intake.pacer.plan()
    assert plan.target > 6
    for offset in range(3):  # one record a getmany: a linger gathers them
        harness.consumer.batches.put_nowait({TP0: records(TP0, offset), TP1: records(TP1, offset)})
    fetched = await harness.intake.fetch()
    assert offsets(fetched) == [(tp, o) for o in range(3) for tp in (TP0, TP1)]  # fetch order
    assert len(harness.consumer.fetches) >= 4  # the last one waited, for nothing
    assert harness.sample("fetched_batch_size_sum") == 6
    assert harness.sample("fetch_target") == plan.target
    assert harness.sample("fetch_linger_ms") == pytest.approx(plan.wait_ms)
    assert harness.sample("in_flight") == 6


async def test_a_linger_ends_at_its_deadline_with_what_it_has(harness: Harness) -> None:
    await harness.start(TP0)
    harness.consumer.times_out = True
    busy(harness)
    fetched = await harness.fetch({TP0: records(TP0, 0)})
    assert offsets(fetched) == [(TP0, 0)]  # nothing more came within the wait
    assert len(harness.consumer.fetches) >= 2  # it did wait
    assert all(timeout_ms <= 10 for timeout_ms, _ in harness.consumer.fetches[1:])


async def test_a_linger_stops_at_the_in_flight_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    capped = Harness(monkeypatch, max_in_flight=2)
    await capped.start(TP0)
    capped.consumer.times_out = True
    busy(capped)
    capped.consumer.batches.put_nowait({TP0: records(TP0, 0)})
    capped.consumer.batches.put_nowait({TP0: records(TP0, 1)})
    capped.consumer.batches.put_nowait({TP0: records(TP0, 2)})
    assert offsets(await capped.intake.fetch()) == [(TP0, 0), (TP0, 1)]
    assert capped.consumer.fetches[1] == (capped.consumer.fetches[1][0], 1)  # room for one


async def test_a_fetch_cancelled_while_it_lingers_leaves_nothing_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = Harness(monkeypatch, budget_ms=5000, fetch_linger_max_ms=1000)  # lingers up to 1 s
    await slow.start(TP0)
    slow.consumer.times_out = True
    busy(slow, rate=2)  # 2/s: a wait of 1 s for 2 more
    slow.consumer.batches.put_nowait({TP0: records(TP0, 0)})
    fetching = asyncio.create_task(slow.intake.fetch())
    await eventually(lambda: len(slow.consumer.fetches) >= 2, "lingering for more")
    fetching.cancel()  # a shutdown: the fetch loop is stopped
    with pytest.raises(asyncio.CancelledError):
        await fetching
    assert await slow.intake.release({TP0}, forget=False), "no work waits to be finished"
    assert slow.committed() == []  # and nothing was committed for it


async def test_records_of_a_partition_revoked_while_a_fetch_lingers_are_left_to_its_next_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = Harness(monkeypatch, budget_ms=5000, fetch_linger_max_ms=1000, max_batch=1)
    await slow.start(TP0, TP1)
    slow.consumer.times_out = True
    busy(slow, rate=2)  # 2/s: a target of 2 x max_batch = 2 records, within 0.5 s
    slow.consumer.batches.put_nowait({TP1: records(TP1, 7)})
    fetching = asyncio.create_task(slow.intake.fetch())
    await eventually(lambda: len(slow.consumer.fetches) >= 2, "lingering for more")
    slow.consumer.assigned.discard(TP1)
    await slow.consumer.listener.on_partitions_revoked({TP1})  # nothing of TP1's in flight
    slow.consumer.batches.put_nowait({TP0: records(TP0, 3)})
    assert offsets(await fetching) == [(TP0, 3)]
    assert slow.sample("in_flight") == 1


async def test_with_lingering_off_a_fetch_takes_what_one_getmany_brings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    off = Harness(monkeypatch, max_batch=20, max_in_flight=100, fetch_linger_max_ms=0)
    await off.start(TP0)
    off.consumer.times_out = True
    busy(off, rate=5000)
    off.consumer.batches.put_nowait({TP0: records(TP0, 0)})
    off.consumer.batches.put_nowait({TP0: records(TP0, 1)})
    assert offsets(await off.intake.fetch()) == [(TP0, 0)]
    assert off.consumer.fetches == [(100, 80)]  # as before pacing: one getmany
    assert off.sample("fetch_linger_ms") == 0


# -- committing ----------------------------------------------------------------------------


async def test_the_commit_loop_commits_the_acknowledged_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(monkeypatch, commit_interval_s=0.01)
    await h.start(TP0)
    fetched = await h.fetch({TP0: records(TP0, 10, 11, 12)})
    loop = asyncio.create_task(h.intake.commit_loop())
    try:
        h.intake.acked(fetched[0].entry)
        h.intake.acked(fetched[2].entry)  # 11 not yet: 12 waits behind it
        await eventually(lambda: h.committed() == [{TP0: 11}], "offset 11 committed")
        h.intake.acked(fetched[1].entry)
        await eventually(lambda: h.committed()[-1:] == [{TP0: 13}], "offset 13 committed")
    finally:
        loop.cancel()
    assert h.consumer.commits[0] == {TP0: OffsetAndMetadata(11, "")}
    assert h.sample("in_flight") == 0


async def test_a_commit_is_made_only_of_offsets_not_committed_yet(harness: Harness) -> None:
    await harness.start(TP0, TP1)
    await harness.intake.drain()  # nothing fetched: nothing to commit
    assert harness.consumer.commits == []
    fetched = await harness.fetch({TP0: records(TP0, 10), TP1: records(TP1, 20)})
    harness.intake.acked(fetched[0].entry)
    harness.intake.acked(fetched[1].entry)
    await harness.intake.drain()
    await harness.intake.drain()  # committed already: no second commit
    assert harness.committed() == [{TP0: 11, TP1: 21}]
    assert harness.sample("commits_total", result="ok") == 1


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            CommitFailedError("rebalanced"),
            "commit failed because the group rebalanced; work will be redone: {}",
        ),
        (KafkaConnectionError("broker gone"), "commit failed ({}); retrying at the next interval"),
    ],
)
async def test_a_failed_commit_is_counted_said_and_made_again_next_time(
    harness: Harness, error: BaseException, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    await harness.start(TP0)
    [one] = await harness.fetch({TP0: records(TP0, 10)})
    harness.intake.acked(one.entry)
    harness.consumer.commit_errors.append(error)
    with caplog.at_level(logging.WARNING, logger=intake_module.__name__):
        await harness.intake.drain()
    assert harness.consumer.commits == []
    assert harness.sample("commits_total", result="failed") == 1
    assert [r.getMessage() for r in caplog.records] == [said.format(error)]
    await harness.intake.drain()
    assert harness.committed() == [{TP0: 11}]  # not taken the first time: made again
    assert harness.sample("commits_total", result="ok") == 1


# -- handing over --------------------------------------------------------------------------


async def test_a_revoked_partition_is_handed_over_once_its_work_is_acknowledged(
    harness: Harness,
) -> None:
    await harness.start(TP0, TP1)
    fetched = await harness.fetch({TP0: records(TP0, 10, 11), TP1: records(TP1, 20, 21)})
    harness.intake.acked(fetched[2].entry)  # TP1's 20: committed by the commit loop, not here
    revoking = asyncio.create_task(harness.consumer.listener.on_partitions_revoked([TP0]))
    await turns()
    harness.intake.acked(fetched[0].entry)
    await turns()
    assert not revoking.done()  # 11 still in flight
    harness.intake.acked(fetched[1].entry)
    await revoking
    assert harness.committed() == [{TP0: 12}]  # the hand-over commits the revoked partition
    assert harness.abandoned == [[]]  # nothing given up
    assert harness.sample("in_flight") == 1  # TP1's 21
    # TP0 is no longer owned: a late record of it is dropped, TP1's are kept
    harness.consumer.assigned = {TP1}
    more = await harness.fetch({TP0: records(TP0, 12), TP1: records(TP1, 21)})
    assert offsets(more) == [(TP1, 21)]


async def test_a_release_interrupted_gives_up_the_work_in_flight(harness: Harness) -> None:
    await harness.start(TP0, TP1)
    fetched = await harness.fetch({TP0: records(TP0, 10, 11), TP1: records(TP1, 20)})
    harness.intake.acked(fetched[0].entry)
    harness.intake.interrupt()  # a task failed: 11 may never be acknowledged
    assert not await harness.intake.release({TP0})
    assert harness.committed() == [{TP0: 11}]
    assert harness.abandoned == [[fetched[1].entry]]
    assert fetched[1].entry.abandoned
    assert harness.sample("in_flight") == 1  # TP1's record


async def test_a_release_past_its_deadline_gives_up_the_work_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(monkeypatch, shutdown_timeout_s=0.01)
    await h.start(TP0)
    fetched = await h.fetch({TP0: records(TP0, 10, 11)})
    h.intake.acked(fetched[0].entry)
    assert not await h.intake.release({TP0})
    assert h.committed() == [{TP0: 11}]
    assert h.abandoned == [[fetched[1].entry]]
    assert h.sample("in_flight") == 0


async def test_a_commit_the_broker_never_answers_does_not_hold_the_hand_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(intake_module, "FINAL_COMMIT_MIN_S", 0.01)
    h = Harness(monkeypatch, shutdown_timeout_s=0.01)
    await h.start(TP0)
    [one] = await h.fetch({TP0: records(TP0, 10)})
    h.intake.acked(one.entry)
    h.consumer.commit_hangs = True
    with caplog.at_level(logging.WARNING, logger=intake_module.__name__):
        assert await h.intake.release({TP0})  # its work was done; only the commit was lost
    assert h.sample("commits_total", result="failed") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "commit not done within 0 s (broker unreachable?); the work since the last commit will "
        "be redone"
    ]
    assert h.abandoned == [[]]


async def test_a_drain_commits_every_partition_and_keeps_them(harness: Harness) -> None:
    await harness.start(TP0, TP1)
    fetched = await harness.fetch({TP0: records(TP0, 10), TP1: records(TP1, 20, 21)})
    for f in fetched[:2]:
        harness.intake.acked(f.entry)
    draining = asyncio.create_task(harness.intake.drain())
    await turns()
    assert not draining.done()  # TP1's 21 still in flight
    harness.intake.acked(fetched[2].entry)
    await draining
    assert harness.committed() == [{TP0: 11, TP1: 22}]
    assert harness.abandoned == []  # kept: nothing given up
    more = await harness.fetch({TP0: records(TP0, 11)})
    assert offsets(more) == [(TP0, 11)]


async def test_a_drain_past_its_deadline_warns_and_gives_up_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(monkeypatch, shutdown_timeout_s=0.01)
    await h.start(TP0)
    await h.fetch({TP0: records(TP0, 10)})
    with caplog.at_level(logging.WARNING, logger=intake_module.__name__):
        await h.intake.drain()
    assert [r.getMessage() for r in caplog.records] == [
        "shutdown deadline passed with work in flight; it will be redone"
    ]
    assert h.abandoned == []
    assert h.sample("in_flight") == 1


# -- lag -----------------------------------------------------------------------------------


async def test_the_lag_is_the_high_water_mark_past_the_committed_offset(
    harness: Harness,
) -> None:
    await harness.start(TP0, TP1, TP2, TP3)
    [one] = await harness.fetch({TP0: records(TP0, 11)})
    harness.intake.acked(one.entry)
    await harness.intake.drain()  # TP0 committed here at 12
    c = harness.consumer
    c.highwaters = {TP0: 20, TP1: 20, TP3: 7}  # TP2: none known yet
    c.broker_committed = {TP0: 3, TP1: 5}  # TP1: committed before this member; TP3: never
    loop = asyncio.create_task(harness.intake.lag_loop())

    def lag(tp: TopicPartition) -> float | None:
        return harness.sample("consumer_lag", topic=tp.topic, partition=str(tp.partition))

    try:
        await eventually(lambda: lag(TP3) is not None, "the lag measured")
    finally:
        loop.cancel()
    assert [lag(tp) for tp in (TP0, TP1, TP2, TP3)] == [8, 15, None, 7]
    await harness.intake.release({TP0})
    assert lag(TP0) is None  # a partition handed over has no lag here
    assert lag(TP1) == 15


async def test_a_committed_offset_past_the_high_water_mark_is_no_lag(harness: Harness) -> None:
    await harness.start(TP0)
    harness.consumer.highwaters = {TP0: 5}
    harness.consumer.broker_committed = {TP0: 9}  # a stale high-water mark
    loop = asyncio.create_task(harness.intake.lag_loop())
    labels = {"topic": IN, "partition": "0"}
    try:
        await eventually(lambda: harness.sample("consumer_lag", **labels) is not None, "lag")
    finally:
        loop.cancel()
    assert harness.sample("consumer_lag", **labels) == 0


async def test_each_hand_over_is_logged_with_its_partitions(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=intake_module.__name__):
        await harness.start(TP1, TP0)
        await harness.intake.release({TP1})
        await harness.intake.release(set())  # nothing revoked: nothing said
    assert [r.getMessage() for r in caplog.records] == [
        "assigned [('chat.messages', 0), ('chat.messages', 1)]",
        "released [('chat.messages', 1)]",
    ]
