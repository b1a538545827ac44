"""The fault scenarios. Each runs real processes on a `Stage` of its own and returns a result.

Time to recover, for every scenario, is counted from the moment the fault is injected:
`first_s` until the first decision of a message sent after that moment arrives, `settled_s`
until the per-second p99 (by send second) is back within the 50 ms budget for the rest of the run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis as redis_py
from aiokafka import AIOKafkaProducer

from chaos.durability import Survival, survival
from chaos.hostile import CASES, DECISION, MIB, burst, judge
from chaos.ledger import Ledger
from chaos.promotion import promotion_kill
from chaos.results import ScenarioResult, now_ms
from chaos.stage import BUDGET_MS, PARTITIONS, Stage, drain_rate, traffic_and_finish
from chaos.verdicts import NOT_HELD, Outcomes, account
from devstack import child
from devstack.child import ModeratorChild, read_status_kb
from devstack.embedded import EmbeddedRedis
from devstack.reviewer import Answer, Reviewer, Sent
from loadgen.kafka import TopicSet
from moderator.config import Settings
from moderator.kafka.refusal import RETRY_BACKOFF_S, RETRY_JITTER
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import read_spec
from moderator.review.held import PREFIX as HELD_PREFIX

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """Sizes and times of a run; `make(quick=True)` is the short one.

    Traffic runs `fault_at_s` before the fault and `after_s` after it ends, or `after_kill_s`
    where a new group member must wait out a dead one's session (6 s by default, 10 s at most).
    """

    quick: bool = False
    rate: float = 80.0
    fault_at_s: float = 8.0
    after_s: float = 20.0
    after_kill_s: float = 32.0
    outage_s: float = 8.0
    hold_s: float = 8.0
    broker_freeze_s: float = 12.0
    publish_window_s: float = 5.0
    probe_messages: int = 2000
    overload_s: float = 15.0
    junk: int = 10_000
    hostile_valid: int = 500
    held_ratio: float = 0.04  # of the traffic, held for review (the loop)
    review_timeout_s: float = 30.0  # the loop's: past a take-over after a SIGKILL

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if not quick:
            return cls()
        return cls(quick=True, fault_at_s=5.0, after_s=12.0, after_kill_s=26.0, outage_s=5.0,
                   hold_s=4.0, publish_window_s=4.0, probe_messages=1000, overload_s=8.0,
                   junk=3000, hostile_valid=150)  # fmt: skip


@dataclass(frozen=True)
class Context:
    plan: Plan
    model_dir: Path
    log_dir: Path

    def stage(self, tag: str, **kwargs: Any) -> Stage:
        return Stage(tag, model_dir=self.model_dir, log_dir=self.log_dir, **kwargs)


Scenario = Callable[[Context, ScenarioResult], Awaitable[None]]


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _count(proc: ModeratorChild, needle: str) -> int:
    """Lines of its output (stdout and log) that contain `needle`."""
    return sum(1 for line in proc.output().splitlines() if needle in line)


def _rss_kb(proc: ModeratorChild) -> int | None:
    """VmRSS of the process, in kB (None once it is gone)."""
    return read_status_kb(proc.pid, ["VmRSS"]).get("VmRSS")


def _attach_logs(res: ScenarioResult, *procs: ModeratorChild) -> None:
    for proc in procs:
        res.logs.append((f"{proc.name} (pid {proc.pid})", proc.output(25)))


# -- 1. SIGKILL then restart -------------------------------------------------------------------


async def sigkill_restart(
    ctx: Context, res: ScenarioResult, session_timeout_ms: int | None = None
) -> None:
    """The take-over waits for the broker to expire the killed member's session, so
    `session_timeout_ms` (the moderator's default if None) sets most of the time to recover."""
    p = ctx.plan
    async with ctx.stage("kill") as st:
        env = st.env(session_timeout_ms=str(session_timeout_ms)) if session_timeout_ms else None
        a = await st.start("a", env)
        load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.after_kill_s))
        await asyncio.sleep(p.fault_at_s)
        fault_ms = now_ms()
        a.kill()
        b = st.spawn("b", env)  # restarted at once, as a supervisor would
        committed = await st.committed()  # before b can join: what a had committed
        ready_s = await asyncio.to_thread(b.wait_ready)
        b_ready_ms = now_ms()
        await traffic_and_finish(st, res, load, fault_ms)
        lg = st.obs.ledger
        window = _uncommitted_decided(lg, committed, before_ms=b_ready_ms)
        res.figure("committed offsets at the kill", _offsets(committed))
        res.figure("decided but uncommitted at the kill (the redo window)", window)
        res.figure("restart to ready", _fmt_s(ready_s))
        res.check("duplicates stay within the uncommitted window", res.duplicated <= window,
                  f"{res.duplicated} duplicated, window {window}")  # fmt: skip
        res.check("the restarted instance runs", b.alive())
        if not res.passed:
            _attach_logs(res, a, b)


def _uncommitted_decided(lg: Ledger, committed: dict[int, int | None], before_ms: float) -> int:
    return sum(
        1
        for mid, inp in lg.inputs.items()
        if inp.offset >= (committed.get(inp.partition) or 0)
        and lg.first_ms.get(mid, float("inf")) < before_ms
    )


def _offsets(committed: dict[int, int | None]) -> str:
    return " ".join(f"p{p}:{o if o is not None else '-'}" for p, o in sorted(committed.items()))


# -- 2. instances join and leave -----------------------------------------------------------------

COMMIT_FAILED_LOG = "commit failed"


async def rebalance(ctx: Context, res: ScenarioResult) -> None:
    p = ctx.plan
    async with ctx.stage("rebalance") as st:
        a = await st.start("a")
        load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.hold_s + p.after_kill_s))
        await asyncio.sleep(p.fault_at_s)
        join_ms = now_ms()
        b, c = st.spawn("b"), st.spawn("c")
        ready = await asyncio.gather(asyncio.to_thread(b.wait_ready),
                                     asyncio.to_thread(c.wait_ready))  # fmt: skip
        await asyncio.sleep(p.hold_s)
        failed_bc = [x.metric("moderator_commits_total", result="failed") or 0.0 for x in (b, c)]
        leave_ms = now_ms()
        exits = await asyncio.gather(asyncio.to_thread(b.terminate, 60),
                                     asyncio.to_thread(c.terminate, 60))  # fmt: skip
        await traffic_and_finish(st, res, load, join_ms)
        failed_a = a.metric("moderator_commits_total", result="failed") or 0.0
        logged = sum(_count(x, COMMIT_FAILED_LOG) for x in (a, b, c))
        violations = st.obs.ledger.order_violations()
        res.figure("b, c ready after", " / ".join(_fmt_s(r) for r in ready))
        res.figure("b, c SIGTERM exit (code, seconds)",
                   " / ".join(f"{code}, {secs:.1f} s" for code, secs in exits))  # fmt: skip
        res.figure("failed commits (metric: a at the end, b and c before they left)",
                   f"{failed_a:.0f} + {failed_bc[0]:.0f} + {failed_bc[1]:.0f}")  # fmt: skip
        res.figure("'commit failed' warnings in the three logs", logged)
        res.figure("leave → first decision of a message sent after it",
                   _fmt_s(st.obs.ledger.first_decision_after(leave_ms)))  # fmt: skip
        res.check("a channel's decisions never go backwards", not violations,
                  f"{len(violations)} out-of-order first decisions"
                  + (f", e.g. {violations[0]}" if violations else ""))  # fmt: skip
        res.check("the instances that left exited 0", all(code == 0 for code, _ in exits),
                  [code for code, _ in exits])  # fmt: skip
        res.check("the instance that stayed runs", a.alive())
        if not res.passed:
            _attach_logs(res, a, b, c)


