"""The publisher's bookkeeping without a broker: which failures count as refusals, when a
refused outcome is diverted, and that no offset moves before its replacement is acknowledged.

Only the producer is replaced, by one whose sends return futures the test resolves as the broker
would; the publisher, its re-sends, diversion, the supervisor and the offset ledger are the
service's own.
The same behaviour against the real broker is in tests/integration/test_publish_failure.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, UnknownError
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import TopicPartition

from moderator.kafka.ledger import OffsetLedger
from moderator.kafka.publisher import Fetched, Publisher
from moderator.kafka.refusal import RETRY_JITTER, describe
from moderator.metrics import Metrics
from moderator.records import DLQ_ERROR_CODE, Outcome
from moderator.tasks import Supervisor
from tests.waiting import eventually

IN, OUT, DLQ = "chat.messages", "chat.decisions", "chat.messages.dlq"
REFUSED_TP = TopicPartition(IN, 0)
OTHER_TP = TopicPartition(IN, 1)
WAIT_S = 1.0  # the longest any step may take; each waits on its condition, not a clock
PARTITIONS = range(12)  # of the output topics


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes | None = b'{"message_id":"m"}'
    key: bytes | None = b"c-1"
    timestamp: int = 1_000
    headers: tuple[tuple[str, bytes], ...] = ()


class Payload(NamedTuple):
    """What the producer was handed for one record."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


class Send(NamedTuple):
    topic: str
    outcome: Payload
    alone: bool
    future: asyncio.Future[Any]
    partition: int | None = None  # a send alone names its partition


class Batch:
    """A one-record batch, as `AIOKafkaProducer.create_batch` builds for a send alone."""

    def __init__(self) -> None:
        self.payload: Payload | None = None

    def append(self, *, key: bytes | None, value: bytes | None, timestamp: None,
               headers: list[tuple[str, bytes]]) -> None:  # fmt: skip
        self.payload = Payload(key, value, list(headers))

    def close(self) -> None:
        pass


class Producer:
    """A producer whose every send is a future the test answers."""

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.full = 0  # the next sends fail to enqueue (the producer's buffer is full)
        self.stops = 0

    def _record(
        self, topic: str, payload: Payload, alone: bool, partition: int | None = None
    ) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self.sends.append(Send(topic, payload, alone, future, partition))
        return future

    async def send(self, topic: str, value: bytes | None, key: bytes | None,
                   headers: list[tuple[str, bytes]] | None) -> asyncio.Future[Any]:  # fmt: skip
        if self.full:
            self.full -= 1
            raise KafkaTimeoutError("the producer's buffer is full")
        return self._record(topic, Payload(key, value, list(headers or [])), alone=False)

    def create_batch(self) -> Batch:
        return Batch()

    async def partitions_for(self, topic: str) -> set[int]:
        return set(PARTITIONS) if topic in (OUT, DLQ) else set()

    async def send_batch(self, batch: Batch, topic: str, *, partition: int) -> asyncio.Future[Any]:
        assert batch.payload is not None
        return self._record(topic, batch.payload, alone=True, partition=partition)

    async def stop(self) -> None:
        self.stops += 1


async def until(condition: Callable[[], bool], what: str) -> None:
    """`eventually`, only yielding to the loop between checks: the publisher's own tasks make
    each condition true, with no clock to wait for."""
    await eventually(condition, what, timeout_s=WAIT_S, poll_s=0)


def resends() -> list[asyncio.Task[Any]]:
    """The publisher's re-sends still scheduled (each waits out its backoff, then sends)."""
    return [t for t in asyncio.all_tasks() if t.get_name() == "moderator-resend"]


