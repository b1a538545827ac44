"""The moderation loop's cost (issue 29): the moderator with the loop off and on, side by side.

Off is the moderator with every part of the loop that a setting turns off turned off: no review
context (`MODERATOR_REVIEW_CONTEXT=0`: no channel rings), no `[users]` rules (the default
policy), no overrides (`MODERATOR_OVERRIDE_TOPIC` empty). What no setting turns off stays on in
both: a `review` decision's review record and held message, the verdict consumer, the timeout
sweep. On is the defaults (context 5), a policy with every `[users]` rule on (strikes with a
mute, flood, repeats, a deny list of links) at limits the traffic cannot reach, so every
message pays for the rules' state while the rules decide nothing the model would have, and an
overrides topic holding `OVERRIDES` overrides (of texts the traffic never sends, so each
message is looked up and none skips the model). Both: the score cache on (L1 and a fresh Redis:
the loop keeps its state there), the load generator's traffic (its texts, repeats, toxic share,
channels, and users spread over its 5,000), the same seed.

One run measures the pairs alternately, off then on, then on then off, and so on, so the
machine's drift (these machines are shared) falls on both arms alike; every measurement is a
fresh moderator, Redis, topics and group. Backlog drain: the traffic produced at once, timed to
its last decision, with the CPU each role spent (bench/cpu.py) and the moderator's counters
(Redis round trips by part, held messages, the users' rules). Then open loop at one rate, a
share of the off arm's drain rate (`RATE_FRACTION`, well inside capacity), for p99.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from statistics import mean
from typing import Any

import orjson

from bench.cpu import CpuSplit, per_message_ms
from bench.pairs import interleaved
from bench.profile import start_profile, summarize_folded
from bench.stack import (
    ModeratorConfig,
    create_topics,
    drain_records,
    moderator,
    warm_up,
)
from bench.texts import SEED, bench_texts
from devstack.child import Samples
from loadgen.config import LoadConfig
from loadgen.hop import measure_hop
from loadgen.kafka import TopicSet, make_producer
from loadgen.traffic import TrafficGenerator
from moderator.kafka.topics import COMPACTED, ensure_topics
from moderator.loop import run
from moderator.metric_wings import REDIS_PARTS, USER_RULES, USER_STEPS
from moderator.records import Verdict
from moderator.review.overrides import from_verdict

log = logging.getLogger(__name__)

ARMS = ("off", "on")
RATE_FRACTION = 0.25  # of the off arm's drain rate: inside capacity on a shared 2-core host
OVERRIDES = 1000
DUP_RATIO = LoadConfig.dup_ratio  # the load generator's traffic as it is by default
TOXIC_RATIO = LoadConfig.toxic_ratio
CHANNELS = LoadConfig.channels
DENIED_DOMAIN = "denied.invalid"  # a link the deny list refuses: the traffic has none
MUTE_S = 60
# The functions of the loop's own modules, for the profile's share of them.
LOOP_MODULES = (
    *("moderator/users/escalation.py", "moderator/users/state.py"),
    *("moderator/policy/user_rules.py", "moderator/review/hold.py"),
    *("moderator/review/held.py", "moderator/review/overrides.py"),
)


@dataclass(frozen=True)
class LoopPlan:
    pairs: int  # (off, on) pairs, at least 2
    backlog: int  # messages per drain
    duration_s: float  # of each open-loop run
    profile: bool = False  # py-spy over one more drain of the on arm (not timed)


def arm_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, arm) in the order run: off-on, on-off, off-on, ...: a drift in time costs both
    arms alike over each two pairs."""
    return interleaved(pairs, ARMS)