# -- 3. SIGTERM under load -----------------------------------------------------------------------


async def sigterm(ctx: Context, res: ScenarioResult, *, workers: int = 1) -> None:
    """SIGTERM under load; with `workers` > 1, `run --workers` and SIGTERM to every process of
    its group at once, as systemd's KillMode=control-group does."""
    p = ctx.plan
    deadline_s = 15.0
    args = ("--workers", str(workers)) if workers > 1 else ()
    async with ctx.stage("term" if workers == 1 else "termgroup") as st:
        a = await st.start("a", st.env(shutdown_timeout_s=str(deadline_s)), args)
        load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.after_s))
        await asyncio.sleep(p.fault_at_s)
        fault_ms = now_ms()
        stop = a.terminate if workers == 1 else a.terminate_group
        code, exit_s = await asyncio.to_thread(stop, 60)
        committed = await st.committed()
        lg = st.obs.ledger
        await asyncio.sleep(0.5)  # let the observer read what a published last
        undecided_committed = [
            mid for mid, inp in lg.inputs.items()
            if inp.offset < (committed.get(inp.partition) or 0) and mid not in lg.first_ms
        ]  # fmt: skip
        redo = _uncommitted_decided(lg, committed, before_ms=float("inf"))
        b = await st.start("b")
        await traffic_and_finish(st, res, load, fault_ms)
        res.figure("exit code, time to exit", f"{code}, {exit_s:.2f} s "
                   f"(MODERATOR_SHUTDOWN_TIMEOUT_S={deadline_s:g})")  # fmt: skip
        res.figure("committed offsets after exit", _offsets(committed))
        res.figure("decided but left uncommitted by the exit (redone by the next)", redo)
        res.check("exit code 0", code == 0, code)
        res.check("exited within the shutdown deadline", exit_s <= deadline_s + 2,
                  f"{exit_s:.2f} s")  # fmt: skip
        res.check("nothing committed without its decision", not undecided_committed,
                  f"{len(undecided_committed)} committed inputs without a decision")  # fmt: skip
        res.check("duplicates only from the uncommitted rest", res.duplicated <= redo,
                  f"{res.duplicated} duplicated, {redo} uncommitted")  # fmt: skip
        if not res.passed:
            _attach_logs(res, a, b)


# -- 4. Redis killed, or frozen ------------------------------------------------------------------


Samples = list[tuple[float, dict[str, float]]]


async def _sample(
    proc: ModeratorChild, names: tuple[str, ...], out: Samples, interval_s: float = 0.25
) -> None:
    while True:
        samples = await asyncio.to_thread(proc.scrape)
        if samples is not None:
            out.append((now_ms(), {n: samples.total(n) for n in names}))
        await asyncio.sleep(interval_s)


async def redis_outage(ctx: Context, res: ScenarioResult, *, freeze: bool) -> None:
    p = ctx.plan
    names = ("moderator_redis_up", "moderator_redis_errors_total")
    async with ctx.stage("redis-freeze" if freeze else "redis-kill") as st:
        redis = st.redis
        assert redis is not None
        a = await st.start("a")
        samples: list[tuple[float, dict[str, float]]] = []
        sampler = asyncio.create_task(_sample(a, names, samples))
        load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.outage_s + p.after_s))
        await asyncio.sleep(p.fault_at_s)
        pid = redis.pid
        assert pid is not None
        fault_ms = now_ms()
        if freeze:
            os.kill(pid, signal.SIGSTOP)
        else:
            os.kill(pid, signal.SIGKILL)
            redis.stop()
        await asyncio.sleep(p.outage_s)
        back_ms = now_ms()
        if freeze:
            os.kill(pid, signal.SIGCONT)
        else:
            await asyncio.to_thread(redis.start)  # same port, empty
        await traffic_and_finish(st, res, load, fault_ms)
        sampler.cancel()
        lg = st.obs.ledger

        def at(t_ms: float, name: str) -> float:
            before = [v[name] for t, v in samples if t <= t_ms]
            return before[-1] if before else 0.0

        down = [v["moderator_redis_up"] for t, v in samples if fault_ms <= t < back_ms]
        up_again = [t for t, v in samples if t >= back_ms and v["moderator_redis_up"] == 1]
        errors = at(back_ms, names[1]) - at(fault_ms, names[1])
        flowing = lg.decided_between(fault_ms, back_ms)
        start = lg.start_ms or fault_ms
        before_p99 = lg.p_ms(0.99, start + 2000, fault_ms)
        during_p99 = lg.p_ms(0.99, fault_ms, back_ms)
        res.figure("decisions while Redis was " + ("frozen" if freeze else "down"), flowing)
        res.figure("Redis errors counted while it was out", f"{errors:.0f}")
        res.figure("p99 before / while out", f"{_fmt_ms(before_p99)} / {_fmt_ms(during_p99)}")
        res.figure("breaker closed after Redis came back",
                   _fmt_s((up_again[0] - back_ms) / 1000 if up_again else None))  # fmt: skip
        res.check("moderator_redis_up went 0 while out", bool(down) and min(down) == 0,
                  f"min {min(down) if down else '-'}")  # fmt: skip
        res.check("moderator_redis_up back to 1 by itself", bool(up_again))
        res.check("errors counted", errors >= 1, f"{errors:.0f}")
        res.check("decisions kept flowing", flowing > 0, flowing)
        res.check(
            "Redis failures not paid per message (errors ≤ 5% of decisions while out)",
            errors <= max(5.0, 0.05 * flowing),
            f"{errors:.0f} errors, {flowing} decisions",
        )
        res.notes.append(
            "Redis was " + ("frozen with SIGSTOP (calls time out)" if freeze else
                            "killed with SIGKILL (connections refused) and restarted empty "
                            "on the same port")
            + f" for {p.outage_s:g} s, {p.fault_at_s:g} s into the traffic."
        )  # fmt: skip
        if not res.passed:
            _attach_logs(res, a)


async def redis_killed(ctx: Context, res: ScenarioResult) -> None:
    await redis_outage(ctx, res, freeze=False)


async def redis_frozen(ctx: Context, res: ScenarioResult) -> None:
    await redis_outage(ctx, res, freeze=True)


# -- 5. broker frozen --------------------------------------------------------------------------


