"""The demo's part of the moderation loop without a broker: the policy it runs, which held
messages its scripted moderator answers, and the report it prints from the moderator's /metrics."""

from __future__ import annotations

import json
from pathlib import Path

from devstack import demo_loop
from devstack.child import Samples
from devstack.reviewer import Reviewer, Sent
from moderator.policy.review_rules import review_rules
from moderator.policy.rules import Policy, read_spec


def metrics(**values: float) -> Samples:
    """A /metrics page with the loop's series."""
    lines = [
        f"moderator_review_records_total {values.get('held', 0)}",
        f"moderator_review_timeouts_total {values.get('timeouts', 0)}",
        *(f'moderator_verdict_outcomes_total{{outcome="{o}"}} {values.get(o, 0)}'
          for o in ("applied", "late", "not_held", "invalid")),
        *(f'moderator_user_rules_total{{rule="{r}"}} {values.get(r, 0)}'
          for r in ("escalated", "muted")),
    ]  # fmt: skip
    return Samples("\n".join(lines) + "\n")


def test_the_demo_policy_is_the_users_or_the_default_with_the_short_timeout(
    tmp_path: Path,
) -> None:
    path = demo_loop.demo_policy(tmp_path, None)
    policy = Policy.load(path)
    spec = json.loads(path.read_text())
    assert review_rules(spec, policy.actions, "demo") == (demo_loop.REVIEW_TIMEOUT_S, "allow")
    demo_keys = ("review_timeout_s", "users", "deny")
    assert spec == {**read_spec(), **{k: spec[k] for k in demo_keys}}  # the rest as it was
    assert (policy.users.strikes, policy.users.mute_s) == (demo_loop.STRIKES, demo_loop.MUTE_S)

    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({**read_spec(), "review_fallback": "block"}))
    spec = json.loads(demo_loop.demo_policy(tmp_path, str(mine)).read_text())
    assert (spec["review_fallback"], spec["review_timeout_s"]) == (
        "block",
        demo_loop.REVIEW_TIMEOUT_S,
    )


def test_two_held_messages_in_three_get_a_verdict_and_the_third_times_out() -> None:
    answers = [demo_loop.rule(n, {}) for n in range(6)]
    assert [[a.verdict for a in got] for got in answers] == [
        ["block"], ["allow"], [], ["block"], ["allow"], []
    ]  # fmt: skip
    assert {a.moderator_id for got in answers for a in got} == {demo_loop.MODERATOR_ID}


def test_the_report_counts_held_verdicts_finals_and_timeouts_and_shows_the_override() -> None:
    desk = Reviewer("127.0.0.1:1", "r", "v", demo_loop.rule)
    desk.held = {"m-1": {"text": "hola"}, "m-2": {"text": "salut"}, "m-3": {"text": "ciao"}}
    desk.sent = [Sent("m-1", "block", demo_loop.MODERATOR_ID, True, 1.0),
                 Sent("m-2", "allow", demo_loop.MODERATOR_ID, True, 2.0)]  # fmt: skip
    elsewhere = {"action": "review", "reason": "unsupported_language:es"}
    repeat = demo_loop.Repeat(
        "hola", "block", {"action": "block", "reason": "override"}, elsewhere, "c-es"
    )
    text = demo_loop.report(metrics(held=3, timeouts=1, applied=2), desk, repeat)
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert "held for review 3" in lines["held"]
    assert "2 sent, 2 applied (late 0, not held 0, invalid 0)" in lines["verdicts"]
    assert "final decisions 3: 2 by a verdict, 1 timed out" in lines["final"]
    assert "in its channel c-es: block, reason override;" in lines["override"]
    assert lines["override"].endswith(
        f"in {demo_loop.OVERRIDE_CHANNEL}: review, reason unsupported_language:es"
    ), "a verdict's override is its channel's only"
    assert "escalation" in lines
    assert "0 decisions escalated, 0 muted" in lines["user"]


def test_an_override_that_did_not_come_is_said() -> None:
    desk = Reviewer("127.0.0.1:1", "r", "v", demo_loop.rule)
    missing = demo_loop.Repeat("hola", "block", None)
    assert "no decision within" in demo_loop.report(metrics(), desk, missing)
    assert "no verdict was applied" in demo_loop.report(metrics(), desk, None)
    assert "did not answer" in demo_loop.report(None, desk, None)


def test_the_demo_users_word_is_nudged_without_the_model_and_other_chat_is_not(
    tmp_path: Path,
) -> None:
    policy = Policy.load(demo_loop.demo_policy(tmp_path, None))
    assert len(demo_loop.FLAGGED) > demo_loop.STRIKES  # one line past the limit
    for text in demo_loop.FLAGGED:
        verdict = policy.deny_ruling(text)
        assert verdict is not None
        assert (verdict.action, verdict.reason) == ("nudge", "deny:policy:demo")
    assert policy.deny_ruling(demo_loop.WHILE_MUTED) is None
    assert policy.deny_ruling(demo_loop.AFTER_MUTE) is None
    assert Policy.load(None).deny_ruling(demo_loop.FLAGGED[0]) is None  # the demo's word alone


def decision(action: str, reason: str | None, strikes: int, escalated: bool) -> dict[str, object]:
    return {"action": action, "reason": reason, "strikes": strikes, "escalated": escalated}


def test_the_report_shows_the_users_strikes_the_escalation_the_mute_and_its_end() -> None:
    desk = Reviewer("127.0.0.1:1", "r", "v", demo_loop.rule)
    user = [
        demo_loop.Line("c-1", "x", decision("nudge", "deny:policy:demo", 1, False)),
        demo_loop.Line("c-2", "x", decision("nudge", "deny:policy:demo", 2, False)),
        demo_loop.Line("c-3", "x", decision("review", "deny:policy:demo", 3, True)),
        demo_loop.Line("c-1", "sorry", decision("block", "muted", 3, False)),
        demo_loop.Line("c-2", "gg", decision("allow", None, 3, False)),
        demo_loop.Line("c-3", "gg", None),
    ]
    text = demo_loop.report(metrics(escalated=4, muted=7), desk, None, user)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[0] == "escalation")
    shown = lines[at + 1 : at + 1 + len(user)]
    assert [line.split()[0] for line in shown] == ["c-1", "c-2", "c-3", "c-1", "c-2", "c-3"]
    assert shown[1].endswith("nudge, reason deny:policy:demo, strikes 2")
    assert shown[2].endswith("review, reason deny:policy:demo, strikes 3, escalated")
    assert shown[3].endswith("block, reason muted, strikes 3")
    assert shown[4].endswith("allow, strikes 3")
    assert "no decision within" in shown[5]
    assert "4 decisions escalated, 7 muted" in lines[at + 1 + len(user)]
