"""Escalation by user around its state (moderator/users/escalation.py): the Redis client it makes,
when it falls back to this process's state and when it tries Redis again, what it warns, a muted
user's action, the bounds of the rules' windows, and results paired one to one with messages.

Redis is replaced by a stand-in for `RedisState` that answers from a `MemoryState` or fails, and
the clock the fallback reads is set by hand. The rules' decisions: tests/unit/test_users.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from moderator.metrics import Metrics
from moderator.policy.rules import Policy, Ruling, read_spec
from moderator.records import ChatMessage
from moderator.users import escalation as escalation_module
from moderator.users.escalation import Escalation
from moderator.users.state import MemoryState, Seen, Strike, after_call, before_call

S = 1000  # ms
URL = "redis://:s3cret@redis.internal:6379/0"


def policy(**users: Any) -> Policy:
    return Policy.from_mapping({**read_spec(), "users": users})


def msg(i: int, *, channel: str = "c", t_s: float = 0, text: str = "hi") -> ChatMessage:
    return ChatMessage(f"m-{i}", channel, "u", text, 1_700_000_000_000 + int(t_s * S))


class Clock:
    """`time` for moderator/users/escalation.py: the monotonic clock of its fallback."""

    def __init__(self) -> None:
        self.now_s = 5.0

    def monotonic(self) -> float:
        return self.now_s


class Remote:
    """`RedisState`'s two calls: answered from a `MemoryState`, or failing while `down`."""

    def __init__(self) -> None:
        self.state = MemoryState()
        self.down = False
        self.calls = 0
        self.extra: list[Any] = []  # answered after the real results: a broken script

    async def before(self, batch: Sequence[Seen]) -> list[int]:
        self._call()
        before_call(batch)  # what the script would be sent, made as `RedisState` makes it
        return [*self.state.before(batch), *self.extra]

    async def after(self, batch: Sequence[Strike]) -> list[tuple[int, bool]]:
        self._call()
        after_call(batch)
        return [*self.state.after(batch), *self.extra]

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise RedisConnectionError("Connection refused")


