"""The whole pipeline through Kafka and Redis, against the bare model on the same texts.

Per model: the bare model scores a backlog in-process (the runtime's `MicroBatcher`, max_batch
the service's default max_batch, same threads); then a fresh `moderator run` (cache off) drains the
same texts through the embedded broker, and the ratio of the two is the pipeline's share. The
drain rate is the saturation rate; open-loop runs of the load generator at 25%, 50% and 90% of
it give the end-to-end latency, with the broker's own hop measured alone in the same run. Last,
cache on (L1 + a fresh Redis) vs off at 40% repeats.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cpu import CpuSplit, per_message_ms
from bench.ladder import SERVICE_MAX_BATCH, backlog_rung
from bench.profile import finish_profile, start_profile
from bench.stack import ModeratorConfig, affinity, create_topics, drain, moderator, warm_up
from bench.texts import SEED, bench_texts, key_repeat_share, repeat_share
from devstack.child import ModeratorChild, Samples, read_status_kb
from loadgen.config import LoadConfig
from loadgen.hop import HopResult, measure_hop
from loadgen.kafka import TopicSet
from loadgen.runner import run_load
from loadgen.summary import LoadSummary
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.loop import run

log = logging.getLogger(__name__)

LOAD_FRACTIONS = (0.1, 0.25, 0.5, 0.65, 0.8, 0.9, 1.0)
PINNED_FRACTIONS = (0.25, 0.5, 0.8, 1.0)
SUMMARY_KEYS = (
    "rate", "duration_s", "sent", "decided", "missing", "throughput_per_s", "p50_ms", "p90_ms",
    "p99_ms", "p999_ms", "max_ms", "over_budget_ratio", "server_total_p50_ms",
    "server_total_p99_ms", "send_lag_p99_ms", "percentiles_ms",
)  # fmt: skip


@dataclass(frozen=True)
class PipelinePlan:
    backlog: int  # messages per drain
    latency_duration_s: float
    bare_budget_s: float
    profile: bool
    pinned: bool = False  # also the latency curve with moderator and harness on separate cores


def summary_dict(summary: LoadSummary) -> dict[str, Any]:
    full = summary.as_dict()
    return {key: full[key] for key in SUMMARY_KEYS}


def drain_run(
    bootstrap: str,
    cfg: ModeratorConfig,
    texts: Sequence[str],
    *,
    tag: str,
    profile_texts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A fresh moderator drains `texts`; its memory after warm-up; optionally a profiled drain."""
    names = TopicSet.fresh("bench", tag)
    run(create_topics(bootstrap, names))
    with moderator(cfg, bootstrap, names) as mp:
        run(warm_up(bootstrap, names, texts))
        pids = mp.worker_pids()
        warm = [read_status_kb(pid) for pid in pids]
        result = run(drain(bootstrap, names, texts, prefix=f"{tag}-d", timeout_s=300))
        after = [read_status_kb(pid) for pid in pids]
        profile = None
        if profile_texts:
            with tempfile.TemporaryDirectory(prefix="bench-prof-") as tmp:
                out = Path(tmp) / "profile.txt"
                seconds = len(profile_texts) / max(result.msgs_per_s, 1.0)
                spy = start_profile(pids[0], seconds, out)
                run(drain(bootstrap, names, profile_texts, prefix=f"{tag}-p", timeout_s=300))
                profile = finish_profile(spy, out)
    log.info("%s: drained %d/%d in %.2f s = %.1f msg/s (%d cached)", tag, result.decided,
             result.messages, result.seconds, result.msgs_per_s, result.cached)  # fmt: skip
    return {"drain": result.as_dict(), "rss_warm_kb": warm, "rss_after_kb": after,
            "profile": profile, "config": _cfg_dict(cfg)}  # fmt: skip


