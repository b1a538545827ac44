"""What every open console shows, rebuilt from the topics: the held messages still waiting, who
claimed which, the verdicts (the audit trail), and the overview. Pure state: the feed and the
claims store feed it, and each change goes to the listeners (the pages' event streams) as one
event, so every open page sees it at once.

A held message leaves the queue when its first verdict is read from the verdict topic, when a final
decision for it is read from the decision topic (a verdict applied, or the review timed out), or
when its `expires_at_ms` passes (the moderator then applies the policy's fallback). A verdict this
console holds back for its undo grace period (console/app.py) takes the item off this console's
pages at once (`hold_back`); an undo puts it back (`put_back`). Any verdict after the first is
shown as late (the moderator counts it and changes only the override). The shadow model's
disagreements are kept here too (console/disagreements.py), joined with the reviews and verdicts.
"""

from __future__ import annotations

from bisect import insort
from collections import Counter
from collections.abc import Callable
from typing import Any

from console.bounded import Field, Joins
from console.disagreements import Disagreements
from console.recent import RecentByUser
from console.records import VERDICTS, Decision, Verdict, now_ms

Listener = Callable[[str, dict[str, Any]], None]
ABOUT = ("channel_id", "user_id", "text")  # what a history entry keeps of its review record
MINUTE_MS = 60_000
TOP_CHANNELS = 5
# Held messages whose label, first verdict and final decision are kept for the joins between
# topics (console/bounded.py), which come within the message's review timeout: more than the
# 12,000 held in the default timeout (600 s) at 1,000 decisions a second with 2% held. One
# entry a message: about 220 bytes with its final (tracemalloc, 20,000 messages; 375 when they
# were three maps), and its verdict's fields beside: some 8 MB at most.
KEPT_MESSAGES = 20_000


def history_key(verdict: Verdict) -> str:
    """A history entry's key, the same in every console: its time first, so keys sort as the
    entries were decided (what pages the history, here and in Redis)."""
    return f"{verdict.at_ms:013d}:{verdict.message_id}:{verdict.moderator_id}"


