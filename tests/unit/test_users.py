"""Escalation by user on in-process state: the policy's `[users]` rules, strikes, mute, flood,
repeats and links (moderator/policy/user_rules.py, users/state.py, users/escalation.py)."""

from __future__ import annotations

import asyncio
import io
from typing import Any, cast

import orjson
import pytest

from moderator.admin.score import decide_lines
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Reader
from moderator.errors import PolicyError
from moderator.metrics import Metrics
from moderator.pipeline import Pipeline
from moderator.policy.channels import PolicyBook
from moderator.policy.rules import Policy, Ruling, read_spec
from moderator.policy.user_rules import MAX_WINDOW_S, UserRules, host_of
from moderator.records import ChatMessage
from moderator.users.escalation import Escalation
from moderator.users.state import MemoryState, RedisState

S = 1000  # ms


def policy(**users: Any) -> Policy:
    return Policy.from_mapping({**read_spec(), "users": users})


def msg(
    i: int, *, user: str = "u", channel: str = "c", t_s: float = 0, text: str = "hi"
) -> ChatMessage:
    return ChatMessage(f"m-{i}", channel, user, text, 1_700_000_000_000 + int(t_s * S))


def flagged(action: str = "nudge") -> Ruling:
    return Ruling(action, "insult", "medium")


def test_every_rule_is_off_unless_the_policy_sets_it() -> None:
    rules = Policy.load().users
    assert rules == UserRules()
    assert not rules.on
    assert policy(flood_messages=3).users.on


@pytest.mark.parametrize(
    ("users", "named"),
    [
        ({"strikez": 3}, "strikez"),
        ({"strikes": -1}, "strikes"),
        ({"strikes": 2.5}, "strikes"),
        ({"strikes": True}, "strikes"),
        ({"flood_window_s": 0}, "flood_window_s"),
        ({"strike_window_s": 10**9}, "strike_window_s"),
        ({"flood_window_s": MAX_WINDOW_S + 1}, "flood_window_s"),  # a week at most
        ({"strikes": 1_000_001}, "strikes"),
        ({"mute_scope": "server"}, "mute_scope"),
        ({"flood_action": "ban"}, "flood_action"),
        ({"link_action": "allow"}, "link_action"),
        ({"links_deny": "evil.com"}, "links_deny"),
        ({"links_allow": ["localhost"]}, "links_allow"),
        ({"links_deny": ["com."]}, "links_deny"),  # a dot at its edge makes no domain
    ],
)
def test_a_bad_users_table_is_refused_naming_the_key(users: dict[str, Any], named: str) -> None:
    with pytest.raises(PolicyError, match=f"users.*{named}"):
        policy(**users)
    with pytest.raises(PolicyError, match="users"):
        Policy.from_mapping({**read_spec(), "users": 5})


def test_counts_and_windows_may_reach_their_bounds() -> None:
    assert policy(strikes=0).users.strikes == 0  # off
    assert policy(strikes=1_000_000).users.strikes == 1_000_000
    assert policy(flood_messages=MAX_WINDOW_S + 1).users.flood_messages == MAX_WINDOW_S + 1
    assert policy(flood_window_s=MAX_WINDOW_S).users.flood_window_s == MAX_WINDOW_S


def test_the_rules_act_with_block_by_default_when_the_policy_has_it() -> None:
    spec = {"name": "p", "version": 1, "actions": ["warn", "block", "ban"], "users": {}}
    rules = Policy.from_mapping(spec).users
    assert (rules.flood_action, rules.repeat_action, rules.link_action) == ("block",) * 3


def test_listed_domains_are_read_as_hosts_are() -> None:
    rules = policy(links_deny=[".Evil.COM.", "Xbox.com", "cdn.shop.xyz"]).users
    assert rules.links_deny == ("evil.com", "xbox.com", "cdn.shop.xyz")
    assert rules.link_domain("see evil.com") == "evil.com"
    assert rules.link_domain("see cdn.shop.xyz") == "cdn.shop.xyz"  # its top-level domain known


