"""What a shadow model costs the primary (issue 41): the moderator with no shadow, with one, and
with one too slow to keep up, side by side at fixed open-loop rates.

Arms: **off**, the default model alone; **on**, the same with a second real model directory as
its shadow (devstack/candidate.py: the shipped graph under another manifest), at the shadow's
default threads and queue; **slow**, a shadow that cannot keep up, the BERT-base-shaped speed
model (random weights, 12 layers; bench/artifacts.py) on one thread, with a short queue so it
sheds within a run instead of after the default queue's thousand messages. At each rate the arms
run in rounds, in order then reversed (bench/pairs.py), so a shared machine's drift falls on all
of them alike; every run is a fresh moderator, Redis (the score cache on, as shipped), topics and
group, warmed first, then the load generator's traffic at the rate for the primary's p50 and
p99, with the CPU each role spent (bench/cpu.py: the shadow's threads are a role of their own)
and the shadow's counters from the moderator's /metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.artifacts import speed_model_dir
from bench.pairs import interleaved
from bench.pipeline import latency_run
from bench.stack import PARTITIONS, ModeratorConfig
from devstack.candidate import candidate_model
from devstack.child import ModeratorChild, Samples
from loadgen.config import LoadConfig
from loadgen.hop import HopResult, measure_hop
from loadgen.kafka import TopicSet
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.loop import run

log = logging.getLogger(__name__)

ARMS = ("off", "on", "slow")
SLOW_SHAPE = "bert-base"  # 12 layers x 768: ~16 CPU-ms a message on one thread, so < 100 msg/s
SLOW_THREADS = 1
# Shedding starts once the queue is full: at a deficit of tens of messages a second the default
# queue (1000) fills only after the runs end; 100 fills within a run's first seconds.
SLOW_QUEUE = 100
DUP_RATIO = LoadConfig.dup_ratio  # the load generator's traffic as it is by default
SETTLE_TIMEOUT_S = 120.0  # the slow shadow reads the warm-up's 64 messages in a few seconds


@dataclass(frozen=True)
class ShadowPlan:
    rates: tuple[float, ...]  # open-loop msgs/s, each arm run at all of them
    pairs: int  # rounds of the three arms per rate
    duration_s: float  # of each open-loop run


@dataclass(frozen=True)
class ShadowModel:
    """A shadow arm's model directory and the settings it runs with."""

    model_dir: Path
    threads: int
    queue: int

    def describe(self) -> dict[str, Any]:
        info = Classifier(self.model_dir, threads=1).info
        return {"model": info.ident, "dir": str(self.model_dir), "threads": self.threads,
                "queue": self.queue}  # fmt: skip


def shadow_models(workdir: Path) -> dict[str, ShadowModel]:
    """The on and slow arms' shadows: the candidate at the shadow's defaults, and the slow
    speed model on SLOW_THREADS with SLOW_QUEUE."""
    defaults = Settings()
    return {
        "on": ShadowModel(candidate_model(workdir / "candidate"), defaults.shadow_threads,
                          defaults.shadow_queue),
        "slow": ShadowModel(speed_model_dir(SLOW_SHAPE), SLOW_THREADS, SLOW_QUEUE),
    }  # fmt: skip


def arm_config(base: ModeratorConfig, shadow: ShadowModel | None, tag: str) -> ModeratorConfig:
    """The moderator of an arm: `base` alone, or with `shadow` writing its disagreements to a
    fresh topic of its own (the moderator creates it, as it would `chat.shadow`)."""
    if shadow is None:
        return base
    topic = TopicSet.fresh("bench", tag).in_topic.replace(".in.", ".shadow.")
    settings = (("shadow_model", str(shadow.model_dir)), ("shadow_threads", str(shadow.threads)),
                ("shadow_queue", str(shadow.queue)), ("shadow_topic", topic))  # fmt: skip
    return dataclasses.replace(base, settings=settings)


