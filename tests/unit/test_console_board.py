"""The console's state (console/board.py) and record parsing (console/records.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from console.board import MINUTE_MS, Board
from console.bounded import Joins, Newest
from console.recent import RecentByUser
from console.records import (
    BadRecord,
    Decision,
    Verdict,
    encode_verdict,
    parse_review,
    read_verdict,
)
from moderator.policy.rules import Policy, read_spec
from moderator.records import ChatMessage, Outcome
from moderator.review.hold import encode_review, held_message

NOW = 1_800_000_000_000


def review(message_id: str, **fields: Any) -> dict[str, Any]:
    record = {"message_id": message_id, "channel_id": "c", "user_id": "u", "text": "hi",
              "reason": "threat", "held_at_ms": NOW, "expires_at_ms": NOW + 60_000}  # fmt: skip
    record.update(fields)
    return parse_review(orjson.dumps(record), NOW)


def verdict(message_id: str, action: str = "block", who: str = "alice", at: int = NOW) -> Verdict:
    return Verdict(message_id, action, who, None, "global", at)


@pytest.fixture
def board() -> tuple[Board, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    b = Board(undo_grace_s=30, overview_minutes=15, clock=lambda: NOW)
    b.listeners.append(lambda name, data: events.append((name, data)))
    return b, events


def test_a_review_record_is_queued_and_its_first_verdict_takes_it_off(board: Any) -> None:
    b, events = board
    b.add_review(review("m-1"))
    assert list(b.items) == ["m-1"]
    b.set_claim("m-1", {"moderator_id": "bob", "until_ms": NOW + 1})
    b.add_verdict(verdict("m-1"))
    assert b.items == {}
    assert b.claims == {}
    assert [name for name, _ in events] == ["held", "claim", "gone", "verdict"]
    assert events[2][1]["verdict"]["moderator_id"] == "alice"
    assert b.history[-1]["kind"] == "decided"


def test_a_verdict_read_before_its_review_record_keeps_it_off_the_queue(board: Any) -> None:
    b, _ = board
    b.add_verdict(verdict("m-1", "allow"))
    b.add_review(review("m-1"))
    assert b.items == {}
    assert b.overview()["agreement"] == [
        {"label": "threat", "allow": 1, "nudge": 0, "block": 0, "decided": 1}
    ]


def test_every_verdict_after_the_first_is_late_and_the_first_counts(board: Any) -> None:
    b, _ = board
    b.add_review(review("m-1"))
    b.add_verdict(verdict("m-1", "block"))
    b.add_verdict(verdict("m-1", "allow", who="bob", at=NOW + 1000))
    b.add_verdict(verdict("m-1", "nudge", at=NOW + 2000))  # its own decider's too: the topic's
    assert b.first["m-1"].verdict == "block"
    assert [e["kind"] for e in b.history] == ["decided", "late", "late"]
    row = b.overview()["agreement"][0]
    assert (row["block"], row["nudge"], row["allow"], row["decided"]) == (1, 0, 0, 1)


def test_a_held_back_verdict_takes_its_item_off_until_it_is_undone_or_read(board: Any) -> None:
    b, events = board
    for message_id in ("m-1", "m-2"):
        b.add_review(review(message_id))
    b.hold_back(verdict("m-1"))
    b.hold_back(verdict("m-2"))
    assert b.items == {}
    assert [data.get("pending", {}).get("moderator_id") for name, data in events
            if name == "gone"] == ["alice", "alice"]  # fmt: skip
    b.put_back("m-1")  # undone: waiting again, on every page
    assert list(b.items) == ["m-1"]
    assert events[-1] == ("held", b.items["m-1"])
    b.add_verdict(verdict("m-2"))  # read back from the topic: decided, nothing to put back
    b.put_back("m-2")
    assert list(b.items) == ["m-1"]
    assert b.history[-1]["kind"] == "decided"


def test_expired_and_finally_decided_items_leave_the_queue(board: Any) -> None:
    b, events = board
    b.add_review(review("m-old", expires_at_ms=NOW - 1))
    assert b.items == {}  # already past its deadline when read: never shown
    b.add_review(review("m-1", expires_at_ms=NOW + 5))
    b.add_review(review("m-2"))
    b.clock = lambda: NOW + 10
    b.expire()
    assert list(b.items) == ["m-2"]
    b.add_decision(Decision("m-2", "c", "allow", True, "review_timeout", NOW))
    assert b.items == {}
    assert [data for name, data in events if name == "gone"] == [
        {"message_id": "m-1", "expired": True},
        {"message_id": "m-2", "final": {"action": "allow", "reason": "review_timeout"}},
    ]


def test_the_overview_counts_decisions_per_minute_and_flagged_channels(board: Any) -> None:
    b, _ = board
    for channel, action, final in [("a", "block", False), ("a", "nudge", False),
                                   ("b", "allow", False), ("b", "block", True)]:  # fmt: skip
        b.add_decision(Decision("m", channel, action, final, None, NOW))
    b.add_decision(Decision("m", "z", "block", False, None, NOW - 16 * MINUTE_MS))  # too old
    b.add_review(review("m-1", held_at_ms=NOW - 5000))
    overview = b.overview()
    minute = NOW - NOW % MINUTE_MS
    assert overview["per_minute"] == [
        {"minute_ms": minute, "block": 2, "nudge": 1, "allow": 1, "final": 1}
    ]
    assert overview["top_channels"] == [
        {"channel_id": "a", "flagged": 2},
        {"channel_id": "b", "flagged": 1},
    ]
    assert (overview["waiting"], overview["oldest_held_at_ms"]) == (1, NOW - 5000)


def test_the_broker_status_is_sent_only_when_it_changes(board: Any) -> None:
    b, events = board
    b.set_status(broker="down")
    b.set_status(broker="down")
    b.set_status(broker="up")
    assert [data["broker"] for name, data in events if name == "status"] == ["down", "up"]


@pytest.mark.parametrize(
    "value",
    [b"not json", b"[1]", b'{"message_id": "m", "verdict": "ban", "moderator_id": "a", "at_ms": 1}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "", "at_ms": 1}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "a", "at_ms": "1"}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "a", "at_ms": 1, "scope": "x"}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "a", "at_ms": 1, "scope": null}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "a", "at_ms": 1,'
     b' "override_expires_at_ms": "7d"}',
     b'{"message_id": "m", "verdict": "block", "moderator_id": "a", "at_ms": 1, "reason": "' +
     b"x" * 64 + b'"}',  # over max_bytes
     None],
)  # fmt: skip
def test_a_verdict_the_moderators_would_dead_letter_is_refused(value: bytes | None) -> None:
    with pytest.raises(BadRecord):
        read_verdict(value, max_bytes=128)


def test_a_verdict_round_trips_and_scope_defaults_to_the_channel() -> None:
    v = read_verdict(
        b'{"message_id": "m", "verdict": "nudge", "moderator_id": "a", "at_ms": 5}', max_bytes=96
    )
    assert v == Verdict("m", "nudge", "a", None, "channel", 5)  # as the moderators read it
    assert read_verdict(encode_verdict(v), max_bytes=4096) == v
    lapsing = v._replace(scope="global", override_expires_at_ms=99)
    assert read_verdict(encode_verdict(lapsing), max_bytes=4096) == lapsing


def test_a_review_record_is_read_leniently_and_bounded() -> None:
    item = parse_review(
        orjson.dumps({"message_id": "m", "channel_id": "c", "user_id": "u", "text": "x" * 10_000,
                      "reason": "unsupported_language:de", "scores": {"threat": 0.5, "bad": "x"},
                      "context": [{"text": str(i)} for i in range(50)] + ["junk"]}),
        NOW,
    )  # fmt: skip
    assert item["label"] == "unsupported_language"
    assert len(item["text"]) == 4096
    assert item["scores"] == {"threat": 0.5}
    assert [c["text"] for c in item["context"]] == [str(i) for i in range(31, 50)]
    assert (item["held_at_ms"], item["expires_at_ms"], item["strikes"]) == (NOW, None, 0)
    with pytest.raises(BadRecord):
        parse_review(b'{"message_id": "m", "channel_id": "c"}', NOW)


def test_a_review_record_keeps_the_deadline_and_fallback_its_policy_gave_it() -> None:
    # Held by the moderator's own code under a policy of its own: the page's time left and
    # "then nudge" come from these two fields, never from a timeout the console assumes.
    spec = {**read_spec(), "review_timeout_s": 45, "review_fallback": "nudge"}
    policy = Policy.from_mapping(spec)
    chat = ChatMessage("m-1", "c-1", "u-1", "you will regret this", NOW - 400)
    decision = {"action": "review", "reason": "threat", "severity": "medium",
                "scores": {"threat": 0.6}, "model": "m@1", "policy": "p@1",
                "span": [0, 20]}  # fmt: skip
    outcome = Outcome(None, orjson.dumps(decision), [], action="review", decision=decision)
    held = held_message(chat, policy, outcome, NOW)
    item = parse_review(encode_review(held, [], context_missing=False), NOW + 5)
    assert (item["held_at_ms"], item["expires_at_ms"]) == (NOW, held["expires_at_ms"])
    assert item["expires_at_ms"] - item["held_at_ms"] == spec["review_timeout_s"] * 1000
    assert item["review_fallback"] == "nudge"
    for odd in ({}, {"review_fallback": ""}, {"review_fallback": 3}):
        assert review("m-2", **odd)["review_fallback"] is None  # shown without "then …"


def test_the_history_keeps_the_newest_entries_by_time_whatever_order_they_are_read_in() -> None:
    b = Board(undo_grace_s=0, overview_minutes=15, history_size=3, clock=lambda: NOW)
    for at in (5, 1, 4, 2, 3):  # two partitions: read in no order of time
        b.add_verdict(verdict(f"m-{at}", at=NOW + at))
    assert [e["message_id"] for e in b.history] == ["m-3", "m-4", "m-5"]


def test_a_history_entry_has_its_review_records_user_and_text_whichever_is_read_first(
    board: Any,
) -> None:
    b, events = board
    b.add_review(review("m-1", user_id="u-1", text="first"))
    b.add_verdict(verdict("m-1"))  # decided while it waited
    b.add_verdict(verdict("m-9", at=NOW + 1))  # its review record comes after it
    assert b.history[-1]["text"] is None
    b.add_review(review("m-9", user_id="u-9", text="later"))
    assert [(e["user_id"], e["text"]) for e in b.history] == [("u-1", "first"), ("u-9", "later")]
    assert events[-1] == ("reviewed", {"message_id": "m-9", "channel_id": "c", "user_id": "u-9",
                                       "text": "later"})  # fmt: skip


def test_the_user_panel_keeps_each_users_newest_messages_with_what_became_of_them(
    board: Any,
) -> None:
    b, _ = board
    b.add_verdict(verdict("m-1", "nudge", who="bob"))  # read before its review record
    b.add_decision(Decision("m-2", "c", "allow", True, "review_timeout", NOW))
    for i in (1, 2, 3):
        b.add_review(review(f"m-{i}", user_id="u-1", held_at_ms=NOW + i))
    b.add_review(review("m-9", user_id="u-9"))
    recent = b.recent.recent("u-1")
    assert [r["message_id"] for r in recent] == ["m-3", "m-2", "m-1"]  # newest first
    assert recent[2]["verdict"]["moderator_id"] == "bob"
    assert recent[1]["final"] == {"action": "allow", "reason": "review_timeout"}
    assert (recent[0]["verdict"], recent[0]["final"]) == (None, None)  # still waiting


def test_the_user_panels_memory_is_bounded_per_user_and_in_users() -> None:
    recent = RecentByUser(per_user=2, users=2)
    for n, user in enumerate(["u-1", "u-1", "u-1"]):
        recent.add_review({"message_id": f"m-{n}", "user_id": user, "held_at_ms": n})
    assert [r["message_id"] for r in recent.recent("u-1")] == ["m-2", "m-1"]  # the newest 2
    for n, user in ((3, "u-2"), (4, "u-3")):
        recent.add_review({"message_id": f"m-{n}", "user_id": user, "held_at_ms": n})
    assert recent.recent("u-1") == []  # the user seen longest ago, forgotten
    assert [r["message_id"] for r in recent.recent("u-3")] == ["m-4"]
    recent.add_verdict(verdict("m-0"))  # forgotten: nothing kept for it
    assert [r["message_id"] for r in recent.recent("u-2")] == ["m-3"]


def test_the_user_panel_keeps_at_most_rows_messages_in_all() -> None:
    recent = RecentByUser(per_user=3, users=100, rows=4)
    for n, user in enumerate(["u-1", "u-1", "u-2", "u-2", "u-3"]):
        recent.add_review({"message_id": f"m-{n}", "user_id": user, "held_at_ms": n})
    assert recent.recent("u-1") == []  # 5 rows > 4: the user seen longest ago goes whole
    assert [[r["message_id"] for r in recent.recent(u)] for u in ("u-2", "u-3")] == [
        ["m-3", "m-2"], ["m-4"]]  # fmt: skip
    with pytest.raises(ValueError, match="at least one user"):
        RecentByUser(per_user=3, rows=2)


def test_labels_verdicts_and_finals_are_kept_for_the_newest_messages_only() -> None:
    b = Board(undo_grace_s=30, overview_minutes=15, kept_messages=3, clock=lambda: NOW)
    for n in range(10):
        b.add_review(review(f"m-{n}"))
        b.add_verdict(verdict(f"m-{n}"))
        b.add_decision(Decision(f"m-{n}", "c", "block", True, "verdict", NOW))
    assert (list(b.labels), list(b.first), list(b.finals)) == ([f"m-{n}" for n in (7, 8, 9)],) * 3
    assert len(b.joins) == 3  # one entry a message, whatever it was joined with
    assert b.overview()["decided"] == 10  # counted before they were forgotten


def test_a_message_is_forgotten_whole_as_newer_messages_are_held() -> None:
    """The bound counts held messages, decided or not: a verdict is not kept for longer than the
    label it joins with (three maps filled at three rates did that)."""
    b = Board(undo_grace_s=30, overview_minutes=15, kept_messages=2, clock=lambda: NOW)
    b.add_review(review("m-1"))
    b.add_verdict(verdict("m-1"))
    b.add_decision(Decision("m-1", "c", "block", True, "verdict", NOW))
    b.add_review(review("m-2"))
    b.add_review(review("m-3"))  # held, never decided: m-1 goes, all of it
    assert ("m-1" in b.labels, "m-1" in b.first, "m-1" in b.finals) == (False, False, False)
    assert list(b.labels) == ["m-2", "m-3"]
    assert list(b.first) == list(b.finals) == []


def test_a_fact_of_a_kept_message_can_be_forgotten_alone() -> None:
    joins = Joins(3)
    labels, first = joins.field("label"), joins.field("first")
    labels["m-1"] = "toxic"
    first["m-1"] = verdict("m-1")
    del first["m-1"]
    assert (dict(labels), dict(first)) == ({"m-1": "toxic"}, {})
    with pytest.raises(KeyError):
        del first["m-1"]
    with pytest.raises(ValueError, match="no such fact"):
        joins.field("text")


def test_a_verdict_read_before_its_review_still_joins_while_its_message_is_kept() -> None:
    b = Board(undo_grace_s=30, overview_minutes=15, kept_messages=2, clock=lambda: NOW)
    b.add_verdict(verdict("m-new"))
    b.add_verdict(verdict("m-other"))
    b.add_review(review("m-new", reason="spam"))  # still kept: joined, not queued
    assert b.items == {}
    assert b.overview()["agreement"][0]["label"] == "spam"
    b.add_verdict(verdict("m-third"))  # m-new, the oldest, goes
    assert list(b.first) == ["m-other", "m-third"]


def test_newest_forgets_the_key_set_longest_ago_not_the_one_read_least() -> None:
    kept: Newest[str, int] = Newest(2)
    kept["a"], kept["b"] = 1, 2
    assert kept["a"] == 1
    kept["a"] = 10  # set again: keeps its place
    kept["c"] = 3
    assert dict(kept) == {"b": 2, "c": 3}
    with pytest.raises(ValueError, match="at least 1"):
        Newest(0)
