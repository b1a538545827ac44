"""The pacer's rule on its own (moderator/kafka/pacing.py), fed numbers: no clock, no broker.

What it promises: no wait until it has measured enough batches, at rates where a wait would
gather nobody, or with lingering off; otherwise a wait just long enough for the target the rate
brings within the budget's slack, never past `max_linger_ms` or half the slack, and a target
never past `max_target`.
"""

from __future__ import annotations

import pytest

from moderator.kafka.pacing import MIN_SAMPLES, NO_WAIT, RATE_TAU_S, Pacer


def paced(rate: float, took_ms: float, *, budget_ms: float = 50.0, max_linger_ms: float = 10.0,
          max_target: int = 16) -> Pacer:  # fmt: skip
    """A pacer that has seen `rate` records/s for long enough and batches taking `took_ms`."""
    pacer = Pacer(budget_ms=budget_ms, max_linger_ms=max_linger_ms, max_target=max_target)
    for _ in range(MIN_SAMPLES):
        pacer.decided(took_ms)
    step_s = 0.01
    for i in range(int(20 * RATE_TAU_S / step_s) + 1):  # 20 time constants: settled
        pacer.arrived(round(rate * step_s) if i else 0, i * step_s)
    return pacer


def test_the_rate_settles_on_the_arrival_rate_and_follows_a_fall() -> None:
    pacer = paced(500, 5.0)
    assert pacer.rate == pytest.approx(500, rel=0.02)
    pacer.arrived(0, 20 * RATE_TAU_S + 5 * RATE_TAU_S)  # five time constants with nothing
    assert pacer.rate < 500 * 0.01


def test_no_wait_before_enough_batches_were_timed() -> None:
    pacer = Pacer(budget_ms=50, max_linger_ms=10, max_target=16)
    pacer.arrived(0, 0.0)
    pacer.arrived(1000, 1.0)
    for _ in range(MIN_SAMPLES - 1):
        pacer.decided(5.0)
    assert pacer.others_p99_ms() is None
    assert pacer.plan() == NO_WAIT
    pacer.decided(5.0)
    assert pacer.plan().target > 1  # the same numbers, one batch more: now it waits


def test_a_quiet_stream_is_decided_a_message_at_once() -> None:
    # 50 msg/s: 10 ms would gather half a message; waiting buys nothing.
    assert paced(50, 5.0).plan() == NO_WAIT


def test_a_busy_stream_waits_just_long_enough_for_its_target() -> None:
    plan = paced(400, 5.0).plan()  # cap 10 ms (the budget's slack is 22.5): 4 more arrive
    assert plan.target == 5
    assert plan.wait_ms == pytest.approx(4 / 400 * 1000, rel=0.05)
    assert plan.wait_ms <= 10.0


def test_the_target_grows_with_the_rate_up_to_its_cap() -> None:
    targets = [paced(rate, 5.0).plan().target for rate in (100, 300, 600, 1200, 5000)]
    assert targets == sorted(targets)
    assert targets[0] < targets[-1] == 16
    assert paced(5000, 5.0).plan().wait_ms < 10.0  # the cap arrives before the wait ends


def test_the_wait_never_spends_more_than_half_the_slack() -> None:
    # The rest of a batch's journey takes 40 ms of a 50 ms budget: 5 ms may be spent waiting.
    plan = paced(2000, 40.0).plan()
    assert 1 < plan.target <= 11
    assert plan.wait_ms <= 5.0


def test_no_wait_once_the_budget_is_spent_by_the_other_stages() -> None:
    assert paced(2000, 49.0).plan().wait_ms <= 0.5  # half a millisecond left to spend
    assert paced(500, 49.0).plan() == NO_WAIT  # which would gather nobody at this rate
    assert paced(2000, 80.0).plan() == NO_WAIT  # over budget already: never add to it


def test_the_p99_reads_the_slow_batches_not_the_median() -> None:
    pacer = paced(2000, 5.0)
    for took_ms in [5.0] * 97 + [45.0] * 3:
        pacer.decided(took_ms)
    assert pacer.others_p99_ms() == 45.0
    assert pacer.plan().wait_ms <= (50 - 45) / 2


def test_lingering_off_is_no_wait_whatever_the_numbers() -> None:
    assert paced(5000, 1.0, max_linger_ms=0).plan() == NO_WAIT
