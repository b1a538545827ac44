"""Hold for review, with context: every `review` decision also becomes a review record for the
review topic (moderator/schemas/review.schema.json), the held message with its channel's last
messages before it, and the message is held (moderator/review/held.py) until a verdict or its
timeout. The decision itself then says when that timeout falls and what it will decide (its `review`
field), the same deadline and fallback the held message keeps.

Every decided message is pushed onto its channel's context ring (the Redis list
`moderator:ctx:<channel_id>`, its last few messages, gone CONTEXT_TTL_S after the channel's
last one). A fetched batch costs one Redis round trip: the rings of the channels with a held
message are read as they were before the batch while the batch is pushed and its held messages
stored. A held message's context is that ring, then the batch's earlier messages of its
channel, taken newest first up to `review_context` messages and `review_context_bytes` bytes of
text, given oldest first. Redis down or slow: the review record goes out all the same, its
context empty and `context_missing` true (moderator/review/held.py keeps the held message here).

Batches are decided concurrently, and a short batch may finish scoring before a longer one
fetched earlier: the review steps (`after_decisions`) still run one at a time in fetch order
(`turn`, taken as a batch starts), or a held message's context would miss a message of its
channel still being scored in an earlier batch. It costs little: a batch is published only after
every earlier one anyway (moderator/service.py), and a review step is one Redis round trip.

The pipeline calls `after_decisions` once per batch (moderator/pipeline.py); the publisher
sends a decision's review record right after it, and the input offset is committed only once
both are acknowledged (moderator/kafka/publisher.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from moderator.config import Settings
from moderator.metric_wings import ReviewMetrics
from moderator.policy.review_rules import REVIEW, review_rules
from moderator.policy.rules import Policy
from moderator.records import ChatMessage, Outcome
from moderator.review.held import Held, HeldStore, Redis
from moderator.turns import Turn, Turns

CONTEXT_TTL_S = 3600  # a channel silent for an hour has no context left to show
# What a held message keeps of its decision as it was (strikes and escalated: 0 and false
# where escalation is off).
COPIED = ("action", "reason", "severity", "scores", "model", "policy", "span", "language")
RING_SLACK = 2  # a ring keeps this many times review_context: a redelivery repeats entries


def hold_label(decision: dict[str, Any]) -> str:
    """What held a message, for the agreement counters: `escalated`, else the reason's head (a
    model label, `truncated`, `unsupported_language`, `deny`), else `none`."""
    if decision.get("escalated"):
        return "escalated"
    reason = decision.get("reason")
    return reason.split(":", 1)[0] if reason else "none"


def ring_entry(chat: ChatMessage, max_bytes: int) -> bytes:
    """A message as its channel's ring keeps it: its text cut to what a context may carry."""
    text = chat.text.encode()[:max_bytes].decode("utf-8", "ignore")
    return orjson.dumps(
        {
            "message_id": chat.message_id,
            "user_id": chat.user_id,
            "text": text,
            "sent_at_ms": chat.sent_at_ms,
        }
    )


def select_context(
    entries: Iterable[bytes], message_id: str, *, limit: int, max_bytes: int
) -> list[dict[str, Any]]:
    """The last messages before `message_id` among ring `entries` (oldest first), newest first
    while within `limit` messages and `max_bytes` bytes of text, given oldest first. A message
    repeated (a redelivered batch) counts once; the held message itself is left out."""
    seen = {message_id}
    chosen: list[dict[str, Any]] = []
    used = 0
    for raw in reversed(list(entries)):
        if len(chosen) >= limit:
            break
        entry = orjson.loads(raw)
        if entry["message_id"] in seen:
            continue
        seen.add(entry["message_id"])
        used += len(entry["text"].encode())
        if used > max_bytes:
            break
        chosen.append(entry)
    return chosen[::-1]


def held_message(chat: ChatMessage, policy: Policy, outcome: Outcome, now_ms: int) -> Held:
    """What is kept of a held message: enough for its review record, its final decision, the
    agreement counters and an override (its text); read from the decision's record as the
    pipeline made it (`outcome.decision`), not decoded again from its JSON."""
    decision = _record(outcome)
    rules = review_rules(policy.spec, policy.actions, policy.ident)  # validated when loaded
    key = outcome.key if outcome.key is not None else chat.channel_id.encode()
    return {
        **chat._asdict(),
        **{name: decision.get(name) for name in COPIED},
        "truncated": decision.get("truncated", False),
        "strikes": decision.get("strikes", 0),
        "escalated": decision.get("escalated", False),
        "label": hold_label(decision),
        "key": key.decode("latin-1"),  # any bytes, back as they were (`final_key`)
        "held_at_ms": now_ms,
        "expires_at_ms": now_ms + round(rules.timeout_s * 1000),
        "review_fallback": rules.fallback,
    }