async def broker_frozen(ctx: Context, res: ScenarioResult, freeze_s: float | None = None) -> None:
    """`freeze_s` past the producer's 40 s request timeout makes in-flight sends time out and
    go through the re-send path, with commits failing until the thaw."""
    p = ctx.plan
    freeze_s = freeze_s or p.broker_freeze_s
    async with ctx.stage("broker-freeze", redis=False) as st:
        assert st.broker is not None
        a = await st.start("a")
        traffic_s = p.fault_at_s + freeze_s + p.after_kill_s
        load = asyncio.create_task(st.load(p.rate, traffic_s))
        await asyncio.sleep(p.fault_at_s)
        fault_ms = now_ms()
        st.broker.freeze()
        await asyncio.sleep(freeze_s)
        st.broker.thaw()
        thaw_ms = now_ms()
        await traffic_and_finish(st, res, load, fault_ms, timeout_s=180)
        lg = st.obs.ledger
        crashes = _count(a, "failed; stopping the moderator")
        res.figure("frozen for", f"{freeze_s:g} s (SIGSTOP, then SIGCONT)")
        res.figure("thaw → first decision of a message sent after the thaw",
                   _fmt_s(lg.first_decision_after(thaw_ms)))  # fmt: skip
        res.figure(
            "thaw → p99 within budget for good", _fmt_s(lg.back_under_budget(thaw_ms, BUDGET_MS))
        )
        res.figure("publish re-sends (timed-out or failed deliveries)",
                   f"{a.metric('moderator_publish_retries_total') or 0:.0f}")  # fmt: skip
        failed, ok = (a.metric("moderator_commits_total", result=r) or 0 for r in ("failed", "ok"))
        res.figure("commits failed / succeeded", f"{failed:.0f} / {ok:.0f}")
        res.figure("warnings logged", _count(a, "WARNING"))
        res.check("the moderator never stopped (no crash, no restart)", a.alive() and not crashes,
                  f"alive={a.alive()}, fatal log lines {crashes}")  # fmt: skip
        if not res.passed:
            _attach_logs(res, a)


# -- 6. publishing decisions fails ------------------------------------------------------------


REFUSED_IDS = "[37]$"  # one message in five: the load generator's ids end in a sequence number


def reject_window_schema(lo_ms: int, hi_ms: int, id_pattern: str | None = None) -> dict[str, Any]:
    """A Tansu JSON schema refusing decisions decided in [lo_ms, hi_ms] (INVALID_RECORD): all of
    them, or only those whose `message_id` matches `id_pattern`."""
    refused: dict[str, Any] = {
        "properties": {"decided_at_ms": {"minimum": lo_ms, "maximum": hi_ms}},
        "required": ["decided_at_ms"],
    }
    if id_pattern is not None:
        refused["properties"]["message_id"] = {"pattern": id_pattern}
        refused["required"].append("message_id")
    return {
        "title": "decisions refused in a window",
        "type": "object",
        "properties": {"value": {"type": "object", "not": refused}},
    }


RETRY_LOG = re.compile(r"publishing to \S+ failed .*; retry (\d+) in ([\d.]+)s")


async def publish_failure(ctx: Context, res: ScenarioResult, *, hold: bool = False) -> None:
    """Decisions decided in a window are refused for good (their bytes never change). By default
    one message in five is refused, so the topic keeps taking the others, and the moderator
    diverts each refused one to the dead-letter topic after MODERATOR_PUBLISH_ATTEMPTS refusals.
    With `hold` (MODERATOR_PUBLISH_ATTEMPTS=0) every decision in the window is refused and
    re-sent forever, and a restart redoes them."""
    p = ctx.plan
    lead_s = 15.0  # the moderator must be consuming by then
    window: list[int] = []

    def schemas(names: TopicSet) -> dict[str, dict[str, Any]]:
        lo = int(now_ms() + lead_s * 1000)
        window[:] = [lo, lo + int(p.publish_window_s * 1000)]
        pattern = None if hold else REFUSED_IDS
        return {names.out_topic: reject_window_schema(window[0], window[1], pattern)}

    async with ctx.stage("publish", schemas=schemas) as st:
        env = st.env(shutdown_timeout_s="5")
        if hold:
            env = st.env(shutdown_timeout_s="5", publish_attempts="0")
        a = await st.start("a", env)
        lo_ms, hi_ms = window
        if now_ms() > lo_ms - 3000:
            raise RuntimeError("the moderator started too late for the refusal window")
        # Diverting counts refusals only while other decisions go through: keep traffic up
        # until the last refused ones are through their back-offs.
        traffic_s = (hi_ms - now_ms()) / 1000 + (10 if hold else 20)
        load = asyncio.create_task(st.load(p.rate, traffic_s, drain_timeout_s=2.0))
        await asyncio.sleep((lo_ms - now_ms()) / 1000)
        fault_ms = now_ms()
        snapshots: list[tuple[float, dict[int, int | None]]] = []
        sampler = asyncio.create_task(_sample_commits(st, snapshots))
        await asyncio.sleep((hi_ms - now_ms()) / 1000 + 4)
        lg = st.obs.ledger
        which = "every decision" if hold else f"decisions whose message_id matches {REFUSED_IDS}"
        res.figure("refusal window", f"{p.publish_window_s:g} s (Tansu schema on the decisions "
                   f"topic: {which}, decided_at_ms in the window → INVALID_RECORD)")  # fmt: skip
        if hold:
            await _publish_held(st, res, a, load, hi_ms, fault_ms)
        else:
            await _publish_diverted(st, res, a, load, (lo_ms, hi_ms), fault_ms, snapshots)
        sampler.cancel()
        backoffs = [(int(m.group(1)), float(m.group(2))) for m in RETRY_LOG.finditer(a.output())]
        res.figure("back-offs seen in the log (s)", _backoff_summary([b for _, b in backoffs]))
        res.check("retries back off", _backoffs_grow(backoffs), _backoffs_by_attempt(backoffs))
        res.check("other decisions kept flowing", lg.decided_between(hi_ms, hi_ms + 4000) > 0,
                  lg.decided_between(hi_ms, hi_ms + 4000))  # fmt: skip


