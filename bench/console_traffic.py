"""The records a console reads at a platform's decision rate, made with the moderator's own code
(bench/console_feed.py's traffic): every chat message of the load generator's traffic becomes a
decision record (moderator.records.decision_record); a share of them is held for review, so it
also gets a review record (moderator.review.hold.encode_review) and, later, either a moderator's
verdict and the final decision that applies it, or the review timeout's final decision
(moderator.review.finals.encode_final), as the moderator would write them.

Pure: no Kafka, no clock of its own; the runner asks for the records of each new message and for
those that have fallen due, and produces them.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from loadgen.traffic import TrafficGenerator
from moderator.policy.review_rules import DEFAULT as REVIEW_DEFAULTS
from moderator.records import ChatMessage, Timing, Verdict, decision_record, parse_message
from moderator.review.finals import TIMEOUT_REASON, VERDICT_REASON, encode_final
from moderator.review.hold import encode_review, with_review

LABELS = ("toxic", "insult", "threat", "obscene")  # the shipped model's labels a hold names
FLAGGED_SHARE = 0.05  # of the messages not held: nudged or blocked outright
VERDICT_SHARE = 0.5  # of the held: a moderator's verdict; the others time out
VERDICT_DELAY_S = (5.0, 120.0)  # how long a held message waits for its verdict
MODERATORS = 8
CONTEXT = 5  # channel lines before a held message, in its review record
MODEL = "minilm-l6"
POLICY = "default"


class Out(NamedTuple):
    """One record to produce: `kind` is `decision`, `review` or `verdict` (its topic's role)."""

    kind: str
    key: bytes
    value: bytes


class Traffic:
    """Decisions of the load generator's traffic and their reviews, verdicts and finals."""

    def __init__(self, run_id: str, held_share: float, seed: int = 44) -> None:
        self.held_share = held_share
        self.timeout_ms = round(REVIEW_DEFAULTS.timeout_s * 1000)
        self._gen = TrafficGenerator(run_id=run_id, seed=seed, channels=64)
        self._rng = random.Random(seed)
        self._due: list[tuple[int, int, Out | _Final]] = []  # (due_ms, order, record)
        self._order = itertools.count()
        self._lines: dict[str, list[dict[str, Any]]] = {}  # channel -> its last CONTEXT lines
        self.made = 0
        self.held = 0  # of them held for review

    def message(self, now_ms: int) -> list[Out]:
        """The records of the next chat message, decided at `now_ms`."""
        out = self._gen.next_record(now_ms)
        chat = parse_message(out.value, timestamp_ms=now_ms, max_bytes=1 << 20)
        self.made += 1
        context = self._context(chat)
        if self._rng.random() < self.held_share:
            return self._held(chat, now_ms, context)
        action, reason = "allow", None
        if self._rng.random() < FLAGGED_SHARE:
            action, reason = self._rng.choice(("nudge", "block")), self._rng.choice(LABELS)
        record = _decision(chat, action, reason, now_ms)
        return [Out("decision", out.key, orjson.dumps(record))]

    def due(self, now_ms: int) -> Iterator[Out]:
        """The verdicts and final decisions whose time has come."""
        while self._due and self._due[0][0] <= now_ms:
            record = heapq.heappop(self._due)[2]
            yield record.out() if isinstance(record, _Final) else record

    @property
    def waiting(self) -> int:
        return len(self._due)

    def _context(self, chat: ChatMessage) -> list[dict[str, Any]]:
        lines = self._lines.setdefault(chat.channel_id, [])
        before = list(lines)
        lines.append({"message_id": chat.message_id, "user_id": chat.user_id,
                      "text": chat.text, "sent_at_ms": chat.sent_at_ms})  # fmt: skip
        del lines[:-CONTEXT]
        return before

    def _held(self, chat: ChatMessage, now_ms: int, context: list[dict[str, Any]]) -> list[Out]:
        self.held += 1
        label = self._rng.choice(LABELS)
        record = _decision(chat, "review", label, now_ms)
        held = {
            **chat._asdict(), **{k: record[k] for k in ("action", "reason", "severity", "scores",
                                                         "model", "policy", "span", "truncated",
                                                         "strikes", "escalated")},
            "language": None, "label": label, "key": chat.channel_id, "held_at_ms": now_ms,
            "expires_at_ms": now_ms + self.timeout_ms,
            "review_fallback": REVIEW_DEFAULTS.fallback,
        }  # fmt: skip
        key = chat.channel_id.encode()
        if self._rng.random() < VERDICT_SHARE:
            at = now_ms + round(self._rng.uniform(*VERDICT_DELAY_S) * 1000)
            choice = self._rng.choice(("allow", "nudge", "block"))
            who = f"mod-{self._rng.randrange(MODERATORS)}"
            verdict = Verdict(chat.message_id, choice, who, None, "channel", at)
            self._later(at, Out("verdict", chat.message_id.encode(),
                                orjson.dumps(verdict._asdict())))  # fmt: skip
            final = _Final(held, choice, f"{VERDICT_REASON}:{who}")
            self._later(at + 50, final)  # applied right after it is read
        else:
            final = _Final(held, str(held["review_fallback"]), TIMEOUT_REASON)
            self._later(now_ms + self.timeout_ms, final)
        return [
            Out("decision", key, with_review(record, held)),
            Out("review", key, encode_review(held, context, context_missing=False)),
        ]

    def _later(self, due_ms: int, out: Out | _Final) -> None:
        heapq.heappush(self._due, (due_ms, next(self._order), out))


class _Final(NamedTuple):
    """A final decision to come: encoded when it falls due, as the moderator would (its
    `decided_at_ms` is then), not when its message was held."""

    held: dict[str, Any]
    action: str
    reason: str

    def out(self) -> Out:
        return Out("decision", str(self.held["key"]).encode(),
                   encode_final(self.held, self.action, self.reason))  # fmt: skip


def _decision(chat: ChatMessage, action: str, reason: str | None, now_ms: int) -> dict[str, Any]:
    scores = {label: 0.01 for label in LABELS}
    if reason in scores:
        scores[reason] = 0.83
    return decision_record(
        chat, action=action, reason=reason, scores=scores, model=MODEL, policy=POLICY,
        cached=False, degraded=False, timing=Timing(2.0, 9.0, 12.0), decided_at_ms=now_ms,
        over_budget=False, span=(0, len(chat.text)),
    )  # fmt: skip
