"""Matching decisions and dead letters to what was sent: decided, missing, duplicates."""

from __future__ import annotations

import base64

import orjson
import pytest

from loadgen.stats import percentile_ms
from loadgen.tracker import DecisionTracker
from loadgen.traffic import Kind


def decision(message_id: str, **extra: object) -> bytes:
    return orjson.dumps({"message_id": message_id, "action": "allow", "cached": False, **extra})


@pytest.fixture
def tracker() -> DecisionTracker:
    t = DecisionTracker("lgrun")
    for i in range(5):
        t.on_scheduled(f"lgrun-{i}", Kind.BENIGN, due_s=100.0 + i, offset_s=float(i))
    return t


def test_latency_is_taken_from_the_scheduled_time(tracker: DecisionTracker) -> None:
    tracker.on_decision(decision("lgrun-0"), now_s=100.025)
    tracker.on_decision(decision("lgrun-1"), now_s=101.500)
    assert tracker.decided == 2
    assert percentile_ms(tracker.latency, 0.0) == pytest.approx(25.0, rel=1e-3)
    assert percentile_ms(tracker.latency, 100.0) == pytest.approx(500.0, rel=1e-3)
    assert set(tracker.per_second) == {0, 1}


def test_undecided_messages_are_missing(tracker: DecisionTracker) -> None:
    tracker.on_decision(decision("lgrun-0"), now_s=100.1)
    assert tracker.missing == 4
    assert tracker.missing_offsets_s() == [1.0, 2.0, 3.0, 4.0]


def test_a_second_decision_for_a_message_is_a_duplicate(tracker: DecisionTracker) -> None:
    tracker.on_decision(decision("lgrun-2"), now_s=102.1)
    tracker.on_decision(decision("lgrun-2"), now_s=102.2)
    assert (tracker.decided, tracker.duplicates) == (1, 1)
    assert tracker.latency.get_total_count() == 1


def test_other_runs_and_garbage_are_counted_apart(tracker: DecisionTracker) -> None:
    tracker.on_decision(decision("lgother-1"), now_s=100.0)
    tracker.on_decision(b"not json", now_s=100.0)
    tracker.on_decision(orjson.dumps({"action": "allow"}), now_s=100.0)
    tracker.on_decision(orjson.dumps([1, 2]), now_s=100.0)
    assert (tracker.foreign, tracker.bad_decisions, tracker.decided) == (1, 3, 0)


def test_actions_cache_hits_and_degraded_are_counted(tracker: DecisionTracker) -> None:
    tracker.on_scheduled("lgrun-9", Kind.TOXIC, due_s=100.0, offset_s=0.0)
    tracker.on_decision(decision("lgrun-0", cached=True), now_s=100.1)
    tracker.on_decision(decision("lgrun-1", degraded=True, latency_ms={"total": 4.5}), 101.1)
    tracker.on_decision(decision("lgrun-9", action="block"), now_s=100.1)
    assert tracker.actions == {"allow": 2, "block": 1}
    assert tracker.actions_by_kind == {"benign": {"allow": 2}, "toxic": {"block": 1}}
    assert (tracker.cached, tracker.degraded) == (1, 1)
    assert percentile_ms(tracker.server_total, 50.0) == pytest.approx(4.5, rel=1e-3)


def test_dead_letters_match_malformed_records_by_key_value_or_base64() -> None:
    t = DecisionTracker("lgrun")
    for i in range(4):
        t.on_scheduled(f"lgrun-bad-{i}", Kind.MALFORMED, due_s=0.0, offset_s=0.0)
    t.on_dead_letter(b"lgrun-bad-0", b"\xff\xfe")  # the original key, kept untouched
    t.on_dead_letter(b"c-1", b'{"message_id": "lgrun-bad-1", "text": ')
    envelope = {"value": base64.b64encode(b'{"trace": "lgrun-bad-2"}').decode(), "error": "x"}
    t.on_dead_letter(None, orjson.dumps(envelope))
    t.on_dead_letter(b"c-1", b"nothing recognisable")
    t.on_dead_letter(b"lgrun-bad-0", b"")  # the same one again
    assert t.malformed_sent == 4
    assert t.dead_letters == 3
    assert t.dead_letters_unmatched == 1
    assert t.duplicates == 1
    assert t.malformed_outstanding == 1
    assert t.sent == 0


def test_a_dead_lettered_valid_message_is_missing(tracker: DecisionTracker) -> None:
    tracker.on_dead_letter(b"c-1", decision("lgrun-3"))
    assert tracker.valid_dead_lettered == 1
    assert tracker.in_flight == 4
    assert tracker.missing == 5


def test_a_malformed_record_decided_instead_of_dead_lettered_is_reported() -> None:
    t = DecisionTracker("lgrun")
    t.on_scheduled("lgrun-bad-0", Kind.MALFORMED, due_s=0.0, offset_s=0.0)
    t.on_decision(decision("lgrun-bad-0"), now_s=1.0)
    assert (t.malformed_decided, t.decided, t.malformed_outstanding) == (1, 0, 0)


def test_a_failed_send_is_not_waited_for(tracker: DecisionTracker) -> None:
    tracker.on_send_error("lgrun-4", RuntimeError("broker said no"))
    assert (tracker.send_errors, tracker.in_flight) == (1, 4)


def test_a_held_message_s_final_decision_is_counted_apart_not_as_a_duplicate(
    tracker: DecisionTracker,
) -> None:
    tracker.on_decision(decision("lgrun-3", action="review", final=False), now_s=103.1)
    tracker.on_decision(decision("lgrun-3", action="allow", final=True), now_s=110.0)
    assert (tracker.decided, tracker.duplicates, tracker.finals) == (1, 0, 1)
    assert tracker.latency.get_total_count() == 1, "the final decision's wait is not latency"