class Client:
    def __init__(self, url: str, **options: Any) -> None:
        self.url, self.options = url, options
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class Redis:
    """Escalation's Redis: the clients it made, and the one `RedisState` it got."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.clients: list[Client] = []
        self.remote = Remote()
        monkeypatch.setattr(aioredis.Redis, "from_url", self.from_url)
        monkeypatch.setattr(escalation_module, "RedisState", lambda client: self.remote)

    def from_url(self, url: str, **options: Any) -> Client:
        self.clients.append(Client(url, **options))
        return self.clients[-1]


@pytest.fixture
def redis(monkeypatch: pytest.MonkeyPatch) -> Redis:
    return Redis(monkeypatch)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(escalation_module, "time", fake)
    return fake


async def test_the_redis_client_gives_up_fast_and_never_retries(redis: Redis) -> None:
    users = Escalation(Metrics().users, URL)  # the default timeout: 25 ms
    await users.start()
    await users.start()  # started already: the same client
    slower = Escalation(Metrics().users, URL, timeout_ms=100)
    await slower.start()
    first, second = redis.clients
    assert first.url == URL
    retry = first.options.pop("retry")
    assert first.options == {
        "socket_timeout": pytest.approx(0.1),  # four times the timeout
        "socket_connect_timeout": 0.25,  # a quarter of a second at least
        "health_check_interval": 0,
    }
    assert retry.get_retries() == 0, "one failure falls back"
    assert second.options["socket_timeout"] == pytest.approx(0.4)
    assert second.options["socket_connect_timeout"] == pytest.approx(0.4)
    await users.stop()
    assert first.closed


async def test_without_a_redis_url_no_client_is_made(redis: Redis) -> None:
    users = Escalation(Metrics().users)
    await users.start()
    assert redis.clients == []
    p = policy(strikes=1)
    assert [e.strikes for e in await users.after([(msg(0), p, Ruling("nudge", "x"))])] == [1]
    assert redis.remote.calls == 0


def round_trips(users: Escalation, step: str) -> float | None:
    return users.metrics.registry.get_sample_value(
        "moderator_user_state_round_trips_total", {"step": step}
    )


async def test_each_step_is_one_round_trip_counted_under_its_name(redis: Redis) -> None:
    users = Escalation(Metrics().users, URL)
    await users.start()
    p = policy(strikes=1, flood_messages=5)
    await users.before([(msg(0), p), (msg(1), p)])
    await users.after([(msg(0), p, Ruling("nudge", "x")), (msg(1), p, Ruling("nudge", "x"))])
    await users.after([(msg(2), p, Ruling("nudge", "x"))])
    assert (round_trips(users, "before"), round_trips(users, "after")) == (1, 2)
    assert redis.remote.calls == 3


async def test_redis_is_tried_again_a_retry_period_after_it_failed(
    redis: Redis, clock: Clock
) -> None:
    users = Escalation(Metrics().users, URL)
    await users.start()
    p = policy(flood_messages=5)
    redis.remote.down = True
    await users.before([(msg(0), p)])
    assert users.degraded
    redis.remote.down = False
    clock.now_s += escalation_module.RETRY_S / 2
    await users.before([(msg(1), p)])
    assert redis.remote.calls == 1, "not yet: this process's state"
    clock.now_s = 5.0 + escalation_module.RETRY_S
    await users.before([(msg(2), p)])
    assert redis.remote.calls == 2, "a retry period later"
    assert not users.degraded


async def test_an_outage_is_warned_about_once_a_minute_at_most(
    redis: Redis, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    users = Escalation(Metrics().users, URL)
    await users.start()
    p = policy(flood_messages=5)
    warned_at: list[float] = []

    async def call_at(now_s: float, *, down: bool) -> None:
        clock.now_s, redis.remote.down = now_s, down
        before = len(caplog.records)
        await users.before([(msg(int(now_s * S)), p)])
        warned_at.extend(now_s for r in caplog.records[before:] if r.levelno == logging.WARNING)

    with caplog.at_level(logging.WARNING, logger=escalation_module.__name__):
        await call_at(5.0, down=True)  # warned
        await call_at(6.0, down=False)
        await call_at(30.0, down=True)  # a flap within the minute: not again
        await call_at(31.0, down=False)
        await call_at(65.0, down=True)  # a minute after the warning, not over it
        await call_at(66.0, down=True)  # still down, over a minute on: the same outage
        await call_at(67.0, down=False)
        await call_at(68.0, down=True)  # over a minute since the warning
    assert warned_at == [5.0, 68.0]
    warning = caplog.records[0].getMessage()
    assert "redis.internal:6379" in warning
    assert "s3cret" not in warning
    assert "ConnectionError: Connection refused" in warning


def muted_action(actions: list[str]) -> str:
    spec = {"name": "p", "version": 1, "actions": actions, "users": {"strikes": 1, "mute_s": 60}}
    p = Policy.from_mapping(spec)
    users = Escalation(Metrics().users)
    users.after_local([(msg(i, t_s=i), p, Ruling(actions[0], "x")) for i in (0, 1)])  # muted
    [ruling] = users.before_local([(msg(2, t_s=2), p)])
    assert ruling is not None
    assert ruling.reason == "muted"
    return ruling.action


def test_a_muted_user_is_blocked_or_given_the_policys_most_severe_action() -> None:
    assert muted_action(["warn", "block", "ban"]) == "block"
    assert muted_action(["warn", "hold", "ban"]) == "ban"


@pytest.mark.parametrize(
    ("rules", "texts", "ruling"),
    [
        ({"flood_messages": 1, "flood_window_s": 10}, ["a", "b"], "rate_limited"),
        ({"repeat_channels": 2, "repeat_window_s": 10}, ["spam", "spam"], "spam"),
    ],
)
def test_a_message_one_window_earlier_is_out_of_the_window(
    rules: dict[str, int], texts: list[str], ruling: str
) -> None:
    p = policy(**rules)
    for gap_s, expected in ((9.999, ruling), (10, None)):
        users = Escalation(Metrics().users)
        first, second = (msg(i, channel=f"c{i}", t_s=i * gap_s, text=texts[i]) for i in (0, 1))
        out = users.before_local([(first, p), (second, p)])
        assert [r.reason if r else None for r in out] == [None, expected]


def test_a_strike_one_window_earlier_is_out_of_the_window() -> None:
    p = policy(strikes=1, strike_window_s=10)
    for gap_s, escalated in ((9.999, True), (10, False)):
        users = Escalation(Metrics().users)
        items = [(msg(i, t_s=i * gap_s), p, Ruling("nudge", "x")) for i in (0, 1)]
        assert [e.escalated for e in users.after_local(items)] == [False, escalated]


def test_a_text_with_nothing_left_to_compare_repeats_nothing() -> None:
    p = policy(repeat_channels=2)
    users = Escalation(Metrics().users)
    items = [(msg(i, channel=f"c{i}", text="!!!"), p) for i in range(3)]
    assert users.before_local(items) == [None, None, None]


async def test_a_result_per_message_or_an_error(redis: Redis) -> None:
    users = Escalation(Metrics().users, URL)
    await users.start()
    p = policy(strikes=1, flood_messages=5)
    with pytest.raises(ValueError, match="zip"):
        await users.before([(msg(0), p), (msg(1), p)], texts=[])
    redis.remote.extra = [0]  # one result too many: a bug, not a decision
    with pytest.raises(ValueError, match="zip"):
        await users.before([(msg(0), p)])
    redis.remote.extra = [(0, False)]
    with pytest.raises(ValueError, match="zip"):
        await users.after([(msg(0), p, Ruling("nudge", "x"))])
