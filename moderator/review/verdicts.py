"""Human verdicts: the verdict topic's consumer, which applies each verdict to its held message.

Consumed by the group `<group_id>.verdicts`, so one instance applies each verdict (keyed by
message id: one message's verdicts are read in order, on one partition). Each verdict:
- malformed: dead-lettered (the input's codes, or `invalid_verdict`);
- the first for its held message (`applied`): its final decision (moderator/review/finals.py),
counted
  by the decision's action, the verdict and the label that held the message, then the override
  (`Overrides.record_verdict`, when the moderator has overrides);
- the same verdict record again (redelivered after a crash): its final decision again, a
  duplicate; never a dead letter;
- `late` (another verdict decided first): counted, and the override only;
- for no held message (never held, expired, timed out): dead-lettered, `verdict_not_held`.
Its offset is committed only after all of that was acknowledged. Redis down: a verdict for a
message not held in this process waits for Redis (moderator/review/held.py), it is not
dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from moderator.config import Settings
from moderator.errors import InvalidRecord
from moderator.kafka.connect import Sender, start_client, stop_within
from moderator.kafka.refusal import divert
from moderator.kafka.topics import ensure_topics
from moderator.metric_wings import ReviewMetrics
from moderator.records import Outcome, Verdict, dead_letter, parse_verdict
from moderator.review.finals import VERDICT_REASON, Refused, deliver, encode_final, final_key
from moderator.review.held import Applied, HeldStore, RedisUnavailable
from moderator.tasks import cancel

log = logging.getLogger(__name__)

GROUP_SUFFIX = ".verdicts"
NOT_HELD = "verdict_not_held"
POLL_MS = 500
REDIS_WAIT_S = 1.0  # between tries of a verdict while Redis is away


class OverrideSink(Protocol):
    """What a verdict updates besides its held message: `overrides.Overrides` (a protocol, so
    this module stands without it)."""

    async def record_verdict(self, *, text: str, channel_id: str, verdict: Verdict) -> None: ...


class VerdictIntake:
    """The verdict consumer: `start()` joins the group, then `task` applies verdicts in order."""

    def __init__(
        self,
        settings: Settings,
        metrics: ReviewMetrics,
        store: HeldStore,
        producer: Sender,
        overrides: OverrideSink | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.producer = producer
        self.overrides = overrides
        self._consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Make sure the review and verdict topics exist, and join the verdicts group."""
        s = self.settings
        topics = {s.review_topic: s.topic_partitions, s.verdict_topic: s.topic_partitions}
        try:
            await ensure_topics(s.kafka_options(), topics, replication=s.topic_replication)
        except KafkaError as exc:  # not allowed to create topics: they may exist all the same
            log.warning("could not make sure the topics %s exist: %r", ", ".join(topics), exc)
        self._consumer = consumer = AIOKafkaConsumer(
            **s.kafka_options(),
            group_id=s.group_id + GROUP_SUFFIX,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **s.consumer_timeouts(),
            client_id="moderator-verdicts",
        )
        await start_client(consumer, s.kafka_options(), "the verdicts consumer")
        consumer.subscribe([s.verdict_topic])
        self.task = asyncio.create_task(self._run(), name="moderator-verdicts")

    async def stop(self) -> None:
        await cancel(self.task)
        if self._consumer is not None:
            await stop_within(self._consumer)

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            fetched = await self._consumer.getmany(timeout_ms=POLL_MS)
            for tp, records in fetched.items():
                for record in records:
                    await self.handle(record)
                await self._commit(tp, records[-1].offset + 1)

    async def _commit(self, tp: TopicPartition, offset: int) -> None:
        assert self._consumer is not None
        try:
            await self._consumer.commit({tp: OffsetAndMetadata(offset, "")})
        except KafkaError as exc:  # a rebalance: the next owner applies them again, idempotently
            log.warning("verdict commit failed (%s); those verdicts will be applied again", exc)

    async def handle(self, record: ConsumerRecord[bytes, bytes]) -> str:
        """Apply one verdict record; what became of it (an outcome of `Applied`, or invalid)."""
        try:
            verdict = parse_verdict(record.value, max_bytes=self.settings.max_record_bytes)
        except InvalidRecord as err:
            self.metrics.verdict_outcomes["invalid"].inc()
            await self._send(record, dead_letter(record, err), self.settings.dlq_topic)
            return "invalid"
        applied = await self._apply(verdict, f"{record.topic}/{record.partition}/{record.offset}")
        held = applied.held
        if held is None or applied.status in ("not_held", "timed_out"):
            late = applied.status == "timed_out"  # counted apart: a slow queue, not lost state
            self.metrics.verdict_outcomes["timed_out" if late else "not_held"].inc()
            why = "timed out before it" if late else "no held message"
            not_held = InvalidRecord(NOT_HELD, f"{verdict.message_id}: {why}, not applied")
            await self._send(record, dead_letter(record, not_held), self.settings.dlq_topic)
            return applied.status
        if applied.status in ("applied", "again"):
            reason = f"{VERDICT_REASON}:{verdict.moderator_id}"
            value = encode_final(held, verdict.verdict, reason)
            final = Outcome(final_key(held), value, [], action=verdict.verdict)
            await self._send(record, final, self.settings.out_topic)
        if applied.status == "applied":
            self.metrics.verdicts[held["action"], verdict.verdict, held["label"]].inc()
        if applied.status != "again":
            self.metrics.verdict_outcomes[applied.status].inc()
        if self.overrides is not None:
            text, channel_id = held["text"], held["channel_id"]
            await self.overrides.record_verdict(text=text, channel_id=channel_id, verdict=verdict)
        return applied.status

    async def _apply(self, verdict: Verdict, verdict_id: str) -> Applied:
        """The store's answer; while Redis is away and the message is not held here, ask again."""
        waited = False
        while True:
            try:
                return await self.store.apply(verdict.message_id, verdict_id)
            except RedisUnavailable:
                if not waited:
                    log.warning("verdict for %s waits for redis", verdict.message_id)
                    waited = True
                await asyncio.sleep(REDIS_WAIT_S)

    async def _send(self, record: ConsumerRecord[bytes, bytes], out: Outcome, topic: str) -> None:
        """Publish `out` for the verdict `record` until acknowledged; what the broker refuses
        for good goes to the dead-letter topic instead (moderator/kafka/refusal.py)."""
        attempts = self.settings.publish_attempts
        while True:
            try:
                await deliver(
                    self.producer, topic, out.key, out.value, out.headers, refusals=attempts
                )
                return
            except Refused as exc:
                diverted = divert(out, record, exc.__cause__ or exc, attempts)
                if diverted is None:  # a receipt refused too: re-send it until taken
                    attempts = 0
                    continue
                log.error(
                    "the broker refused %s for a verdict; diverting it to the dead-letter topic",
                    "a dead letter" if out.dead_letter else "a final decision",
                )
                out, topic = diverted, self.settings.dlq_topic
