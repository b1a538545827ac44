"""Each user's newest held messages, and what became of each: still waiting, the first verdict
read (who, what, why), the final decision read (a verdict applied, or the review timeout's
fallback). What the user panel (console/users_panel.py) shows, from the topics the console reads
anyway; at most `PER_USER` messages for each of the `USERS` users seen last, and at most `ROWS`
messages in all, so its memory is bounded however long the console runs (full, 5,000 users of 20
rows held about 75 MiB, which an hour at 1,000 decisions a second showed as growth: issue 44).
Pure state: the board feeds it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from console.records import Verdict

PER_USER = 20
USERS = 5_000
ROWS = 10_000
SHOWN = ("message_id", "channel_id", "text", "held_at_ms", "label", "severity", "reason")


class RecentByUser:
    """Each user's newest held messages and their outcome."""

    def __init__(self, per_user: int = PER_USER, users: int = USERS, rows: int = ROWS) -> None:
        if rows < per_user:
            raise ValueError(f"rows ({rows}) must hold at least one user's {per_user}")
        self.per_user = per_user
        self.users = users
        self.rows = rows
        self._by_user: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self._by_message: dict[str, dict[str, Any]] = {}

    def add_review(self, item: dict[str, Any]) -> None:
        if item["message_id"] in self._by_message:
            return
        user = item["user_id"]
        kept = self._by_user.pop(user, None) or deque()
        self._by_user[user] = kept  # the newest user last: the first to go is the oldest seen
        if len(kept) == self.per_user:
            self._by_message.pop(kept.popleft()["message_id"], None)
        row = {**{k: item.get(k) for k in SHOWN}, "verdict": None, "final": None}
        kept.append(row)
        self._by_message[item["message_id"]] = row
        while len(self._by_user) > self.users or len(self._by_message) > self.rows:
            _, gone = self._by_user.popitem(last=False)  # never the user just added: it is newest
            for old in gone:
                self._by_message.pop(old["message_id"], None)

    def add_verdict(self, verdict: Verdict) -> None:
        """The first verdict read on a message (later ones change nothing the user got)."""
        row = self._by_message.get(verdict.message_id)
        if row is not None and row["verdict"] is None:
            row["verdict"] = {"verdict": verdict.verdict, "moderator_id": verdict.moderator_id,
                              "reason": verdict.reason, "at_ms": verdict.at_ms}  # fmt: skip

    def add_final(self, message_id: str, action: str, reason: str | None) -> None:
        row = self._by_message.get(message_id)
        if row is not None:
            row["final"] = {"action": action, "reason": reason}

    def recent(self, user_id: str) -> list[dict[str, Any]]:
        """The user's kept messages, newest first."""
        return sorted(self._by_user.get(user_id, ()), key=lambda r: -int(r["held_at_ms"] or 0))
