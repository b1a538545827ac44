"""Side by side with a peer (issue 31, item 4): the moderator and the Quix Streams application
(bench/quix_peer.py) on the same broker, the same traffic, in one run.

At each open-loop rate, the two take turns, moderator then peer, then peer then moderator, and
so on, so the drift of a shared machine falls on both alike. Every run is a fresh process, fresh
topics and a fresh group, warmed by the same 64 messages first; then the load generator's
traffic (its seed, no repeats: the peer has no cache, and the moderator runs with none) for p50
and p99 end to end, and the CPU each role spent per decided message (bench/cpu.py: the peer's
main thread counts as its "event loop", its other threads, librdkafka's and ONNX Runtime's, as
"model pool & other").
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import quix_peer
from bench.cpu import per_message_ms
from bench.pairs import interleaved
from bench.pipeline import load_run, summary_dict
from bench.stack import ModeratorConfig, create_topics, moderator, warm_up
from bench.texts import bench_texts
from loadgen.hop import HopResult, measure_hop
from loadgen.kafka import TopicSet
from moderator.config import Settings
from moderator.loop import run

log = logging.getLogger(__name__)

ARMS = ("moderator", "quix")
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class PeerPlan:
    rates: tuple[float, ...]  # open-loop msgs/s, each run at all of them
    pairs: int  # (moderator, quix) pairs per rate
    duration_s: float  # of each open-loop run


def arm_order(pairs: int) -> list[tuple[int, str]]:
    """(pair, arm) in the order run: moderator-quix, quix-moderator, ...: a drift in time costs
    both arms alike over each two pairs."""
    return interleaved(pairs, ARMS)


@contextlib.contextmanager
def peer(bootstrap: str, names: TopicSet, model_dir: Path, threads: int) -> Iterator[int]:
    """The Quix Streams peer deciding `names`; its pid. Stopped (SIGTERM, then SIGKILL) on exit."""
    child = quix_peer.start(bootstrap, names.in_topic, names.out_topic, names.group_id,
                            model_dir, threads=threads)  # fmt: skip
    try:
        yield child.pid
    finally:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@contextlib.contextmanager
def subject(
    arm: str, bootstrap: str, names: TopicSet, model_dir: Path, threads: int
) -> Iterator[list[int]]:
    """The processes of `arm` deciding `names`, warm: the moderator (cache off) or the peer."""
    if arm == "moderator":
        cfg = ModeratorConfig(model_dir, threads=threads, cache=False)
        with moderator(cfg, bootstrap, names) as mp:
            run(warm_up(bootstrap, names, bench_texts(64)))
            yield mp.worker_pids()
    else:
        # One model call at a time, on the threads the moderator gives each of its batches (1
        # by default): a check at 130 msgs/s on this 2-core host (2 runs each, load 4-7) gave
        # the peer 0.3-1.1 CPU-ms more per message on 2 intra-op threads, and no lower p50.
        per_call, _ = Settings(threads=threads).scoring_layout
        with peer(bootstrap, names, model_dir, per_call) as pid:
            run(warm_up(bootstrap, names, bench_texts(64)))
            yield [pid]


def measure(
    arm: str,
    pair: int,
    rate: float,
    bootstrap: str,
    model_dir: Path,
    plan: PeerPlan,
    hop: HopResult,
    *,
    threads: int,
    broker_pid: int,
) -> dict[str, Any]:
    """One open-loop run of `arm` at `rate`: latency and CPU per decided message by role."""
    names = TopicSet.fresh("bench", f"peer-{arm}{pair}-{int(rate)}")
    run(create_topics(bootstrap, names))
    with subject(arm, bootstrap, names, model_dir, threads) as pids:
        summary, split, waits = load_run(bootstrap, names, pids, rate, plan.duration_s, hop,
                                         broker_pid=broker_pid)  # fmt: skip
    out = summary_dict(summary)
    out.update(arm=arm, pair=pair, cpu_ms_per_msg=per_message_ms(split, summary.decided),
               cpu_seconds={role: round(v, 3) for role, v in split.items()},
               wait_ms_per_msg=per_message_ms(waits, summary.decided))  # fmt: skip
    log.info("peer %s (pair %d) at %.0f/s: p50 %s p99 %s ms, %d missing", arm, pair, rate,
             out["p50_ms"], out["p99_ms"], out["missing"])  # fmt: skip
    return out


def run_peer(
    bootstrap: str,
    model_dir: Path,
    plan: PeerPlan,
    *,
    threads: int,
    broker_pid: int = 0,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    sample_load: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """Every rate's pairs in alternating order; `sample_load` (the load average) after each run."""
    quix_peer.ensure_site()
    out: dict[str, Any] = {
        "model_dir": str(model_dir), "threads": threads, "rates": list(plan.rates),
        "pairs": plan.pairs, "duration_s": plan.duration_s, "quixstreams": quix_peer.QUIXSTREAMS,
        "settings": [list(row) for row in quix_peer.settings_table()], "runs": [],
    }  # fmt: skip
    hop = run(measure_hop(bootstrap))
    out["hop"] = hop.as_dict()
    for rate in plan.rates:
        for pair, arm in arm_order(plan.pairs):
            row = measure(arm, pair, rate, bootstrap, model_dir, plan, hop, threads=threads,
                          broker_pid=broker_pid)  # fmt: skip
            if sample_load is not None:
                row["loadavg"] = sample_load()
            out["runs"].append(row)
            if checkpoint is not None:
                checkpoint(out)
    return out


def by_arm(runs: Sequence[Mapping[str, Any]], rate: float, arm: str) -> list[Mapping[str, Any]]:
    """The runs of `arm` at `rate`, in the order run."""
    return [r for r in runs if r["arm"] == arm and r["rate"] == round(rate, 1)]
