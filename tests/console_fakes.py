"""The console's pieces for tests without a broker: a feed that hands each verdict straight back
to the board (as the verdict topic would), the test logins, and a login through the form."""

from __future__ import annotations

from starlette.testclient import TestClient

from console.board import Board
from console.feed import Feed
from console.records import Verdict

TOKENS = "alice:alice-token-1,bob:bob-token-22"


class TopicFeed(Feed):
    """Sends verdicts nowhere but the board (`echo`: as if read back from the verdict topic)."""

    def __init__(self, board: Board, *, echo: bool = True) -> None:
        super().__init__(
            board,
            {},
            review_topic="r",
            verdict_topic="v",
            decision_topic="d",
            max_record_bytes=4096,
        )
        self.sent: list[Verdict] = []
        self.echo = echo

    async def start(self) -> None:
        pass  # no broker to follow

    async def stop(self) -> None:
        pass

    async def send(self, verdict: Verdict, timeout_s: float) -> bool:
        self.sent.append(verdict)
        if self.echo:
            self.board.add_verdict(verdict)
        return True


def logged_in(client: TestClient, token: str) -> str:
    """Log `client` in; its CSRF token."""
    csrf = client.get("/api/session").json()["csrf"]
    reply = client.post("/login", data={"token": token, "csrf": csrf}, follow_redirects=False)
    assert reply.status_code == 303
    assert reply.headers["location"] == "/"
    session = client.get("/api/session").json()
    assert session["moderator_id"]
    return str(session["csrf"])
