"""The users' state (moderator/users/state.py). Its Redis keys and arguments, pinned: instances of
two versions share these keys during a rolling deploy, so a renamed key would reset every user's
strikes, mutes, floods and repeats. How `RedisState` loads its script, on a fake client. How
`MemoryState` bounds windows and forgets expired keys, on a fake clock. That the Lua script and the
per-process state decide alike is tests/integration/test_users.py.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from moderator.users import state
from moderator.users.state import (
    MUTED,
    NONE,
    RATE_LIMITED,
    SWEEP_EVERY,
    MemoryState,
    RedisState,
    Seen,
    Strike,
    after_call,
    before_call,
)

USER = "moderator:user:{u-1}"  # {u-1}: every key of one user in one cluster slot


def test_the_before_step_reads_mutes_and_counts_floods_and_repeats_under_the_users_keys() -> None:
    seen = Seen("u-1", "c-1", "m-1", 100_000, 5, 10_000, 3, 60_000, "d1g3st")
    keys, args = before_call([seen])
    assert keys == [f"{USER}:mute", f"{USER}:mute:c-1", f"{USER}:flood", f"{USER}:repeat:d1g3st"]
    # each window's lower bound is exclusive; the keys outlive the longer window by a minute
    assert args == ["before", "100000", "m-1", "5", "(90000", "120000", "3", "(40000", "c-1"]


def test_a_strike_is_counted_under_the_user_and_mutes_in_the_policys_scope() -> None:
    everywhere = Strike("u-1", "c-1", "m-1", 100_000, True, 2, 30_000, 5_000, False)
    here = everywhere._replace(message_id="m-2", mute_channel=True)
    keys, args = after_call([everywhere, here])
    assert keys == [f"{USER}:strikes", f"{USER}:mute", f"{USER}:strikes", f"{USER}:mute:c-1"]
    assert args[:8] == ["after", "100000", "m-1", "1", "2", "(70000", "90000", "105000"]


def test_an_allowed_message_without_a_mute_rule_is_no_strike_and_mutes_nobody() -> None:
    allowed = Strike("u-1", "c-1", "m-1", 100_000, False, 2, 30_000, 0, False)
    _, args = after_call([allowed])
    assert args == ["after", "100000", "m-1", "0", "2", "(70000", "90000", "0"]


T = 1_700_000_000_000  # a message's time (ms)
STRIKE = Strike("u-1", "c-1", "m-1", T, True, 1, 30_000, 0, False)  # kept 30 s + 60 s
IDLE = Seen("idle", "c-1", "idle", T, 0, 0, 0, 0, "")  # another user, no rule: moves the sweep on


class Clock:
    """`time` for moderator/users/state.py: the monotonic clock its keys expire by, set by hand."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return self.now_s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(state, "time", fake)
    return fake


def idle(memory: MemoryState, messages: int) -> None:
    memory.before([IDLE] * messages)


def strikes_now(memory: MemoryState) -> tuple[int, bool]:
    """The user's strikes in the window, read by an allowed message (no strike of its own)."""
    [out] = memory.after([STRIKE._replace(message_id="m-check", flagged=False)])
    return out


def test_a_strike_at_the_windows_lower_bound_is_out_of_it() -> None:
    memory = MemoryState()
    memory.after([STRIKE])
    later = STRIKE._replace(message_id="m-2", flagged=False)
    assert memory.after([later._replace(t_ms=T + 29_999)]) == [(1, False)]
    assert memory.after([later._replace(t_ms=T + 30_000)]) == [(0, False)]


def test_a_shorter_mute_never_shortens_a_longer_one() -> None:
    memory = MemoryState()
    mute = STRIKE._replace(k=0, mute_ms=100_000)  # the first strike escalates: mute 100 s
    memory.after([mute, mute._replace(message_id="m-2", t_ms=T + 10_000, mute_ms=1_000)])
    seen = IDLE._replace(user_id="u-1", message_id="m-3", t_ms=T + 50_000)
    assert memory.before([seen]) == [MUTED]


@pytest.mark.parametrize(("now_s", "kept"), [(90.0, True), (90.001, False)])
def test_strikes_are_kept_a_margin_past_their_window_then_forgotten(
    clock: Clock, now_s: float, kept: bool
) -> None:
    memory = MemoryState()
    memory.after([STRIKE])  # message 1
    clock.now_s = now_s
    idle(memory, SWEEP_EVERY - 2)
    assert strikes_now(memory) == (int(kept), False)  # message SWEEP_EVERY: the sweep