def traffic(
    prefix: str, n: int, sent_at_ms: int, seed: int = SEED
) -> list[tuple[bytes, bytes, str]]:
    """The load generator's first `n` records for the bench's seed ((key, value, message_id)),
    all stamped `sent_at_ms`: a backlog. The load generator's open-loop run with the same seed
    sends the same texts from the same users to the same channels."""
    gen = TrafficGenerator(run_id=prefix, seed=seed, dup_ratio=DUP_RATIO,
                           toxic_ratio=TOXIC_RATIO, channels=CHANNELS)  # fmt: skip
    return [(r.key, r.value, r.message_id) for r in (gen.next_record(sent_at_ms) for _ in range(n))]


def busiest_user(records: Iterable[tuple[bytes, bytes, str]]) -> int:
    """The most messages one user sends in `records`: no count of a user's messages, strikes
    or repeats within any window can pass it."""
    users = Counter(orjson.loads(value)["user_id"] for _, value, _ in records)
    return max(users.values(), default=0)


def users_table(limit: int, channels: int = CHANNELS) -> dict[str, Any]:
    """A `[users]` table with every rule on and out of the traffic's reach: `limit` messages,
    strikes or channels of one user never happen (`limit` is one more than the busiest user
    sends, `channels` one more than there are)."""
    return {
        "strikes": limit,
        "mute_s": MUTE_S,
        "flood_messages": limit,
        "repeat_channels": channels + 1,
        "links_deny": [DENIED_DOMAIN],
    }


def policy_text(table: Mapping[str, Any]) -> str:
    """The default policy with `table` as its `[users]` table (TOML)."""
    lines = ["", "[users]"]
    for key, value in table.items():
        shown = "[" + ", ".join(f'"{v}"' for v in value) + "]" if isinstance(value, list) else value
        lines.append(f"{key} = {shown}")
    default = resources.files("moderator").joinpath("default_policy.toml").read_text()
    return default + "\n".join(lines) + "\n"


def limit_for(n: int) -> int:
    """One more than the busiest user sends among the traffic's first `n` messages."""
    return busiest_user(traffic("limit", n, 0)) + 1


async def fill_overrides(bootstrap: str, topic: str, n: int) -> None:
    """`n` overrides on a fresh compacted topic, as moderators' verdicts would leave them (half
    global, half for one channel), of texts the bench's traffic never sends."""
    await ensure_topics(bootstrap, {topic: 1}, configs={topic: COMPACTED})
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        for i in range(n):
            scope = "channel" if i % 2 else "global"
            verdict = Verdict(f"bench-ovr-{i}", "block", "bench", None, scope, 0)
            override = from_verdict(f"bench override {i} zqx", f"c-{i % CHANNELS}", verdict)
            assert override is not None
            await producer.send(topic, override.encode(), key=override.key.encode())
        await producer.flush()
    finally:
        await producer.stop()


def counters(before: Samples, after: Samples) -> dict[str, Any]:
    """What the moderator counted between two scrapes: messages, Redis round trips by part (the
    users' state by step), review records (held messages), the users' rules and overrides."""

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    trips = {part: delta("moderator_redis_round_trips_total", part=part) for part in REDIS_PARTS}
    for step in USER_STEPS:
        trips[f"users_{step}"] = delta("moderator_user_state_round_trips_total", step=step)
    return {
        "consumed": delta("moderator_messages_consumed_total"),
        "round_trips": trips,
        "held": delta("moderator_review_records_total"),
        "rules": {rule: delta("moderator_user_rules_total", rule=rule) for rule in USER_RULES},
        "overridden": delta("moderator_override_decisions_total"),
        "user_state_local": delta("moderator_user_state_local_total"),
        "review_fallbacks": delta("moderator_review_fallbacks_total"),
    }


def per_message(count: Mapping[str, Any]) -> dict[str, float]:
    """Round trips per consumed message, by part, and their total."""
    n = max(float(count.get("consumed") or 0), 1.0)
    trips = count.get("round_trips") or {}
    out = {part: round(v / n, 4) for part, v in trips.items()}
    out["total"] = round(sum(trips.values()) / n, 4)
    return out


