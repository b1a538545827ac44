"""The loop's bookkeeping: each held message ends with its first verdict or its fallback, once
in kind; repeats are counted, a second kind, a wrong one or a verdict_not_held are found."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from chaos.ledger import Ledger
from chaos.scenarios import LOOP_FALLBACK, LOOP_VERDICTS, loop_policy, loop_rule
from chaos.verdicts import NOT_HELD, TIMEOUT_REASON, account
from devstack.reviewer import Sent
from moderator.policy.review_rules import review_rules
from moderator.policy.rules import Policy

FALLBACK = "nudge"


def review(message_id: str) -> dict[str, Any]:
    return {"message_id": message_id, "action": "review", "review_fallback": FALLBACK}


def final(lg: Ledger, message_id: str, action: str, reason: str, at_ms: float) -> None:
    value = {"message_id": message_id, "action": action, "reason": reason, "final": True}
    lg.on_decision(orjson.dumps(value), at_ms)


def sent(message_id: str, verdict: str, moderator: str = "mod-1", *, first: bool = True,
         at_ms: float = 1000) -> Sent:  # fmt: skip
    return Sent(message_id, verdict, moderator, first, at_ms)


def test_verdicts_applied_timeouts_and_repeats_are_counted() -> None:
    lg = Ledger()
    held = {m: review(m) for m in ("m-1", "m-2", "m-3")}
    verdicts = [sent("m-1", "block"), sent("m-1", "allow", "mod-2", first=False),
                sent("m-2", "allow", at_ms=2000)]  # fmt: skip
    final(lg, "m-1", "block", "verdict:mod-1", 1100)
    final(lg, "m-1", "block", "verdict:mod-1", 9000)  # redelivered after a crash
    final(lg, "m-2", "allow", "verdict:mod-1", 2300)
    final(lg, "m-3", FALLBACK, TIMEOUT_REASON, 40_000)
    out = account(held, verdicts, lg.final_kinds, lg.final_first_ms, lg.dead)
    assert (out.held, out.verdicts_first, out.verdicts_late) == (3, 2, 1)
    assert (out.applied, out.timed_out, out.finals, out.repeats) == (2, 1, 4, 1)
    assert out.latencies_ms == [100, 300]
    assert out.missing == out.mixed == out.wrong_verdict == out.wrong_timeout == []
    assert out.not_held == out.unheld_finals == []


def test_a_late_verdict_that_decided_a_second_time_is_a_mixed_and_wrong_outcome() -> None:
    lg = Ledger()
    verdicts = [sent("m-1", "block"), sent("m-1", "allow", "mod-2", first=False)]
    final(lg, "m-1", "block", "verdict:mod-1", 1100)
    final(lg, "m-1", "allow", "verdict:mod-2", 1200)
    out = account({"m-1": review("m-1")}, verdicts, lg.final_kinds, lg.final_first_ms, lg.dead)
    assert (out.mixed, out.wrong_verdict, out.applied) == (["m-1"], ["m-1"], 0)


def test_a_verdict_lost_to_a_timeout_is_wrong_and_its_dead_letter_found() -> None:
    lg = Ledger()
    final(lg, "m-1", FALLBACK, TIMEOUT_REASON, 40_000)
    final(lg, "m-2", "allow", TIMEOUT_REASON, 40_000)  # not the policy's fallback
    final(lg, "m-9", "allow", TIMEOUT_REASON, 40_000)  # never held
    lg.on_dead_letter(b"m-1", NOT_HELD)
    held = {m: review(m) for m in ("m-1", "m-2", "m-3")}
    out = account(held, [sent("m-1", "block")], lg.final_kinds, lg.final_first_ms, lg.dead)
    assert out.wrong_verdict == ["m-1"]
    assert out.not_held == ["m-1"]
    assert out.wrong_timeout == ["m-2"]
    assert out.missing == ["m-3"]
    assert out.unheld_finals == ["m-9"]


def test_the_ledger_keeps_final_decisions_apart_by_kind() -> None:
    lg = Ledger()
    final(lg, "m-1", "block", "verdict:mod-1", 10)
    final(lg, "m-1", "block", "verdict:mod-1", 20)
    assert lg.final_kinds == {"m-1": Counter({("block", "verdict:mod-1"): 2})}
    assert lg.final_first_ms == {"m-1": 10}
    assert lg.duplicates == 0


def test_the_scenarios_moderator_leaves_a_third_to_time_out_and_gives_some_a_late_verdict() -> None:
    answers = [loop_rule(n, {}) for n in range(36)]
    assert sum(1 for a in answers if not a) == 12
    late = [a for a in answers if len(a) == 2]
    assert late
    assert all(first.verdict != second.verdict for first, second in late)
    assert {a[0].verdict for a in answers if a} == set(LOOP_VERDICTS)


def test_the_scenarios_policy_is_valid_with_its_timeout_and_fallback(tmp_path: Path) -> None:
    path = loop_policy(tmp_path / "p.json", 30.0)
    policy = Policy.load(path)
    rules = review_rules(orjson.loads(path.read_bytes()), policy.actions, "loop")
    assert rules == (30.0, LOOP_FALLBACK)
