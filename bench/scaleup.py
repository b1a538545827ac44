"""Scale-up on one machine: one process with T threads vs K processes with T/K threads each.

The K processes are `moderator run --workers K` (one consumer group, each worker pinned to its own
disjoint cores). Both layouts drain the same backlog (cache off, so the model does every message:
the saturation throughput), then run open-loop at one common rate for p99.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bench.pipeline import drain_run, latency_run
from bench.stack import ModeratorConfig
from bench.texts import bench_texts
from loadgen.hop import measure_hop
from moderator.loop import run
from moderator.workers import core_sets

log = logging.getLogger(__name__)

COMMON_RATE_FRACTION = 0.5


def layouts(cores: int, threads: int) -> list[tuple[int, int]]:
    """(processes, threads per process) pairs to compare: 1 x T, then K x T/K down to 1 thread."""
    out = [(1, threads)]
    k = 2
    while k <= min(cores, threads):
        if threads % k == 0:
            out.append((k, threads // k))
        k *= 2
    return out


def layout_label(workers: int, threads: int, cores: int) -> str:
    if workers == 1:
        return f"1 process x {threads} threads"
    sets = core_sets(workers, list(range(cores)))
    pins = " ".join("{" + ",".join(map(str, s)) + "}" for s in sets)
    return f"{workers} processes x {threads} thread{'s' if threads > 1 else ''}, pinned {pins}"


def run_scaleup(
    bootstrap: str,
    shape: str,
    model_dir: Path,
    *,
    cores: int,
    threads: int,
    backlog: int,
    duration_s: float,
) -> dict[str, Any]:
    texts = bench_texts(backlog)
    rows: list[dict[str, Any]] = []
    for workers, per in layouts(cores, threads):
        # `run --workers K` gives each worker MODERATOR_THREADS // K threads.
        cfg = ModeratorConfig(model_dir, threads=per * workers if workers > 1 else per,
                              workers=workers, cache=False)  # fmt: skip
        result = drain_run(bootstrap, cfg, texts, tag=f"{shape}-scale{workers}")
        result["workers"] = workers
        result["threads_each"] = per
        result["label"] = layout_label(workers, per, cores)
        rows.append(result)
    common = COMMON_RATE_FRACTION * min(float(r["drain"]["msgs_per_s"]) for r in rows)
    hop = run(measure_hop(bootstrap))
    for row in rows:
        cfg = ModeratorConfig(model_dir, threads=row["config"]["threads"],
                              workers=row["workers"], cache=False)  # fmt: skip
        row["at_common_rate"] = latency_run(bootstrap, cfg, common, duration_s, hop,
                                            tag=f"{shape}-scale{row['workers']}-lat")  # fmt: skip
    return {"shape": shape, "model_dir": str(model_dir), "common_rate": round(common, 1),
            "hop": hop.as_dict(), "layouts": rows}  # fmt: skip
