"""Escalation by user: the pipeline's two per-batch calls for the policies' `[users]` rules.

`before` (after parsing, before the screen) decides, without the model, the messages of a
muted user (`block`, reason `muted`), of a user over the flood limit (`rate_limited`), of a
text the user posted in too many channels (`spam`) and with a link the channel's lists refuse
(`link:<domain>`). `after` (once every message of the batch is decided, before encoding) counts
each flagged message as a strike of its user, once per message id, and moves the action of a
flagged message one step up the policy's ladder (`nudge` → `review` → `block`) when the user
already has the policy's `strikes` within its window, muting the user if the policy says so.
The policy of the channel where a message is posted decides, for that message.

The state is shared through Redis (moderator/users/state.py: one script call per batch and step,
and none when no message's policy has a rule on). A Redis call that fails or outlasts the
timeout falls back to this process's own state, with one warning and
`moderator_user_state_degraded` at 1; Redis is tried again after `RETRY_S`, and used again
from the first call that succeeds. Strikes counted meanwhile stay in this process.

Batches are decided concurrently, and each step runs one batch at a time in fetch order (a
`UserTurns`, taken as the batch starts; moderator/turns.py), because the counts depend on the
order: a message counts only what is already recorded up to its own `sent_at_ms`, so a later
message's strike counted before an earlier one's is missed by both, and the escalation past the
limit may not happen at all (strikes at t1 < t2 < t3 with `strikes = 2`: in order, t3 is
escalated; counted t1, t3, t2, none is). The same holds for the flood count. Across instances
there is no such order to keep, and a mute set by a batch's `after` holds from the batches whose
`before` comes after it, not in one already being scored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, TypeVar

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from moderator.decide.cache import WARN_EVERY_S
from moderator.decide.text import Text
from moderator.metric_wings import UserMetrics
from moderator.policy.rules import Policy, Ruling
from moderator.policy.user_rules import escalated
from moderator.records import ChatMessage
from moderator.redaction import redact_url
from moderator.tasks import reraise_cancel
from moderator.turns import Turn, Turns
from moderator.users.state import MUTED, RATE_LIMITED, SPAM, MemoryState, RedisState, Seen, Strike

log = logging.getLogger(__name__)

MUTED_REASON = "muted"
RATE_LIMITED_REASON = "rate_limited"
SPAM_REASON = "spam"
LINK_REASON = "link"  # reason "link:<domain>"
RETRY_S = 1.0  # while degraded, Redis is tried again this often
S = TypeVar("S")
R = TypeVar("R")


class Escalated(NamedTuple):
    """What `after` makes of one decision."""

    action: str
    strikes: int  # the user's strikes in the window, this message's included
    escalated: bool


class UserTurns(NamedTuple):
    """A batch's turns in the two steps."""

    before: Turn
    after: Turn

    def finish(self) -> None:
        self.before.finish()
        self.after.finish()