async def _publish_held(
    st: Stage,
    res: ScenarioResult,
    a: ModeratorChild,
    load: asyncio.Task[Any],
    hi_ms: float,
    fault_ms: float,
) -> None:
    """MODERATOR_PUBLISH_ATTEMPTS=0: refused decisions hold their partitions until a restart."""
    lg = st.obs.ledger
    stuck = [inp for mid, inp in lg.inputs.items()
             if mid not in lg.first_ms and inp.sent_at_ms < hi_ms]  # fmt: skip
    committed = await st.committed()
    passed_stuck = [i for i in stuck if (committed.get(i.partition) or 0) > i.offset]
    retries_mid = a.metric("moderator_publish_retries_total") or 0.0
    after = lg.decided_between(hi_ms, now_ms())
    await load
    retries_end = a.metric("moderator_publish_retries_total") or 0.0
    code, exit_s = await asyncio.to_thread(a.terminate, 60)
    restart_ms = now_ms()
    b = await st.start("b")
    await st.obs.all_decided(120)
    res.fill(lg, fault_ms, BUDGET_MS)
    stuck_ids = {i.message_id for i in stuck}
    redone_s = max((lg.first_ms[m] for m in stuck_ids if m in lg.first_ms), default=None)
    res.figure("decisions refused and held (inputs not decided 4 s after the window)", len(stuck))
    res.figure("committed offsets while held", _offsets(committed))
    res.figure("publish retries: 4 s after the window / at the end of the traffic",
               f"{retries_mid:.0f} / {retries_end:.0f}")  # fmt: skip
    res.figure("decisions published after the window while others were held", after)
    res.figure("SIGTERM with refused work held: exit code, time", f"{code}, {exit_s:.1f} s "
               "(MODERATOR_SHUTDOWN_TIMEOUT_S=5)")  # fmt: skip
    res.figure("restart → held messages all decided",
               _fmt_s((redone_s - restart_ms) / 1000 if redone_s else None))  # fmt: skip
    res.check("the broker really refused decisions", len(stuck) > 0, len(stuck))
    res.check("no offset committed past a refused decision", not passed_stuck,
              f"{len(passed_stuck)} refused inputs below the committed offset")  # fmt: skip
    res.notes.append(
        "With MODERATOR_PUBLISH_ATTEMPTS=0 a decision the broker refuses for good is re-sent "
        "with the same bytes forever: its partition's commits stay held (never committed "
        "without a decision) until the moderator restarts and decides the input again."
    )
    if not res.passed:
        _attach_logs(res, a, b)


COMMIT_SEEN_MARGIN_MS = 1000.0  # the observer reads a dead letter this long after its ack, at most


async def _publish_diverted(
    st: Stage,
    res: ScenarioResult,
    a: ModeratorChild,
    load: asyncio.Task[Any],
    window: tuple[float, float],
    fault_ms: float,
    snapshots: list[tuple[float, dict[int, int | None]]],
) -> None:
    """The default: refused decisions become `publish_failed` dead letters, then commit."""
    lo_ms, hi_ms = window
    lg = st.obs.ledger
    await traffic_and_finish(st, res, load, fault_ms, timeout_s=60, diverts=True)
    refused = a.metric("moderator_publish_refused_total", outcome="decision") or 0.0
    retries = a.metric("moderator_publish_retries_total") or 0.0
    code, exit_s = await asyncio.to_thread(a.terminate, 60)
    committed = await st.committed()
    diverted = lg.diverted_inputs()
    ends: dict[int, int] = {}
    for inp in lg.inputs.values():
        ends[inp.partition] = max(ends.get(inp.partition, 0), inp.offset + 1)
    # A snapshot taken well before a diverted input's dead letter was read must not have
    # committed past that input (the margin covers the observer's own lag behind the ack).
    early = [
        (inp.message_id, t_ms)
        for inp, seen_ms in diverted
        for t_ms, offsets in snapshots
        if t_ms < seen_ms - COMMIT_SEEN_MARGIN_MS and (offsets.get(inp.partition) or 0) > inp.offset
    ]
    delays = sorted((seen_ms - inp.sent_at_ms) / 1000 for inp, seen_ms in diverted)
    # Only decisions the schema refuses may be diverted: a refused id, decided in the window.
    outside = [
        inp.message_id
        for inp, _ in diverted
        if not lo_ms <= (lg.diverted_decided_ms.get((inp.partition, inp.offset)) or 0) <= hi_ms
        or not re.search(REFUSED_IDS, inp.message_id)
    ]
    res.figure("decisions refused for good, diverted as publish_failed dead letters",
               f"{len(diverted)} (moderator_publish_refused_total: {refused:.0f}; "
               f"dead letters read: {lg.dead_count['publish_failed']})")  # fmt: skip
    if delays:
        res.figure("sent → its publish_failed dead letter read (s)",
                   f"median {delays[len(delays) // 2]:.2f}, max {delays[-1]:.2f} "
                   f"(MODERATOR_PUBLISH_ATTEMPTS={Settings().publish_attempts})")  # fmt: skip
    res.figure("publish retries", f"{retries:.0f}")
    res.figure("commit snapshots checked against the dead letters", len(snapshots))
    res.figure("committed offsets after SIGTERM / ends of the partitions",
               f"{_offsets(committed)} / {_offsets(dict(ends.items()))}")  # fmt: skip
    res.figure("SIGTERM: exit code, time", f"{code}, {exit_s:.1f} s")
    res.check("the broker really refused decisions", len(diverted) > 0, len(diverted))
    res.check("only refused decisions were diverted (a refused id, decided in the window)",
              not outside, f"{len(outside)} outside: {outside[:5]}")  # fmt: skip
    res.check("no offset committed past a refused input before its dead letter",
              not early, f"{len(early)} snapshots ahead of a dead letter")  # fmt: skip
    res.check("nothing held: every partition committed to its end, exit 0",
              code == 0 and all(committed.get(p) == e for p, e in ends.items()),
              _offsets(committed))  # fmt: skip
    res.notes.append(
        "The broker answers the same bytes the same way, so after MODERATOR_PUBLISH_ATTEMPTS "
        "refusals the moderator dead-letters the input (code publish_failed, the refused "
        "decision in the header moderator.decision) and commits past it only once that dead "
        "letter is acknowledged; the partition no longer stalls until a restart."
    )
    if not res.passed:
        _attach_logs(res, a)


async def _sample_commits(st: Stage, out: list[tuple[float, dict[int, int | None]]]) -> None:
    """Snapshots of the group's commits, each stamped when its answer came back."""
    while True:
        offsets = await st.committed()
        out.append((now_ms(), offsets))
        await asyncio.sleep(0.25)


def _backoffs_by_attempt(backoffs: list[tuple[int, float]]) -> str:
    by: dict[int, list[float]] = {}
    for attempt, b in backoffs:
        by.setdefault(attempt, []).append(b)
    return ", ".join(f"retry {k}: max {max(v):g} s" for k, v in sorted(by.items())[:6])


def _backoffs_grow(backoffs: list[tuple[int, float]]) -> bool:
    """The longest back-off of a later retry is longer than the longest of the first."""
    by: dict[int, float] = {}
    for attempt, b in backoffs:
        by[attempt] = max(by.get(attempt, 0.0), b)
    return len(by) >= 3 and max(v for k, v in by.items() if k >= 3) > by.get(1, float("inf"))


