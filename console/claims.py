"""Claims and first-verdict locks, shared by every console through Redis (the score cache's
Redis, keys under `moderator:console:<verdict_topic>:`), each with a TTL so a moderator who walks
away frees the item. The verdict topic scopes them: consoles deciding for one verdict topic
coordinate, and another deployment sharing the Redis (staging beside production, a test) with
the same message ids never finds this one's locks (the moderator scopes its held messages by
its consumer group the same way).

- `<prefix>claim:<message_id>`: `{"moderator_id", "until_ms"}` for the claim TTL.
- `<prefix>verdict:<message_id>`: the verdict this console side let through first
  (SET NX), so two moderators on two consoles cannot both decide an item; the second is told who
  was first. While the verdict waits out its undo grace period in the console that took it, the
  lock lasts the grace plus `PENDING_MARGIN_MS`: an undo deletes it (the item is free again), and
  a console that dies meanwhile lets it lapse, so the item returns to every queue rather than
  stay locked by a verdict that never went out. Confirmed as the verdict is produced, it lasts a
  day (it outlives any review timeout).

Redis unreachable: one warning, then both live in this process only (one console still works;
several may then both decide an item, and the moderator applies the first verdict it reads), and
Redis is tried again every few seconds. No TTL forgets them there, so only the newest
`KEPT_MESSAGES` of each are kept (the board's bound on its joins: an item is long gone from every
page before its lock is forgotten); kept for good, a console without Redis grew with every verdict.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from console.board import KEPT_MESSAGES
from console.bounded import Newest

log = logging.getLogger(__name__)

PREFIX = "moderator:console:"  # then the verdict topic
LOCK_TTL_MS = 86_400_000
PENDING_MARGIN_MS = 30_000  # a pending lock outlives its grace by this: the send's own time
RETRY_S = 5.0
TIMEOUT_S = 0.5

# Take the claim unless someone else holds it; either way, answer the holder's record.
CLAIM = """
local held = redis.call('GET', KEYS[1])
if held and cjson.decode(held)['moderator_id'] ~= ARGV[1] then return held end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return ARGV[2]
"""
# Extend (ARGV[2] ms) or drop (ARGV[2] = 0) the verdict lock only if it is still the caller's
# record ARGV[1]; 1 if it was.
LOCKED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2])
else redis.call('DEL', KEYS[1]) end
return 1
"""
# Drop the claim only if it is the caller's.
RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and cjson.decode(held)['moderator_id'] == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