class Escalation:
    """The user rules' state and the two calls; Redis when `redis_url`, else in-process."""

    def __init__(self, metrics: UserMetrics, redis_url: str = "", *, timeout_ms: float = 25.0):
        self.metrics = metrics
        self.redis_url = redis_url
        self.timeout_s = timeout_ms / 1000
        self.memory = MemoryState()
        self._client: aioredis.Redis | None = None
        self._redis: RedisState | None = None
        self._degraded_at: float | None = None  # time.monotonic() of the last failure
        self._warned_at = -WARN_EVERY_S
        self._turns = (Turns(), Turns())  # before, after

    async def start(self) -> None:
        if not self.redis_url or self._client is not None:
            return
        self._client = aioredis.Redis.from_url(
            self.redis_url,
            socket_timeout=self.timeout_s * 4,
            socket_connect_timeout=max(self.timeout_s * 4, 0.25),
            retry=Retry(NoBackoff(), 0),  # one failure falls back; no stalling retries
            health_check_interval=0,
        )
        self._redis = RedisState(self._client)

    async def stop(self) -> None:
        client, self._client, self._redis = self._client, None, None
        if client is not None:
            await client.aclose()

    @property
    def degraded(self) -> bool:
        return self._degraded_at is not None

    def turn(self) -> UserTurns:
        """The next batch's turns; take them in fetch order (a batch's first step) and `finish`
        them however the batch ends."""
        return UserTurns(self._turns[0].take(), self._turns[1].take())

    async def before(
        self,
        items: Sequence[tuple[ChatMessage, Policy]],
        turn: Turn | None = None,
        texts: Sequence[Text] | None = None,
    ) -> list[Ruling | None]:
        """Per message, the decision the user rules make without the model, or None; after the
        before steps of the batches fetched earlier (`turn`), which it then finishes. `texts`:
        each message's text.Text when the caller made them (else made here)."""
        counted = _counted_before(items, texts)
        batch = [s for _, s in counted]
        remote = self._redis.before if self._redis is not None else None
        codes = await _in_turn(
            turn, lambda: self._call("before", self.memory.before, remote, batch)
        )
        return self._before(items, counted, codes)

    def before_local(self, items: Sequence[tuple[ChatMessage, Policy]]) -> list[Ruling | None]:
        """`before` on this process's state alone (`moderator score`)."""
        counted = _counted_before(items)
        return self._before(items, counted, self.memory.before([s for _, s in counted]))

    async def after(
        self, items: Sequence[tuple[ChatMessage, Policy, Ruling]], turn: Turn | None = None
    ) -> list[Escalated]:
        """Per decided message, its action (one step up when escalated) and the user's strikes;
        after the after steps of the batches fetched earlier (`turn`), which it then finishes."""
        counted = _counted_after(items)
        batch = [s for _, s in counted]
        remote = self._redis.after if self._redis is not None else None
        results = await _in_turn(
            turn, lambda: self._call("after", self.memory.after, remote, batch)
        )
        return self._after(items, counted, results)

    def after_local(self, items: Sequence[tuple[ChatMessage, Policy, Ruling]]) -> list[Escalated]:
        """`after` on this process's state alone (`moderator score`)."""
        counted = _counted_after(items)
        return self._after(items, counted, self.memory.after([s for _, s in counted]))

    def _before(
        self,
        items: Sequence[tuple[ChatMessage, Policy]],
        counted: list[tuple[int, Seen]],
        codes: list[int],
    ) -> list[Ruling | None]:
        found = {i: code for (i, _), code in zip(counted, codes, strict=True)}
        out: list[Ruling | None] = []
        for i, (msg, policy) in enumerate(items):
            ruling = _ruling(policy, found.get(i, 0))
            if ruling is None and (domain := policy.users.link_domain(msg.text)) is not None:
                ruling = Ruling(policy.users.link_action, f"{LINK_REASON}:{domain}")
            if ruling is not None and ruling.reason is not None:
                self.metrics.rules[ruling.reason.split(":", 1)[0]].inc()
            out.append(ruling)
        return out

    def _after(
        self,
        items: Sequence[tuple[ChatMessage, Policy, Ruling]],
        counted: list[tuple[int, Strike]],
        results: list[tuple[int, bool]],
    ) -> list[Escalated]:
        found = {i: r for (i, _), r in zip(counted, results, strict=True)}
        out = []
        for i, (_, policy, ruling) in enumerate(items):
            strikes, up = found.get(i, (0, False))
            action = escalated(ruling.action, policy.actions) if up else ruling.action
            if up:
                self.metrics.escalated.inc()
            out.append(Escalated(action, strikes, up))
        return out

    async def _call(
        self,
        step: str,
        local: Callable[[Sequence[S]], list[R]],
        remote: Callable[[Sequence[S]], Awaitable[list[R]]] | None,
        batch: list[S],
    ) -> list[R]:
        """`remote(batch)` within the timeout, else (or while degraded) `local(batch)`."""
        if not batch:
            return []
        now = time.monotonic()
        if remote is not None and (self._degraded_at is None or now - self._degraded_at >= RETRY_S):
            self.metrics.round_trips[step].inc()
            try:
                out = await asyncio.wait_for(remote(batch), self.timeout_s)
            except (RedisError, OSError, TimeoutError) as exc:
                reraise_cancel(exc)
                self._failed(exc, now)
            else:
                if self._degraded_at is not None:
                    self._degraded_at = None
                    self.metrics.degraded.set(0)
                    log.info("user state: redis is back, shared again")
                return out
        self.metrics.local[step].inc(len(batch))
        return local(batch)

    def _failed(self, exc: BaseException, now: float) -> None:
        self.metrics.redis_errors.inc()
        if self._degraded_at is None:
            self.metrics.degraded.set(1)
        if self._degraded_at is None and now - self._warned_at > WARN_EVERY_S:
            self._warned_at = now  # a flapping Redis warns once a minute, not per flap
            log.warning(
                "user state: redis at %s failed (%s: %s); counting users in this process "
                "alone until it answers again",
                redact_url(self.redis_url),
                type(exc).__name__,
                exc,
            )
        self._degraded_at = now