REVIEW_FIELDS = (
    "message_id",
    "channel_id",
    "user_id",
    "text",
    "sent_at_ms",
    "action",
    "reason",
    "severity",
    "scores",
    "model",
    "policy",
    "span",
    "language",
    "strikes",
    "held_at_ms",
    "expires_at_ms",
    "review_fallback",
)


def with_review(decision: Mapping[str, Any], held: Held) -> bytes:
    """The `review` decision (its record) with its `review` field, as JSON: when its final
    decision is due and the fallback it then gets, the held message's own, so a chat service
    plans with what the timeout will actually do (moderator/schemas/decision.schema.json)."""
    due = {"due_at_ms": held["expires_at_ms"], "fallback": held["review_fallback"]}
    return orjson.dumps({**decision, "review": due})


def _record(outcome: Outcome) -> dict[str, Any]:
    assert outcome.decision is not None, "a decision's outcome carries its record"
    return outcome.decision


def encode_review(held: Held, context: list[dict[str, Any]], *, context_missing: bool) -> bytes:
    """The review record (moderator/schemas/review.schema.json)."""
    record = {name: held[name] for name in REVIEW_FIELDS}
    return orjson.dumps({**record, "context": context, "context_missing": context_missing})


class Review:
    """The pipeline's hook after deciding: context rings, held messages, review records."""

    def __init__(
        self,
        store: HeldStore,
        metrics: ReviewMetrics,
        *,
        context: int,
        context_bytes: int,
        labels: Iterable[str],
    ) -> None:
        self.store = store
        self.context = context
        self.context_bytes = context_bytes
        self._turns = Turns()
        metrics.precreate_verdicts(labels)

    def turn(self) -> Turn:
        """The next batch's turn; take it in fetch order (a batch's first step: asyncio starts
        tasks in the order they were made) and `finish` it however the batch ends."""
        return self._turns.take()

    async def after_decisions(
        self, decided: Sequence[tuple[ChatMessage, Policy, Outcome]], turn: Turn | None = None
    ) -> list[Outcome]:
        """`decided`'s outcomes, each `review` decision's with its review record; after the
        review steps of the batches fetched before it (`turn`), which it then finishes."""
        if turn is not None:
            await turn.wait()
        try:
            return await self._after_decisions(decided)
        finally:
            if turn is not None:
                turn.finish()

    async def _after_decisions(
        self, decided: Sequence[tuple[ChatMessage, Policy, Outcome]]
    ) -> list[Outcome]:
        outcomes = [outcome for _, _, outcome in decided]
        now_ms = int(time.time() * 1000)
        pushes: dict[str, list[bytes]] = {}
        holds: list[tuple[int, Held, list[bytes]]] = []  # index, held, the batch's ring before
        for i, (chat, policy, outcome) in enumerate(decided):
            ring = pushes.setdefault(chat.channel_id, [])
            if outcome.action == REVIEW:
                holds.append((i, held_message(chat, policy, outcome, now_ms), list(ring)))
            if self.context:
                ring.append(ring_entry(chat, self.context_bytes))
        pushes = {channel: ring for channel, ring in pushes.items() if ring}
        if not holds and not pushes:
            return outcomes
        reads = sorted({held["channel_id"] for _, held, _ in holds}) if self.context else []
        rings = await self.store.hold(
            [held for _, held, _ in holds],
            pushes,
            reads,
            ring_size=self.context * RING_SLACK,
            ring_ttl_s=CONTEXT_TTL_S,
        )
        for i, held, earlier in holds:
            context = []
            if rings is not None and self.context:
                entries = [*rings.get(held["channel_id"], []), *earlier]
                context = select_context(
                    entries, held["message_id"], limit=self.context, max_bytes=self.context_bytes
                )
            value = encode_review(held, context, context_missing=rings is None)
            outcomes[i] = outcomes[i]._replace(
                value=with_review(_record(outcomes[i]), held),
                review=value,
                review_key=held["message_id"].encode(),
            )
        return outcomes


def review_for(s: Settings, metrics: ReviewMetrics, redis: Redis, labels: Iterable[str]) -> Review:
    """The moderator's hook, its held messages in `redis` (the score cache's) under its group."""
    # A pipeline of writes, not one read: four times what a cache lookup waits.
    wait_s = s.redis_timeout_ms * 4 / 1000
    store = HeldStore(redis, metrics, group=s.group_id, timeout_s=wait_s)
    return Review(
        store,
        metrics,
        context=s.review_context,
        context_bytes=s.review_context_bytes,
        labels=labels,
    )