class Harness:
    """A publisher and an offset ledger wired as the service wires them, on a test producer."""

    def __init__(self, attempts: int, backoff_s: tuple[float, ...] = (0.0,)) -> None:
        self.metrics = Metrics()
        self.producer = Producer()
        self.ledger = OffsetLedger()
        self.ledger.assign([REFUSED_TP, OTHER_TP])
        self.failures: list[BaseException] = []
        self.supervisor = Supervisor("the test", on_failure=self.failures.append)
        self.publisher = Publisher(
            self.producer,
            out_topic=OUT,
            dlq_topic=DLQ,
            publish_attempts=attempts,
            metrics=self.metrics.kafka,
            on_acked=self.ledger.ack,
            supervisor=self.supervisor,
            backoff_s=backoff_s,  # by default, re-send at the next tick
        )
        self.offsets = itertools.count()

    @property
    def sends(self) -> list[Send]:
        return self.producer.sends

    async def publish(
        self, tp: TopicPartition, offset: int, *, dead_letter: bool = False, revoked: bool = False
    ) -> Send:
        """One outcome (a decision, or a dead letter) through the publisher; its first send.
        `revoked`: its partition is given up while the outcome is on its way to the publisher."""
        record = Record(tp.topic, tp.partition, offset)
        if dead_letter:
            headers = [(DLQ_ERROR_CODE, b"invalid_json")]
            outcome = Outcome(b"c-1", b"{broken", headers, error_code="invalid_json")
        else:
            outcome = Outcome(b"c-1", b'{"message_id":"m","action":"allow"}', [], action="allow")

        self.ledger.assign([tp])
        entry = self.ledger.track(tp, offset)
        if revoked:
            self.publisher.abandon(self.ledger.abandon([tp]))
        seen = len(self.sends)
        await self.publisher.publish([Fetched(entry, record)], [outcome])
        assert len(self.sends) == seen + 1, "handed to the producer before publish() returns"
        return self.sends[-1]

    async def next_send(self) -> Send:
        seen = len(self.sends)
        await until(lambda: len(self.sends) > seen, "something is sent")
        return self.sends[-1]

    async def ack_other(self, topic: str = OUT) -> None:
        """The broker takes another record of `topic` (so the topic is not refusing all)."""
        offset = next(self.offsets)
        send = await self.publish(OTHER_TP, offset, dead_letter=topic == DLQ)
        assert send.topic == topic
        send.future.set_result(None)
        await until(lambda: self.ledger.committable(OTHER_TP) == offset + 1, "the ack lands")

    async def fail(self, send: Send, exc: Exception) -> Send:
        """Answer `send` with `exc`; the publisher re-sends it; returns that re-send."""
        send.future.set_exception(exc)
        return await self.next_send()

    async def answer(self, send: Send, exc: Exception | None = None) -> None:
        """Answer `send` (acknowledged, or failed with `exc`) and let its callbacks run."""
        if exc is None:
            send.future.set_result(None)
        else:
            send.future.set_exception(exc)
        for _ in range(3):  # the future's callbacks, then what they schedule
            await asyncio.sleep(0)

    def committable(self) -> int | None:
        return self.ledger.committable(REFUSED_TP)

    def refused(self, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "moderator_publish_refused_total", {"outcome": outcome}
        )  # fmt: skip
        return value or 0.0

    async def close(self) -> None:
        await self.publisher.stop()
        assert not self.failures, "no publisher task died"


@pytest.fixture
async def harness(request: pytest.FixtureRequest) -> Any:
    h = Harness(getattr(request, "param", 3))
    yield h
    await h.close()


async def test_a_refused_decision_is_diverted_and_committed_only_after_its_dead_letter(
    harness: Harness,
) -> None:
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    assert not send.alone
    send = await h.fail(send, UnknownError())  # refused with its batch-mates: not counted
    assert send.alone, "once refused, it travels alone"
    for _ in range(3):
        await h.ack_other()  # the topic takes other records meanwhile
        send = await h.fail(send, UnknownError())
    assert send.topic == DLQ, "three refusals of it alone: diverted"
    assert dict(send.outcome.headers)[DLQ_ERROR_CODE] == b"publish_failed"
    assert send.outcome.value == Record(IN, 0, 7).value
    assert h.refused("decision") == 1
    assert h.committable() is None, "not committed before the dead letter is acknowledged"
    assert h.ledger.in_flight > 0
    await h.answer(send)
    assert h.committable() == 8
    assert h.metrics.registry.get_sample_value(
        "moderator_dead_letters_total", {"reason": "publish_failed"}
    ) == 1  # fmt: skip


async def test_timeouts_and_refusals_while_the_topic_takes_nothing_do_not_count(
    harness: Harness,
) -> None:
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    for _ in range(5):  # a broker fault or a schema refusing everything: held like an outage
        send = await h.fail(send, UnknownError())
    for _ in range(5):
        await h.ack_other()
        send = await h.fail(send, KafkaTimeoutError())  # an outage, never a refusal
    assert send.topic == OUT
    assert h.refused("decision") == 0
    await h.answer(send)  # the broker takes it after all
    assert h.committable() == 8


