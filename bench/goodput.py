"""Goodput inside the budget (issue 31, item 3): the highest open-loop rate at which p99 end to
end stays within 50 ms, found by search, for the moderator and for the Quix Streams peer.

Each probe is one open-loop run of `bench.peer.measure` (a fresh process, topics and group, warm,
the load generator's traffic with its seed), so a probe of the moderator and one of the peer at
the same rate are the runs the peer section makes. The search grows the rate by `factor` from
`start` until a probe misses the budget, then halves the gap geometrically until the highest
passing rate is within `resolution` of the lowest failing one; that rate is run once more to
confirm it. A rate counts only while no probe at or below it has failed, so a confirmation that
fails moves the search below it; out of probes, the best rate so far is reported unconfirmed.

The host bound at the goodput rate is the rate two cores could carry if the moderator cost no
more than its bare model: cores / (bare model + broker + load generator CPU per message), the
bare model measured in this process on the same texts one message per call (the batch size an
open-loop run below saturation mostly sees), the broker and load generator from the run at the
goodput rate itself.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import CpuSplit, load_average
from bench.peer import PeerPlan, measure
from bench.stack import ModeratorConfig, create_topics, moderator, warm_up
from bench.texts import bench_texts
from loadgen.hop import measure_hop
from loadgen.kafka import TopicSet
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.loop import run

log = logging.getLogger(__name__)

BUDGET_MS = 50.0
# The moderator as configured by default (its threads: all cores, one scorer each), the same with
# one scoring thread (MODERATOR_THREADS=1: a core left to the event loop, the broker and the load
# generator), and the Quix Streams peer (one model call at a time).
ONE_SCORER = "moderator-1"
ARMS = ("moderator", ONE_SCORER, "quix")
BARE_TEXTS = 400
IDLE_FETCH_WAITS_MS = (5, 100, 500)  # the bench's (and the default), and two a real broker allows
IDLE_SETTLE_S = 3.0
IDLE_S = 20.0


@dataclass(frozen=True)
class GoodputPlan:
    start: float  # msgs/s of the first probe
    duration_s: float  # of each probe
    factor: float = 1.5  # growth while every probe passes
    resolution: float = 0.08  # stop when the lowest failing rate is within this of the best
    max_probes: int = 12


@dataclass(frozen=True)
class Probe:
    rate: float
    ok: bool
    row: Mapping[str, Any]


def within_budget(row: Mapping[str, Any]) -> bool:
    """Whether an open-loop run's p99 end to end stayed within BUDGET_MS, every message decided."""
    p99 = row.get("p99_ms")
    return p99 is not None and p99 <= BUDGET_MS and not row.get("missing")


def _best(probes: Sequence[Probe]) -> float | None:
    """The highest passing rate with no failed probe at or below it."""
    fails = [p.rate for p in probes if not p.ok]
    floor = min(fails, default=float("inf"))
    return max((p.rate for p in probes if p.ok and p.rate < floor), default=None)


def search(
    probe: Callable[[float], Probe], plan: GoodputPlan
) -> tuple[float | None, bool, list[Probe]]:
    """The goodput (the highest passing rate with no failed probe at or below it), whether a
    second run at it passed too, and every probe in the order run. Out of probes, the search
    returns the best rate so far, unconfirmed."""
    probes: list[Probe] = []
    rate = plan.start
    while len(probes) < plan.max_probes:
        probes.append(probe(rate))
        best = _best(probes)
        low_fail = min((p.rate for p in probes if not p.ok), default=None)
        if best is not None and sum(1 for p in probes if p.rate == best) >= 2:
            return best, True, probes  # passed twice, nothing at or below it failed
        if low_fail is None:
            rate = round(rate * plan.factor, 1)
        elif best is None:
            rate = round(low_fail / plan.factor, 1)
        elif low_fail / best <= 1 + plan.resolution:
            rate = best  # close enough: run it again to confirm it
        else:
            rate = round((best * low_fail) ** 0.5, 1)
    return _best(probes), False, probes


def bare_model_ms(model_dir: Path, threads: int, texts: Sequence[str]) -> float:
    """CPU-ms per message of the bare model, one message per call (tokenizing included), on the
    intra-op threads the moderator gives one batch."""
    per_call, _ = Settings(threads=threads).scoring_layout
    classifier = Classifier(model_dir, threads=per_call)
    for text in texts[:32]:  # warm the session
        classifier.score_ids(classifier.encode([text]))
    before = resource.getrusage(resource.RUSAGE_SELF)
    for text in texts:
        classifier.score_ids(classifier.encode([text]))
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return 1000.0 * used / len(texts)


