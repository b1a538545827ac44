"""Scaling out and back the way Kafka consumers do, and the way KEDA drives deploy/k8s: three
`moderator run` processes in one consumer group, 1 → 3 → 1 under steady load, on the embedded
broker. Every input is decided, the partitions are split between the three while they run (each
one's `moderator_consumer_lag{partition}` series and its last "assigned" log line say which it
owns), and nothing is lost: the last one's committed offsets reach past every input record.

Nothing here asserts a time; the figures (decisions per instance, time to rebalance) are printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from devstack.child import ModeratorChild
from moderator.config import Settings
from moderator.kafka.topics import ensure_topics
from tests.integration.kafka_io import chat, consume, decisions_by_id, read_to_end
from tests.integration.test_processes import committed, start
from tests.waiting import eventually

pytestmark = pytest.mark.integration

PARTITIONS = 6
CHANNELS = 60  # keys enough to reach every partition
BATCH, EVERY_S = 2, 0.05  # about 40 messages a second
REBALANCE_WAIT_S = 150.0  # generous: a join or a leave is a whole-group rebalance on Tansu
ASSIGNED = re.compile(r"assigned \[(.*)\]")


class Load:
    """Valid chat messages produced steadily until `stop()`; remembers every id it sent."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sent: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Load:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            while not self._stop.is_set():
                futures = []
                for _ in range(BATCH):
                    i = len(self.sent)
                    key, value = chat(i, f"scaling line {i}, still chatting", channels=CHANNELS)
                    futures.append(await producer.send(self.topic, value=value, key=key))
                    self.sent.append(f"m-{i}")
                await asyncio.gather(*futures)
                with contextlib.suppress(TimeoutError):  # the pace, or a stop
                    await asyncio.wait_for(self._stop.wait(), EVERY_S)
        finally:
            await producer.stop()


def owned(proc: ModeratorChild) -> frozenset[int]:
    """The input partitions an instance reports lag for: the ones assigned to it now."""
    samples = proc.scrape()
    if samples is None:
        return frozenset()
    return frozenset(int(p) for p in samples.by("moderator_consumer_lag", "partition"))


def last_assigned(proc: ModeratorChild) -> frozenset[int]:
    """The partitions of its last "assigned […]" log line."""
    lines = [m.group(1) for line in proc.output().splitlines() if (m := ASSIGNED.search(line))]
    return frozenset(int(p) for p in re.findall(r"', (\d+)\)", lines[-1])) if lines else frozenset()


def decided(proc: ModeratorChild) -> float:
    return proc.metric("moderator_decisions_total") or 0.0


def split_between(procs: list[ModeratorChild]) -> bool:
    """Every partition owned by exactly one of `procs`, and each of them owning at least one."""
    sets = [owned(p) for p in procs]
    every = set(range(PARTITIONS))
    return (all(sets) and sum(len(s) for s in sets) == PARTITIONS
            and set().union(*sets) == every)  # fmt: skip


@pytest.mark.timeout(900)
async def test_one_to_three_to_one_under_load_decides_everything(settings: Settings) -> None:
    settings = settings.replace(in_topic=f"{settings.in_topic}.scale",
                                out_topic=f"{settings.out_topic}.scale",
                                dlq_topic=f"{settings.dlq_topic}.scale")  # fmt: skip
    await ensure_topics(settings.kafka_bootstrap, {settings.in_topic: PARTITIONS,
                        settings.out_topic: PARTITIONS, settings.dlq_topic: 1})  # fmt: skip
    every = frozenset(range(PARTITIONS))
    a = start(settings, threads=1)
    procs = [a]
    figures: list[str] = []
    try:
        await asyncio.to_thread(a.wait_ready)
        async with Load(settings.kafka_bootstrap, settings.in_topic) as load:
            # 1: one instance owns every partition and decides.
            await eventually(lambda: owned(a) == every and decided(a) >= 50,
                             "a alone owns every partition and decides", timeout_s=60)  # fmt: skip
            figures.append(f"1 instance: a owns {sorted(owned(a))}")

            # 1 → 3: two more join the group; the partitions are split between the three.
            joined_s = time.monotonic()
            b, c = start(settings, threads=1), start(settings, threads=1)
            procs += [b, c]
            await eventually(lambda: split_between([a, b, c]), "the partitions split 3 ways",
                             timeout_s=REBALANCE_WAIT_S)  # fmt: skip
            split_s = time.monotonic() - joined_s
            spread = [owned(p) for p in (a, b, c)]
            before = {id(p): decided(p) for p in (a, b, c)}
            # All three decide their share: each one's count grows after the split.
            await eventually(lambda: all(decided(p) >= before[id(p)] + 40 for p in (a, b, c)),
                             "each of the three decides", timeout_s=60)  # fmt: skip
            # The log says the same as the metrics (each logs its whole assignment).
            for p in (a, b, c):
                assert last_assigned(p) == owned(p), p.output(20)
            during = [decided(p) - before[id(p)] for p in (a, b, c)]  # since the split
            owners = ", ".join(f"{n} owns {sorted(o)}" for n, o in zip("abc", spread, strict=True))
            figures.append(f"3 instances after {split_s:.1f} s: {owners}")

            # 3 → 1: b and c leave with SIGTERM (a scale-down); a takes every partition back.
            left_s = time.monotonic()
            exits = await asyncio.gather(asyncio.to_thread(b.terminate, 60),
                                         asyncio.to_thread(c.terminate, 60))  # fmt: skip
            assert [code for code, _ in exits] == [0, 0], [p.output(20) for p in (b, c)]
            await eventually(lambda: owned(a) == every, "a owns every partition again",
                             timeout_s=REBALANCE_WAIT_S)  # fmt: skip
            back_s = time.monotonic() - left_s
            a_before = decided(a)
            await eventually(lambda: decided(a) >= a_before + 50, "a alone decides again",
                             timeout_s=60)  # fmt: skip
            figures.append(f"back to 1 after {back_s:.1f} s (b, c exited 0 in "
                           f"{exits[0][1]:.1f} s, {exits[1][1]:.1f} s)")  # fmt: skip
        sent = list(load.sent)

        # Every input decided, nothing left uncommitted once a drains.
        out = await consume(settings.kafka_bootstrap, settings.out_topic,
                            until=lambda r: len(decisions_by_id(r)) >= len(sent),
                            timeout_s=120)  # fmt: skip
        code, _ = a.terminate()
    finally:
        for p in procs:
            if p.alive():
                p.kill()
    assert code == 0, a.output(30)
    ids = Counter(orjson.loads(r.value)["message_id"] for r in out)
    assert set(ids) == set(sent), f"{len(set(sent) - set(ids))} inputs never decided"
    # Nothing left uncommitted: the last instance's commits reach past every input record.
    inputs = await consume(settings.kafka_bootstrap, settings.in_topic,
                           until=lambda r: len(r) >= len(sent))  # fmt: skip
    assert sorted(orjson.loads(r.value)["message_id"] for r in inputs) == sorted(sent)
    ends = {p: 1 + max(r.offset for r in inputs if r.partition == p) for p in range(PARTITIONS)}
    assert await committed(settings, PARTITIONS) == ends, "the last instance committed it all"
    dead = await read_to_end(settings.kafka_bootstrap, settings.dlq_topic)  # it has stopped: all
    assert dead == []
    duplicated = sum(n - 1 for n in ids.values())
    print("\n".join(figures))
    print(
        f"decided by a, b, c while three ran: {', '.join(f'{n:.0f}' for n in during)}; "
        f"sent {len(sent)}, decided {len(ids)}, lost 0, duplicated {duplicated}"
    )
