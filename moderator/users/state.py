"""Users' state for moderator/users/escalation.py: strikes, mutes, recent messages and repeated
texts.

Two stores run the same two steps on a batch. `RedisState` runs each step as one call of a Lua
script (loaded once, then EVALSHA): one round trip per batch and step, atomic, so instances
sharing a Redis count one user's strikes together, whichever partitions carry the user's
messages. `MemoryState` runs the same steps on dictionaries: the per-process fallback while
Redis is down or slow, and `moderator score`'s offline state.

Every window is in message time (`sent_at_ms`), so a redelivered message finds the same answer;
a set member is the message id (a redelivered message is counted once). Keys expire on their
own a margin after their window (wall-clock TTL), mutes a margin after they end.

- before (`Seen` → code): muted? (the user's mute for all channels or for this channel is
  later than the message); flood (the message joins the user's messages in the flood window:
  more than `flood_n` → rate limited); repeats (the channel joins those where the user posted
  this normalised text in the repeat window: at least `repeat_k` → spam).
- after (`Strike` → strikes, escalate): a flagged message joins the user's strikes in the
  window; `k` or more before it → escalate, and mute the user until `mute_until_ms`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

PREFIX = "moderator:user:"
MARGIN_MS = 60_000  # keys outlive their window by this much (clock skew between instances)
NONE, MUTED, RATE_LIMITED, SPAM = 0, 1, 2, 3  # what `before` finds, most decisive first
SWEEP_EVERY = 10_000  # MemoryState forgets expired keys once per this many messages


class Seen(NamedTuple):
    """One message, before the model: its user's keys and the rules that count it."""

    user_id: str
    channel_id: str
    message_id: str
    t_ms: int
    flood_n: int  # 0: no flood rule
    flood_ms: int
    repeat_k: int  # 0: no repeat rule (or no text to compare)
    repeat_ms: int
    digest: str  # the normalised text's


class Strike(NamedTuple):
    """One decided message: a strike when flagged, and what its policy does with the count."""

    user_id: str
    channel_id: str
    message_id: str
    t_ms: int
    flagged: bool
    k: int
    window_ms: int
    mute_ms: int  # 0: no mute
    mute_channel: bool  # the mute holds in this channel only


def _key(user_id: str, *parts: str) -> str:
    return ":".join((f"{PREFIX}{{{user_id}}}", *parts))  # {user}: one cluster slot per user


def mute_keys(user_id: str, channel_id: str) -> tuple[str, str]:
    return _key(user_id, "mute"), _key(user_id, "mute", channel_id)


# One function per key, used by both stores: a user's keys are named in one place.
def flood_key(user_id: str) -> str:
    return _key(user_id, "flood")


def repeat_key(user_id: str, digest: str) -> str:
    return _key(user_id, "repeat", digest)


def strikes_key(user_id: str) -> str:
    return _key(user_id, "strikes")