def host_bound(cores: int, bare_ms: float, cpu: Mapping[str, float]) -> float:
    """Msgs/s that `cores` could carry at `bare_ms` of model per message plus the run's broker
    and load generator CPU per message."""
    per_message = bare_ms + cpu.get("broker", 0.0) + cpu.get("load generator", 0.0)
    return 1000.0 * cores / per_message if per_message > 0 else 0.0


def idle_cpu(
    bootstrap: str,
    model_dir: Path,
    threads: int,
    broker_pid: int,
    fetch_waits: Sequence[int] = IDLE_FETCH_WAITS_MS,
) -> list[dict[str, Any]]:
    """CPU-ms per second of an idle moderator (warm, no traffic) and of the broker serving it, at
    each `fetch_max_wait_ms`: the embedded broker holds every fetch for the full wait, so the
    bench's 5 ms polls 200 times a second; a broker that answers a fetch when data arrives lets
    the wait be long (Kafka's default is 500 ms) at no cost in latency."""
    out = []
    for wait in fetch_waits:
        names = TopicSet.fresh("bench", f"idle-{wait}")
        run(create_topics(bootstrap, names))
        cfg = ModeratorConfig(
            model_dir, threads=threads, settings=(("fetch_max_wait_ms", str(wait)),)
        )
        with moderator(cfg, bootstrap, names) as mp:
            run(warm_up(bootstrap, names, bench_texts(64)))
            time.sleep(IDLE_SETTLE_S)
            cpu = CpuSplit(moderators=mp.worker_pids(), broker=broker_pid, harness=0)
            cpu.start()
            time.sleep(IDLE_S)
            split = cpu.stop()
        per_s = {
            role: round(1000 * v / IDLE_S, 1)
            for role, v in split.items()
            if role != "load generator"
        }
        out.append({"fetch_max_wait_ms": wait, "cpu_ms_per_s": per_s})
    return out


def run_goodput(
    bootstrap: str,
    model_dir: Path,
    plan: GoodputPlan,
    *,
    threads: int,
    broker_pid: int = 0,
    arms: Sequence[str] = ARMS,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Search each arm's goodput; the bare model and the host bound at the moderator's."""
    from bench import quix_peer

    if "quix" in arms:
        quix_peer.ensure_site()
    cores = len(os.sched_getaffinity(0))
    bare = bare_model_ms(model_dir, threads, bench_texts(BARE_TEXTS))
    out: dict[str, Any] = {
        "budget_ms": BUDGET_MS, "start": plan.start, "duration_s": plan.duration_s,
        "factor": plan.factor, "resolution": plan.resolution, "cores": cores,
        "bare_model_ms": round(bare, 3), "arms": {},
    }  # fmt: skip
    hop = run(measure_hop(bootstrap))
    out["hop"] = hop.as_dict()
    out["idle"] = idle_cpu(bootstrap, model_dir, threads, broker_pid)
    peer_plan = PeerPlan((), 1, plan.duration_s)
    for arm in arms:
        tried = 0
        subject, arm_threads = ("moderator", 1) if arm == ONE_SCORER else (arm, threads)

        def probe(
            rate: float, arm: str = arm, subject: str = subject, arm_threads: int = arm_threads
        ) -> Probe:
            nonlocal tried
            row = measure(subject, tried, rate, bootstrap, model_dir, peer_plan, hop,
                          threads=arm_threads, broker_pid=broker_pid)  # fmt: skip
            row["loadavg"] = load_average()
            tried += 1
            ok = within_budget(row)
            log.info("goodput %s at %.1f/s: p99 %s ms -> %s", arm, rate, row["p99_ms"], ok)
            return Probe(rate, ok, row)

        best, confirmed, probes = search(probe, plan)
        at_best = next((p.row for p in reversed(probes) if p.ok and p.rate == best), None)
        cpu = (at_best or {}).get("cpu_ms_per_msg") or {}
        out["arms"][arm] = {
            "goodput": best,
            "confirmed": confirmed,
            "probes": [dict(p.row, ok=p.ok) for p in probes],
            "host_bound": round(host_bound(cores, bare, cpu), 1) if at_best else None,
            "threads": arm_threads,
        }
        if checkpoint is not None:
            checkpoint(out)
    return out
