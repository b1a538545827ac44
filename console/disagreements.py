"""The disagreements view's state: the newest `kept` records of the shadow topic (issue 41), each
joined with what the console already reads of its message. Pure: the feed hands it records, the
board hands it reviews and verdicts, and each call returns the row that changed, if one did.

A shadow record holds ids and figures only (no text, no user: moderator/shadow/agreement.py).
The text, its user and the channel's lines before it come from the message's review record, so
only a message the primary held shows them; any other shows its ids. The verdict is the first on
the verdict topic (the one the moderators apply), which also exists only for held messages.
Memory is bounded: `kept` rows, and the last REVIEWS_KEPT reviews waiting for their record.
"""

from __future__ import annotations

import bisect
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import Any

from console.records import Verdict

# A review is kept for the join until this many newer ones were read. Live, a held message's
# shadow record follows its review by the shadow's queue delay; a console starting on the topics'
# retention reads every partition at once, up to 256 KiB of each per fetch (console/feed.py).
REVIEWS_KEPT = 1000
SIDES = ("primary", "shadow", "neither")  # what a verdict may side with (`agrees`)


def agrees(row: Mapping[str, Any], verdict: Verdict | None) -> str | None:
    """Which model the human's verdict sides with: `primary`, `shadow`, or `neither` (a verdict
    is allow, nudge or block; a model may have said review, which no verdict is); None, none."""
    if verdict is None:
        return None
    for side in ("primary", "shadow"):
        if row[side]["action"] == verdict.verdict:
            return side
    return "neither"


def joined(row: dict[str, Any], verdict: Verdict | None) -> dict[str, Any]:
    """`row` with the verdict the moderators applied for its message (or none yet)."""
    shown = None
    if verdict is not None:
        shown = {k: getattr(verdict, k) for k in ("verdict", "moderator_id", "reason", "at_ms")}
    return {**row, "verdict": shown, "agrees": agrees(row, verdict)}


def held_message(review: Mapping[str, Any]) -> dict[str, Any]:
    """What a row shows of its message, from its review record (records.parse_review: the text
    and its context already bounded there)."""
    return {"user_id": review["user_id"], "text": review["text"], "context": review["context"]}


class Disagreements:
    """The newest `kept` disagreements by `at_ms`, one row per message (a record read again, as
    after a moderator's restart, replaces its row), joined with reviews and first verdicts.
    `kept` 0: the view is off, and nothing is kept."""

    def __init__(self, kept: int, verdicts: Mapping[str, Verdict]) -> None:
        self.kept = kept
        self.verdicts = verdicts  # the board's first verdict of each message
        self.rows: dict[str, dict[str, Any]] = {}
        self.order: list[tuple[int, str]] = []  # (at_ms, message_id), oldest first
        self.waiting: OrderedDict[str, dict[str, Any]] = OrderedDict()  # reviews without a row

    def add(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """Keep `row` (records.parse_disagreement's) if it is among the newest: the row as shown,
        else None."""
        message_id, at_ms = row["message_id"], row["at_ms"]
        old = self.rows.get(message_id)
        if old is not None:
            self.order.remove((old["at_ms"], message_id))
        elif len(self.rows) >= self.kept and (not self.order or at_ms < self.order[0][0]):
            return None  # older than every row kept (or the view is off)
        message = self.waiting.pop(message_id, None) or (old or {}).get("message")
        shown = joined({**row, "message": message}, self.verdicts.get(message_id))
        self.rows[message_id] = shown
        bisect.insort(self.order, (at_ms, message_id))
        while len(self.rows) > self.kept:
            _, oldest = self.order.pop(0)
            del self.rows[oldest]
        return shown if message_id in self.rows else None

    def add_review(self, review: Mapping[str, Any]) -> dict[str, Any] | None:
        """A review record read (records.parse_review's): its row gains the text, the user and
        the context, or they wait for its record among the last REVIEWS_KEPT."""
        message_id = review["message_id"]
        row = self.rows.get(message_id)
        if row is not None:
            row = self.rows[message_id] = {**row, "message": held_message(review)}
        elif self.kept > 0:
            self.waiting[message_id] = held_message(review)
            self.waiting.move_to_end(message_id)
            while len(self.waiting) > REVIEWS_KEPT:
                self.waiting.popitem(last=False)
        return row

    def add_verdict(self, verdict: Verdict) -> dict[str, Any] | None:
        """The first verdict on a message read: its row, if it has one, says it."""
        row = self.rows.get(verdict.message_id)
        if row is not None:
            row = self.rows[verdict.message_id] = joined(row, verdict)
        return row

    def sides(self) -> Counter[str]:
        """The rows with a verdict, by the model it sides with (each of SIDES, 0 when none)."""
        counts = Counter(dict.fromkeys(SIDES, 0))
        counts.update(row["agrees"] for row in self.rows.values() if row["agrees"] is not None)
        return counts

    def newest_first(self) -> list[dict[str, Any]]:
        return [self.rows[message_id] for _, message_id in reversed(self.order)]