def latency_run(
    bootstrap: str,
    cfg: ModeratorConfig,
    rate: float,
    duration_s: float,
    hop: HopResult,
    tag: str,
    *,
    broker_pid: int = 0,
    harness_cores: frozenset[int] | None = None,
    dup_ratio: float = 0.0,
    counters: Callable[[Samples, Samples], dict[str, Any]] | None = None,
    settle: Callable[[ModeratorChild], None] | None = None,
) -> dict[str, Any]:
    """Open-loop load at `rate` against a fresh moderator (the load generator, `dup_ratio` 0 by
    default), with the CPU each role spent per decided message and the scorer's batches
    (bench/cpu.py); `counters` reads more from the metrics before and after (`out["counters"]`);
    `settle` waits, once warm, for what the warm-up left behind (a shadow's backlog).

    `harness_cores`: pin the load generator and the broker (`broker_pid`) there, while
    `cfg.cores` holds the moderator, so the service's own curve is told apart from the share of
    the machine the harness takes."""
    names = TopicSet.fresh("bench", tag)
    run(create_topics(bootstrap, names))
    with moderator(cfg, bootstrap, names) as mp:
        run(warm_up(bootstrap, names, bench_texts(64)))
        if settle is not None:
            settle(mp)
        before = mp.scrape()
        summary, split, waits = load_run(bootstrap, names, mp.worker_pids(), rate, duration_s,
                                         hop, broker_pid=broker_pid, harness_cores=harness_cores,
                                         dup_ratio=dup_ratio)  # fmt: skip
        after = mp.scrape()
        del mp
    out = summary_dict(summary)
    out["cpu_ms_per_msg"] = per_message_ms(split, summary.decided)
    out["cpu_seconds"] = {role: round(v, 3) for role, v in split.items()}
    out["wait_ms_per_msg"] = per_message_ms(waits, summary.decided)  # runnable, no core free
    if before is not None and after is not None:
        out["batches"] = batch_stats(before, after)
        if counters is not None:
            out["counters"] = counters(before, after)
    log.info("%s at %.0f/s: p50 %s p99 %s ms, %d missing", tag, rate, out["p50_ms"],
             out["p99_ms"], out["missing"])  # fmt: skip
    return out


def load_run(
    bootstrap: str,
    names: TopicSet,
    pids: Sequence[int],
    rate: float,
    duration_s: float,
    hop: HopResult,
    *,
    broker_pid: int = 0,
    harness_cores: frozenset[int] | None = None,
    dup_ratio: float = 0.0,
) -> tuple[LoadSummary, dict[str, float], dict[str, float]]:
    """The load generator's open-loop run at `rate` against whatever decides `names` (its
    processes `pids`, warm already), the CPU each role spent meanwhile and the time its threads
    waited for a core (bench/cpu.py)."""
    cpu = CpuSplit(moderators=pids, broker=broker_pid, harness=os.getpid())
    pinned = [broker_pid] if broker_pid and harness_cores is not None else []
    with affinity(harness_cores, *pinned):
        cpu.start()
        summary = run(
            run_load(
                LoadConfig(
                    bootstrap=bootstrap, rate=round(rate, 1), duration_s=duration_s,
                    dup_ratio=dup_ratio, in_topic=names.in_topic, out_topic=names.out_topic,
                    dlq_topic=names.dlq_topic, hop=False, seed=SEED, drain_timeout_s=20.0,
                ),
                hop=hop,
            )
        )  # fmt: skip
        split = cpu.stop()
    return summary, split, cpu.waits


def batch_stats(before: Samples, after: Samples) -> dict[str, float | None]:
    """The scorer's batches between two scrapes: mean size, mean wait for a batch to start, and
    the mean model time of the batch a message was in."""

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    batches = delta("moderator_batch_size_count")
    scored = delta("moderator_stage_seconds_count", stage="score")
    return {
        "batches": batches,
        "mean_size": round(delta("moderator_batch_size_sum") / batches, 3) if batches else None,
        "queue_ms": round(delta("moderator_stage_seconds_sum", stage="queue") * 1000 / scored, 3)
        if scored
        else None,
        "model_ms": round(delta("moderator_stage_seconds_sum", stage="score") * 1000 / scored, 3)
        if scored
        else None,
    }