class Board:
    def __init__(
        self,
        *,
        undo_grace_s: float,
        overview_minutes: int,
        history_size: int = 200,
        disagreements_kept: int = 0,
        kept_messages: int = KEPT_MESSAGES,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.undo_grace_ms = int(undo_grace_s * 1000)
        self.overview_minutes = overview_minutes
        self.clock = clock
        self.items: dict[str, dict[str, Any]] = {}  # held and undecided, by message_id
        # the newest `kept_messages` held messages' labels, first verdicts and final decisions,
        # one entry each (console/bounded.py): a verdict read after its message was forgotten
        # shows as decided, not late
        self.joins = Joins(kept_messages)
        self.first: Field[Verdict] = self.joins.field("first")  # the verdict that decided it
        self.labels: Field[str] = self.joins.field("label")  # the label that held each one
        # messages with a final decision on the decision topic: its action and reason
        self.finals: Field[tuple[str, str | None]] = self.joins.field("final")
        self.held_back: dict[str, dict[str, Any]] = {}  # items whose verdict waits out its grace
        self.claims: dict[str, dict[str, Any]] = {}  # message_id -> {moderator_id, until_ms}
        # the newest `history_size` entries by their key (console/history.py has the older ones),
        # oldest first: records read from two partitions arrive in no order
        self.history_size = history_size
        self.history: list[dict[str, Any]] = []
        self.agreement: Counter[tuple[str, str]] = Counter()  # (label, verdict) of decided ones
        self.minutes: dict[int, Counter[str]] = {}  # minute start -> action (or "final") counts
        self.flagged: dict[int, Counter[str]] = {}  # minute start -> channel -> non-allow count
        self.status: dict[str, Any] = {"broker": "connecting", "redis": "up", "since_ms": clock()}
        self.listeners: list[Listener] = []
        # the shadow's disagreements, joined with the reviews and first verdicts above (0: off)
        self.disagreements = Disagreements(disagreements_kept, self.first)
        self.recent = RecentByUser()  # each user's newest held messages, for the user panel

    def _emit(self, event: str, data: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            listener(event, data)

    def tell(self, event: str, data: dict[str, Any]) -> None:
        """An event for every page that changes nothing here (how a held-back verdict went)."""
        self._emit(event, data)

    # -- the topics ----------------------------------------------------------------------------

    def add_review(self, item: dict[str, Any]) -> None:
        message_id = item["message_id"]
        self.labels[message_id] = item["label"]
        self.recent.add_review(item)
        if message_id in self.first:  # its verdict or final decision was read first
            self.recent.add_verdict(self.first[message_id])
        if message_id in self.finals:
            self.recent.add_final(message_id, *self.finals[message_id])
        self._changed(self.disagreements.add_review(item))
        if message_id in self.first:  # its verdict was read first (another topic, another pace)
            self._count(message_id, self.first[message_id])
            self._reviewed(item)
            return
        if message_id in self.finals or message_id in self.items:
            return
        expires = item.get("expires_at_ms")
        if expires is not None and expires <= self.clock():
            return
        self.items[message_id] = item
        self._emit("held", item)

    def add_verdict(self, verdict: Verdict) -> None:
        message_id = verdict.message_id
        held = self.items.get(message_id) or self.held_back.get(message_id)  # before it leaves
        first = self.first.get(message_id)
        if first is None:
            kind = "decided"
            self.first[message_id] = verdict
            self.recent.add_verdict(verdict)
            self.held_back.pop(message_id, None)
            self._count(message_id, verdict)
            self._gone(message_id, verdict=verdict._asdict())
            self._changed(self.disagreements.add_verdict(verdict))
        else:
            kind = "late"
        entry = {
            **verdict._asdict(),
            "kind": kind,
            "label": self.labels.get(message_id),
            "decided_by": self.first[message_id].moderator_id,
            "key": history_key(verdict),
            **{field: held[field] if held else None for field in ABOUT},
        }
        insort(self.history, entry, key=lambda e: str(e["key"]))
        if len(self.history) > self.history_size:
            del self.history[0]
        self._emit("verdict", entry)

    def _reviewed(self, item: dict[str, Any]) -> None:
        """A review record read after its verdict: the entries on it get its text and user, and
        the history store (console/history.py) hears of it (`reviewed`), for the older pages."""
        about = {field: item[field] for field in ABOUT}
        for entry in self.history:
            if entry["message_id"] == item["message_id"]:
                entry.update(about)
        self._emit("reviewed", {"message_id": item["message_id"], **about})

    def hold_back(self, verdict: Verdict) -> None:
        """`verdict` waits out its undo grace here: its item leaves this console's pages now."""
        item = self.items.get(verdict.message_id)
        if item is not None:
            self.held_back[verdict.message_id] = item
            self._gone(verdict.message_id, pending=verdict._asdict())

    def put_back(self, message_id: str) -> None:
        """The held-back verdict was undone (or could not go out): the item waits again, unless
        it was decided or expired meanwhile."""
        item = self.held_back.pop(message_id, None)
        if item is not None:
            self.add_review(item)

    def add_decision(self, decision: Decision) -> None:
        minute = decision.at_ms - decision.at_ms % MINUTE_MS
        if minute > self.clock() - self.overview_minutes * MINUTE_MS:
            self.minutes.setdefault(minute, Counter())[decision.action] += 1
            if decision.final:
                self.minutes[minute]["final"] += 1
            if decision.action != "allow":
                self.flagged.setdefault(minute, Counter())[decision.channel_id] += 1
        if decision.final:
            self.finals[decision.message_id] = (decision.action, decision.reason)
            self.recent.add_final(decision.message_id, decision.action, decision.reason)
            self.held_back.pop(decision.message_id, None)
            if decision.message_id in self.items:
                self._gone(decision.message_id, final={"action": decision.action,
                                                       "reason": decision.reason})  # fmt: skip

    def add_disagreement(self, row: dict[str, Any]) -> None:
        """A shadow record read (records.parse_disagreement's): shown if among the newest kept."""
        self._changed(self.disagreements.add(row))

    def _changed(self, row: dict[str, Any] | None) -> None:
        if row is not None:
            self._emit("disagreement", row)

    def _count(self, message_id: str, verdict: Verdict) -> None:
        label = self.labels.get(message_id)
        if label is not None:  # else counted when its review record arrives
            self.agreement[(label, verdict.verdict)] += 1

    def _gone(self, message_id: str, **why: Any) -> None:
        self.items.pop(message_id, None)
        self.claims.pop(message_id, None)
        self._emit("gone", {"message_id": message_id, **why})

    # -- time, claims, health ------------------------------------------------------------------

    def expire(self) -> None:
        """Drop held messages past their review deadline, and overview minutes past the window."""
        now = self.clock()
        for message_id, item in list(self.items.items()):
            expires = item.get("expires_at_ms")
            if expires is not None and expires <= now:
                self._gone(message_id, expired=True)
        oldest = now - self.overview_minutes * MINUTE_MS
        for table in (self.minutes, self.flagged):
            for minute in [m for m in table if m <= oldest]:
                del table[minute]

    def set_claim(self, message_id: str, claim: dict[str, Any] | None) -> None:
        if message_id not in self.items or self.claims.get(message_id) == claim:
            return
        if claim is None:
            self.claims.pop(message_id, None)
        else:
            self.claims[message_id] = claim
        self._emit("claim", {"message_id": message_id, "claim": claim})

    def set_claims(self, claims: dict[str, dict[str, Any]]) -> None:
        """Every waiting item's claim as the shared store has it (None: unclaimed)."""
        for message_id in list(self.items):
            self.set_claim(message_id, claims.get(message_id))

    def set_status(self, **parts: str) -> None:
        changed = {k: v for k, v in parts.items() if self.status.get(k) != v}
        if changed:
            self.status.update(changed, since_ms=self.clock())
            self._emit("status", dict(self.status))

    # -- what a page is sent -------------------------------------------------------------------

    def publish_overview(self) -> None:
        """The overview to every page (its figures change with time as well as with records)."""
        self._emit("overview", self.overview())

    def snapshot(self) -> dict[str, Any]:
        return {
            "items": list(self.items.values()),
            "claims": dict(self.claims),
            "history": list(self.history),
            "status": dict(self.status),
            "overview": self.overview(),
            "undo_grace_ms": self.undo_grace_ms,
            "disagreements": self.disagreements.newest_first()
            if self.disagreements.kept > 0
            else None,  # the view is off
        }

    def overview(self) -> dict[str, Any]:
        now = self.clock()
        held = [item["held_at_ms"] for item in self.items.values()]
        labels = sorted({label for label, _ in self.agreement})
        agreement: list[dict[str, Any]] = []
        decided = allowed = 0
        for label in labels:
            row = {v: self.agreement[(label, v)] for v in VERDICTS}
            agreement.append({"label": label, **row, "decided": sum(row.values())})
            decided += sum(row.values())
            allowed += row["allow"]
        channels: Counter[str] = Counter()
        for counts in self.flagged.values():
            channels.update(counts)
        return {
            "now_ms": now,
            "waiting": len(self.items),
            "oldest_held_at_ms": min(held) if held else None,
            "per_minute": [
                {"minute_ms": minute, **self.minutes[minute]} for minute in sorted(self.minutes)
            ],
            "agreement": agreement,
            "decided": decided,
            "allowed_share": allowed / decided if decided else None,
            "top_channels": [
                {"channel_id": channel, "flagged": n}
                for channel, n in channels.most_common(TOP_CHANNELS)
            ],
        }
