"""The console's Kafka side: it follows the review, verdict and shadow topics from the start of
their retention (outside any consumer group, no commits: a restarted console rebuilds the queue
and the disagreements view) and the decision topic from `overview_minutes` ago, and produces
verdicts.

The broker may stop answering at any time (a network split, a stopped process): a probe asks it
for metadata every `PROBE_S` and, when no answer comes within `PROBE_TIMEOUT_S`, the board says
`broker: down` (the page shows a banner) while the console keeps serving what it has; the
consumers carry on by themselves when the broker is back, and the next answer clears the banner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from console.board import MINUTE_MS, Board
from console.records import (
    BadRecord,
    Verdict,
    encode_verdict,
    now_ms,
    parse_decision,
    parse_disagreement,
    parse_review,
    read_verdict,
)
from moderator.kafka.connect import stop_within

log = logging.getLogger(__name__)

PROBE_S = 1.0
PROBE_TIMEOUT_S = 3.0
RETRY_S = 2.0
POLL_MS = 500
METADATA_MAX_AGE_MS = 5000  # how soon a topic created after the console starts is followed
# What one fetch may bring, far below aiokafka's defaults (50 MiB a fetch, 1 MiB a partition, no
# cap on a getmany): a console that fell behind otherwise takes its backlog in one response and
# keeps the high-water mark of that allocation (issue 44: RSS rose in steps each time it lagged).
# Capped, catching up costs nothing measurable: a 100,000-record backlog (600-byte records, 4
# partitions, the embedded broker) drained at ~150,000 records/s capped, ~135,000 uncapped.
FETCH_MAX_BYTES = 1 << 20
PARTITION_FETCH_BYTES = 256 << 10
MAX_RECORDS = 500  # a getmany's records: the page's handlers run between two


class Feed:
    def __init__(
        self,
        board: Board,
        kafka_options: Mapping[str, Any],
        *,
        review_topic: str,
        verdict_topic: str,
        decision_topic: str,
        max_record_bytes: int,
        shadow_topic: str = "",
    ) -> None:
        self.board = board
        self.options = {**kafka_options, "metadata_max_age_ms": METADATA_MAX_AGE_MS}
        self.fetch_options = {
            "fetch_max_bytes": FETCH_MAX_BYTES,
            "max_partition_fetch_bytes": PARTITION_FETCH_BYTES,
        }
        self.review_topic = review_topic
        self.verdict_topic = verdict_topic
        self.decision_topic = decision_topic
        self.shadow_topic = shadow_topic  # empty: the disagreements view is off
        self.max_record_bytes = max_record_bytes  # the moderators' limit on a verdict
        self.producer: AIOKafkaProducer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sending: set[asyncio.Task[None]] = set()  # verdicts the broker has yet to take
        self._clients: list[AIOKafkaConsumer | AIOKafkaProducer] = []

    async def start(self) -> None:
        """Start following in the background: the console serves even before the broker answers."""
        self._tasks = [
            asyncio.create_task(self._follow(), name="console-follow"),
            asyncio.create_task(self._follow_decisions(), name="console-decisions"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for client in self._clients:
            await stop_within(client, 5.0)

    async def _started(self, client: AIOKafkaConsumer | AIOKafkaProducer, what: str) -> None:
        """Start `client`, retrying while the broker does not answer."""
        while True:
            try:
                await client.start()
                self._clients.append(client)
                return
            except KafkaError as exc:
                self.board.set_status(broker="down")
                log.warning("%s: the broker does not answer (%r); retrying", what, exc)
                await asyncio.sleep(RETRY_S)

    async def _follow(self) -> None:
        topics = filter(None, (self.review_topic, self.verdict_topic, self.shadow_topic))
        consumer = AIOKafkaConsumer(
            *topics, **self.options, **self.fetch_options, group_id=None,
            enable_auto_commit=False, auto_offset_reset="earliest", client_id="moderator-console",
        )  # fmt: skip
        await self._started(consumer, "the review and verdict consumer")
        self.producer = producer = AIOKafkaProducer(
            **self.options, acks="all", linger_ms=0, client_id="moderator-console"
        )
        await self._started(producer, "the verdict producer")
        probe = asyncio.create_task(self._probe(consumer), name="console-probe")
        try:
            await _read_forever(consumer, "the review and verdict topics", self._apply)
        finally:
            probe.cancel()

    async def _probe(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                await asyncio.wait_for(consumer.topics(), PROBE_TIMEOUT_S)
                self.board.set_status(broker="up")
            except (TimeoutError, KafkaError) as exc:
                if self.board.status.get("broker") != "down":
                    log.warning("the broker does not answer (%r): the page says so", exc)
                self.board.set_status(broker="down")
            await asyncio.sleep(PROBE_S)

    def _apply(self, record: ConsumerRecord[bytes, bytes]) -> None:
        try:
            if record.topic == self.review_topic:
                self.board.add_review(parse_review(record.value, record.timestamp))
            elif record.topic == self.verdict_topic:
                self.board.add_verdict(read_verdict(record.value, max_bytes=self.max_record_bytes))
            elif record.topic == self.shadow_topic:
                self.board.add_disagreement(parse_disagreement(record.value, record.timestamp))
        except BadRecord as exc:
            log.warning("%s[%d]@%d skipped: %s", record.topic, record.partition, record.offset, exc)

    async def _follow_decisions(self) -> None:
        """The decision topic from `overview_minutes` ago (its start where the broker cannot find
        offsets by time), for the overview and the final decisions."""
        consumer = AIOKafkaConsumer(
            **self.options, **self.fetch_options, group_id=None, enable_auto_commit=False,
            client_id="moderator-console-decisions",
        )  # fmt: skip
        await self._started(consumer, "the decision consumer")
        while not (partitions := consumer.partitions_for_topic(self.decision_topic)):
            with contextlib.suppress(KafkaError):
                await consumer.topics()  # refreshes the metadata: the topic may come later
            await asyncio.sleep(RETRY_S)
        tps = [TopicPartition(self.decision_topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        since = now_ms() - self.board.overview_minutes * MINUTE_MS
        # The ends as they were before the search by time: a record produced while it runs is
        # past them, so "from now on" below still reads it (seek_to_end would skip it).
        ends = await consumer.end_offsets(tps)
        found = await consumer.offsets_for_times(dict.fromkeys(tps, since))
        for tp in tps:
            at = found.get(tp)
            if at is not None and at.timestamp >= 0:
                consumer.seek(tp, at.offset)
            else:  # nothing that recent (or a broker that cannot say): from now on
                consumer.seek(tp, ends[tp])
        await _read_forever(consumer, "the decision topic", self._apply_decision)

    def _apply_decision(self, record: ConsumerRecord[bytes, bytes]) -> None:
        # a record the console cannot read is the moderator's business, not the page's
        with contextlib.suppress(BadRecord):
            self.board.add_decision(parse_decision(record.value, record.timestamp))

    async def send(self, verdict: Verdict, timeout_s: float) -> bool:
        """Produce `verdict` (key = message_id); True once the broker took it, False when it did
        not answer within `timeout_s` (the record stays queued in the producer and goes out when
        the broker is back). Raises KafkaError if the broker refused it."""
        if self.producer is None:
            raise KafkaError("the verdict producer has not started: the broker does not answer")
        producer = self.producer

        async def deliver() -> None:
            sent = await producer.send(
                self.verdict_topic, encode_verdict(verdict), key=verdict.message_id.encode()
            )
            await sent

        task = asyncio.create_task(deliver())
        self._sending.add(task)
        task.add_done_callback(self._sent)
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if done:
            task.result()
            return True
        return False

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a verdict was not delivered: %r", task.exception())


async def _read_forever(
    consumer: AIOKafkaConsumer, what: str, on_record: Callable[[ConsumerRecord[bytes, bytes]], None]
) -> None:
    """Feed `on_record` every record `consumer` fetches, for good; a failed fetch is logged and
    retried after RETRY_S (the broker may be away for a while)."""
    while True:
        try:
            batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
        except KafkaError as exc:
            log.warning("reading %s: %r", what, exc)
            await asyncio.sleep(RETRY_S)
            continue
        for records in batch.values():
            for record in records:
                on_record(record)