class LoopBench:
    """One model's loop-off vs loop-on measurements against one broker."""

    def __init__(self, bootstrap: str, model_dir: Path, plan: LoopPlan, *, threads: int,
                 broker_pid: int = 0, workdir: Path) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.plan = plan
        self.broker_pid = broker_pid
        self.workdir = workdir
        self.base = ModeratorConfig(model_dir, threads=threads, cache=True)

    def config(self, arm: str, limit: int, tag: str) -> ModeratorConfig:
        """The moderator of `arm`; on: with a policy whose limits pass `limit`, and a fresh
        overrides topic filled with OVERRIDES overrides."""
        if arm == "off":
            off = (("review_context", "0"), ("override_topic", ""))
            return dataclasses.replace(self.base, settings=off)
        policy = self.workdir / f"policy-{tag}.toml"
        policy.write_text(policy_text(users_table(limit)))
        topic = TopicSet.fresh("bench", tag).in_topic.replace(".in.", ".overrides.")
        run(fill_overrides(self.bootstrap, topic, OVERRIDES))
        on = (("policy", str(policy)), ("override_topic", topic))
        return dataclasses.replace(self.base, settings=on)

    def drain(self, arm: str, pair: int, records_n: int, limit: int) -> dict[str, Any]:
        """One timed backlog drain with its CPU split and counters (and, asked, a profile)."""
        tag = f"loop-{arm}{pair}"
        cfg = self.config(arm, limit, tag)
        names = TopicSet.fresh("bench", tag)
        run(create_topics(self.bootstrap, names))
        records = traffic(f"{tag}-d", records_n, _now_ms())
        with moderator(cfg, self.bootstrap, names) as mp:
            run(warm_up(self.bootstrap, names, bench_texts(64)))
            before = mp.scrape()
            cpu = CpuSplit(moderators=mp.worker_pids(), broker=self.broker_pid,
                           harness=os.getpid())  # fmt: skip
            cpu.start()
            result = run(drain_records(self.bootstrap, names, records, timeout_s=300))
            split = cpu.stop()
            after = mp.scrape()
            profile = None
            if self.plan.profile and arm == "on" and pair == 0:
                profile = self._profile(mp.worker_pids()[0], names, records_n, result.msgs_per_s)
        out: dict[str, Any] = {"arm": arm, "pair": pair, "drain": result.as_dict(),
                               "cpu_ms_per_msg": per_message_ms(split, result.decided)}  # fmt: skip
        if before is not None and after is not None:
            out["counters"] = counters(before, after)
            out["round_trips_per_msg"] = per_message(out["counters"])
        if profile is not None:
            out["profile"] = profile
        log.info("loop %s (pair %d): %.1f msg/s, %d/%d decided", arm, pair, result.msgs_per_s,
                 result.decided, result.messages)  # fmt: skip
        return out

    def _profile(self, pid: int, names: TopicSet, n: int, rate: float) -> dict[str, Any] | None:
        """py-spy over a second drain of new traffic (not timed): where the on arm's time goes,
        and the share of it in the loop's own modules."""
        out = self.workdir / f"profile-{pid}.txt"
        spy = start_profile(pid, n / max(rate, 1.0), out)
        if spy is None:
            return None
        # Another seed: the timed drain's texts are all in the cache by now.
        fresh = traffic(f"prof{pid}", n, _now_ms(), seed=SEED + 1)
        run(drain_records(self.bootstrap, names, fresh, 300))
        _, err = spy.communicate(timeout=120)
        if spy.returncode != 0 or not out.is_file():
            log.warning("py-spy failed (%s): %s", spy.returncode, err.decode(errors="replace"))
            return None
        lines = out.read_text().splitlines()
        return {**summarize_folded(lines, top=20), "loop_modules": module_shares(lines)}

    def latency(self, arm: str, pair: int, rate: float, limit: int, hop: Any) -> dict[str, Any]:
        from bench.pipeline import latency_run

        tag = f"loop-lat-{arm}{pair}"
        row = latency_run(self.bootstrap, self.config(arm, limit, tag), rate,
                          self.plan.duration_s, hop, tag, broker_pid=self.broker_pid,
                          dup_ratio=DUP_RATIO, counters=counters)  # fmt: skip
        row["arm"], row["pair"] = arm, pair
        if row.get("counters"):
            row["round_trips_per_msg"] = per_message(row["counters"])
        return row


