"""The console's disagreements view (issue 41): a shadow record as the moderator writes it
(moderator/shadow/agreement.py) parsed into a row (console/records.py), kept newest first within
its bound, and joined with its message's review and first verdict (console/disagreements.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from console.board import Board
from console.config import ConsoleSettings
from console.disagreements import REVIEWS_KEPT, Disagreements, agrees
from console.records import BadRecord, Verdict, parse_disagreement, parse_review
from moderator.decide.screen import Judged
from moderator.errors import ConfigError
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage
from moderator.shadow.agreement import Primary, disagreement_record
from tests.contract import check_shadow

NOW = 1_800_000_000_000
POLICY = Policy.load()
HELD = Ruling("review", "threat", "medium")
BLOCKED = Ruling("block", "threat", "high")


def record(
    message_id: str,
    at_ms: int = NOW,
    primary: Ruling = HELD,
    shadow: Ruling = BLOCKED,
    shadow_scores: dict[str, float] | None = None,
) -> bytes:
    """The shadow topic's record of a disagreement, made by the moderator's own function."""
    chat = ChatMessage(message_id, "speedrun", "u-troll", "say that again", NOW - 500)
    first = Primary(chat, POLICY, "chat-minilm@3", primary, {"threat": 0.71, "toxic": 0.4}, None)
    scores = {"threat": 0.93} if shadow_scores is None else shadow_scores
    judged = Judged(shadow, scores, (0, 14), language="en")
    return orjson.dumps(check_shadow(disagreement_record(first, judged, "candidate@4", at_ms)))


def row(
    message_id: str, at_ms: int = NOW, primary: Ruling = HELD, shadow: Ruling = BLOCKED
) -> dict[str, Any]:
    return parse_disagreement(record(message_id, at_ms, primary, shadow), NOW)


def review(message_id: str, text: str = "say that again") -> dict[str, Any]:
    held = {"message_id": message_id, "channel_id": "speedrun", "user_id": "u-troll",
            "text": text, "reason": "threat", "held_at_ms": NOW, "expires_at_ms": NOW + 60_000,
            "context": [{"message_id": "c-1", "user_id": "u-7", "text": "gg"}]}  # fmt: skip
    return parse_review(orjson.dumps(held), NOW)


def verdict(message_id: str, action: str) -> Verdict:
    return Verdict(message_id, action, "bob", "a threat", "channel", NOW + 1000)


@pytest.fixture
def board() -> tuple[Board, list[dict[str, Any]]]:
    """A board keeping 2 disagreements, and the disagreement events its pages are sent."""
    events: list[dict[str, Any]] = []
    b = Board(undo_grace_s=0, overview_minutes=15, disagreements_kept=2, clock=lambda: NOW)
    b.listeners.append(lambda name, data: events.append(data) if name == "disagreement" else None)
    return b, events


def test_a_shadow_record_reads_as_both_decisions_with_their_models_and_top_scores() -> None:
    got = parse_disagreement(record("m-1", shadow_scores={}), NOW - 5)
    assert got["message_id"] == "m-1"
    assert got["channel_id"] == "speedrun"
    assert got["policy"] == POLICY.ident
    assert got["language"] == "en"  # the shadow's gate named it; the primary's did not
    assert got["at_ms"] == NOW
    assert got["primary"] == {"model": "chat-minilm@3", "action": "review", "reason": "threat",
                              "top": {"label": "threat", "score": 0.71}}  # fmt: skip
    assert got["shadow"] == {"model": "candidate@4", "action": "block", "reason": "threat",
                             "top": None}  # not asked  # fmt: skip
    assert (got["message"], got["verdict"], got["agrees"]) == (None, None, None)


def test_a_record_without_its_time_takes_the_records_timestamp() -> None:
    data = orjson.loads(record("m-1"))
    del data["at_ms"]
    assert parse_disagreement(orjson.dumps(data), NOW - 5)["at_ms"] == NOW - 5


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d.pop("primary"), "'primary' must be an object"),
        (lambda d: d["shadow"].pop("model"), "'shadow' needs a model and an action"),
        (lambda d: d["primary"].update(action=""), "'primary' needs a model and an action"),
        (lambda d: d.update(message_id=7), "'message_id' must be a non-empty string"),
    ],
)
def test_a_record_without_its_ids_or_a_decision_is_refused(change: Any, why: str) -> None:
    data = orjson.loads(record("m-1"))
    change(data)
    with pytest.raises(BadRecord, match=why):
        parse_disagreement(orjson.dumps(data), NOW)


@pytest.mark.parametrize("value", [None, b"not json", b"[1]"])
def test_a_tombstone_or_a_record_that_is_no_object_is_refused(value: bytes | None) -> None:
    with pytest.raises(BadRecord):
        parse_disagreement(value, NOW)


def test_the_verdict_sides_with_the_model_whose_action_it_is() -> None:
    shown = row("m-1")  # primary review, shadow block
    assert agrees(shown, verdict("m-1", "block")) == "shadow"
    assert agrees(shown, verdict("m-1", "allow")) == "neither"
    assert agrees(shown, None) is None
    allowed = row("m-2", primary=Ruling("allow", None), shadow=Ruling("nudge", "insult"))
    assert agrees(allowed, verdict("m-2", "allow")) == "primary"


def test_the_newest_are_kept_by_their_time_whatever_order_they_are_read_in(board: Any) -> None:
    b, events = board
    for message_id, at_ms in [("m-2", NOW + 2), ("m-1", NOW + 1), ("m-3", NOW + 3)]:
        b.add_disagreement(row(message_id, at_ms))
    assert [r["message_id"] for r in b.snapshot()["disagreements"]] == ["m-3", "m-2"]
    b.add_disagreement(row("m-0", NOW))  # older than every row kept: not shown
    assert [e["message_id"] for e in events] == ["m-2", "m-1", "m-3"]
    assert set(b.disagreements.rows) == {"m-2", "m-3"}


def test_a_record_read_again_replaces_its_row(board: Any) -> None:
    b, _ = board
    b.add_disagreement(row("m-1", NOW + 1))
    b.add_disagreement(row("m-2", NOW + 2))
    b.add_disagreement(row("m-1", NOW + 3, shadow=Ruling("nudge", "insult")))
    rows = b.snapshot()["disagreements"]
    assert [(r["message_id"], r["shadow"]["action"]) for r in rows] == [
        ("m-1", "nudge"),
        ("m-2", "block"),
    ]


def test_a_held_messages_text_user_and_context_join_its_row_in_either_order(board: Any) -> None:
    b, events = board
    b.add_review(review("m-before", "read first"))
    b.add_disagreement(row("m-before", NOW + 1))
    b.add_disagreement(row("m-after", NOW + 2))
    assert events[-1]["message"] is None
    b.add_review(review("m-after", "read second"))
    assert events[-1]["message_id"] == "m-after"
    rows = {r["message_id"]: r["message"] for r in b.snapshot()["disagreements"]}
    context = [{"message_id": "c-1", "user_id": "u-7", "text": "gg", "sent_at_ms": None}]
    assert rows == {
        "m-before": {"user_id": "u-troll", "text": "read first", "context": context},
        "m-after": {"user_id": "u-troll", "text": "read second", "context": context},
    }


def test_the_first_verdict_joins_its_row_whether_read_before_or_after_it(board: Any) -> None:
    b, events = board
    b.add_verdict(verdict("m-before", "block"))
    b.add_disagreement(row("m-before", NOW + 1))
    assert events[-1]["verdict"]["verdict"] == "block"
    assert events[-1]["agrees"] == "shadow"
    b.add_disagreement(row("m-after", NOW + 2))
    b.add_verdict(verdict("m-after", "allow"))
    b.add_verdict(verdict("m-after", "block"))  # late: the first decided
    assert (events[-1]["message_id"], events[-1]["verdict"]) == (
        "m-after",
        {"verdict": "allow", "moderator_id": "bob", "reason": "a threat", "at_ms": NOW + 1000},
    )
    assert events[-1]["agrees"] == "neither"
    assert len(events) == 3


def test_reviews_wait_for_their_record_within_a_bound() -> None:
    kept = Disagreements(1, {})
    for i in range(REVIEWS_KEPT + 1):
        kept.add_review(review(f"m-{i}"))
    assert len(kept.waiting) == REVIEWS_KEPT
    let_go = kept.add(row("m-0"))
    assert let_go is not None
    assert let_go["message"] is None  # the oldest review was let go
    newest = kept.add(row(f"m-{REVIEWS_KEPT}", NOW + 1))
    assert newest is not None
    assert newest["message"] is not None


def test_without_a_shadow_topic_the_view_is_off_and_nothing_is_kept() -> None:
    b = Board(undo_grace_s=0, overview_minutes=15)
    b.add_review(review("m-1"))
    b.add_disagreement(row("m-1"))
    assert b.snapshot()["disagreements"] is None
    assert (b.disagreements.rows, b.disagreements.waiting) == ({}, {})


def test_the_bound_is_a_setting_and_cannot_be_negative() -> None:
    env = {"MODERATOR_CONSOLE_TOKENS": "alice:alice-token-1234"}
    assert ConsoleSettings.from_env(env).disagreements_kept > 0
    bad = ConsoleSettings.from_env({**env, "MODERATOR_CONSOLE_DISAGREEMENTS_KEPT": "-1"})
    with pytest.raises(ConfigError, match="DISAGREEMENTS_KEPT"):
        bad.check()


def test_the_verdicts_kept_are_counted_by_the_model_they_side_with() -> None:
    b = Board(undo_grace_s=0, overview_minutes=15, disagreements_kept=3, clock=lambda: NOW)
    assert b.disagreements.sides() == {"primary": 0, "shadow": 0, "neither": 0}
    allowed = Ruling("allow", None, None)
    b.add_disagreement(row("m-1", NOW + 1))  # primary review, shadow block
    b.add_disagreement(row("m-2", NOW + 2, primary=BLOCKED, shadow=allowed))
    b.add_disagreement(row("m-3", NOW + 3))  # no verdict: not counted
    b.add_verdict(verdict("m-1", "block"))
    b.add_verdict(verdict("m-2", "block"))
    assert b.disagreements.sides() == {"primary": 1, "shadow": 1, "neither": 0}
    b.add_disagreement(row("m-4", NOW + 4))  # m-1 leaves the kept rows, and the count
    b.add_verdict(verdict("m-4", "nudge"))
    assert b.disagreements.sides() == {"primary": 1, "shadow": 0, "neither": 1}