def test_a_policy_with_actions_of_its_own_acts_with_its_most_severe_by_default() -> None:
    spec = {"name": "p", "version": 1, "actions": ["warn", "mute"], "users": {"flood_messages": 1}}
    assert Policy.from_mapping(spec).users.flood_action == "mute"


def test_a_channel_policy_merges_its_users_table_key_by_key() -> None:
    book = PolicyBook(policy(strikes=3, flood_messages=5))
    book.apply("c", orjson.dumps({"name": "c", "version": 1, "users": {"flood_messages": 2}}))
    rules = book.for_channel("c").users
    assert (rules.strikes, rules.flood_messages) == (3, 2)


@pytest.mark.parametrize(
    ("text", "domain"),
    [
        ("look https://Evil.COM/x?y=1, now", "evil.com"),
        ("look at cdn.evil.com/free", "cdn.evil.com"),  # written bare, a subdomain
        ("see shop.xyz today", "shop.xyz"),  # a top-level domain only the list names
        ("mail me at bob@evil.com", None),  # an address, not a link
        ("mail bob@x.org, then see evil.com", "evil.com"),  # an address is skipped, not the end
        ("good.com and https://evil.com.good.com/", None),  # under a domain not listed
        ("gg wp, file.txt and hello.world", None),
    ],
)
def test_a_deny_list_refuses_its_domains_and_subdomains(text: str, domain: str | None) -> None:
    assert policy(links_deny=["evil.com", "shop.xyz"]).users.link_domain(text) == domain


@pytest.mark.parametrize(
    ("text", "domain"),
    [
        ("go to good.com/path or docs.good.com", None),
        ("notgood.com is fine?", "notgood.com"),
        ("www.other.org!", "www.other.org"),
        ("good.com, then https://x.evil.com", "x.evil.com"),
    ],
)
def test_an_allow_list_refuses_every_other_domain(text: str, domain: str | None) -> None:
    assert policy(links_allow=["good.com"]).users.link_domain(text) == domain


def test_a_deny_list_alone_lets_every_other_domain_through() -> None:
    rules = policy(links_deny=["evil.com"]).users
    assert rules.link_domain("https://evil.com.example.org/") is None
    assert rules.link_domain("http://user:pw@EVIL.com:8080/a") == "evil.com"
    assert host_of("https://a.b.com./x") == "a.b.com"


async def test_k_strikes_escalate_the_next_flagged_message_one_step() -> None:
    p = policy(strikes=2, strike_window_s=60)
    users = Escalation(Metrics().users)
    got = [await users.after([(msg(i, t_s=i), p, flagged())]) for i in range(4)]
    assert [(e[0].action, e[0].strikes, e[0].escalated) for e in got] == [
        ("nudge", 1, False),
        ("nudge", 2, False),
        ("review", 3, True),
        ("review", 4, True),
    ]
    up = await users.after([(msg(9, t_s=5), p, flagged("review"))])
    assert up[0].action == "block"
    top = await users.after([(msg(10, t_s=6), p, flagged("block"))])
    assert top[0].action == "block"  # the top of the ladder stays


async def test_an_action_the_policy_does_not_list_is_not_escalated() -> None:
    spec = {"name": "p", "version": 1, "actions": ["warn", "mute"], "users": {"strikes": 1}}
    p = Policy.from_mapping(spec)
    users = Escalation(Metrics().users)
    out = await users.after([(msg(i, t_s=i), p, Ruling(a, None)) for i, a in
                             enumerate(["warn", "block", "warn", "mute"])])  # fmt: skip
    assert [(e.action, e.escalated) for e in out] == [
        ("warn", False),
        ("block", True),
        ("mute", True),
        ("mute", True),
    ]


async def test_an_allowed_message_is_no_strike_but_carries_the_count() -> None:
    p = policy(strikes=1)
    users = Escalation(Metrics().users)
    await users.after([(msg(0), p, flagged())])
    allowed = await users.after([(msg(1, t_s=1), p, Ruling("allow", None))])
    assert allowed[0] == ("allow", 1, False)


