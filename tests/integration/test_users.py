"""Escalation by user against the real Redis and broker: the Lua script agrees with the
per-process state, two instances share one user's strikes, a redelivered message adds none, a
flood is rate-limited, a mute ends when it should, and Redis killed mid-stream degrades to
per-process state and recovers. Nothing here asserts a time: waits have deadlines."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from devstack.child import ModeratorChild, moderator_env
from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.metrics import Metrics
from moderator.policy.rules import Policy, Ruling, read_spec
from moderator.records import ChatMessage
from moderator.service import Moderator
from moderator.users.escalation import Escalation
from tests.integration.kafka_io import consume, decisions_by_id
from tests.waiting import eventually

pytestmark = pytest.mark.integration

FLAG = "potato"  # a deny term of the test policy: flagged (nudge) without doubt


def policy_file(tmp_path: Path, **users: Any) -> Path:
    spec = read_spec()
    spec["deny"] = [{"term": FLAG, "action": "nudge"}]
    spec["users"] = users
    path = tmp_path / "policy.json"
    path.write_bytes(orjson.dumps(spec))
    return path


USER = ["u"]  # this test's user: the Redis is the session's, and users' state outlives a test


@pytest.fixture(autouse=True)
def fresh_user() -> None:
    USER[0] = f"u-{uuid.uuid4().hex[:8]}"


def value(message_id: str, channel: str, text: str, *, user: str = "", **extra: Any) -> bytes:
    """A chat message of this test's user (or of `user`, a name of this test)."""
    user = f"{USER[0]}{user}"
    record = {"message_id": message_id, "channel_id": channel, "user_id": user, "text": text,
              "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    record.update(extra)
    return orjson.dumps(record)


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[AIOKafkaProducer]:
    client = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    await client.start()
    try:
        yield client
    finally:
        await client.stop()


async def send(
    producer: AIOKafkaProducer, topic: str, values: Iterable[bytes], *, partition: int = 0
) -> None:
    """Each value onto `partition` (key: its channel), acknowledged."""
    for v in values:
        key = orjson.loads(v)["channel_id"].encode()
        await (await producer.send(topic, value=v, key=key, partition=partition))


async def decision(s: Settings, message_id: str, nth: int = 1) -> dict[str, Any]:
    """The `nth` decision for `message_id` (a redelivered message has two)."""

    def seen(records: list[Any]) -> bool:
        return sum(orjson.loads(r.value)["message_id"] == message_id for r in records) >= nth

    records = await consume(s.kafka_bootstrap, s.out_topic, until=seen)
    mine = [r for r in records if orjson.loads(r.value)["message_id"] == message_id]
    assert len(mine) >= nth, f"no decision {nth} for {message_id}"
    return dict(decisions_by_id(mine[nth - 1 : nth])[message_id])


def sample(service: Moderator, name: str, **labels: str) -> float:
    return service.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_the_lua_script_and_the_per_process_state_agree(redis_server: EmbeddedRedis) -> None:
    p = Policy.from_mapping({**read_spec(), "users": {
        "strikes": 2, "strike_window_s": 5, "mute_s": 3, "flood_messages": 2, "flood_window_s": 2,
        "repeat_channels": 2, "repeat_window_s": 4,
    }})  # fmt: skip
    shared = Escalation(Metrics().users, redis_server.url, timeout_ms=2000)
    local = Escalation(Metrics().users)
    await shared.start()
    rng = random.Random(29)
    t0 = 1_700_000_000_000 + rng.randrange(10**9)  # fresh keys for every run
    reasons: set[str | None] = set()
    try:
        for batch in range(60):
            msgs = []
            for j in range(rng.randrange(1, 6)):
                i = rng.randrange(batch * 3 + j + 1)  # now and then a redelivered id
                msgs.append(ChatMessage(
                    f"m-{t0}-{i}", f"c-{rng.randrange(3)}", f"u-{t0}-{rng.randrange(3)}",
                    rng.choice(["gg", "buy gold", "hi"]), t0 + i * 300,
                ))  # fmt: skip
            items = [(m, p) for m in msgs]
            before = await shared.before(items)
            assert before == await local.before(items)
            reasons.update(v.reason for v in before if v is not None)
            verdicts = [v or Ruling(rng.choice(["allow", "nudge"]), None) for v in before]
            after_items = [(m, p, v) for m, v in zip(msgs, verdicts, strict=True)]
            after = await shared.after(after_items)
            assert after == await local.after(after_items)
            reasons.update("escalated" for e in after if e.escalated)
        assert reasons == {"muted", "rate_limited", "spam", "escalated"}, "every path was run"
        assert not shared.degraded
        trips = sample_of(shared, "moderator_user_state_round_trips_total", step="before")
        assert trips == 60, "one round trip per batch and step"
    finally:
        await shared.stop()


def sample_of(users: Escalation, name: str, **labels: str) -> float:
    return users.metrics.registry.get_sample_value(name, labels) or 0.0


def run(s: Settings) -> ModeratorChild:
    """`moderator run` on `s` (its policy file included), started."""
    env = moderator_env(
        kafka_bootstrap=s.kafka_bootstrap, redis_url=s.redis_url, model_dir=s.model_dir,
        in_topic=s.in_topic, out_topic=s.out_topic, dlq_topic=s.dlq_topic, group_id=s.group_id,
        policy=s.policy, policy_topic=s.policy_topic, threads=1, commit_interval_s=0.2,
    )  # fmt: skip
    return ModeratorChild(["run"], env).start()


def lag_partitions(proc: ModeratorChild) -> frozenset[int]:
    """The input partitions a `moderator run` reports lag for: the ones assigned to it now."""
    samples = proc.scrape()
    found = {} if samples is None else samples.by("moderator_consumer_lag", "partition")
    return frozenset(int(p) for p in found)


@pytest.mark.timeout(300)
async def test_two_instances_share_a_users_strikes_and_a_redelivery_adds_none(
    settings: Settings, producer: AIOKafkaProducer, tmp_path: Path
) -> None:
    s = settings.replace(policy=policy_file(tmp_path, strikes=2, strike_window_s=600))
    with run(s) as first, run(s) as second:
        await asyncio.gather(*(asyncio.to_thread(p.wait_ready) for p in (first, second)))
        await eventually(
            lambda: {lag_partitions(first), lag_partitions(second)} == {
                frozenset({0}), frozenset({1})},
            "the two input partitions split between the two processes",
            timeout_s=120,
        )  # fmt: skip
        on = {0: first if lag_partitions(first) == {0} else second}
        on[1] = second if on[0] is first else first
        now = int(time.time() * 1000)  # a millisecond apart at least: no ties in the window
        m = [value(f"s-{i}", f"ch-{i % 2}", f"a {FLAG}", sent_at_ms=now + i) for i in range(3)]
        got = []
        for i, v in enumerate(m):  # one user's messages, alternating partitions
            await send(producer, s.in_topic, [v], partition=i % 2)
            got.append(await decision(s, f"s-{i}"))
        assert [(d["strikes"], d["escalated"], d["action"]) for d in got] == [
            (1, False, "nudge"), (2, False, "nudge"), (3, True, "review"),
        ]  # fmt: skip
        for p, proc in on.items():  # each process decided the user's messages on its partition
            assert proc.metric("moderator_decisions_total", action="nudge") == 1
            assert proc.metric("moderator_decisions_total", action="review") == (p == 0)
            assert (proc.metric("moderator_user_state_round_trips_total", step="after") or 0) >= 1

        await send(producer, s.in_topic, [m[1]], partition=1)  # redelivered (same id and time)
        again = await decision(s, "s-1", nth=2)
        assert (again["strikes"], again["escalated"]) == (2, False)
        await send(producer, s.in_topic, [value("s-9", "ch-0", "and " + FLAG)], partition=0)
        assert (await decision(s, "s-9"))["strikes"] == 4, "the redelivery added no strike"


async def test_a_flood_is_rate_limited(
    settings: Settings, classifier: Classifier, producer: AIOKafkaProducer, tmp_path: Path
) -> None:
    s = settings.replace(policy=policy_file(tmp_path, flood_messages=3, flood_window_s=60))
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        # Sent at one instant: batches decided at once may reach Redis in either order, and
        # whichever three come first pass.
        now = int(time.time() * 1000)
        flood = [value(f"f-{i}", "ch", f"hello {i}", sent_at_ms=now) for i in range(6)]
        await send(producer, s.in_topic, flood)
        got = [await decision(s, f"f-{i}") for i in range(6)]
        limited = [d for d in got if d["reason"] == "rate_limited"]
        assert len(limited) == 3
        assert {d["action"] for d in limited} == {"block"}
        assert all(d["scores"] == {} for d in limited), "decided without the model"
        await send(producer, s.in_topic, [value("g-0", "ch", "hello", user="-2")])
        assert (await decision(s, "g-0"))["reason"] != "rate_limited", "another user is free"


async def test_a_mute_ends_when_its_time_is_up(
    settings: Settings, classifier: Classifier, producer: AIOKafkaProducer, tmp_path: Path
) -> None:
    mute_s = 2
    s = settings.replace(policy=policy_file(tmp_path, strikes=1, mute_s=mute_s))
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        flagged = [value(f"x-{i}", "ch", FLAG) for i in range(2)]
        for i, v in enumerate(flagged):  # one after the other: batches are decided at once
            await send(producer, s.in_topic, [v])
            await decision(s, f"x-{i}")
        assert (await decision(s, "x-1"))["escalated"] is True
        ends_ms = orjson.loads(flagged[1])["sent_at_ms"] + mute_s * 1000
        seen: list[tuple[int, str | None]] = []

        async def unmuted() -> bool:
            i = len(seen)
            v = value(f"y-{i}", "other-channel", "hello again")
            await send(producer, s.in_topic, [v])
            d = await decision(s, f"y-{i}")
            seen.append((orjson.loads(v)["sent_at_ms"], d["reason"]))
            return d["reason"] != "muted"

        await eventually(unmuted, "a message after the mute is not muted", timeout_s=60)
        assert seen[0][1] == "muted", "muted in another channel too"
        assert all(t < ends_ms for t, reason in seen if reason == "muted")
        assert seen[-1][0] >= ends_ms, "not muted only once the mute ended"


@pytest.mark.timeout(300)
async def test_redis_killed_mid_stream_degrades_to_process_state_and_recovers(
    settings: Settings,
    classifier: Classifier,
    producer: AIOKafkaProducer,
    fresh_redis: EmbeddedRedis,
    tmp_path: Path,
) -> None:
    path = policy_file(tmp_path, strikes=3, flood_messages=1000, flood_window_s=60)
    s = settings.replace(policy=path, redis_url=fresh_redis.url)
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        await send(producer, s.in_topic, [value(f"a-{i}", "ch", f"one {i}") for i in range(20)])
        assert (await decision(s, "a-19"))["reason"] is None
        assert sample(service, "moderator_user_state_degraded") == 0
        fresh_redis.stop()
        wave = [value(f"b-{i}", "ch", f"{FLAG} two {i}") for i in range(20)]
        await send(producer, s.in_topic, wave)
        records = await consume(s.kafka_bootstrap, s.out_topic, until=lambda r: len(
            {orjson.loads(x.value)["message_id"] for x in r}) >= 40)  # fmt: skip
        decided = decisions_by_id(records)
        assert {f"b-{i}" for i in range(20)} <= set(decided), "nothing stalled or dropped"
        assert sample(service, "moderator_user_state_degraded") == 1
        assert sample(service, "moderator_user_state_local_total", step="after") >= 1
        # Counted in this process meanwhile: the strikes still add up, and escalate.
        wave_decided = [decided[f"b-{i}"] for i in range(20)]
        assert sorted(d["strikes"] for d in wave_decided) == list(range(1, 21))
        assert sum(d["escalated"] for d in wave_decided) == 20 - 3

        fresh_redis.start()
        n = 0

        async def shared_again() -> bool:
            nonlocal n
            n += 1
            await send(producer, s.in_topic, [value(f"c-{n}", "ch", f"three {n}")])
            await decision(s, f"c-{n}")
            return sample(service, "moderator_user_state_degraded") == 0

        await eventually(shared_again, "the users' state in Redis again", timeout_s=60)
        trips = sample(service, "moderator_user_state_round_trips_total", step="before")
        consumed = sample(service, "moderator_messages_consumed_total")
        print(f"users' state: {trips:.0f} before-calls for {consumed:.0f} messages")


async def test_redis_round_trips_are_per_batch_not_per_message(
    settings: Settings, classifier: Classifier, producer: AIOKafkaProducer, tmp_path: Path
) -> None:
    users = {"strikes": 3, "flood_messages": 50, "repeat_channels": 3, "links_deny": ["x.test"]}
    s = settings.replace(policy=policy_file(tmp_path, **users))
    n = 600
    backlog = [value(f"r-{i}", f"ch-{i % 9}", f"line {i % 40}", user=f"-{i % 40}")
               for i in range(n)]  # fmt: skip
    await send(producer, s.in_topic, backlog[: n // 2], partition=0)
    await send(producer, s.in_topic, backlog[n // 2 :], partition=1)
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        records = await consume(s.kafka_bootstrap, s.out_topic, until=lambda r: len(r) >= n)
        assert len(decisions_by_id(records)) == n
        before = sample(service, "moderator_user_state_round_trips_total", step="before")
        after = sample(service, "moderator_user_state_round_trips_total", step="after")
        local = sample(service, "moderator_user_state_local_total", step="before")
    assert local == 0
    assert before == after, "one call per step and batch"
    assert before < n, "a batch of messages shares one call"
    print(f"users' state: {before + after:.0f} Redis round trips for {n} messages "
          f"({(before + after) / n:.3f} per message, {n / before:.1f} per batch)")  # fmt: skip