# KEYS and ARGV come in one group per message; numbers as Python wrote them (Lua would print
# a millisecond timestamp as 1.7e+12). An exclusive bound is "(" + number.
SCRIPT = """
local out = {}
if ARGV[1] == 'before' then
  for i = 0, #KEYS / 4 - 1 do
    local k, a = i * 4, 1 + i * 8
    local t = tonumber(ARGV[a + 1])
    local code = 0
    local mute = math.max(tonumber(redis.call('GET', KEYS[k + 1]) or '0'),
                          tonumber(redis.call('GET', KEYS[k + 2]) or '0'))
    if mute > t then code = 1 end
    if tonumber(ARGV[a + 3]) > 0 then
      redis.call('ZADD', KEYS[k + 3], 'NX', ARGV[a + 1], ARGV[a + 2])
      redis.call('ZREMRANGEBYSCORE', KEYS[k + 3], '-inf', ARGV[a + 4])
      redis.call('PEXPIRE', KEYS[k + 3], ARGV[a + 5])
      local n = redis.call('ZCOUNT', KEYS[k + 3], ARGV[a + 4], ARGV[a + 1])
      if code == 0 and n > tonumber(ARGV[a + 3]) then code = 2 end
    end
    if tonumber(ARGV[a + 6]) > 0 then
      redis.call('ZADD', KEYS[k + 4], 'GT', ARGV[a + 1], ARGV[a + 8])
      redis.call('ZREMRANGEBYSCORE', KEYS[k + 4], '-inf', ARGV[a + 7])
      redis.call('PEXPIRE', KEYS[k + 4], ARGV[a + 5])
      local n = redis.call('ZCOUNT', KEYS[k + 4], ARGV[a + 7], '+inf')
      if code == 0 and n >= tonumber(ARGV[a + 6]) then code = 3 end
    end
    out[#out + 1] = code
  end
else
  for i = 0, #KEYS / 2 - 1 do
    local k, a = i * 2, 1 + i * 7
    local strikes, mute = KEYS[k + 1], KEYS[k + 2]
    local escalate = 0
    if ARGV[a + 3] == '1' then
      redis.call('ZADD', strikes, 'NX', ARGV[a + 1], ARGV[a + 2])
      redis.call('ZREMRANGEBYSCORE', strikes, '-inf', ARGV[a + 5])
      redis.call('PEXPIRE', strikes, ARGV[a + 6])
    end
    local n = redis.call('ZCOUNT', strikes, ARGV[a + 5], ARGV[a + 1])
    if ARGV[a + 3] == '1' and n - 1 >= tonumber(ARGV[a + 4]) then
      escalate = 1
      local untl = ARGV[a + 7]
      if untl ~= '0' and tonumber(untl) > tonumber(redis.call('GET', mute) or '0') then
        redis.call('SET', mute, untl, 'PX', tonumber(untl) - tonumber(ARGV[a + 1]) + 60000)
      end
    end
    out[#out + 1] = n
    out[#out + 1] = escalate
  end
end
return out
"""


def before_call(batch: Sequence[Seen]) -> tuple[list[str], list[str]]:
    """The script's KEYS and ARGV for the before step."""
    keys: list[str] = []
    args = ["before"]
    for s in batch:
        keys += [*mute_keys(s.user_id, s.channel_id), flood_key(s.user_id)]
        keys.append(repeat_key(s.user_id, s.digest))
        ttl = max(s.flood_ms, s.repeat_ms) + MARGIN_MS
        args += [str(s.t_ms), s.message_id, str(s.flood_n), f"({s.t_ms - s.flood_ms}", str(ttl)]
        args += [str(s.repeat_k), f"({s.t_ms - s.repeat_ms}", s.channel_id]
    return keys, args


def after_call(batch: Sequence[Strike]) -> tuple[list[str], list[str]]:
    """The script's KEYS and ARGV for the after step."""
    keys: list[str] = []
    args = ["after"]
    for s in batch:
        mute_all, mute_channel = mute_keys(s.user_id, s.channel_id)
        keys += [strikes_key(s.user_id), mute_channel if s.mute_channel else mute_all]
        until = s.t_ms + s.mute_ms if s.mute_ms else 0
        args += [str(s.t_ms), s.message_id, "1" if s.flagged else "0", str(s.k)]
        args += [f"({s.t_ms - s.window_ms}", str(s.window_ms + MARGIN_MS), str(until)]
    return keys, args