async def test_a_redelivered_message_counts_once() -> None:
    p = policy(strikes=1)
    users = Escalation(Metrics().users)
    first = await users.after([(msg(0), p, flagged())])
    again = await users.after([(msg(0), p, flagged())])
    assert first == again == [("nudge", 1, False)]
    second = await users.after([(msg(1, t_s=1), p, flagged())])
    assert second[0] == ("review", 2, True)
    assert await users.after([(msg(1, t_s=1), p, flagged())]) == second


async def test_strikes_leave_the_window() -> None:
    p = policy(strikes=1, strike_window_s=10)
    users = Escalation(Metrics().users)
    await users.after([(msg(0), p, flagged())])
    late = await users.after([(msg(1, t_s=11), p, flagged())])
    assert late[0] == ("nudge", 1, False)


async def test_strikes_count_across_channels_in_one_batch() -> None:
    p = policy(strikes=1)
    users = Escalation(Metrics().users)
    batch = [(msg(0, channel="a"), p, flagged()), (msg(1, channel="b", t_s=1), p, flagged())]
    batch.append((msg(2, user="other", t_s=1), p, flagged()))
    out = await users.after(batch)
    assert [(e.strikes, e.escalated) for e in out] == [(1, False), (2, True), (1, False)]


async def test_an_escalated_user_is_muted_in_every_channel_until_the_mute_ends() -> None:
    p = policy(strikes=1, mute_s=30)
    users = Escalation(Metrics().users)
    await users.after([(msg(0), p, flagged()), (msg(1, t_s=1), p, flagged())])  # escalated
    during = await users.before([(msg(2, channel="elsewhere", t_s=30), p)])
    assert during == [Ruling("block", "muted")]
    after = await users.before([(msg(3, channel="elsewhere", t_s=31), p)])
    assert after == [None]
    decided = await users.after([(msg(2, t_s=30), p, during[0])])
    assert decided[0] == ("block", 2, False), "a muted message is no strike"


async def test_a_channel_mute_holds_in_that_channel_only() -> None:
    p = policy(strikes=1, mute_s=30, mute_scope="channel")
    users = Escalation(Metrics().users)
    await users.after([(msg(0), p, flagged()), (msg(1, t_s=1), p, flagged())])
    out = await users.before([(msg(2, t_s=2), p), (msg(3, channel="other", t_s=2), p)])
    assert out == [Ruling("block", "muted"), None]


async def test_more_than_n_messages_in_the_window_are_rate_limited() -> None:
    p = policy(flood_messages=3, flood_window_s=10, flood_action="review")
    users = Escalation(Metrics().users)
    out = await users.before([(msg(i, channel=f"c{i}", t_s=i), p) for i in range(5)])
    assert out == [None] * 3 + [Ruling("review", "rate_limited")] * 2
    again = await users.before([(msg(2, channel="c2", t_s=2), p)])
    assert again == [None], "a redelivered message counts once"
    assert await users.before([(msg(9, t_s=14), p)]) == [None]  # the window moved on


async def test_the_same_text_in_k_channels_is_spam() -> None:
    p = policy(repeat_channels=3, repeat_window_s=60)
    users = Escalation(Metrics().users)
    texts = ["Buy gold at my site!!!", "buy gold at my site!!", "BUY GOLD AT MY SITE!"]
    batch = [(msg(i, channel=f"c{i}", t_s=i, text=t), p) for i, t in enumerate(texts)]
    batch.append((msg(8, channel="c0", t_s=3, text="something else"), p))
    assert await users.before(batch) == [None, None, Ruling("block", "spam"), None]
    other_user = await users.before([(msg(9, user="v", channel="c5", t_s=4, text=texts[0]), p)])
    assert other_user == [None]
    assert await users.before([(msg(10, channel="c9", t_s=90, text=texts[0]), p)]) == [None]