@pytest.mark.parametrize("harness", [0], indirect=True)
async def test_zero_attempts_re_sends_forever(harness: Harness) -> None:
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    for _ in range(8):
        await h.ack_other()
        send = await h.fail(send, UnknownError())
    assert send.topic == OUT
    assert h.committable() is None


async def test_a_refused_dead_letter_becomes_a_receipt_and_a_refused_receipt_holds(
    harness: Harness,
) -> None:
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    send = await h.fail(send, UnknownError())
    for _ in range(3):
        await h.ack_other()
        send = await h.fail(send, UnknownError())
    assert send.topic == DLQ
    assert not send.alone, "the dead letter is a new record: batched until refused"
    send = await h.fail(send, UnknownError())
    for _ in range(3):
        await h.ack_other(DLQ)
        send = await h.fail(send, UnknownError())
    assert send.topic == DLQ
    assert orjson.loads(send.outcome.value or b"") == {
        "value_omitted_bytes": len(Record(IN, 0, 7).value or b"")
    }
    assert send.outcome.key == b"chat.messages/0/7"
    assert h.refused("dead_letter") == 1
    for _ in range(6):
        await h.ack_other(DLQ)
        send = await h.fail(send, UnknownError())
        send = await h.fail(send, UnknownError())  # no other record taken meanwhile: not counted
    assert h.refused("receipt") == 1, "said once"
    assert send.outcome.key == b"chat.messages/0/7", "the receipt is re-sent, never dropped"
    assert h.committable() is None


async def test_work_of_a_partition_given_up_is_no_longer_in_flight(harness: Harness) -> None:
    """A revoked partition's unacknowledged deliveries are redone by its new owner; here they
    must stop re-sending and stop counting, or the in-flight cap would shrink for good."""
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    send = await h.fail(send, KafkaTimeoutError())  # being re-sent
    assert h.ledger.in_flight == 1
    h.publisher.abandon(h.ledger.abandon([REFUSED_TP]))  # as the service's release does
    sends = len(h.sends)
    assert h.ledger.in_flight == 0
    assert send.future.cancelled()
    revoked = TopicPartition(IN, 9)  # published after its partition was revoked
    late = await h.publish(revoked, 3, revoked=True)
    await h.answer(late, KafkaTimeoutError())
    assert h.ledger.in_flight == 0
    # Every re-send the publisher still holds has run its course (a cancelled one at once, one
    # wrongly scheduled after its backoff of 0): only then is "never re-sent" a fact.
    await asyncio.gather(*resends(), return_exceptions=True)
    assert len(h.sends) == sends + 1, "nothing given up is re-sent: `late` went out once"


async def test_a_re_send_waits_for_its_backoff_only_and_stop_cancels_it() -> None:
    """Re-sends are scheduled by the delivery's own failure, not by a commit tick; a re-send
    still waiting out its backoff is the publisher's task, and stopping cancels it."""
    h = Harness(3, backoff_s=(0.0, 60.0))
    send = await h.publish(REFUSED_TP, 7)
    await h.fail(send, KafkaTimeoutError())  # backoff 0: re-sent with no commit in between
    sends = len(h.sends)
    await h.answer(h.sends[-1], KafkaTimeoutError())

    assert [t.done() for t in resends()] == [False], "one re-send waiting out its backoff"
    await h.close()
    assert not resends(), "stopping the publisher cancelled it"
    assert len(h.sends) == sends


