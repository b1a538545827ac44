"""The verdict applier without a broker or Redis: what each answer of the held store leads to
(a final decision, counted once; the override; a dead letter), and that a verdict waits for
Redis rather than be dead-lettered while Redis is away."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import orjson
import pytest

from moderator.config import Settings
from moderator.metrics import Metrics
from moderator.records import DLQ_ERROR_CODE, Verdict
from moderator.review import verdicts as verdict_intake
from moderator.review.held import Applied, RedisUnavailable
from moderator.review.verdicts import VerdictIntake
from tests.contract import check_dead_letter_headers, check_decision

HELD = {"message_id": "m-1", "channel_id": "c-1", "user_id": "u-1", "text": "kys lol",
        "sent_at_ms": 1, "action": "review", "reason": "self_harm", "severity": "medium",
        "scores": {"self_harm": 0.9}, "model": "m@1", "policy": "p@1", "span": [0, 7],
        "language": None, "truncated": False, "label": "self_harm", "key": "c-1"}  # fmt: skip


class Record(NamedTuple):
    value: bytes | None
    topic: str = "chat.verdicts"
    partition: int = 0
    offset: int = 3
    key: bytes | None = b"m-1"
    timestamp: int = 1_000
    headers: tuple[tuple[str, bytes], ...] = ()


class Store:
    """Answers each apply with the next of `answers` (an exception is raised)."""

    def __init__(self, *answers: Applied | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []

    async def apply(self, message_id: str, verdict_id: str) -> Applied:
        self.asked.append((message_id, verdict_id))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, Any]] = []

    async def send(self, topic: str, value: Any, key: Any, headers: Any) -> asyncio.Future[Any]:
        self.sent.append((topic, key, value, headers))
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


class Overrides:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, Verdict]] = []

    async def record_verdict(self, *, text: str, channel_id: str, verdict: Verdict) -> None:
        self.recorded.append((text, channel_id, verdict))


def verdict(action: str = "block") -> bytes:
    return orjson.dumps({"message_id": "m-1", "verdict": action, "moderator_id": "mod-7",
                         "at_ms": 5})  # fmt: skip


def intake(store: Store) -> tuple[VerdictIntake, Producer, Overrides, Metrics]:
    producer, overrides, metrics = Producer(), Overrides(), Metrics()
    metrics.review.precreate_verdicts(["self_harm"])
    applier = VerdictIntake(Settings(), metrics.review, store, producer, overrides)  # type: ignore[arg-type]
    return applier, producer, overrides, metrics


def count(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(f"moderator_{name}", labels) or 0.0


@pytest.mark.parametrize("status", ["applied", "again"])
async def test_a_verdict_that_ends_its_message_publishes_its_final_decision(status: str) -> None:
    applier, producer, overrides, metrics = intake(Store(Applied(status, HELD)))
    assert await applier.handle(Record(verdict())) == status  # type: ignore[arg-type]
    ((topic, key, value, _),) = producer.sent
    final = check_decision(orjson.loads(value or b""))
    assert (topic, key) == ("chat.decisions", b"c-1")
    assert (final["action"], final["reason"], final["final"]) == ("block", "verdict:mod-7", True)
    assert [(t, c) for t, c, _ in overrides.recorded] == [("kys lol", "c-1")]
    counted = count(metrics, "verdicts_total", model_action="review", verdict="block",
                    label="self_harm")  # fmt: skip
    assert counted == (1 if status == "applied" else 0), "a redelivered verdict counts once"


async def test_a_late_verdict_changes_only_the_override() -> None:
    applier, producer, overrides, metrics = intake(Store(Applied("late", HELD)))
    assert await applier.handle(Record(verdict("allow"))) == "late"  # type: ignore[arg-type]
    assert producer.sent == []
    assert overrides.recorded[0][2].verdict == "allow"
    assert count(metrics, "verdict_outcomes_total", outcome="late") == 1


@pytest.mark.parametrize(("answer", "value", "code"), [
    (Applied("not_held", None), verdict(), "verdict_not_held"),
    (Applied("timed_out", HELD), verdict(), "verdict_not_held"),
    (None, b"{oops", "invalid_json"),
    (None, verdict("smite"), "invalid_verdict"),
])  # fmt: skip
async def test_a_verdict_for_nothing_and_a_malformed_one_are_dead_letters(
    answer: Applied | None, value: bytes, code: str
) -> None:
    applier, producer, overrides, _ = intake(Store(*([answer] if answer else [])))
    await applier.handle(Record(value))  # type: ignore[arg-type]
    ((topic, key, sent, headers),) = producer.sent
    assert (topic, key, sent) == ("chat.messages.dlq", b"m-1", value), "the verdict untouched"
    assert check_dead_letter_headers(headers)[DLQ_ERROR_CODE] == code
    assert overrides.recorded == []


@pytest.mark.parametrize(("answer", "outcome"), [
    (Applied("not_held", None), "not_held"),  # lost or never held: ModeratorVerdictsNotHeld
    (Applied("timed_out", HELD), "timed_out"),  # after its fallback: a slow queue
])  # fmt: skip
async def test_a_verdict_after_its_timeout_counts_apart_from_one_for_a_message_not_held(
    answer: Applied, outcome: str
) -> None:
    applier, _, _, metrics = intake(Store(answer))
    await applier.handle(Record(verdict()))  # type: ignore[arg-type]
    counted = {o: count(metrics, "verdict_outcomes_total", outcome=o)
               for o in ("not_held", "timed_out")}  # fmt: skip
    assert counted == {o: 1.0 if o == outcome else 0.0 for o in counted}


async def test_a_verdict_waits_for_redis_instead_of_being_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(verdict_intake, "REDIS_WAIT_S", 0.0)
    store = Store(RedisUnavailable("down"), RedisUnavailable("down"), Applied("applied", HELD))
    applier, producer, _, _ = intake(store)
    assert await applier.handle(Record(verdict())) == "applied"  # type: ignore[arg-type]
    assert store.asked == [("m-1", "chat.verdicts/0/3")] * 3, "the same verdict, by its offset"
    assert [topic for topic, *_ in producer.sent] == ["chat.decisions"]
