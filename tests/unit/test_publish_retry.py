"""The service's publish bookkeeping without a broker: which failures count as refusals, when a
refused outcome is diverted, and that no offset moves before its replacement is acknowledged.

Only the hand-off to the producer (`Moderator._send`) is replaced, by futures the test resolves
as the broker would; the publish loop, re-sends and commit bookkeeping are the service's own.
The same behaviour against the real broker is in tests/integration/test_publish_failure.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import Any, NamedTuple

import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, UnknownError
from aiokafka.structs import TopicPartition

from moderator import service
from moderator.config import Settings
from moderator.pipeline import Outcome
from moderator.records import DLQ_ERROR_CODE
from moderator.service import Moderator, _Unit

IN, OUT, DLQ = "chat.messages", "chat.decisions", "chat.messages.dlq"
REFUSED_TP = TopicPartition(IN, 0)
OTHER_TP = TopicPartition(IN, 1)


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes | None = b'{"message_id":"m"}'
    key: bytes | None = b"c-1"
    timestamp: int = 1_000


class Send(NamedTuple):
    topic: str
    outcome: Outcome
    alone: bool
    future: asyncio.Future[Any]


class Harness:
    """A moderator whose producer hand-off is a list of sends the test answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, attempts: int) -> None:
        self.m = Moderator(Settings(publish_attempts=attempts))
        self.sends: list[Send] = []
        self.offsets = itertools.count()
        monkeypatch.setattr(self.m, "_send", self._send)
        monkeypatch.setattr(service, "RETRY_BACKOFF_S", (0.0,))  # re-send at the next tick
        for tp in (REFUSED_TP, OTHER_TP):
            self.m._deliveries[tp] = deque()
        self.loop_task = asyncio.create_task(self.m._publish_loop())

    async def _send(self, topic: str, outcome: Outcome, *, alone: bool = False) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.sends.append(Send(topic, outcome, alone, future))
        return future

    async def publish(self, tp: TopicPartition, offset: int, *, dead_letter: bool = False) -> Send:
        """One outcome (a decision, or a dead letter) through the publish loop; its first send."""
        record = Record(tp.topic, tp.partition, offset)
        if dead_letter:
            outcome = Outcome(True, b"c-1", b"{broken", [(DLQ_ERROR_CODE, b"invalid_json")],
                              "invalid_json")  # fmt: skip
        else:
            outcome = Outcome(False, b"c-1", b'{"message_id":"m","action":"allow"}', [], "allow")

        async def outcomes() -> list[Outcome]:
            return [outcome]

        self.m._add_in_flight(1)
        self.m._units.put_nowait(_Unit([record], asyncio.create_task(outcomes())))
        return await self.next_send()

    async def next_send(self) -> Send:
        seen = len(self.sends)
        for _ in range(200):
            await asyncio.sleep(0.005)
            if len(self.sends) > seen:
                return self.sends[-1]
        raise AssertionError("nothing was sent")

    async def ack_other(self, topic: str = OUT) -> None:
        """The broker takes another record of `topic` (so the topic is not refusing all)."""
        send = await self.publish(OTHER_TP, next(self.offsets), dead_letter=topic == DLQ)
        assert send.topic == topic
        send.future.set_result(None)
        await asyncio.sleep(0.01)  # the re-send task ends, then its done-callbacks run

    async def fail(self, send: Send, exc: Exception) -> Send:
        """Answer `send` with `exc`; the next commit tick re-sends it; returns that re-send."""
        send.future.set_exception(exc)
        await asyncio.sleep(0.01)
        self.m._advance()
        return await self.next_send()

    def committable(self) -> int | None:
        self.m._advance()
        return self.m._committable.get(REFUSED_TP)

    def refused(self, outcome: str) -> float:
        value = self.m.metrics.registry.get_sample_value(
            "moderator_publish_refused_total", {"outcome": outcome}
        )  # fmt: skip
        return value or 0.0

    async def close(self) -> None:
        self.loop_task.cancel()
        await asyncio.gather(self.loop_task, return_exceptions=True)


@pytest.fixture
async def harness(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    h = Harness(monkeypatch, getattr(request, "param", 3))
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
    assert h.m._in_flight > 0
    send.future.set_result(None)
    await asyncio.sleep(0.01)
    assert h.committable() == 8
    assert h.m.metrics.registry.get_sample_value(
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
    send.future.set_result(None)  # the broker takes it after all
    await asyncio.sleep(0.01)
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
    assert h.m._in_flight == 1
    h.m._abandon(h.m._deliveries.pop(REFUSED_TP))
    await asyncio.sleep(0.01)
    assert h.m._in_flight == 0
    assert send.future.cancelled()
    revoked = TopicPartition(IN, 9)  # published after its partition was revoked
    late = await h.publish(revoked, 3)
    late.future.set_exception(KafkaTimeoutError())
    await asyncio.sleep(0.01)
    h.m._advance()
    assert h.m._in_flight == 0
    sends = len(h.sends)
    await asyncio.sleep(0.05)
    assert len(h.sends) == sends, "nothing given up is re-sent"