def shadow_counters(before: Samples, after: Samples) -> dict[str, float]:
    """What the moderator counted between two scrapes: messages consumed, and the shadow's
    comparisons, disagreements, skipped messages and records; `queued`: what still waited for
    the shadow at the second."""

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    return {
        "consumed": delta("moderator_messages_consumed_total"),
        "compared": delta("moderator_shadow_decisions_total"),
        "disagreed": delta("moderator_shadow_disagreements_total"),
        "skipped": delta("moderator_shadow_skipped_total"),
        "records_sent": delta("moderator_shadow_records_total", result="sent"),
        "records_failed": delta("moderator_shadow_records_total", result="failed"),
        "queued": after.total("moderator_shadow_queued"),
    }


def settled(samples: Samples) -> bool:
    """Whether the shadow has compared or skipped every message consumed so far: each one the
    primary's model read is handed to it (the bench's moderator has no users' rules, overrides
    or degraded mode to decide one without the model)."""
    done = samples.total("moderator_shadow_decisions_total")
    done += samples.total("moderator_shadow_skipped_total")
    return done >= samples.total("moderator_messages_consumed_total")


def settle(child: ModeratorChild, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Wait until the shadow has read the warm-up: a slow one would otherwise still be reading it
    in the measured run, its CPU and comparisons counted there and its queue already part full."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        samples = child.scrape()
        if samples is not None and settled(samples):
            return
        time.sleep(0.2)
    log.warning("the shadow had not read the warm-up after %.0f s; measuring anyway", timeout_s)


def measure(
    bootstrap: str,
    cfg: ModeratorConfig,
    run_at: tuple[str, int, float],
    duration_s: float,
    hop: HopResult,
    broker_pid: int,
) -> dict[str, Any]:
    """One open-loop run of an arm (`run_at`: arm, pair, rate): the load generator's latency, CPU
    per decided message by role, the shadow's counters."""
    arm, pair, rate = run_at
    tag = f"shadow-{arm}{pair}-{int(rate)}"
    wait = settle if arm != "off" else None
    row = latency_run(bootstrap, cfg, rate, duration_s, hop, tag, broker_pid=broker_pid,
                      dup_ratio=DUP_RATIO, counters=shadow_counters, settle=wait)  # fmt: skip
    row.update(arm=arm, pair=pair)
    log.info("shadow %s (pair %d) at %.0f/s: p50 %s p99 %s ms, counters %s", arm, pair, rate,
             row.get("p50_ms"), row.get("p99_ms"), row.get("counters"))  # fmt: skip
    return row


def run_shadow(
    bootstrap: str,
    model_dir: Path,
    plan: ShadowPlan,
    *,
    threads: int,
    broker_pid: int = 0,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every rate's rounds of the three arms, in interleaved order; saved after each run."""
    base = ModeratorConfig(model_dir, threads=threads, cache=True)
    order = interleaved(plan.pairs, ARMS)
    out: dict[str, Any] = {
        "model": Classifier(model_dir, threads=1).info.ident, "model_dir": str(model_dir),
        "threads": threads, "partitions": PARTITIONS, "rates": list(plan.rates),
        "pairs": plan.pairs, "duration_s": plan.duration_s, "dup_ratio": DUP_RATIO,
        "slow_shape": SLOW_SHAPE, "order": [arm for _, arm in order], "runs": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-shadow-") as tmp:
        shadows = shadow_models(Path(tmp))
        out["shadows"] = {arm: shadow.describe() for arm, shadow in shadows.items()}
        hop = run(measure_hop(bootstrap))
        out["hop"] = hop.as_dict()
        for rate in plan.rates:
            for pair, arm in order:
                cfg = arm_config(base, shadows.get(arm), f"shadow-{arm}{pair}")
                row = measure(bootstrap, cfg, (arm, pair, rate), plan.duration_s, hop, broker_pid)
                out["runs"].append(row)
                if checkpoint is not None:
                    checkpoint(out)
    return out
