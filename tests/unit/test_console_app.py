"""The console's HTTP side (console/app.py) without a broker: access, CSRF, first verdict wins,
undo. The feed is replaced by one that hands each verdict straight back to the board, as the
verdict topic would."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from console.app import create_app
from console.board import Board
from console.claims import Claims
from console.commands import register
from console.config import ConsoleSettings
from console.csrf import csrf_ok
from console.feed import Feed
from console.records import now_ms, parse_review
from moderator.commandline import settings_from_args
from moderator.config import Settings
from moderator.errors import ConfigError
from tests.console_fakes import TOKENS, TopicFeed, logged_in
from tests.oidc import AUDIENCE, ISSUER, Provider, bearer
from tests.waiting import eventually_blocking


@pytest.fixture
def board() -> Board:
    board = Board(undo_grace_s=30, overview_minutes=15)
    for message_id in ("m-1", "m-2"):
        record = {"message_id": message_id, "channel_id": "c", "user_id": "u", "text": "hi"}
        board.add_review(parse_review(orjson.dumps(record), now_ms()))
    return board


def app(board: Board, feed: Feed | None = None, **settings: Any) -> TestClient:
    return two(board, feed, **settings)[0]


def two(board: Board, feed: Feed | None = None, **settings: Any) -> tuple[TestClient, TestClient]:
    """Two browsers (cookie jars) on one console; its verdicts go out at once unless a grace is
    given (`undo_grace_s`; then use the clients in `with`, so the app's event loop runs on)."""
    console = ConsoleSettings(**{"tokens": TOKENS, "undo_grace_s": 0, **settings})
    served = create_app(
        console, board, feed or TopicFeed(board), Claims("", 60, verdict_topic="chat.verdicts")
    )
    return TestClient(served), TestClient(served)


def act(client: TestClient, csrf: str, path: str, **body: Any) -> Any:
    return client.post(path, json=body, headers={"X-CSRF-Token": csrf})


def test_the_page_forbids_inline_script_and_framing(board: Board) -> None:
    reply = app(board).get("/")
    assert reply.status_code == 200
    csp = reply.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert reply.headers["x-content-type-options"] == "nosniff"


def test_nothing_but_the_login_works_without_an_identity(board: Board) -> None:
    client = app(board)
    csrf = client.get("/api/session").json()["csrf"]
    assert client.get("/events").status_code == 401
    assert act(client, csrf, "/api/verdict", message_id="m-1", verdict="block").status_code == 401
    assert act(client, csrf, "/api/claim", message_id="m-1").status_code == 401
    wrong = client.post(
        "/login", data={"token": "guess-guess", "csrf": csrf}, follow_redirects=False
    )
    assert wrong.headers["location"] == "/?login=failed"
    assert client.get("/api/session").json()["moderator_id"] is None


def test_posts_without_the_sessions_csrf_token_or_from_another_origin_are_refused(
    board: Board,
) -> None:
    client = app(board)
    csrf = logged_in(client, "alice-token-1")
    assert (
        act(client, "forged", "/api/verdict", message_id="m-1", verdict="block").status_code == 403
    )
    assert (
        client.post("/api/verdict", json={"message_id": "m-1", "verdict": "block"}).status_code
        == 403
    )
    evil = client.post(
        "/api/verdict", json={"message_id": "m-1", "verdict": "block"},
        headers={"X-CSRF-Token": csrf, "Origin": "https://evil.example"},
    )  # fmt: skip
    assert evil.status_code == 403
    assert client.post("/login", data={"token": "bob-token-22"}).status_code == 403
    assert client.post("/logout", data={}).status_code == 403
    assert "m-1" in board.items  # nothing was decided


def test_the_first_verdict_wins_and_the_second_moderator_is_told_who_decided(
    board: Board,
) -> None:
    feed = TopicFeed(board, echo=False)  # the verdict not yet read back: the lock decides
    alice, bob = two(board, feed)
    a, b = logged_in(alice, "alice-token-1"), logged_in(bob, "bob-token-22")
    first = act(alice, a, "/api/verdict", message_id="m-1", verdict="block", reason=" threat ")
    assert first.status_code == 200
    assert first.json()["verdict"]["moderator_id"] == "alice"
    second = act(bob, b, "/api/verdict", message_id="m-1", verdict="allow")
    assert second.status_code == 409
    assert second.json() == {"error": "gone", "decided_by": "alice", "verdict": "block"}
    assert [(v.moderator_id, v.verdict, v.reason) for v in feed.sent] == [
        ("alice", "block", "threat")
    ]
    board.add_verdict(feed.sent[0])  # read back from the topic: gone from the queue
    assert act(bob, b, "/api/verdict", message_id="m-1", verdict="allow").status_code == 409
    assert act(bob, b, "/api/verdict", message_id="m-x", verdict="allow").status_code == 404


def test_a_claimed_item_is_the_claimers_to_decide(board: Board) -> None:
    alice, bob = two(board)
    a, b = logged_in(alice, "alice-token-1"), logged_in(bob, "bob-token-22")
    assert act(alice, a, "/api/claim", message_id="m-2").status_code == 200
    assert board.claims["m-2"]["moderator_id"] == "alice"
    taken = act(bob, b, "/api/claim", message_id="m-2")
    assert taken.status_code == 409
    assert taken.json()["claim"]["moderator_id"] == "alice"
    refused = act(bob, b, "/api/verdict", message_id="m-2", verdict="allow")
    assert (refused.status_code, refused.json()["error"]) == (409, "claimed")
    assert act(alice, a, "/api/claim", message_id="m-2", release=True).status_code == 200
    assert "m-2" not in board.claims
    assert act(bob, b, "/api/verdict", message_id="m-2", verdict="allow").status_code == 200


def test_a_verdict_waits_out_the_grace_in_the_console_and_an_undo_cancels_it(
    board: Board,
) -> None:
    feed = TopicFeed(board)
    alice, bob = two(board, feed, undo_grace_s=3600)  # the grace never runs out in this test
    with alice, bob:
        a, b = logged_in(alice, "alice-token-1"), logged_in(bob, "bob-token-22")
        held = act(alice, a, "/api/verdict", message_id="m-1", verdict="block")
        assert (held.status_code, held.json()["pending"]) == (200, True)
        assert "m-1" not in board.items  # off this console's pages at once
        assert feed.sent == []  # and not on the topic
        late = act(bob, b, "/api/verdict", message_id="m-1", verdict="allow")
        assert (late.status_code, late.json()["decided_by"]) == (409, "alice")
        assert act(bob, b, "/api/undo", message_id="m-1").status_code == 409  # not bob's
        undone = act(alice, a, "/api/undo", message_id="m-1")
        assert undone.status_code == 200
        assert "m-1" in board.items  # waiting again
        assert act(alice, a, "/api/undo", message_id="m-1").status_code == 409  # once
        # The lock went with the undo: bob may decide it now.
        assert act(bob, b, "/api/verdict", message_id="m-1", verdict="nudge").status_code == 200
        assert feed.sent == []
    # The console stopped within bob's grace: what it held back went out, alice's never.
    assert [(v.moderator_id, v.verdict) for v in feed.sent] == [("bob", "nudge")]
    assert board.first["m-1"].moderator_id == "bob"


def test_a_verdict_goes_out_once_its_grace_is_over_and_then_cannot_be_undone(
    board: Board,
) -> None:
    feed = TopicFeed(board)
    client = app(board, feed, undo_grace_s=0.01)
    with client:
        csrf = logged_in(client, "alice-token-1")
        assert act(client, csrf, "/api/verdict", message_id="m-2", verdict="allow").json()[
            "pending"
        ]
        eventually_blocking(lambda: feed.sent, "the verdict went out", timeout_s=30)
        assert [(v.message_id, v.verdict) for v in feed.sent] == [("m-2", "allow")]
        refused = act(client, csrf, "/api/undo", message_id="m-2")
        assert refused.status_code == 409
        assert "grace period is over" in refused.json()["error"]
        assert "m-2" not in board.items


@pytest.fixture(scope="module")
def idp() -> Provider:
    return Provider()


def behind_proxy(board: Board, idp: Provider, key_file: Path, **settings: Any) -> TestClient:
    """The console in the proxy mode: the ID tokens of `idp` verified against its pinned key."""
    idp.pem(key_file)
    settings = {"tokens": "", **settings}
    return app(board, oidc_issuer=ISSUER, oidc_audience=AUDIENCE, oidc_key_file=str(key_file),
               **settings)  # fmt: skip


def test_a_forged_identity_header_names_nobody_in_either_mode(
    board: Board, idp: Provider, tmp_path: Path
) -> None:
    forged = {"X-Forwarded-Email": "mallory@evil", "X-Forwarded-User": "mallory",
              "X-Auth-Request-Email": "mallory@evil", "Remote-User": "mallory"}  # fmt: skip
    feed = TopicFeed(board)
    for client in (app(board, feed), behind_proxy(board, idp, tmp_path / "idp.pem", feed=feed)):
        session = client.get("/api/session", headers=forged).json()
        assert session["moderator_id"] is None
        reply = client.post("/api/verdict", json={"message_id": "m-1", "verdict": "allow"},
                            headers={**forged, "X-CSRF-Token": session["csrf"]})  # fmt: skip
        assert reply.status_code == 401
        assert client.get("/events", headers=forged).status_code == 401
    assert feed.sent == []
    assert "m-1" in board.items


def test_the_proxys_verified_id_token_names_the_moderator_by_its_claim(
    board: Board, idp: Provider, tmp_path: Path
) -> None:
    client = behind_proxy(board, idp, tmp_path / "idp.pem")
    token = bearer(idp.token("carol@example.com"))
    session = client.get("/api/session", headers=token).json()
    assert session["moderator_id"] == "carol@example.com"
    assert session["token_login"] is False
    # The header on every request: a cookie alone names nobody in this mode.
    assert act(client, session["csrf"], "/api/verdict", message_id="m-1",
               verdict="allow").status_code == 401  # fmt: skip
    reply = client.post("/api/verdict", json={"message_id": "m-1", "verdict": "allow"},
                        headers={**token, "X-CSRF-Token": session["csrf"]})  # fmt: skip
    assert reply.status_code == 200
    assert board.first["m-1"].moderator_id == "carol@example.com"


def test_a_forged_expired_or_foreign_token_is_refused(
    board: Board, idp: Provider, tmp_path: Path
) -> None:
    feed = TopicFeed(board)
    client = behind_proxy(board, idp, tmp_path / "idp.pem", feed=feed, tokens=TOKENS)
    csrf = logged_in(client, "alice-token-1")  # a bad token does not fall back to her login
    mallory = Provider(kid=idp.kid)  # her own key under the provider's key id
    for token in (mallory.token("carol@example.com"),
                  idp.token("carol@example.com", exp=int(time.time()) - 3600),
                  idp.token("carol@example.com", aud="another-app"),
                  idp.token("carol@example.com", iss="https://evil.example"),
                  "mallory@evil"):  # fmt: skip
        assert client.get("/api/session", headers=bearer(token)).json()["moderator_id"] is None
        reply = client.post("/api/verdict", json={"message_id": "m-1", "verdict": "block"},
                            headers={**bearer(token), "X-CSRF-Token": csrf})  # fmt: skip
        assert reply.status_code == 401
    assert client.get("/api/session").json()["moderator_id"] == "alice"
    assert feed.sent == []
    assert "m-1" in board.items


def test_a_post_with_a_valid_token_still_needs_the_sessions_csrf_token(
    board: Board, idp: Provider, tmp_path: Path
) -> None:
    """A browser behind the proxy sends the proxy's cookie, hence the token, to any page's post."""
    client = behind_proxy(board, idp, tmp_path / "idp.pem")
    token = bearer(idp.token("carol@example.com"))
    csrf = client.get("/api/session", headers=token).json()["csrf"]
    body = {"message_id": "m-1", "verdict": "block"}
    assert client.post("/api/verdict", json=body, headers=token).status_code == 403
    forged = {**token, "X-CSRF-Token": "forged"}
    assert client.post("/api/verdict", json=body, headers=forged).status_code == 403
    cross = {**token, "X-CSRF-Token": csrf, "Origin": "https://evil.example"}
    assert client.post("/api/verdict", json=body, headers=cross).status_code == 403
    assert "m-1" in board.items


def test_every_state_changing_route_passes_the_csrf_check(board: Board) -> None:
    """Routes added later included: each is asked without the session's token."""
    client = app(board)
    csrf = logged_in(client, "alice-token-1")
    changing = [(route.path, method) for route in client.app.routes  # type: ignore[attr-defined]
                for method in sorted(getattr(route, "methods", None) or ())
                if method not in ("GET", "HEAD", "OPTIONS")]  # fmt: skip
    assert ("/api/verdict", "POST") in changing
    assert ("/logout", "POST") in changing
    for path, method in changing:
        for headers in ({}, {"X-CSRF-Token": "forged"},
                        {"X-CSRF-Token": csrf, "Origin": "https://evil.example"}):  # fmt: skip
            reply = client.request(method, path, json={"message_id": "m-1"}, headers=headers)
            assert reply.status_code == 403, (method, path, headers)
            assert reply.json() == {"error": "csrf"}
    assert "m-1" in board.items


def test_behind_a_tls_proxy_the_expected_origin_is_https_whatever_the_last_hop() -> None:
    """secure_cookies: the page came over HTTPS, though the proxy may call the console in HTTP."""

    def post(origin: str) -> Request:
        return Request({"type": "http", "method": "POST", "scheme": "http", "path": "/api/verdict",
                        "query_string": b"", "session": {"csrf": "the-token"},
                        "headers": [(b"host", b"console.example.com"),
                                    (b"origin", origin.encode())]})  # fmt: skip

    assert csrf_ok(post("https://console.example.com"), "the-token", https=True)
    assert not csrf_ok(post("https://console.example.com"), "the-token")  # as plain HTTP
    assert not csrf_ok(post("http://console.example.com"), "the-token", https=True)
    assert not csrf_ok(post("https://evil.example"), "the-token", https=True)
    assert not csrf_ok(post("https://console.example.com"), "forged", https=True)


def test_the_topics_are_the_moderators_settings_read_by_the_console_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    monkeypatch.setenv("MODERATOR_REVIEW_TOPIC", "r")
    monkeypatch.setenv("MODERATOR_OUT_TOPIC", "d")
    args = parser.parse_args(["console", "--verdict-topic", "v"])
    settings = settings_from_args(args)
    assert (settings.review_topic, settings.verdict_topic, settings.out_topic) == ("r", "v", "d")
    assert Settings(review_topic="r").review_topic == settings.review_topic  # one definition


def test_settings_come_from_the_consoles_variables(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("# moderators\ncarol carol-token-333\n\n")
    settings = ConsoleSettings.from_env({
        "MODERATOR_CONSOLE_PORT": "9000",
        "MODERATOR_CONSOLE_TOKENS": "alice:alice-token-1", "MODERATOR_CONSOLE_SECURE_COOKIES": "1",
        "MODERATOR_CONSOLE_TOKENS_FILE": str(tokens),
    }, port="9001")  # fmt: skip
    assert (settings.port, settings.secure_cookies) == (9001, True)
    assert settings.logins() == {"alice-token-1": "alice", "carol-token-333": "carol"}
    with pytest.raises(ConfigError, match="MODERATOR_CONSOLE_PORT"):
        ConsoleSettings.from_env({"MODERATOR_CONSOLE_PORT": "http"})
    with pytest.raises(ConfigError, match="no way to log in"):
        ConsoleSettings().check()
    with pytest.raises(ConfigError, match="at least 8"):
        ConsoleSettings(tokens="alice:short").logins()
    tokens.write_text("carol\n")
    with pytest.raises(ConfigError, match="line 1"):
        ConsoleSettings(tokens_file=str(tokens)).logins()


def test_a_bulk_verdict_is_answered_per_id_by_the_one_item_rules(board: Board) -> None:
    feed = TopicFeed(board, echo=False)
    alice, bob = two(board, feed)
    a, b = logged_in(alice, "alice-token-1"), logged_in(bob, "bob-token-22")
    assert act(bob, b, "/api/claim", message_id="m-2").status_code == 200  # bob's
    assert act(alice, a, "/api/bulk/verdict", message_ids=[], verdict="block").status_code == 400
    assert act(alice, a, "/api/bulk/verdict", message_ids=["m-1"], verdict="ban").status_code == 400
    assert act(alice, "forged", "/api/bulk/verdict", message_ids=["m-1"],
               verdict="block").status_code == 403  # fmt: skip
    reply = act(alice, a, "/api/bulk/verdict", message_ids=["m-1", "m-2", "m-9", "m-1"],
                verdict="block", reason="raid")  # fmt: skip
    assert reply.status_code == 200
    results = reply.json()["results"]
    assert [(r["message_id"], r["status"]) for r in results] == [
        ("m-1", 200), ("m-2", 409), ("m-9", 404)]  # fmt: skip
    assert results[1]["error"] == "claimed"
    assert results[1]["claim"]["moderator_id"] == "bob"
    assert reply.json()["done"] == ["m-1"]
    assert [(v.message_id, v.moderator_id, v.reason) for v in feed.sent] == [
        ("m-1", "alice", "raid")]  # fmt: skip
    assert "m-2" in board.items  # bob's claim: never acted on


def test_one_bulk_undo_takes_back_every_verdict_of_the_batch_in_its_grace(board: Board) -> None:
    feed = TopicFeed(board, echo=False)
    alice, bob = two(board, feed, undo_grace_s=30)
    with alice, bob:
        a, b = logged_in(alice, "alice-token-1"), logged_in(bob, "bob-token-22")
        ids = ["m-1", "m-2"]
        taken = act(alice, a, "/api/bulk/verdict", message_ids=ids, verdict="nudge")
        assert taken.json()["done"] == ids
        assert board.items == {}  # held back: off every page for the grace
        refused = act(bob, b, "/api/bulk/undo", message_ids=ids)  # not bob's to undo
        assert [r["status"] for r in refused.json()["results"]] == [409, 409]
        undone = act(alice, a, "/api/bulk/undo", message_ids=ids)
        assert undone.json()["done"] == ids
        assert sorted(board.items) == ids
    assert feed.sent == []