async def test_a_refused_link_decides_without_the_model() -> None:
    p = policy(links_deny=["evil.com"], link_action="nudge")
    users = Escalation(Metrics().users)
    out = await users.before([(msg(0, text="free at https://x.evil.com/"), p), (msg(1), p)])
    assert out == [Ruling("nudge", "link:x.evil.com"), None]
    assert (
        users.metrics.registry.get_sample_value("moderator_user_rules_total", {"rule": "link"}) == 1
    )


async def test_a_policy_without_rules_touches_no_state() -> None:
    users = Escalation(Metrics().users)
    p = Policy.load()
    assert await users.before([(msg(0), p)]) == [None]
    assert await users.after([(msg(0), p, flagged())]) == [("nudge", 0, False)]
    assert (
        users.metrics.registry.get_sample_value(
            "moderator_user_state_local_total", {"step": "after"}
        )
        == 0
    )


async def test_the_pipeline_decides_without_the_model_and_escalates(classifier: Classifier) -> None:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    p = policy(strikes=2, flood_messages=3, links_deny=["evil.com"])
    users = Escalation(metrics.users)
    await batcher.start()
    try:
        pipe = Pipeline(classifier, p, batcher, cache, metrics.decide, max_record_bytes=65536,
                        budget_ms=60_000, users=users)  # fmt: skip
        records = [_record(i, text) for i, text in enumerate(
            ["you are an idiot", "go to evil.com now", "you are a moron, idiot", "hi", "gg"]
        )]  # fmt: skip
        decisions = [orjson.loads(o.value or b"") for o in await pipe.process(records)]
    finally:
        await batcher.stop()
    got = [(d["action"], d["reason"], d["strikes"], d["escalated"]) for d in decisions]
    assert got[0][1:] == ("insult", 1, False)
    assert got[1] == ("block", "link:evil.com", 2, False)
    assert got[2][2:] == (3, True)
    assert got[2][0] in ("review", "block")
    assert got[3][:2] == got[4][:2] == ("block", "rate_limited")
    assert decisions[1]["scores"] == {}, "decided without the model"


class _Record:
    def __init__(self, value: bytes, offset: int) -> None:
        self.value, self.offset, self.key = value, offset, b"c"
        self.topic, self.partition, self.timestamp = "chat.messages", 0, 1_000
        self.headers: tuple[tuple[str, bytes], ...] = ()


def _record(i: int, text: str) -> _Record:
    sent = 1_700_000_000_000 + i
    value = {"message_id": f"m-{i}", "channel_id": "c", "user_id": "u", "text": text}
    return _Record(orjson.dumps({**value, "sent_at_ms": sent}), i)


def test_score_applies_the_user_rules_line_after_line(reader: Reader) -> None:
    p = policy(strikes=2, mute_s=60, repeat_channels=2, links_deny=["evil.com"])
    p = Policy.from_mapping({**p.spec, "deny": [{"term": "potato", "action": "nudge"}]})
    said = [
        ("a", "sam", "potato"), ("b", "sam", "potato salad"), ("a", "sam", "potato again"),
        ("c", "sam", "hello"), ("a", "kim", "see evil.com"), ("a", "kim", "buy gold"),
        ("b", "kim", "BUY GOLD"),
    ]  # fmt: skip
    lines = [
        orjson.dumps({"message_id": str(i), "channel_id": c, "user_id": u, "text": t,
                      "sent_at_ms": 1000 * i}).decode() + "\n"
        for i, (c, u, t) in enumerate(said)
    ]  # fmt: skip
    lines.append('{"text": "no user"}\n')
    out = io.StringIO()
    assert decide_lines(lines, reader, p, out, users=Escalation(Metrics().users)) == 0
    rows = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["action"], r["reason"], r["strikes"], r["escalated"]) for r in rows] == [
        ("nudge", "deny:policy:custom", 1, False),
        ("nudge", "deny:policy:custom", 2, False),
        ("review", "deny:policy:custom", 3, True),
        ("block", "muted", 3, False),  # the line right after: muted, in another channel too
        ("block", "link:evil.com", 1, False),
        ("allow", None, 1, False),
        ("block", "spam", 2, False),
        ("allow", None, 0, False),
    ]


