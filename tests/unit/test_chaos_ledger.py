"""The chaos ledger: loss, duplicates, order and recovery figures from what the topics held."""

from __future__ import annotations

import orjson

from chaos.ledger import Ledger, quantile


def sent(lg: Ledger, n: int, *, channel: str = "c-1", at_ms: int, partition: int = 0) -> None:
    value = {"message_id": f"m-{n}", "channel_id": channel, "user_id": "u", "text": "gg",
             "sent_at_ms": at_ms}  # fmt: skip
    lg.on_input(orjson.dumps(value), partition, n)


def decided(lg: Ledger, n: int, at_ms: float, **extra: object) -> None:
    lg.on_decision(orjson.dumps({"message_id": f"m-{n}", "action": "allow", **extra}), at_ms)


def test_lost_duplicates_and_junk_are_counted() -> None:
    lg = Ledger()
    for n in range(4):
        sent(lg, n, at_ms=1000 + n)
    lg.on_input(b"\xff junk", 0, 99)
    lg.on_input(orjson.dumps({"message_id": "x", "channel_id": "c", "user_id": "u", "text": 1}),
                0, 100)  # fmt: skip
    decided(lg, 0, 1010)
    decided(lg, 1, 1011, degraded=True)
    decided(lg, 1, 1500)
    decided(lg, 3, 1020)
    assert lg.lost() == ["m-2"]
    assert lg.lost(since_ms=1003) == []
    assert lg.decided == 3
    assert lg.duplicates == 1
    assert lg.junk_inputs == 2
    assert lg.degraded == {"m-1"}


def test_an_input_diverted_as_publish_failed_is_accounted_for_but_not_decided() -> None:
    lg = Ledger()
    for n in range(3):
        sent(lg, n, at_ms=1000 + n)
    decided(lg, 0, 1010)
    lg.on_dead_letter(
        b"c-1", "publish_failed", (0, 1), 4000, b'{"message_id": "m-1", "decided_at_ms": 3500}'
    )
    lg.on_dead_letter(b"c-1", "publish_failed", (0, 1), 4500)  # a repeat keeps the first time
    lg.on_dead_letter(b"c-1", "not_utf8", (0, 2), 4600)  # only publish_failed stands for one
    assert lg.lost() == ["m-2"]
    assert lg.decided == 1
    assert [(inp.message_id, t) for inp, t in lg.diverted_inputs()] == [("m-1", 4000)]
    assert lg.diverted_decided_ms == {(0, 1): 3500}


def test_a_channel_whose_decisions_go_backwards_is_a_violation() -> None:
    lg = Ledger()
    for n in range(3):
        sent(lg, n, at_ms=1000)
    sent(lg, 3, channel="c-2", at_ms=1000, partition=1)
    for n, t in ((0, 1), (3, 2), (2, 3), (1, 4)):  # m-2 decided before m-1
        decided(lg, n, t)
    assert lg.order_violations() == [("c-1", "m-1", "m-2")]


def test_a_redone_decision_is_not_a_violation() -> None:
    lg = Ledger()
    for n in range(3):
        sent(lg, n, at_ms=1000)
    for n in (0, 1, 2, 1, 2):  # a restart repeats m-1 and m-2 after m-2
        decided(lg, n, 2000)
    assert lg.order_violations() == []
    assert lg.duplicates == 2


def test_recovery_is_measured_from_the_fault() -> None:
    lg = Ledger()
    # 10 s of traffic, 10 messages a second; the ones sent in seconds 3-5 wait until 6.5 s.
    for n in range(100):
        at = 10_000 + n * 100
        sent(lg, n, at_ms=at)
        second = n // 10
        decided(lg, n, 16_500 + n if 3 <= second <= 5 else at + 10)
    fault_ms = 13_000
    # m-60, sent at 16.0 s, is decided at 16.01 s: before the held ones of seconds 3-5.
    assert lg.first_decision_after(fault_ms) == 3.01
    assert lg.back_under_budget(fault_ms, 50.0) == 3.0  # second 6 starts 3 s after the fault
    assert lg.back_under_budget(10_000, 50.0) == 6.0
    assert lg.back_under_budget(17_000, 50.0) == 0.0
    assert lg.first_decision_after(30_000) is None
    assert lg.per_second_p99()[0] == 10.0
    assert lg.decided_between(16_000, 17_000) == 40  # 30 held + 10 sent in second 6


def test_quantile_is_nearest_rank() -> None:
    assert quantile([], 0.99) is None
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert quantile([float(i) for i in range(1, 101)], 0.99) == 99.0
    assert quantile([5.0], 0.99) == 5.0


def test_a_record_the_moderator_dead_letters_is_never_expected_to_be_decided() -> None:
    ledger = Ledger()
    too_large = orjson.dumps({"message_id": "big", "channel_id": "c", "user_id": "u",
                              "text": "x" * 70_000, "sent_at_ms": 1})  # fmt: skip
    ledger.on_input(too_large, 0, 0)
    assert ledger.junk_inputs == 1
    assert ledger.lost() == []


def test_a_final_decision_is_no_duplicate_and_is_counted_apart() -> None:
    lg = Ledger()
    sent(lg, 0, at_ms=1000)
    decided(lg, 0, 1010, action="review", final=False)
    decided(lg, 0, 5000, action="block", final=True)
    assert (lg.decided, lg.duplicates, lg.finals["m-0"]) == (1, 0, 1)
    assert lg.actions == {"review": 1}
