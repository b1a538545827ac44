"""Final decisions without a broker: what a final decision repeats of the held message, and how
`deliver` re-sends one through outages and refusals.

Only the producer is replaced, by one whose sends the test answers as the broker would, and the
back-off's sleep by one that records how long it would wait; the delivery loop is the module's own.
The same path against the real broker and Redis is in tests/integration/test_held.py.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from moderator.kafka.refusal import RETRY_BACKOFF_S, RETRY_JITTER
from moderator.metrics import Metrics
from moderator.review import finals
from moderator.review.finals import Refused, TimeoutSweeper, deliver, encode_final, final_key
from moderator.review.held import Held, HeldStore

HELD: Held = {
    "message_id": "m-1",
    "channel_id": "c-1",
    "user_id": "u-1",
    "text": "you will regret this",
    "sent_at_ms": 1_000,
    "scores": {"threat": 0.81, "toxicity": 0.4},
    "model": "chat-minilm@1",
    "policy": "default@3",
    "span": [4, 10],
    "truncated": False,
    "language": "en",
    "key": "c-1",
    "review_fallback": "block",
}


class Broker:
    """A producer whose sends fail with the scripted errors, in order, then are acknowledged."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.sends: list[tuple[str, bytes | None, bytes | None, Any]] = []

    async def send(self, topic: str, value: Any, key: Any, headers: Any) -> asyncio.Future[None]:
        self.sends.append((topic, key, value, headers))
        sent = asyncio.get_running_loop().create_future()
        if self.errors:
            sent.set_exception(self.errors.pop(0))
        else:
            sent.set_result(None)
        return sent


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The back-offs `deliver` waited, in seconds (recorded, not slept)."""
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(finals, "asyncio", SimpleNamespace(sleep=sleep))
    return waited


def outage() -> KafkaConnectionError:
    return KafkaConnectionError("broker away")


def refusal() -> MessageSizeTooLargeError:
    return MessageSizeTooLargeError("record too large")


def test_a_final_decision_repeats_the_held_message_with_its_own_action_and_reason() -> None:
    before_ms = int(time.time() * 1000)
    final = orjson.loads(encode_final(HELD, "allow", "verdict:mod-7"))
    assert before_ms <= final["decided_at_ms"] <= time.time() * 1000  # decided now, not when held
    repeated = (
        "message_id",
        "channel_id",
        "user_id",
        "scores",
        "model",
        "policy",
        "span",
        "truncated",
    )
    assert {name: final[name] for name in repeated} == {name: HELD[name] for name in repeated}
    assert (final["action"], final["reason"], final["final"]) == ("allow", "verdict:mod-7", True)
    assert (final["cached"], final["degraded"], final["language"]) == (False, False, "en")
    # No model ran for it: no latency of its own, never over the scoring budget.
    assert final["latency_ms"] == {"queue": 0, "score": 0, "total": 0}
    assert final["over_budget"] is False


def test_a_truncated_held_message_stays_truncated_in_its_final_decision() -> None:
    final = orjson.loads(encode_final({**HELD, "truncated": True}, "block", "review_timeout"))
    assert final["truncated"] is True


def test_a_held_message_without_scores_gets_a_final_decision_with_empty_scores() -> None:
    final = orjson.loads(encode_final({**HELD, "scores": None}, "block", "review_timeout"))
    assert final["scores"] == {}


def test_a_final_decision_is_keyed_as_the_original_decision_was() -> None:
    assert final_key(HELD) == b"c-1"
    assert final_key({**HELD, "key": "caf\u00e9"}) == "café".encode("latin-1")


async def test_one_acknowledged_send_is_all_a_final_decision_takes(waits: list[float]) -> None:
    broker = Broker()
    await deliver(broker, "chat.decisions", b"c-1", b"{}", [("h", b"v")])
    assert broker.sends == [("chat.decisions", b"c-1", b"{}", [("h", b"v")])]
    assert waits == []


async def test_no_headers_are_sent_as_none() -> None:
    broker = Broker()
    await deliver(broker, "chat.decisions", b"c-1", b"{}")
    assert broker.sends[0][3] is None


async def test_a_final_decision_is_re_sent_through_an_outage_backing_off_further_each_time(
    waits: list[float],
) -> None:
    failures = len(RETRY_BACKOFF_S) + 2
    broker = Broker(*(outage() for _ in range(failures)))
    await deliver(broker, "chat.decisions", b"c-1", b"{}", refusals=1)
    assert len(broker.sends) == failures + 1  # an outage is no refusal: it never gives up
    steps = [*RETRY_BACKOFF_S, RETRY_BACKOFF_S[-1], RETRY_BACKOFF_S[-1]]  # the last step repeats
    factors = [waited / step for waited, step in zip(waits, steps, strict=True)]
    assert all(1 - RETRY_JITTER <= f <= 1 + RETRY_JITTER for f in factors), factors
    assert len(set(factors)) > 1  # jittered: instances that failed together do not retry together


async def test_each_re_send_is_logged_with_its_topic_and_error(
    waits: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    await deliver(Broker(outage()), "chat.decisions", b"c-1", b"{}")
    [record] = [r for r in caplog.records if r.name == "moderator.review.finals"]
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith(
        "publishing to chat.decisions failed (KafkaConnectionError: broker away); retry 1 in "
    )


async def test_a_verdicts_final_decision_refused_as_often_as_allowed_is_given_up(
    waits: list[float],
) -> None:
    broker = Broker(refusal(), outage(), refusal(), refusal())
    with pytest.raises(Refused, match="record too large"):
        await deliver(broker, "chat.decisions", b"c-1", b"{}", refusals=2)
    assert len(broker.sends) == 3  # refused, away, refused: the second refusal gives up
    assert len(waits) == 2


async def test_a_timeouts_final_decision_is_re_sent_however_often_it_is_refused(
    waits: list[float],
) -> None:
    broker = Broker(*(refusal() for _ in range(5)))
    await deliver(broker, "chat.decisions", b"c-1", b"{}")  # refusals=0: never given up
    assert len(broker.sends) == 6
    assert len(waits) == 5


class NoRedis:
    """The score cache with Redis off: the held messages are kept in this process."""

    redis_enabled = True
    client = None

    def failed(self, exc: BaseException) -> None:
        raise AssertionError("no call is made without a client")


async def test_a_held_message_past_its_timeout_gets_its_fallback_once() -> None:
    metrics = Metrics()
    store = HeldStore(NoRedis(), metrics.review, group="g", timeout_s=0.1)
    now_ms = int(time.time() * 1000)
    due = {**HELD, "held_at_ms": now_ms - 60_000, "expires_at_ms": now_ms - 1}
    later = {**HELD, "message_id": "m-2", "held_at_ms": now_ms, "expires_at_ms": now_ms + 600_000}
    await store.hold([due, later], {}, [], ring_size=1, ring_ttl_s=1)
    broker = Broker()
    sweeper = TimeoutSweeper(store, broker, out_topic="chat.decisions", metrics=metrics.review)
    assert await sweeper.sweep() == 1
    [(topic, key, value, _)] = broker.sends
    final = orjson.loads(value or b"")
    assert (topic, key) == ("chat.decisions", b"c-1")
    assert (final["message_id"], final["action"], final["reason"]) == (
        "m-1",
        "block",
        "review_timeout",
    )
    assert await sweeper.sweep() == 0, "settled: timed out once"
    assert len(broker.sends) == 1
    assert metrics.registry.get_sample_value("moderator_review_timeouts_total") == 1