class Claims:
    def __init__(
        self, redis_url: str, claim_ttl_s: float, *, verdict_topic: str, kept: int = KEPT_MESSAGES
    ) -> None:
        self.prefix = f"{PREFIX}{verdict_topic}:"
        self.claim_ttl_ms = int(claim_ttl_s * 1000)
        self.redis = (
            aioredis.Redis.from_url(
                redis_url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S
            )
            if redis_url
            else None
        )
        self._down_until = 0.0
        self._claims: Newest[str, dict[str, Any]] = Newest(kept)  # the fallback, this process only
        self._locks: Newest[str, dict[str, Any]] = Newest(kept)

    @property
    def shared(self) -> bool:
        """Whether claims are shared with other consoles right now."""
        return self.redis is not None and time.monotonic() >= self._down_until

    async def close(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()

    def _failed(self, exc: Exception) -> None:
        if self.shared:
            log.warning("Redis unreachable (%r): claims are this console's own until it is back",
                        exc)  # fmt: skip
        self._down_until = time.monotonic() + RETRY_S

    def _ok(self) -> None:
        if self._down_until:
            log.info("Redis is back: claims are shared again")
            self._down_until = 0.0

    async def claim(self, message_id: str, moderator_id: str) -> dict[str, Any]:
        """Claim `message_id` for `moderator_id` unless another holds it; the holder's claim."""
        until = int(time.time() * 1000) + self.claim_ttl_ms
        record = {"moderator_id": moderator_id, "until_ms": until}
        if self.redis is not None and self.shared:
            try:
                held = await self.redis.eval(
                    CLAIM, 1, self.prefix + "claim:" + message_id, moderator_id,
                    orjson.dumps(record), self.claim_ttl_ms,
                )  # fmt: skip
                self._ok()
                return dict(orjson.loads(held))
            except (RedisError, OSError) as exc:
                self._failed(exc)
        held_here = self._claims.get(message_id)
        if held_here and held_here["moderator_id"] != moderator_id and _live(held_here):
            return held_here
        self._claims[message_id] = record
        return record

    async def release(self, message_id: str, moderator_id: str) -> None:
        if self.redis is not None and self.shared:
            try:
                await self.redis.eval(RELEASE, 1, self.prefix + "claim:" + message_id, moderator_id)
                self._ok()
            except (RedisError, OSError) as exc:
                self._failed(exc)
        if self._claims.get(message_id, {}).get("moderator_id") == moderator_id:
            del self._claims[message_id]

    async def held(self, message_ids: list[str]) -> dict[str, dict[str, Any]] | None:
        """The live claims on `message_ids`, a verdict lock counting as its moderator's claim
        (`deciding`: the verdict); None when the shared store cannot say."""
        if not message_ids:
            return {}
        if self.redis is not None and self.shared:
            keys = [self.prefix + kind + m for kind in ("claim:", "verdict:") for m in message_ids]
            try:
                values = await self.redis.mget(keys)
                self._ok()
            except (RedisError, OSError) as exc:
                self._failed(exc)
            else:
                claims, locks = values[: len(message_ids)], values[len(message_ids) :]
                found = {m: orjson.loads(v) for m, v in zip(message_ids, claims, strict=True) if v}
                for m, lock in zip(message_ids, locks, strict=True):
                    if lock:
                        found[m] = _deciding(orjson.loads(lock))
                return found
        found = {m: c for m in message_ids if (c := self._claims.get(m)) and _live(c)}
        found.update({m: _deciding(self._locks[m]) for m in message_ids if m in self._locks})
        return found

    async def first_verdict(
        self, message_id: str, record: dict[str, Any], *, ttl_ms: int = LOCK_TTL_MS
    ) -> dict[str, Any]:
        """Record `record` as `message_id`'s verdict for `ttl_ms` unless one was recorded first;
        the first."""
        if self.redis is not None and self.shared:
            key = self.prefix + "verdict:" + message_id
            try:
                value = orjson.dumps(record)
                if await self.redis.set(key, value, nx=True, px=ttl_ms):
                    self._ok()
                    return record
                first = await self.redis.get(key)
                self._ok()
                if first is not None:
                    return dict(orjson.loads(first))
            except (RedisError, OSError) as exc:
                self._failed(exc)
        return self._locks.setdefault(message_id, record)

    async def confirm(self, message_id: str, record: dict[str, Any]) -> bool:
        """Make `record`'s lock last a day (its verdict goes out); False if it is no longer
        `record`'s (it lapsed, and maybe another moderator's verdict took its place)."""
        return await self._locked(message_id, record, LOCK_TTL_MS)

    async def cancel(self, message_id: str, record: dict[str, Any]) -> bool:
        """Drop `record`'s lock (an undo): the item is free again. False if it was not held."""
        return await self._locked(message_id, record, 0)

    async def _locked(self, message_id: str, record: dict[str, Any], ttl_ms: int) -> bool:
        mine = self._locks.get(message_id) == record
        if not ttl_ms and mine:
            del self._locks[message_id]
        if self.redis is not None and self.shared:
            key, value = self.prefix + "verdict:" + message_id, orjson.dumps(record)
            try:
                done = await self.redis.eval(LOCKED, 1, key, value, ttl_ms)
                self._ok()
                return bool(done)
            except (RedisError, OSError) as exc:
                self._failed(exc)
        return mine or self.redis is not None  # Redis away: this console's word stands


def _deciding(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict lock shown as its moderator's claim, until the verdict is due to go out."""
    return {
        "moderator_id": verdict["moderator_id"],
        "until_ms": verdict.get("send_at_ms", 0),
        "deciding": verdict,
    }


def _live(claim: dict[str, Any]) -> bool:
    return int(claim["until_ms"]) > time.time() * 1000
