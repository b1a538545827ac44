"""A compacted topic read as a table, outside any consumer group: what every instance does with the
policies and the overrides topics (each needs all of it), and what the operators' commands read.

`Table` is the live one (faust's Table, quix-streams' State: "a topic read into a dict, kept
live"): it makes sure the topic exists, reads it to its end offsets before it says it is ready,
then follows it, feeding each record to its book in topic order. A book keeps the latest record
it accepted per key (a tombstone deletes the key); a record it refuses raises the table's
`refusal` and leaves it as it was. `read_state` reads one to its end once, as a moderator would
have it at start, noting which keys' last record is refused and why.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord, TopicPartition

from moderator.kafka.connect import start_client, stop_within
from moderator.kafka.topics import COMPACTED, compacted_reader, ensure_topics
from moderator.tasks import cancel

POLL_MS = 200  # a change is applied within about this long after it is written
OnRecord = Callable[[ConsumerRecord[bytes, bytes]], None]


class Book(Protocol):
    """What a table is read into: `apply` one record (value None: a tombstone), saying what
    happened (`applied`, `removed`, ...); raises for a record it refuses, leaving itself as it
    was."""

    def apply(self, key: str, value: bytes | None, /) -> str: ...


B = TypeVar("B", bound=Book)


class Ready(NamedTuple):
    """How `Table.start` found its topic: whether there is one, and how long reading it took."""

    found: bool
    took_s: float


class Table(Generic[B]):
    """`book` kept in step with a compacted topic. `start()` returns once the topic is read to
    its end offsets (ready), then it is followed in `task`; `stop()` may be called twice.

    Per record: `apply(key, value)` (by default `book.apply`), then `on_change(key, outcome)`;
    or, when it raises `refusal`, `on_refused(key, error)`: the owner counts and logs both.
    `what` names the topic in the consumer's client id (`moderator-<what>`), its task and its
    connection error."""

    def __init__(
        self,
        book: B,
        topic: str,
        kafka_options: Mapping[str, Any],
        *,
        what: str,
        refusal: type[Exception],
        on_change: Callable[[str, str], None],
        on_refused: Callable[[str, Exception], None],
        apply: Callable[[str, bytes | None], str] | None = None,
        replication: int = 1,
    ) -> None:
        self.book = book
        self.topic = topic
        self.options = dict(kafka_options)
        self.what = what
        self.replication = replication
        self.task: asyncio.Task[None] | None = None
        self._refusal = refusal
        self._apply = apply or book.apply
        self._on_change = on_change
        self._on_refused = on_refused
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> Ready:
        """Create the topic if missing, read it to its end offsets, then follow it."""
        self._consumer = consumer = await compacted_reader(
            self.options, self.topic, replication=self.replication, what=self.what
        )
        await start_client(consumer, self.options, f"the {self.what} consumer")
        started = time.perf_counter()
        found = await read_to_end(consumer, self.topic, self.take)
        took_s = time.perf_counter() - started
        self.task = asyncio.create_task(follow(consumer, self.take), name=f"moderator-{self.what}")
        return Ready(found, took_s)

    async def stop(self) -> None:
        """Cancel the following, then stop the consumer; nothing left to do the second time."""
        consumer, self._consumer = self._consumer, None
        await stop_following(self.task, consumer)

    def take(self, record: ConsumerRecord[bytes, bytes]) -> None:
        """Apply one record of the topic to the book."""
        key = record_key(record)
        try:
            outcome = self._apply(key, record.value)
        except self._refusal as exc:
            self._on_refused(key, exc)
            return
        self._on_change(key, outcome)


@dataclass(eq=False)
class TopicState(Generic[B]):
    """A compacted topic as a moderator reading it from the start would have it: its book, the
    keys whose last record the book refuses (and why: an earlier record of the key may still be
    in effect), and how many records did what (`outcomes`, by what `apply` said)."""

    book: B
    refusal: type[Exception]
    refused: dict[str, str] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)

    def take(self, key: str, value: bytes | None) -> None:
        """Apply one record, as the moderators' table would."""
        try:
            self.outcomes[self.book.apply(key, value)] += 1
            self.refused.pop(key, None)
        except self.refusal as exc:
            self.refused[key] = str(exc)