def _backoff_summary(backoffs: list[float]) -> str:
    if not backoffs:
        return "none"
    ordered = sorted(backoffs)
    median = ordered[len(ordered) // 2]
    return (f"{len(ordered)} retries; back-off min {ordered[0]:g} s, median {median:g} s, "
            f"max {ordered[-1]:g} s (steps {', '.join(f'{b:g}' for b in RETRY_BACKOFF_S)} s, "
            f"each drawn within ±{RETRY_JITTER:.0%})")  # fmt: skip


# -- 7. overload -------------------------------------------------------------------------------


async def overload(ctx: Context, res: ScenarioResult) -> None:
    p = ctx.plan
    cap = 1000
    names = ("moderator_in_flight", "moderator_consumer_lag", "moderator_degraded_decisions_total")
    async with ctx.stage("overload") as st:
        saturation = await drain_rate(st, p.probe_messages)
        rate = round(3 * saturation)
        a = await st.start("a", st.env(degraded_mode="lexical", max_in_flight=str(cap)))
        samples: list[tuple[float, dict[str, float]]] = []
        rss: list[tuple[float, int]] = []
        sampler = asyncio.create_task(_sample(a, names, samples))
        rss_task = asyncio.create_task(_sample_rss(a, rss))
        await asyncio.sleep(1.0)
        base_kb = _rss_kb(a) or 0
        fault_ms = now_ms()
        load = asyncio.create_task(st.load(rate, p.overload_s, dup_ratio=0.0))
        summary = await load
        end_ms = fault_ms + p.overload_s * 1000
        await st.obs.all_decided(180)
        await asyncio.sleep(2.5)  # two lag samples after the catch-up
        sampler.cancel()
        rss_task.cancel()
        lg = st.obs.ledger
        res.fill(lg, fault_ms, BUDGET_MS)
        peak_kb = max((kb for _, kb in rss), default=0)
        in_flight = max((v["moderator_in_flight"] for _, v in samples), default=0.0)
        lag_peak = max((v["moderator_consumer_lag"] for _, v in samples), default=0.0)
        lag_zero = [t for t, v in samples if t > end_ms and v["moderator_consumer_lag"] == 0]
        caught_ms = max(lg.first_ms.values(), default=end_ms)
        res.figure("saturation (drain of a backlog, model on every message)",
                   f"{saturation:.0f} msgs/s")  # fmt: skip
        res.figure("offered", f"{rate} msgs/s (3x) for {p.overload_s:g} s; generator reached "
                   f"{summary.offered_rate_per_s:.0f}/s")  # fmt: skip
        res.figure("degraded decisions", f"{len(lg.degraded)} of {lg.decided} "
                   f"({len(lg.degraded) / max(lg.decided, 1):.0%})")  # fmt: skip
        res.figure("RSS before / peak", f"{base_kb / 1024:.0f} / {peak_kb / 1024:.0f} MiB")
        res.figure("in flight, peak (cap)", f"{in_flight:.0f} ({cap})")
        res.figure("consumer lag, peak", f"{lag_peak:.0f}")
        res.figure("burst end → last decision (caught up)",
                   _fmt_s(max(0.0, (caught_ms - end_ms) / 1000)))  # fmt: skip
        res.figure("burst end → lag 0 on /metrics",
                   _fmt_s((lag_zero[0] - end_ms) / 1000 if lag_zero else None))  # fmt: skip
        res.check("degraded decisions appear, marked", len(lg.degraded) > 0, len(lg.degraded))
        res.check("in flight never above the cap", in_flight <= cap, f"{in_flight:.0f}")
        res.check(
            "memory bounded (peak RSS < before + 256 MiB)",
            peak_kb - base_kb < 256 * 1024,
            f"+{(peak_kb - base_kb) / 1024:.0f} MiB",
        )
        res.check("the stream caught up (lag back to 0)", bool(lag_zero))
        if not res.passed:
            _attach_logs(res, a)


async def _sample_rss(proc: ModeratorChild, out: list[tuple[float, int]]) -> None:
    while True:
        kb = _rss_kb(proc)
        if kb is not None:
            out.append((now_ms(), kb))
        await asyncio.sleep(0.2)


# -- 8. hostile input --------------------------------------------------------------------------


async def hostile_input(ctx: Context, res: ScenarioResult) -> None:
    p = ctx.plan
    records = burst(p.junk, p.hostile_valid)
    async with ctx.stage("hostile") as st:
        a = await st.start("a")
        load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.after_s))
        await asyncio.sleep(p.fault_at_s)
        fault_ms = now_ms()
        await _produce_raw(st.bootstrap, st.names.in_topic, records)
        sent_ms = now_ms()
        keys = {r.key for r in records}
        lg = st.obs.ledger

        def accounted(ledger: Ledger) -> bool:
            done = sum(1 for k in keys if k in ledger.dead or k.decode() in ledger.first_ms)
            return done == len(keys)

        if not await st.obs.wait_for(accounted, 180):
            missing = [r.case for r in records
                       if r.key not in lg.dead and r.key.decode() not in lg.first_ms]  # fmt: skip
            res.notes.append(f"{len(missing)} hostile records had no outcome after 180 s: "
                             f"{sorted(set(missing))[:10]}")  # fmt: skip
        done_ms = now_ms()
        await traffic_and_finish(st, res, load, fault_ms)
        res.hostile = judge(records, lg.dead, set(lg.first_ms))
        junk = [r for r in records if not CASES[r.case].valid]
        window_ms = max(done_ms, fault_ms + 3000) - fault_ms
        start = lg.start_ms or fault_ms
        base_lo = start + 2000
        base_ms = max(fault_ms - base_lo, 1.0)
        during = _valid_decided(lg, fault_ms, fault_ms + window_ms) / (window_ms / 1000)
        before = _valid_decided(lg, base_lo, fault_ms) / (base_ms / 1000)
        ratio = during / before if before else None
        n_junk = sum(1 for r in records if DECISION not in _expect(r.case))
        res.figure("hostile records", f"{n_junk} junk + {len(records) - n_junk} valid, "
                   f"produced in {(sent_ms - fault_ms) / 1000:.2f} s")  # fmt: skip
        res.figure("burst → every hostile record dead-lettered or decided",
                   _fmt_s((done_ms - fault_ms) / 1000))  # fmt: skip
        res.figure(
            "valid traffic decided/s before / during the burst",
            f"{before:.1f} / {during:.1f} (ratio {ratio:.2f})" if ratio else "-",
        )
        res.figure("valid traffic p99 sent before / during the burst",
                   f"{_fmt_ms(lg.p_ms(0.99, base_lo, fault_ms))} / "
                   f"{_fmt_ms(lg.p_ms(0.99, fault_ms, fault_ms + window_ms))}")  # fmt: skip
        res.figure(
            "dead letters by code", ", ".join(f"{k} {v}" for k, v in sorted(lg.dead_count.items()))
        )
        bad_cases = [row.case.name for row in res.hostile if not row.ok]
        res.check(
            "every junk record dead-lettered with the expected code, every valid one decided",
            not bad_cases,
            ", ".join(bad_cases) or f"{len(junk)} records",
        )
        res.check(
            "valid throughput kept during the burst (≥ 0.8 of before)",
            ratio is not None and ratio >= 0.8,
            f"{ratio:.2f}" if ratio else "-",
        )
        if not res.passed:
            _attach_logs(res, a)


def _expect(case: str) -> frozenset[str]:
    return CASES[case].expect