def module_shares(lines: Iterable[str], modules: Sequence[str] = LOOP_MODULES) -> dict[str, float]:
    """Per module, the share of all samples (py-spy's folded lines) with a frame in it; `any`:
    with a frame in any of them."""
    per: Counter[str] = Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        found = {m for m in modules if m in stack}
        for m in found:
            per[m] += count
        if found:
            per["any"] += count
    return {m: round(per[m] / total, 4) if total else 0.0 for m in (*modules, "any")}


def _now_ms() -> int:
    return int(time.time() * 1000)


def ratio_of_means(drains: Sequence[Mapping[str, Any]]) -> float | None:
    """The on arm's mean drain rate over the off arm's."""
    rates = {arm: [float(d["drain"]["msgs_per_s"]) for d in drains if d["arm"] == arm]
             for arm in ARMS}  # fmt: skip
    if not rates["off"] or not rates["on"]:
        return None
    return round(mean(rates["on"]) / mean(rates["off"]), 4)


def pair_ratios(drains: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each pair's on / off drain rate."""
    by = {(d["pair"], d["arm"]): d["drain"]["msgs_per_s"] for d in drains}
    pairs = sorted({p for p, _ in by})
    return [round(by[p, "on"] / by[p, "off"], 4) for p in pairs
            if (p, "on") in by and (p, "off") in by and by[p, "off"]]  # fmt: skip


def run_loop(
    bootstrap: str,
    model_dir: Path,
    plan: LoopPlan,
    *,
    threads: int,
    broker_pid: int = 0,
    checkpoint: Any = None,
) -> dict[str, Any]:
    """Every pair's drains, then every pair's open-loop runs at one rate (the same order)."""
    limit = limit_for(plan.backlog)
    out: dict[str, Any] = {
        "model_dir": str(model_dir), "threads": threads, "cores": len(os.sched_getaffinity(0)),
        "backlog": plan.backlog, "pairs": plan.pairs,
        "order": [arm for _, arm in arm_order(plan.pairs)],
        "users": users_table(limit), "overrides": OVERRIDES, "dup_ratio": DUP_RATIO,
        "toxic_ratio": TOXIC_RATIO, "channels": CHANNELS, "rate_fraction": RATE_FRACTION,
        "drains": [], "latency": [],
    }  # fmt: skip

    def save() -> None:
        if checkpoint is not None:
            checkpoint(out)

    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        bench = LoopBench(bootstrap, model_dir, plan, threads=threads, broker_pid=broker_pid,
                          workdir=Path(tmp))  # fmt: skip
        for pair, arm in arm_order(plan.pairs):
            out["drains"].append(bench.drain(arm, pair, plan.backlog, limit))
            out["ratio"] = ratio_of_means(out["drains"])
            out["pair_ratios"] = pair_ratios(out["drains"])
            save()
        off = [d["drain"]["msgs_per_s"] for d in out["drains"] if d["arm"] == "off"]
        rate = round(RATE_FRACTION * mean(off), 1)
        out["rate"] = rate
        # The open-loop run sends rate x duration messages of the same traffic: twice bounds it.
        limit = limit_for(2 * math.ceil(rate * plan.duration_s))
        out["users_latency"] = users_table(limit)
        hop = run(measure_hop(bootstrap))
        out["hop"] = hop.as_dict()
        for pair, arm in arm_order(plan.pairs):
            out["latency"].append(bench.latency(arm, pair, rate, limit, hop))
            save()
    return out
