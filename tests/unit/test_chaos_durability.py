"""The Redis-restart scenario's bookkeeping (chaos/durability.py): a held message is lost when it
got no final decision or its verdict found it not held, and only one held in the second before
the kill may be."""

from __future__ import annotations

from chaos.durability import survival
from chaos.verdicts import Outcomes

KILL_MS = 100_000.0


def held(**held_at_ms: float) -> dict[str, dict[str, float]]:
    return {message_id: {"held_at_ms": at} for message_id, at in held_at_ms.items()}


def test_messages_are_sorted_by_when_they_were_held_against_the_kill() -> None:
    reviews = held(early=10_000, edge=KILL_MS - 1000, late=KILL_MS - 1, kill=KILL_MS,
                   after=KILL_MS + 5_000)  # fmt: skip
    s = survival(reviews, Outcomes(held=len(reviews)), KILL_MS)
    assert (s.before, s.last_second, s.after) == (3, 2, 2)
    assert s.lost_beyond_last_second == s.lost_last_second == ()


def test_a_message_without_a_final_decision_or_whose_verdict_found_nothing_is_lost() -> None:
    reviews = held(a=1_000, b=2_000, c=KILL_MS - 500, d=KILL_MS - 400, e=KILL_MS + 10, f=3_000)
    out = Outcomes(held=len(reviews), missing=["a", "c", "e"], not_held=["b", "d"])
    s = survival(reviews, out, KILL_MS)
    assert s.lost_last_second == ("c", "d"), "what everysec may lose: counted, allowed"
    assert s.lost_before == ("a", "b")
    assert s.lost_after == ("e",)
    assert s.lost_beyond_last_second == ("a", "b", "e")


def test_the_window_is_the_fsync_interval_given() -> None:
    reviews = held(a=KILL_MS - 1_500)
    out = Outcomes(held=1, missing=["a"])
    assert survival(reviews, out, KILL_MS).lost_before == ("a",)
    assert survival(reviews, out, KILL_MS, window_ms=2_000).lost_last_second == ("a",)