def _valid_decided(lg: Ledger, lo_ms: float, hi_ms: float) -> int:
    """Load-generator (not hostile) messages first decided in [lo_ms, hi_ms)."""
    return sum(
        1 for mid, t in lg.first_ms.items() if lo_ms <= t < hi_ms and not mid.startswith("h-")
    )


async def _produce_raw(bootstrap: str, topic: str, records: list[Any]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=8 * MIB,
        client_id="chaos-hostile",
    )  # fmt: skip
    await producer.start()
    try:
        futures = [await producer.send(topic, value=r.value, key=r.key) for r in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


# -- 9. the moderation loop: SIGKILL while verdicts flow ---------------------------------------

LOOP_FALLBACK = "nudge"  # the timeout's action: not the default `allow`, so it shows the policy's
LOOP_MODERATORS = ("chaos-mod-1", "chaos-mod-2")
LOOP_VERDICTS = ("allow", "block", "nudge")
# moderator/review/held.py LEASE_MS: a timeout claimed by the killed one waits this
LOOP_LEASE_S = 30.0


def loop_rule(n: int, review: dict[str, Any]) -> list[Answer]:
    """The scripted moderator's answers to the n-th held message: every third is left to its
    timeout; the others get a verdict, and every fourth of those a later, different one."""
    if n % 3 == 2:
        return []
    verdict = LOOP_VERDICTS[(n // 3) % len(LOOP_VERDICTS)]
    answers = [Answer(verdict, LOOP_MODERATORS[0])]
    if n % 4 == 0:
        other = LOOP_VERDICTS[(LOOP_VERDICTS.index(verdict) + 1) % len(LOOP_VERDICTS)]
        answers.append(Answer(other, LOOP_MODERATORS[1]))
    return answers


def loop_policy(path: Path, timeout_s: float) -> Path:
    """The default policy with a short review timeout and the loop's fallback, as a file."""
    spec = {**read_spec(), "review_timeout_s": timeout_s, "review_fallback": LOOP_FALLBACK}
    path.write_bytes(orjson.dumps(spec))
    return path


async def moderation_loop(ctx: Context, res: ScenarioResult) -> None:
    """Two moderators consume while messages flow, a share of them held for review, and a
    scripted moderator answers the review topic with verdicts; one moderator is SIGKILLed in the
    middle and restarted at once. Held messages left without a verdict time out."""
    p = ctx.plan
    timeout_s = p.review_timeout_s
    async with ctx.stage("loop") as st:
        n = st.names
        review_topic, verdict_topic = f"{n.in_topic}.review", f"{n.in_topic}.verdicts"
        await ensure_topics(st.bootstrap, {review_topic: PARTITIONS, verdict_topic: PARTITIONS})
        ctx.log_dir.mkdir(parents=True, exist_ok=True)
        policy = loop_policy(ctx.log_dir / f"{n.group_id}.policy.json", timeout_s)
        env = st.env(policy=str(policy), review_topic=review_topic, verdict_topic=verdict_topic)
        reviewer = Reviewer(st.bootstrap, review_topic, verdict_topic, loop_rule)
        async with reviewer:
            a, b = await asyncio.gather(st.start("a", env), st.start("b", env))
            load = asyncio.create_task(st.load(p.rate, p.fault_at_s + p.after_kill_s,
                                               held_ratio=p.held_ratio))  # fmt: skip
            await asyncio.sleep(p.fault_at_s)
            before = a.scrape()
            fault_ms = now_ms()
            a.kill()
            c = st.spawn("c", env)  # restarted at once, as a supervisor would
            held_at_kill, sent_at_kill = len(reviewer.held), len(reviewer.sent)

            # Every held message ended: the last one's timeout, a sweep, and a lease the
            # killed instance may have left on a timeout it had claimed.
            ended = functools.partial(_every_held_ended, reviewer)
            await traffic_and_finish(st, res, load, fault_ms, settled=ended,
                                      settle_s=timeout_s + LOOP_LEASE_S + 30)  # fmt: skip
            lg = st.obs.ledger
            survivors = [x.scrape() for x in (b, c)]
        out = account(reviewer.held, reviewer.sent, lg.final_kinds, lg.final_first_ms, lg.dead)
        _loop_figures(res, reviewer, out, before, survivors, timeout_s)
        res.figure("held / verdicts sent before the kill", f"{held_at_kill} / {sent_at_kill}")
        res.check("messages were held and verdicts given on both sides of the kill",
                  0 < held_at_kill < out.held and 0 < sent_at_kill < len(reviewer.sent),
                  f"{held_at_kill} of {out.held} held, {sent_at_kill} of "
                  f"{len(reviewer.sent)} verdicts before it")  # fmt: skip
        res.check("every verdict delivered to the broker", not reviewer.failed,
                  f"{len(reviewer.failed)} not delivered")  # fmt: skip
        res.check("every held message got a final decision", not out.missing,
                  f"{len(out.missing)} without{_ids(out.missing)}")  # fmt: skip
        res.check("one kind of final decision per held message (repeats allowed)",
                  not out.mixed, f"{len(out.mixed)} with two kinds{_ids(out.mixed)}")  # fmt: skip
        res.check("each first verdict applied as the final decision; later verdicts changed "
                  "nothing", not out.wrong_verdict and out.applied == out.verdicts_first,
                  f"{out.applied} of {out.verdicts_first} applied, "
                  f"{len(out.wrong_verdict)} otherwise{_ids(out.wrong_verdict)}")  # fmt: skip
        res.check("no verdict dead-lettered as verdict_not_held for a held message",
                  not out.not_held and not lg.dead_count[NOT_HELD],
                  f"{lg.dead_count[NOT_HELD]} dead letters{_ids(out.not_held)}")  # fmt: skip
        res.check(f"held messages without a verdict timed out to the fallback ({LOOP_FALLBACK})",
                  out.timed_out > 0 and not out.wrong_timeout,
                  f"{out.timed_out} timed out, {len(out.wrong_timeout)} otherwise"
                  f"{_ids(out.wrong_timeout)}")  # fmt: skip
        res.check("no final decision for a message never held", not out.unheld_finals,
                  f"{len(out.unheld_finals)}{_ids(out.unheld_finals)}")  # fmt: skip
        res.check("the restarted instance runs", c.alive())
        if not res.passed:
            _attach_logs(res, a, b, c)


def _ids(message_ids: list[str]) -> str:
    """`: [the first few]`, or nothing for none."""
    return f": {message_ids[:5]}" if message_ids else ""


def _every_held_ended(reviewer: Reviewer, ledger: Ledger) -> bool:
    """Every message the ledger saw held has reached the reviewer, and each has its final
    decision (a verdict applied, or its timeout's fallback)."""
    reviewer.check()
    return len(reviewer.held) >= ledger.actions["review"] and all(
        mid in ledger.final_kinds for mid in reviewer.held
    )


def _loop_figures(
    res: ScenarioResult,
    reviewer: Reviewer,
    out: Outcomes,
    before: child.Samples | None,
    survivors: list[child.Samples | None],
    timeout_s: float,
) -> None:
    res.figure("held messages (review records read, repeats included)",
               f"{out.held} ({reviewer.records})")  # fmt: skip
    res.figure("verdicts sent: first / later (stock confluent-kafka producer)",
               f"{out.verdicts_first} / {out.verdicts_late}")  # fmt: skip
    res.figure("verdicts applied (final decision `verdict:…`)", out.applied)
    res.figure(f"timed out to {LOOP_FALLBACK} (review_timeout_s={timeout_s:g})", out.timed_out)
    res.figure("final decisions read / repeated by redelivery", f"{out.finals} / {out.repeats}")
    if out.latencies_ms:
        lat = out.latencies_ms
        res.figure("verdict acknowledged → its final decision read",
                   f"median {lat[len(lat) // 2]:.0f} ms, max {lat[-1]:.0f} ms")  # fmt: skip
    counted = [s for s in (before, *survivors) if s is not None]
    outcomes = {o: sum(s.total("moderator_verdict_outcomes_total", outcome=o) for s in counted)
                for o in ("applied", "late", "not_held", "timed_out", "invalid")}  # fmt: skip
    timeouts = sum(s.total("moderator_review_timeouts_total") for s in counted)
    res.figure("verdict outcomes the instances counted (the killed one scraped just before)",
               ", ".join(f"{k} {v:.0f}" for k, v in outcomes.items())
               + f"; timeouts {timeouts:.0f}")  # fmt: skip


# -- 10. Redis SIGKILLed with messages held ----------------------------------------------------

HELD_REDIS_ANSWERED = 3  # every third held message is answered at once, before the kill


def held_restart_rule(n: int, review: dict[str, Any]) -> list[Answer]:
    """Every third held message gets its verdict at once; the others wait for the kill (then
    half get their verdict after Redis is back, the rest time out)."""
    if n % HELD_REDIS_ANSWERED:
        return []
    return [Answer(LOOP_VERDICTS[(n // HELD_REDIS_ANSWERED) % len(LOOP_VERDICTS)],
                   LOOP_MODERATORS[0])]  # fmt: skip


async def _answer_later(bootstrap: str, topic: str, answers: list[tuple[str, str]]) -> list[Sent]:
    """Verdicts for held messages, each acknowledged before the next, as a moderators' tool
    would send them: `answers` are (message id, verdict)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    sent: list[Sent] = []
    try:
        for message_id, verdict in answers:
            moderator_id, at_ms = LOOP_MODERATORS[1], int(now_ms())
            value = orjson.dumps({"message_id": message_id, "verdict": verdict,
                                  "moderator_id": moderator_id, "at_ms": at_ms})  # fmt: skip
            await producer.send_and_wait(topic, value, key=message_id.encode())
            sent.append(Sent(message_id, verdict, moderator_id, True, now_ms()))
    finally:
        await producer.stop()
    return sent


def _awaiting(redis: EmbeddedRedis, group: str) -> int:
    """Held messages awaiting a verdict or their timeout in Redis (the due index's size)."""
    with redis_py.Redis.from_url(redis.url, socket_timeout=5) as client:
        return int(client.zcard(f"{HELD_PREFIX}{group}:due"))


async def redis_restart_held(ctx: Context, res: ScenarioResult) -> None:
    """Messages held for review in a Redis that keeps an append-only file (fsynced every
    second, no eviction: the shipped configuration), then Redis SIGKILLed and restarted at once on
    its data: every held message still gets exactly its final decision, a verdict sent after
    the restart or its timeout; at most those held in the last second may be lost."""
    p = ctx.plan
    timeout_s = p.review_timeout_s
    before_kill_s = 2 * p.fault_at_s  # a backlog of held messages, most awaiting
    with tempfile.TemporaryDirectory(prefix="chaos-redis-") as data:
        async with ctx.stage("redis-held", redis_dir=Path(data)) as st:
            redis, n = st.redis, st.names
            assert redis is not None
            review_topic, verdict_topic = f"{n.in_topic}.review", f"{n.in_topic}.verdicts"
            await ensure_topics(st.bootstrap, {review_topic: PARTITIONS,
                                               verdict_topic: PARTITIONS})  # fmt: skip
            ctx.log_dir.mkdir(parents=True, exist_ok=True)
            policy = loop_policy(ctx.log_dir / f"{n.group_id}.policy.json", timeout_s)
            env = st.env(policy=str(policy), review_topic=review_topic,
                         verdict_topic=verdict_topic)  # fmt: skip
            async with Reviewer(st.bootstrap, review_topic, verdict_topic,
                                held_restart_rule) as reviewer:  # fmt: skip
                a = await st.start("a", env)
                load = asyncio.create_task(st.load(p.rate, before_kill_s + p.after_s,
                                                   held_ratio=p.held_ratio))  # fmt: skip
                await asyncio.sleep(before_kill_s)
                awaiting_before = await asyncio.to_thread(_awaiting, redis, n.group_id)
                pid = redis.pid
                assert pid is not None
                kill_ms = now_ms()
                os.kill(pid, signal.SIGKILL)
                redis.stop()
                await asyncio.to_thread(redis.start)  # same port, same data directory
                restart_ms = now_ms() - kill_ms
                awaiting_after = await asyncio.to_thread(_awaiting, redis, n.group_id)
                # Held before the kill, still waiting, and not about to time out: half of them
                # get their verdict now, from Redis's replayed file.
                soon_ms = now_ms() + 5_000
                waiting = [mid for mid, review in reviewer.held.items()
                           if review["held_at_ms"] < kill_ms and mid not in reviewer.answered()
                           and review["expires_at_ms"] > soon_ms]  # fmt: skip
                later = await _answer_later(st.bootstrap, verdict_topic, [
                    (mid, LOOP_VERDICTS[i % len(LOOP_VERDICTS)])
                    for i, mid in enumerate(waiting[::2])])  # fmt: skip

                ended = functools.partial(_every_held_ended, reviewer)
                await traffic_and_finish(st, res, load, kill_ms, settled=ended,
                                          settle_s=timeout_s + LOOP_LEASE_S + 30)  # fmt: skip
                lg = st.obs.ledger
                samples = a.scrape()
            out = account(reviewer.held, [*reviewer.sent, *later], lg.final_kinds,
                          lg.final_first_ms, lg.dead)  # fmt: skip
            kept = survival(reviewer.held, out, kill_ms)
            res.figure("held before the kill (in its last second) / after it",
                       f"{kept.before} ({kept.last_second}) / {kept.after}")  # fmt: skip
            res.figure("held messages awaiting in Redis: just before the kill / just after "
                       "the restart", f"{awaiting_before} / {awaiting_after}")  # fmt: skip
            res.figure("Redis SIGKILLed to answering again on its append-only file",
                       f"{restart_ms:.0f} ms")  # fmt: skip
            res.figure(
                "verdicts: at once (before the kill or after it) / after the restart for "
                "messages held before the kill",
                f"{len(reviewer.sent)} / {len(later)}",
            )
            _held_restart_checks(res, out, kept, awaiting_before, awaiting_after, samples)
            res.notes.append(
                f"Redis ran as shipped (--appendonly yes --appendfsync everysec "
                f"--maxmemory-policy noeviction, its data in a directory of its own); "
                f"SIGKILLed {before_kill_s:g} s into the traffic with messages held "
                f"(review_timeout_s={timeout_s:g}) and restarted at once on the same port and "
                "directory. A killed process loses nothing its replies acknowledged (the file "
                "was written before them); the last second is what a crash of the host may "
                "take, which this does not simulate."
            )
            if not res.passed:
                _attach_logs(res, a)


def _held_restart_checks(
    res: ScenarioResult,
    out: Outcomes,
    kept: Survival,
    awaiting_before: int,
    awaiting_after: int,
    samples: child.Samples | None,
) -> None:
    res.figure(
        "held messages ended: by a verdict / by their timeout",
        f"{out.applied} / "
        f"{out.timed_out} (final decisions read {out.finals}, repeats {out.repeats})",
    )
    if samples is not None:
        counted = {o: samples.total("moderator_verdict_outcomes_total", outcome=o)
                   for o in ("applied", "not_held", "timed_out")}  # fmt: skip
        res.figure("verdict outcomes the moderator counted",
                   ", ".join(f"{k} {v:.0f}" for k, v in counted.items()))  # fmt: skip
    res.figure("lost: held in the last second before the kill (everysec allows) / earlier / "
               "after", f"{len(kept.lost_last_second)} / {len(kept.lost_before)} / "
               f"{len(kept.lost_after)}")  # fmt: skip
    res.check("messages awaited in Redis when it was killed", awaiting_before > 0 < kept.before,
              f"{awaiting_before} awaiting")  # fmt: skip
    res.check("the restarted Redis read its held messages back (its append-only file)",
              awaiting_after > 0, f"{awaiting_after} of {awaiting_before}")  # fmt: skip
    res.check("no held message lost beyond the last second's writes",
              not kept.lost_beyond_last_second, f"{len(kept.lost_beyond_last_second)}"
              f"{_ids(list(kept.lost_beyond_last_second))}")  # fmt: skip
    res.check("one kind of final decision per held message (repeats allowed)",
              not out.mixed, f"{len(out.mixed)}{_ids(out.mixed)}")  # fmt: skip
    res.check("each first verdict, before the kill or after the restart, is the final decision",
              not out.wrong_verdict and out.applied == out.verdicts_first,
              f"{out.applied} of {out.verdicts_first} applied"
              f"{_ids(out.wrong_verdict)}")  # fmt: skip
    res.check(f"held messages without a verdict timed out to the fallback ({LOOP_FALLBACK})",
              out.timed_out > 0 and not out.wrong_timeout,
              f"{out.timed_out} timed out, {len(out.wrong_timeout)} otherwise"
              f"{_ids(out.wrong_timeout)}")  # fmt: skip
    res.check("no final decision for a message never held", not out.unheld_finals,
              f"{len(out.unheld_finals)}{_ids(out.unheld_finals)}")  # fmt: skip


# -- the list ----------------------------------------------------------------------------------

SCENARIOS: dict[str, tuple[str, str, Scenario]] = {
    "sigkill": ("SIGKILL mid-stream, restart", "moderator SIGKILLed under load, a new one "
                "started at once (session timeout 6 s, the default)", sigkill_restart),
    "sigkill-3s": ("SIGKILL, session timeout 3 s", "as above with "
                   "MODERATOR_SESSION_TIMEOUT_MS=3000",
                   functools.partial(sigkill_restart, session_timeout_ms=3000)),
    "sigkill-10s": ("SIGKILL, session timeout 10 s", "as above with "
                    "MODERATOR_SESSION_TIMEOUT_MS=10000 (aiokafka's default)",
                    functools.partial(sigkill_restart, session_timeout_ms=10_000)),
    "rebalance": ("Instances join, then leave", "two more instances join the group under load, "
                  "then leave with SIGTERM", rebalance),
    "sigterm": ("SIGTERM under load", "SIGTERM under load; a new instance started after "
                "the exit", sigterm),
    "sigterm-workers": ("SIGTERM to every process, --workers 2", "`run --workers 2` under "
                        "load; SIGTERM to the whole process group at once (systemd's "
                        "KillMode=control-group); a new instance started after the exit",
                        functools.partial(sigterm, workers=2)),
    "redis-kill": ("Redis killed, restarted", "Redis SIGKILLed under load, restarted empty "
                   "on its port", redis_killed),
    "redis-freeze": ("Redis frozen", "Redis SIGSTOPped under load (calls hang), then "
                     "SIGCONT", redis_frozen),
    "broker-freeze": ("Broker frozen", "the Kafka broker SIGSTOPped under load, then "
                      "SIGCONT", broker_frozen),
    "broker-freeze-long": ("Broker frozen past the request timeout", "the broker SIGSTOPped "
                           "for 45 s, past the producer's 40 s request timeout, then SIGCONT",
                           functools.partial(broker_frozen, freeze_s=45.0)),
    "publish-fail": ("Publishing decisions fails", "the broker refuses, for good "
                     "(INVALID_RECORD), the decisions of one message in five decided in a few "
                     "seconds' window; default settings", publish_failure),
    "publish-hold": ("Publishing fails, re-sent forever", "the broker refuses every decision "
                     "decided in a few seconds' window, for good; MODERATOR_PUBLISH_ATTEMPTS=0: "
                     "they hold their partitions until a restart",
                     functools.partial(publish_failure, hold=True)),
    "overload": ("Overload at 3x saturation", "3x the saturation rate, degraded mode "
                 "lexical, in-flight cap 1000", overload),
    "hostile": ("Hostile input burst", "a burst of junk records and nasty valid chat amid "
                "valid traffic", hostile_input),
    "loop": ("Moderation loop: SIGKILL while verdicts flow", "two moderators, a share of the "
             "messages held for review and answered by a scripted moderator's verdicts (some "
             "left to time out, some given a second verdict); one moderator SIGKILLed mid-stream "
             "and restarted at once", moderation_loop),
    "redis-restart-held": ("Redis SIGKILLed with messages held", "messages held for review in "
                           "a Redis with an append-only file (everysec, noeviction), Redis "
                           "SIGKILLed and restarted at once on its data; verdicts after the "
                           "restart, the rest left to time out", redis_restart_held),
    "promotion-kill": ("SIGKILL during a promotion", "two moderators with the shipped model "
                       "deciding and a candidate as shadow; `moderator rollout promote` under "
                       "load, one moderator SIGKILLed as soon as the command exits (the record "
                       "acknowledged) and restarted at once", promotion_kill),
}  # fmt: skip


async def run_scenario(ctx: Context, key: str) -> ScenarioResult:
    title, fault, scenario = SCENARIOS[key]
    res = ScenarioResult(key, title, fault)
    start = time.monotonic()
    try:
        await scenario(ctx, res)
    except Exception as exc:
        log.exception("scenario %s failed", key)
        res.error = f"{type(exc).__name__}: {exc}"
    res.wall_s = time.monotonic() - start
    return res