class RedisState:
    """The state in Redis, one EVALSHA per step and batch. Errors reach the caller (escalation.py
    falls back to `MemoryState`)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self._sha: str | None = None

    async def _run(self, keys: list[str], args: list[str]) -> list[int]:
        for _ in range(2):
            if self._sha is None:
                self._sha = str(await self.client.script_load(SCRIPT))
            try:
                out = await self.client.evalsha(self._sha, len(keys), *keys, *args)
            except NoScriptError:  # Redis restarted (scripts are not persisted): load it again
                self._sha = None
                continue
            return [int(v) for v in out]
        raise NoScriptError("the users' script vanished right after it was loaded")

    async def before(self, batch: Sequence[Seen]) -> list[int]:
        return await self._run(*before_call(batch)) if batch else []

    async def after(self, batch: Sequence[Strike]) -> list[tuple[int, bool]]:
        if not batch:
            return []
        out = await self._run(*after_call(batch))
        return [(out[i], bool(out[i + 1])) for i in range(0, len(out), 2)]


class MemoryState:
    """The same steps on this process's dictionaries (no sharing, lost on restart)."""

    def __init__(self) -> None:
        self._sets: dict[str, dict[str, int]] = {}  # key -> member -> score (ms)
        self._values: dict[str, int] = {}  # mute key -> until (ms)
        self._expiry: dict[str, float] = {}  # key -> time.monotonic() it expires
        self._ops = 0

    def _set(self, key: str, ttl_ms: int) -> dict[str, int]:
        self._expiry[key] = time.monotonic() + ttl_ms / 1000
        return self._sets.setdefault(key, {})

    def _sweep(self) -> None:
        self._ops += 1
        if self._ops % SWEEP_EVERY:
            return
        now = time.monotonic()
        for key in [k for k, at in self._expiry.items() if at < now]:
            self._sets.pop(key, None)
            self._values.pop(key, None)
            del self._expiry[key]

    def before(self, batch: Sequence[Seen]) -> list[int]:
        out = []
        for s in batch:
            self._sweep()
            code = NONE
            if max(self._values.get(k, 0) for k in mute_keys(s.user_id, s.channel_id)) > s.t_ms:
                code = MUTED
            ttl = max(s.flood_ms, s.repeat_ms) + MARGIN_MS
            if s.flood_n:
                flood = self._set(flood_key(s.user_id), ttl)
                flood.setdefault(s.message_id, s.t_ms)
                _trim(flood, s.t_ms - s.flood_ms)
                n = _count(flood, s.t_ms - s.flood_ms, s.t_ms)
                if code == NONE and n > s.flood_n:
                    code = RATE_LIMITED
            if s.repeat_k:
                seen = self._set(repeat_key(s.user_id, s.digest), ttl)
                seen[s.channel_id] = max(seen.get(s.channel_id, s.t_ms), s.t_ms)
                _trim(seen, s.t_ms - s.repeat_ms)
                n = _count(seen, s.t_ms - s.repeat_ms, None)
                if code == NONE and n >= s.repeat_k:
                    code = SPAM
            out.append(code)
        return out

    def after(self, batch: Sequence[Strike]) -> list[tuple[int, bool]]:
        out = []
        for s in batch:
            self._sweep()
            key = strikes_key(s.user_id)
            strikes = self._sets.get(key, {})
            if s.flagged:
                strikes = self._set(key, s.window_ms + MARGIN_MS)
                strikes.setdefault(s.message_id, s.t_ms)
            if s.flagged:
                _trim(strikes, s.t_ms - s.window_ms)
            n = _count(strikes, s.t_ms - s.window_ms, s.t_ms)
            escalate = s.flagged and n - 1 >= s.k
            if escalate and s.mute_ms:
                mute_all, mute_channel = mute_keys(s.user_id, s.channel_id)
                mute = mute_channel if s.mute_channel else mute_all
                until = s.t_ms + s.mute_ms
                if until > self._values.get(mute, 0):
                    self._values[mute] = until
                    self._expiry[mute] = time.monotonic() + (s.mute_ms + MARGIN_MS) / 1000
            out.append((n, escalate))
        return out


def _trim(members: dict[str, int], after_ms: int) -> None:
    """Drop members at or before `after_ms` (ZREMRANGEBYSCORE -inf after_ms)."""
    for member in [m for m, t in members.items() if t <= after_ms]:
        del members[member]


def _count(members: dict[str, int], after_ms: int, until_ms: int | None) -> int:
    """Members after `after_ms` up to `until_ms` (None: all) (ZCOUNT (after until)."""
    return sum(1 for t in members.values() if t > after_ms and (until_ms is None or t <= until_ms))