def _cfg_dict(cfg: ModeratorConfig) -> dict[str, Any]:
    return {"model_dir": str(cfg.model_dir), "threads": cfg.threads, "workers": cfg.workers,
            "cache": cfg.cache}  # fmt: skip


def run_model(
    bootstrap: str,
    shape: str,
    model_dir: Path,
    plan: PipelinePlan,
    *,
    threads: int,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Bare vs pipeline, latency at three loads, cache on vs off, for one model."""
    texts = bench_texts(plan.backlog)
    repeats = bench_texts(plan.backlog, dup_ratio=0.4)
    out: dict[str, Any] = {"model_dir": str(model_dir), "threads": threads,
                           "cores": len(os.sched_getaffinity(0)),
                           "backlog": plan.backlog}  # fmt: skip

    def save() -> None:
        if checkpoint is not None:
            checkpoint(out)

    # The bare model as the service runs it: its batches, threads per batch and batches at once.
    per_batch, at_once = Settings(threads=threads).scoring_layout
    clf = Classifier(model_dir, threads=per_batch, verify=False)
    out["bare"] = backlog_rung(
        clf, texts, shape=shape, key="bare", label="bare model", max_batch=SERVICE_MAX_BATCH,
        budget_s=plan.bare_budget_s, concurrency=at_once,
    ).as_dict()  # fmt: skip
    out["repeats"] = {
        "exact": round(repeat_share(repeats), 4),
        "token_ids": round(key_repeat_share([tuple(ids) for ids in clf.encode(repeats)]), 4),
    }
    del clf
    off = ModeratorConfig(model_dir, threads=threads, cache=False)
    out["pipeline"] = drain_run(bootstrap, off, texts, tag=f"{shape}-pipe",
                                profile_texts=texts if plan.profile else None)  # fmt: skip
    saturation = float(out["pipeline"]["drain"]["msgs_per_s"])
    out["ratio"] = round(saturation / float(out["bare"]["msgs_per_s"]), 4)
    save()

    hop = run(measure_hop(bootstrap))
    out["hop"] = hop.as_dict()
    out["latency"] = []
    for fraction in LOAD_FRACTIONS:
        row = latency_run(bootstrap, off, saturation * fraction, plan.latency_duration_s, hop,
                          tag=f"{shape}-lat{int(fraction * 100)}",
                          broker_pid=broker_pid or 0)  # fmt: skip
        row["fraction"] = fraction
        out["latency"].append(row)
        save()
    cores = sorted(os.sched_getaffinity(0))
    if plan.pinned and len(cores) >= 2:
        # The moderator on the last core (so 1 intra-op thread), the harness and the broker on
        # the rest: the service's own curve, with the harness's share of the machine set apart.
        mine, rest = frozenset(cores[-1:]), frozenset(cores[:-1])
        pinned = dataclasses.replace(off, cores=mine)
        out["latency_pinned"] = {"moderator_cores": sorted(mine), "harness_cores": sorted(rest),
                                 "rows": []}  # fmt: skip
        for fraction in PINNED_FRACTIONS:
            row = latency_run(bootstrap, pinned, saturation * fraction, plan.latency_duration_s,
                              hop, tag=f"{shape}-pin{int(fraction * 100)}",
                              broker_pid=broker_pid or 0, harness_cores=rest)  # fmt: skip
            row["fraction"] = fraction
            out["latency_pinned"]["rows"].append(row)
            save()

    on = ModeratorConfig(model_dir, threads=threads, cache=True)
    out["cache_off"] = drain_run(bootstrap, off, repeats, tag=f"{shape}-nocache")
    out["cache_on"] = drain_run(bootstrap, on, repeats, tag=f"{shape}-cache")
    out["cache_ratio"] = round(
        out["cache_on"]["drain"]["msgs_per_s"] / out["cache_off"]["drain"]["msgs_per_s"], 4
    )
    save()
    return out
