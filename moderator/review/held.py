"""Held messages: a `review` decision's message, kept until a human's verdict or its timeout.

In Redis (the score cache's client and circuit breaker): `moderator:held:<group>:<message_id>`,
a hash of the held message as JSON (`record`), its `state` (`held`, `timing_out`, `final`) and
what ended it (`by`: a verdict's `topic/partition/offset`, or `timeout`), and a due index (the
sorted set `moderator:held:<group>:due`, by when each times out), so any instance of the
consumer group `<group>` applies a verdict or times a message out; another deployment sharing
the Redis (staging beside production) never ends, nor publishes for, this one's messages.
What must happen once runs as a Lua script, atomic in Redis: the first verdict ends a held
message; the same verdict record redelivered after a crash finds it ended by itself and is
applied again (its final decision republished: a duplicate, never a dead letter); any other
later verdict is `late`. A timeout claims its message with a lease
(`timing_out`): an instance that dies before its final decision is acknowledged leaves it to
another, and `settle` ends it once acknowledged. The scripts build keys besides their KEYS:
one Redis, not a cluster.

Redis down, slow or disabled: held messages are kept in this process, in the same states, with
one warning and a metric, and moved to Redis as soon as it answers again, so a verdict another
instance consumes finds them; a verdict for a message held nowhere here waits for Redis rather
than be dead-lettered for an outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson
from redis.exceptions import RedisError

from moderator.metric_wings import ReviewMetrics

log = logging.getLogger(__name__)

PREFIX = "moderator:held:"  # then the consumer group, then a message id (or `due`)
CONTEXT_PREFIX = "moderator:ctx:"
HELD_MARGIN_S = 86_400  # past its timeout: moderators all down for less than this lose no timeout
FINAL_KEEP_S = 86_400  # an ended message is kept this long: a late verdict is told from unknown
LEASE_MS = 30_000  # a timeout claimed by an instance that died is claimed again after this
SLOW_S = 1.0  # a verdict or a sweep waits this long for Redis (off the messages' path)
REDIS_ERRORS = (RedisError, OSError, TimeoutError)

Held = dict[str, Any]  # the held message as the review module writes it (message_id, text, ...)

# KEYS: the message's key, the due index; ARGV: message id, verdict id, seconds to keep it.
_APPLY = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'not_held', ''} end
local record = redis.call('HGET', KEYS[1], 'record')
if state == 'held' then
  redis.call('HSET', KEYS[1], 'state', 'final', 'by', ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  return {'applied', record}
end
local by = redis.call('HGET', KEYS[1], 'by')
if by == ARGV[2] then return {'again', record} end
if by == 'timeout' then return {'timed_out', record} end
return {'late', record}
"""
# KEYS: the due index; ARGV: now (ms), most to claim, lease (ms), key prefix. Returns the number
# of messages in the index, the next held one's due and held times (ms; 0 for none: claimed
# leases skipped), then the claimed ones.
_CLAIM = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {0, 0, 0}
for _, id in ipairs(ids) do
  local key = ARGV[4] .. id
  local state = redis.call('HGET', key, 'state')
  if state == 'held' or state == 'timing_out' then
    redis.call('HSET', key, 'state', 'timing_out', 'by', 'timeout')
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), id)
    table.insert(out, redis.call('HGET', key, 'record'))
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
out[1] = redis.call('ZCARD', KEYS[1])
local ahead = redis.call('ZRANGE', KEYS[1], 0, 2 * tonumber(ARGV[2]), 'WITHSCORES')
for i = 1, #ahead, 2 do
  local key = ARGV[4] .. ahead[i]
  if redis.call('HGET', key, 'state') == 'held' then
    out[2] = tonumber(ahead[i + 1])
    out[3] = cjson.decode(redis.call('HGET', key, 'record'))['held_at_ms'] or 0
    break
  end