class _Hanging:
    """A Redis that never answers."""

    async def before(self, batch: Any) -> list[int]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    after = before


def round_trips(users: Escalation, step: str) -> float:
    """Redis calls made for `step`: counted as a batch goes to Redis, before its answer."""
    value = users.metrics.registry.get_sample_value(
        "moderator_user_state_round_trips_total", {"step": step}
    )
    return value or 0.0


async def test_strikes_count_in_fetch_order_whichever_batch_is_decided_first() -> None:
    p = policy(strikes=2)
    users = Escalation(Metrics().users)
    users._redis = cast(RedisState, _Fake())
    first, second, third, fourth = (users.turn() for _ in range(4))
    early = [(msg(i, channel=f"c{i}", t_s=i), p, flagged()) for i in range(2)]
    last = [(msg(2, channel="c2", t_s=2), p, flagged())]
    later = asyncio.create_task(users.after(last, second.after))
    await asyncio.sleep(0)  # one turn: `later` runs until it waits (tasks start in the order made)
    assert not later.done(), "the batch fetched second, decided first, waits for the first"
    assert round_trips(users, "after") == 0, "it did not go to Redis before its turn"
    assert [e.strikes for e in await users.after(early, first.after)] == [1, 2]
    assert await later == [("review", 3, True)], "the strike past the limit in fetch order"
    third.finish()  # a batch that failed before its steps does not hold the next one up
    out = await asyncio.wait_for(users.after([(msg(3, t_s=3), p, flagged())], fourth.after), 30)
    assert out == [("review", 4, True)]


async def test_floods_count_in_fetch_order_whichever_batch_starts_its_step_first() -> None:
    p = policy(flood_messages=1, flood_window_s=10)
    users = Escalation(Metrics().users)
    users._redis = cast(RedisState, _Fake())
    first, second = users.turn(), users.turn()
    later = asyncio.create_task(users.before([(msg(1, t_s=1), p)], second.before))
    await asyncio.sleep(0)  # one turn: `later` runs until it waits (tasks start in the order made)
    assert not later.done()
    assert round_trips(users, "before") == 0, "it did not go to Redis before its turn"
    assert await users.before([(msg(0), p)], first.before) == [None]
    assert await later == [Ruling("block", "rate_limited")]


async def test_a_slow_redis_falls_back_to_process_state_and_recovers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(
        "moderator.users.escalation.log.warning", lambda msg, *a: warnings.append(msg)
    )
    p = policy(flood_messages=1, strikes=1)
    users = Escalation(Metrics().users, timeout_ms=20)
    working = users._redis = cast(RedisState, _Fake())
    users._redis = cast(RedisState, _Hanging())
    out = [await users.before([(msg(i, t_s=i), p)]) for i in range(3)]
    assert out == [[None], [Ruling("block", "rate_limited")], [Ruling("block", "rate_limited")]]
    assert users.degraded
    gauge = users.metrics.registry.get_sample_value("moderator_user_state_degraded")
    assert gauge == 1
    assert len(warnings) == 1, "one warning, not one per batch"
    monkeypatch.setattr("moderator.users.escalation.RETRY_S", 0.0)
    users._redis = working
    await users.before([(msg(9, t_s=9), p)])
    assert not users.degraded
    assert users.metrics.registry.get_sample_value("moderator_user_state_degraded") == 0


async def test_an_unreachable_redis_never_stops_a_decision() -> None:
    p = policy(strikes=1)
    users = Escalation(Metrics().users, "redis://127.0.0.1:1/0", timeout_ms=200)
    await users.start()
    try:
        out = await users.after([(msg(i, t_s=i), p, flagged()) for i in range(2)])
    finally:
        await users.stop()
    assert out == [("nudge", 1, False), ("review", 2, True)]
    assert users.degraded


class _Fake:
    """A Redis that answers as the process state would."""

    def __init__(self) -> None:
        self.state = MemoryState()

    async def before(self, batch: Any) -> list[int]:
        return self.state.before(batch)

    async def after(self, batch: Any) -> list[tuple[int, bool]]:
        return self.state.after(batch)