async def test_each_diversion_is_logged_with_the_record_its_refusals_the_error_and_the_way_out(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """What an operator reads, and a JSON log indexes (the record's topic, partition, offset)."""
    caplog.set_level(logging.WARNING, logger="moderator.kafka.publisher")  # whatever ran before
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    send = await h.fail(send, UnknownError())
    for _ in range(3):
        await h.ack_other()
        send = await h.fail(send, UnknownError())
    send = await h.fail(send, UnknownError())  # the dead letter, refused in turn
    for _ in range(3):
        await h.ack_other(DLQ)
        send = await h.fail(send, UnknownError())
    send = await h.fail(send, UnknownError())  # and its receipt
    for _ in range(3):
        await h.ack_other(DLQ)
        send = await h.fail(send, UnknownError())
    said = [r for r in caplog.records if r.name == "moderator.kafka.publisher"]
    retries = [r.getMessage() for r in said if r.levelname == "WARNING"]
    assert retries[0].startswith(f"publishing to {OUT} failed (")
    assert retries[0].endswith("); retry 1 in 0.00s")
    said = [r for r in said if r.levelname == "ERROR"]
    why = describe(UnknownError())
    assert [r.getMessage() for r in said] == [
        f"the broker refused the decision for chat.messages[0]@7 3 times ({why}); diverting it "
        "to chat.messages.dlq",
        f"the broker refused the dead letter for chat.messages[0]@7 3 times ({why}); diverting it"
        " to chat.messages.dlq",
        f"the broker refused the dead-letter receipt for chat.messages[0]@7 3 times ({why}); "
        "re-sending it until it is taken, and holding the partition's commits",
    ]
    assert {(r.__dict__["topic"], r.__dict__["partition"], r.__dict__["offset"]) for r in said} == {
        (IN, 0, 7)
    }


async def test_a_refused_record_is_re_sent_alone_to_the_partition_its_key_picks(
    harness: Harness,
) -> None:
    h = harness
    send = await h.publish(REFUSED_TP, 7)
    send = await h.fail(send, UnknownError())
    assert send.alone
    assert send.partition == DefaultPartitioner()(b"c-1", list(PARTITIONS), list(PARTITIONS))
    assert send.outcome == Payload(b"c-1", b'{"message_id":"m","action":"allow"}', [])


async def test_an_outcome_the_producer_could_not_enqueue_is_re_sent(harness: Harness) -> None:
    h = harness
    h.producer.full = 1
    h.ledger.assign([REFUSED_TP])
    entry = h.ledger.track(REFUSED_TP, 7)
    outcome = Outcome(b"c-1", b"{}", [], action="allow")
    await h.publisher.publish([Fetched(entry, Record(IN, 0, 7))], [outcome])  # no exception
    send = await h.next_send()
    await h.answer(send)
    assert h.committable() == 8


async def test_outcomes_pair_one_to_one_with_the_records(harness: Harness) -> None:
    h = harness
    h.ledger.assign([REFUSED_TP])
    fetched = Fetched(h.ledger.track(REFUSED_TP, 7), Record(IN, 0, 7))
    outcome = Outcome(b"c-1", b"{}", [], action="allow")
    with pytest.raises(ValueError, match="zip"):
        await h.publisher.publish([fetched], [outcome, outcome])


async def test_a_stopped_publisher_re_sends_nothing_and_stops_its_producer_once() -> None:
    h = Harness(3)
    send = await h.publish(REFUSED_TP, 7)
    await h.close()
    sends = len(h.sends)
    await h.answer(send, KafkaTimeoutError())  # its answer comes after the stop
    assert not resends()
    assert len(h.sends) == sends, "not re-sent"
    await h.publisher.stop()
    assert h.producer.stops == 1


async def test_re_sends_back_off_step_by_step_each_jittered(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return high

    monkeypatch.setattr(random, "uniform", uniform)  # the publisher's jitter
    caplog.set_level(logging.WARNING, logger="moderator.kafka.publisher")
    h = Harness(3, backoff_s=(0.0, 0.0, 10.0))
    send = await h.publish(REFUSED_TP, 7)
    send = await h.fail(send, KafkaTimeoutError())
    send = await h.fail(send, KafkaTimeoutError())
    await h.answer(send, KafkaTimeoutError())  # the third: 10 s, the last step, then kept
    retries = [r.args for r in caplog.records if r.name == "moderator.kafka.publisher"]
    steps = [args[2:4] for args in retries if isinstance(args, tuple)]  # (retry, backoff_s)
    assert steps == [(1, 0.0), (2, 0.0), (3, 15.0)]
    assert drawn == [(1 - RETRY_JITTER, 1 + RETRY_JITTER)] * 3
    await h.close()


async def test_giving_an_entry_up_cancels_its_re_send_waiting_out_its_backoff() -> None:
    h = Harness(3, backoff_s=(60.0,))
    send = await h.publish(REFUSED_TP, 7)
    await h.answer(send, KafkaTimeoutError())
    assert len(resends()) == 1
    h.publisher.abandon(h.ledger.abandon([REFUSED_TP]))
    await until(lambda: not resends(), "the re-send is cancelled")
    await h.close()