end
return out
"""


class Redis(Protocol):
    """What held messages use of the score cache (moderator/decide/cache.py `ScoreCache`): its Redis
    client while the circuit breaker is closed, and the breaker."""

    @property
    def redis_enabled(self) -> bool: ...
    @property
    def client(self) -> Any: ...
    def failed(self, exc: BaseException) -> None: ...


class RedisUnavailable(Exception):
    """Redis is down, and what was asked about is not held in this process."""


class Applied(NamedTuple):
    """What a verdict did: `applied` (it ended the message), `again` (it had, and came again),
    `late` (another verdict had), `timed_out`, or `not_held`; and the held message, if any."""

    status: str
    held: Held | None


@dataclass(slots=True)
class _Local:
    """A message held in this process while Redis is not answering."""

    held: Held
    state: str = "held"
    by: str = ""
    ended_ms: int = 0  # when it became final: forgotten FINAL_KEEP_S later, as Redis would

    def end(self, by: str) -> None:
        self.state, self.by, self.ended_ms = "final", by, int(time.time() * 1000)

    def apply(self, verdict_id: str) -> Applied:
        if self.state == "held":
            self.end(verdict_id)
            return Applied("applied", self.held)
        if self.by == verdict_id:
            return Applied("again", self.held)
        return Applied("timed_out" if self.by == "timeout" else "late", self.held)


def _pipeline(client: Any) -> Any:
    """One round trip of commands that each stand alone: no MULTI/EXEC around them."""
    return client.pipeline(transaction=False)


def context_key(channel_id: str) -> str:
    return CONTEXT_PREFIX + channel_id


def timeout_spent(now_ms: int, due_ms: int, held_ms: int) -> float:
    """Of a message held at `held_ms` and due at `due_ms`, the share of its timeout spent by
    `now_ms` (above 1: overdue, its sweep behind); 0 for none (`due_ms` 0)."""
    if due_ms <= 0 or due_ms <= held_ms:
        return 0.0
    return max(now_ms - held_ms, 0) / (due_ms - held_ms)


class HeldStore:
    """Held messages and the channels' context rings, in Redis or, while it is away, here."""

    def __init__(
        self, cache: Redis, metrics: ReviewMetrics, *, group: str, timeout_s: float
    ) -> None:
        self.cache = cache
        self.prefix = f"{PREFIX}{group}:"  # the held messages of the instances of `group`
        self.due_key = f"{self.prefix}due"
        self.metrics = metrics
        self.timeout_s = timeout_s  # what the messages' path waits for Redis
        self._local: dict[str, _Local] = {}
        self._degraded = False

    async def hold(
        self,
        held: Sequence[Held],
        pushes: Mapping[str, Sequence[bytes]],
        reads: Sequence[str],
        *,
        ring_size: int,
        ring_ttl_s: int,
    ) -> dict[str, list[bytes]] | None:
        """In one round trip: read the context rings of `reads` (as they were before these
        pushes), push each channel's new entries onto its ring, hold `held` (a message held
        already stays as it is: a redelivered decision changes nothing). The rings read, or None
        when Redis is down, slow or disabled: then `held` is kept in this process."""
        client = self.cache.client
        if client is not None:
            if not held and not pushes:
                return {}
            pipe = _pipeline(client)
            for channel in reads:
                pipe.lrange(context_key(channel), 0, -1)
            for channel, entries in pushes.items():
                key = context_key(channel)
                pipe.rpush(key, *entries)
                pipe.ltrim(key, -ring_size, -1)
                pipe.expire(key, ring_ttl_s)
            for h in held:
                self._write(pipe, h, "held")
            self.metrics.review_trips.inc()
            try:
                replies = await asyncio.wait_for(pipe.execute(), self.timeout_s)
            except REDIS_ERRORS as exc:
                self.cache.failed(exc)
            else:
                self._recovered()
                return {channel: list(replies[i]) for i, channel in enumerate(reads)}
        if held:
            self._fallen_back(len(held))
            for h in held:
                self._local.setdefault(h["message_id"], _Local(h))
        return None

    async def apply(self, message_id: str, verdict_id: str) -> Applied:
        """Apply a verdict (identified by `verdict_id`, the same on a redelivery) to a held
        message. Raises RedisUnavailable when Redis is down and it is not held here."""
        client = self.cache.client
        args = (message_id, verdict_id, FINAL_KEEP_S)
        if client is not None:
            self.metrics.verdict_trips.inc()
            try:
                status, raw = await asyncio.wait_for(
                    client.eval(_APPLY, 2, self.prefix + message_id, self.due_key, *args), SLOW_S
                )
            except REDIS_ERRORS as exc:
                self.cache.failed(exc)
                client = None
            else:
                if status != b"not_held" or message_id not in self._local:
                    return Applied(status.decode(), orjson.loads(raw) if raw else None)
        local = self._local.get(message_id)
        if local is not None:
            return local.apply(verdict_id)
        if client is None and self.cache.redis_enabled:
            raise RedisUnavailable(f"redis is unavailable and {message_id} is not held here")
        return Applied("not_held", None)

    async def claim_due(self, now_ms: int, limit: int = 100) -> list[Held]:
        """Claim the held messages whose timeout passed (each by one instance), for their final
        decisions; `settle` them once those are acknowledged. Moves messages held here to
        Redis first, when it answers."""
        client = self.cache.client
        if client is not None:
            try:
                await self._move_to_redis(client)
                self.metrics.sweep_trips.inc()
                reply = await asyncio.wait_for(
                    client.eval(_CLAIM, 1, self.due_key, now_ms, limit, LEASE_MS, self.prefix),
                    SLOW_S,
                )
            except REDIS_ERRORS as exc:
                self.cache.failed(exc)
            else:
                self.metrics.held_messages.set(int(reply[0]) + len(self._local))
                self._spent(now_ms, int(reply[1]), int(reply[2]))
                return [orjson.loads(raw) for raw in reply[3:]]
        ended_before = now_ms - FINAL_KEEP_S * 1000
        for message_id in [k for k, v in self._local.items() if 0 < v.ended_ms < ended_before]:
            del self._local[message_id]
        due = [
            local
            for local in self._local.values()
            if local.state == "held" and local.held["expires_at_ms"] <= now_ms
        ][:limit]
        for local in due:
            local.state, local.by = "timing_out", "timeout"
        waiting = [v.held for v in self._local.values() if v.state == "held"]
        self.metrics.held_messages.set(len(waiting))
        first = min(waiting, key=lambda h: int(h["expires_at_ms"]), default={})
        self._spent(now_ms, first.get("expires_at_ms", 0), first.get("held_at_ms", 0))
        return [local.held for local in due]

    async def settle(self, message_ids: Sequence[str]) -> None:
        """The final decisions of these timed-out messages were acknowledged: end them."""
        for message_id in message_ids:
            local = self._local.get(message_id)
            if local is not None:
                local.end("timeout")
        client = self.cache.client
        if client is None or not message_ids:
            return  # a lease left in Redis is claimed again: a duplicate, never a loss
        pipe = _pipeline(client)
        for message_id in message_ids:
            pipe.hset(self.prefix + message_id, "state", "final")
            pipe.expire(self.prefix + message_id, FINAL_KEEP_S)
            pipe.zrem(self.due_key, message_id)
        self.metrics.sweep_trips.inc()
        try:
            await asyncio.wait_for(pipe.execute(), SLOW_S)
        except REDIS_ERRORS as exc:
            self.cache.failed(exc)

    async def _move_to_redis(self, client: Any) -> None:
        """Hand the messages held here to Redis (one held there already keeps its state)."""
        moving = {k: v for k, v in self._local.items() if v.state != "timing_out"}
        if not moving:
            return
        pipe = _pipeline(client)
        for local in moving.values():
            self._write(pipe, local.held, local.state, local.by)
        self.metrics.sweep_trips.inc()
        await asyncio.wait_for(pipe.execute(), SLOW_S)
        for message_id in moving:
            del self._local[message_id]
        log.info("moved %d held messages from this process to redis", len(moving))

    def _write(self, pipe: Any, held: Held, state: str, by: str = "") -> None:
        """Queue on `pipe` the commands that hold `held` in `state` unless it is held already."""
        key = self.prefix + held["message_id"]
        pipe.hsetnx(key, "record", orjson.dumps(held))
        pipe.hsetnx(key, "state", state)
        if by:
            pipe.hsetnx(key, "by", by)
        if state == "held":
            timeout_s = (held["expires_at_ms"] - held["held_at_ms"]) // 1000
            pipe.expire(key, max(timeout_s, 1) + HELD_MARGIN_S)
            pipe.zadd(self.due_key, {held["message_id"]: held["expires_at_ms"]}, nx=True)
        else:
            pipe.expire(key, FINAL_KEEP_S)

    def _spent(self, now_ms: int, due_ms: int, held_ms: int) -> None:
        """The next held message's share of its timeout spent: the gauge an alert pages on
        before the queue's oldest messages fall back unseen (0 when none is held)."""
        self.metrics.held_timeout_spent.set(timeout_spent(now_ms, due_ms, held_ms))

    def _fallen_back(self, n: int) -> None:
        self.metrics.review_fallbacks.inc(n)
        if not self._degraded:
            self._degraded = True
            log.warning(
                "redis is unavailable: held messages are kept in this process (and moved to "
                "redis when it is back), review records go out without context"
            )

    def _recovered(self) -> None:
        if self._degraded:
            self._degraded = False
            log.info("redis is back: held messages and review context are kept there again")