S = TypeVar("S", bound=TopicState[Any])


async def read_state(
    kafka_options: Mapping[str, Any], topic: str, state: S, *, client_id: str, role: str
) -> S:
    """`state` with every record of `topic` applied in order (none when there is no topic)."""
    await read_whole(
        kafka_options,
        topic,
        lambda r: state.take(record_key(r), r.value),
        client_id=client_id,
        role=role,
    )
    return state


async def read_whole(
    kafka_options: Mapping[str, Any],
    topic: str,
    on_record: OnRecord,
    *,
    client_id: str,
    role: str,
) -> bool:
    """`read_to_end` with a consumer of its own (`role` names it in a connection error)."""
    consumer = AIOKafkaConsumer(
        **kafka_options, group_id=None, enable_auto_commit=False, client_id=client_id
    )
    try:  # closed on every path: a failed start too ("Unclosed AIOKafkaConsumer" otherwise)
        await start_client(consumer, kafka_options, role)
        return await read_to_end(consumer, topic, on_record)
    finally:
        await stop_within(consumer)


def record_key(record: ConsumerRecord[bytes, bytes]) -> str:
    """A record's key as text; "" when it has none."""
    return (record.key or b"").decode("utf-8", "replace")


async def read_to_end(consumer: AIOKafkaConsumer, topic: str, on_record: OnRecord) -> bool:
    """Assign every partition of `topic` to `consumer` and feed `on_record` each record from the
    beginning up to the end offsets taken now; False when there is no such topic."""
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    if not tps:
        return False
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    ends = await consumer.end_offsets(tps)
    while await _behind(consumer, ends):
        await poll(consumer, on_record)
    return True


async def poll(consumer: AIOKafkaConsumer, on_record: OnRecord) -> None:
    """One fetch (waiting at most POLL_MS), each record fed to `on_record` in order."""
    for records in (await consumer.getmany(timeout_ms=POLL_MS)).values():
        for record in records:
            on_record(record)


async def follow(consumer: AIOKafkaConsumer | None, on_record: OnRecord) -> None:
    """After `read_to_end`: feed `on_record` each new record for good; with no topic to follow
    (`consumer` None or assigned nothing), idle until cancelled."""
    if consumer is None or not consumer.assignment():
        await asyncio.Event().wait()
    while True:
        assert consumer is not None
        await poll(consumer, on_record)


async def stop_following(
    task: asyncio.Task[None] | None, consumer: AIOKafkaConsumer | None
) -> None:
    """Cancel `follow`'s task, then stop its consumer."""
    await cancel(task)
    if consumer is not None:
        await stop_within(consumer)


async def _behind(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]) -> bool:
    """Whether `consumer` has yet to read up to `ends` on any partition."""
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return True
    return False


async def publish(
    kafka_options: Mapping[str, Any],
    topic: str,
    records: Sequence[tuple[str, bytes | None]],
    *,
    client_id: str,
    role: str,
    replication: int = 1,
) -> None:
    """Write `records` (key, value; None: a tombstone) to the compacted one-partition `topic`, in
    order, each acknowledged by every in-sync replica before the next: an operator's change
    (`moderator policy set`, `moderator rollout`) is on the table when the command returns."""
    await ensure_topics(
        kafka_options, {topic: 1}, configs={topic: COMPACTED}, replication=replication
    )
    producer = AIOKafkaProducer(**kafka_options, acks="all", client_id=client_id)
    try:
        await start_client(producer, kafka_options, role)
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key.encode())
    finally:
        await stop_within(producer)