@pytest.mark.parametrize(("now_s", "kept"), [(70.0, True), (70.001, False)])
def test_a_flood_is_kept_a_margin_past_its_window_then_forgotten(
    clock: Clock, now_s: float, kept: bool
) -> None:
    memory = MemoryState()
    flood = Seen("u-1", "c-1", "m-1", T, 1, 10_000, 0, 0, "")  # more than 1 in 10 s: limited
    memory.before([flood])
    clock.now_s = now_s
    idle(memory, SWEEP_EVERY - 2)
    again = flood._replace(message_id="m-2", t_ms=T + 1_000)
    assert memory.before([again]) == [RATE_LIMITED if kept else NONE]


@pytest.mark.parametrize(("now_s", "kept"), [(160.0, True), (160.001, False)])
def test_a_mute_is_kept_a_margin_past_its_end_then_forgotten(
    clock: Clock, now_s: float, kept: bool
) -> None:
    memory = MemoryState()
    memory.after([STRIKE._replace(k=0, mute_ms=100_000)])  # muted until T + 100 s
    clock.now_s = now_s
    idle(memory, SWEEP_EVERY - 2)
    seen = IDLE._replace(user_id="u-1", message_id="m-2", t_ms=T + 50_000)
    assert memory.before([seen]) == [MUTED if kept else NONE]


def test_expired_keys_are_swept_once_every_sweep_every_messages(clock: Clock) -> None:
    # A sweep is a pass over every key: it runs once per SWEEP_EVERY messages, not on each.
    memory = MemoryState()
    memory.after([STRIKE])  # message 1
    clock.now_s = 1_000.0  # long past its expiry
    idle(memory, SWEEP_EVERY - 3)
    assert strikes_now(memory) == (1, False)  # message SWEEP_EVERY - 1
    assert strikes_now(memory) == (0, False)  # message SWEEP_EVERY: swept


class FakeRedis:
    """The two calls `RedisState` makes, on a Redis whose scripts a restart can flush."""

    def __init__(self, *, vanishing: bool = False) -> None:
        self.scripts: set[str] = set()
        self.calls: list[str] = []
        self.vanishing = vanishing  # each script is flushed right after it is loaded

    async def script_load(self, script: str) -> str:
        self.calls.append("load")
        sha = f"sha-{len(script)}"
        if not self.vanishing:
            self.scripts.add(sha)
        return sha

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> list[int]:
        self.calls.append("evalsha")
        if sha not in self.scripts:
            raise NoScriptError("No matching script.")
        return [NONE] * (numkeys // 4)  # the before step: one code per message


def redis_state(fake: FakeRedis) -> RedisState:
    return RedisState(cast(aioredis.Redis, fake))


SEEN = Seen("u-1", "c-1", "m-1", T, 5, 10_000, 0, 0, "")


async def test_the_script_is_loaded_once_then_each_batch_is_one_evalsha() -> None:
    fake = FakeRedis()
    users = redis_state(fake)
    assert await users.before([SEEN]) == [NONE]
    assert await users.before([SEEN, SEEN._replace(message_id="m-2")]) == [NONE, NONE]
    assert fake.calls == ["load", "evalsha", "evalsha"]


async def test_an_empty_batch_makes_no_round_trip() -> None:
    fake = FakeRedis()
    assert await redis_state(fake).before([]) == []
    assert await redis_state(fake).after([]) == []
    assert fake.calls == []


async def test_a_restarted_redis_gets_the_script_again_and_the_batch_goes_through() -> None:
    fake = FakeRedis()
    users = redis_state(fake)
    await users.before([SEEN])
    fake.scripts.clear()  # Redis restarted: scripts are not persisted
    assert await users.before([SEEN]) == [NONE]
    assert fake.calls == ["load", "evalsha", "evalsha", "load", "evalsha"]


async def test_a_script_that_vanishes_again_right_after_loading_is_an_error_not_a_loop() -> None:
    fake = FakeRedis(vanishing=True)
    with pytest.raises(NoScriptError):
        await redis_state(fake).before([SEEN])
    assert fake.calls == ["load", "evalsha", "load", "evalsha"]
