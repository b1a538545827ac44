"""The console's overrides without a broker (console/overrides.py): a verdict's scope defaults to
its channel, global needs the role and the confirmation, the list shows live overrides with who
and when, and revoking checks identity, CSRF and the role before it writes anything."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from console.app import create_app
from console.board import Board
from console.claims import Claims
from console.config import ConsoleSettings
from console.feed import Feed
from console.overrides import MAX_EXPIRY_S, OverrideDesk, Refused, verdict_scope
from console.records import Verdict, now_ms, parse_review
from moderator.review.overrides import from_verdict, wall_ms
from tests.console_fakes import TOKENS, TopicFeed, logged_in

GLOBAL = frozenset({"alice"})
TEXT = "who wants potato salad"


@pytest.mark.parametrize(
    ("body", "who", "expected"),
    [
        ({}, "bob", ("channel", None)),
        ({"scope": ""}, "bob", ("channel", None)),
        ({"scope": "channel", "expires_in_s": 3600}, "bob", ("channel", 3600)),
        ({"scope": "global", "confirm_global": True}, "alice", ("global", None)),
        ({"scope": "global", "confirm_global": True}, "bob", Refused(403, "bob may not")),
        ({"scope": "global"}, "alice", Refused(400, "confirm it")),
        ({"scope": "global", "confirm_global": "yes"}, "alice", Refused(400, "confirm it")),
        ({"scope": "everywhere"}, "alice", Refused(400, "scope: one of")),
        ({"expires_in_s": 0}, "bob", Refused(400, "expires_in_s")),
        ({"expires_in_s": MAX_EXPIRY_S + 1}, "bob", Refused(400, "expires_in_s")),
        ({"expires_in_s": True}, "bob", Refused(400, "expires_in_s")),
    ],
)
def test_a_verdicts_scope_is_its_channel_unless_a_named_moderator_confirms_global(
    body: dict[str, Any], who: str, expected: tuple[str, int | None] | Refused
) -> None:
    got = verdict_scope(body, who, GLOBAL)
    if isinstance(expected, Refused):
        assert isinstance(got, Refused)
        assert got.status == expected.status
        assert expected.error in got.error
    else:
        assert got == expected


def console(board: Board, feed: Feed) -> tuple[TestClient, OverrideDesk]:
    settings = ConsoleSettings(tokens=TOKENS, undo_grace_s=0, global_moderators="alice, ")
    role = settings.global_moderator_ids()
    desk = OverrideDesk(board, feed, {}, override_topic="", audit_topic="",
                        global_moderators=role, send_timeout_s=1)  # fmt: skip
    claims = Claims("", 60, verdict_topic="chat.verdicts")
    return TestClient(create_app(settings, board, feed, claims, desk)), desk


@pytest.fixture
def board() -> Board:
    board = Board(undo_grace_s=0, overview_minutes=15)
    record = {"message_id": "m-1", "channel_id": "c-a", "user_id": "u", "text": TEXT}
    board.add_review(parse_review(orjson.dumps(record), now_ms()))
    return board


def test_a_verdict_posted_without_a_scope_is_sent_for_its_channel_with_its_expiry(
    board: Board,
) -> None:
    feed = TopicFeed(board)
    client, _ = console(board, feed)
    csrf = logged_in(client, "bob-token-22")
    refused = client.post("/api/verdict", headers={"X-CSRF-Token": csrf},
                          json={"message_id": "m-1", "verdict": "block", "scope": "global",
                                "confirm_global": True})  # fmt: skip
    assert refused.status_code == 403
    assert feed.sent == [], "nothing sent"
    body = {"message_id": "m-1", "verdict": "block", "expires_in_s": 60}
    reply = client.post("/api/verdict", headers={"X-CSRF-Token": csrf}, json=body)
    assert reply.status_code == 200, reply.text
    (sent,) = feed.sent
    assert (sent.scope, sent.moderator_id) == ("channel", "bob")
    assert sent.override_expires_at_ms == sent.at_ms + 60_000


def test_the_list_shows_live_overrides_and_revoking_checks_identity_csrf_and_role(
    board: Board,
) -> None:
    client, desk = console(board, TopicFeed(board))
    at = wall_ms()
    made = [
        from_verdict(TEXT, "c-a", Verdict("m-1", "block", "bob", None, "channel", at)),
        from_verdict(TEXT, "c-a", Verdict("m-2", "nudge", "alice", None, "global", at + 1)),
        from_verdict("gone", "c-a", Verdict("m-3", "allow", "bob", None, "channel", at, at - 1)),
    ]
    for override in made:
        assert override is not None
        desk.book.put(override)
    assert client.get("/api/overrides").status_code == 401
    csrf = logged_in(client, "bob-token-22")
    shown = client.get("/api/overrides").json()
    assert shown["may_global"] is False
    assert [(o["moderator_id"], o["scope"], o["at_ms"]) for o in shown["overrides"]] == [
        ("alice", "global", at + 1), ("bob", "channel", at)
    ], "newest first; the expired one is not listed"  # fmt: skip
    everywhere = shown["overrides"][0]["key"]
    no_csrf = client.post("/api/overrides/revoke", json={"key": everywhere})
    assert no_csrf.status_code == 403
    assert no_csrf.json() == {"error": "csrf"}
    role = client.post(
        "/api/overrides/revoke", json={"key": everywhere}, headers={"X-CSRF-Token": csrf}
    )
    assert role.status_code == 403
    assert "may not revoke a global override" in role.json()["error"]
    unknown = client.post(
        "/api/overrides/revoke", json={"key": "nope"}, headers={"X-CSRF-Token": csrf}
    )
    assert unknown.status_code == 404
    own = client.post(
        "/api/overrides/revoke", json={"key": shown["overrides"][1]["key"]},
        headers={"X-CSRF-Token": csrf},
    )  # fmt: skip
    assert own.status_code == 503, "no broker: nothing revoked, and the page is told"
    assert len(client.get("/api/overrides").json()["overrides"]) == 2
    assert client.get("/api/overrides").json()["overrides"][0]["key"] == everywhere
    alice = TestClient(client.app)
    logged_in(alice, "alice-token-1")
    assert alice.get("/api/overrides").json()["may_global"] is True