async def _in_turn(turn: Turn | None, step: Callable[[], Awaitable[list[R]]]) -> list[R]:
    """`step()` once the batch fetched before has done this step (at once without `turn`)."""
    if turn is not None:
        await turn.wait()
    try:
        return await step()
    finally:
        if turn is not None:
            turn.finish()


def _counted_before(
    items: Sequence[tuple[ChatMessage, Policy]], texts: Sequence[Text] | None = None
) -> list[tuple[int, Seen]]:
    made = texts if texts is not None else [Text(msg.text) for msg, _ in items]
    seen = [(i, _seen(m, p, t)) for i, ((m, p), t) in enumerate(zip(items, made, strict=True))]
    return [(i, s) for i, s in seen if s is not None]


def _counted_after(
    items: Sequence[tuple[ChatMessage, Policy, Ruling]],
) -> list[tuple[int, Strike]]:
    return [
        (i, _strike(msg, policy, ruling))
        for i, (msg, policy, ruling) in enumerate(items)
        if policy.users.strikes
    ]


def _seen(msg: ChatMessage, policy: Policy, text: Text) -> Seen | None:
    """What `before` counts of `msg` (its text `text`), or None when its policy has no rule on."""
    rules = policy.users
    if not rules.on:
        return None
    repeat_k = rules.repeat_channels
    digest = ""
    if repeat_k:
        digest = text.repeat_key  # case, spacing, punctuation, look-alikes: not a new text
        repeat_k = repeat_k if digest else 0  # an empty text repeats nothing
    ids = (msg.user_id, msg.channel_id, msg.message_id, msg.sent_at_ms)
    flood = (rules.flood_messages, rules.flood_window_s * 1000)
    return Seen(*ids, *flood, repeat_k, rules.repeat_window_s * 1000, digest)


def _strike(msg: ChatMessage, policy: Policy, ruling: Ruling) -> Strike:
    rules = policy.users
    # A muted message is no strike: a mute would otherwise renew itself.
    flagged = ruling.action != policy.actions[0] and ruling.reason != MUTED_REASON
    return Strike(
        *(msg.user_id, msg.channel_id, msg.message_id, msg.sent_at_ms, flagged),
        *(rules.strikes, rules.strike_window_s * 1000, rules.mute_s * 1000),
        rules.mute_scope == "channel",
    )


def _ruling(policy: Policy, code: int) -> Ruling | None:
    rules = policy.users
    if code == MUTED:
        return Ruling("block" if "block" in policy.actions else policy.actions[-1], MUTED_REASON)
    if code == RATE_LIMITED:
        return Ruling(rules.flood_action, RATE_LIMITED_REASON)
    if code == SPAM:
        return Ruling(rules.repeat_action, SPAM_REASON)
    return None
