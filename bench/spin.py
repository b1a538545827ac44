"""Diagnosis: how the scorer should use its threads, and what spin-waiting costs.

One process, cache off, each layout's own backlog-drain saturation, then open-loop load at one
common rate (half the pipeline's saturation, the latency target's load) for every layout:
one batch over all threads with ONNX Runtime's spin-waiting (its default, `bench.withspin`) and
without (the moderator before 2026-11-25), one thread, and one one-thread batch per thread at
once (the moderator as shipped, `MODERATOR_BATCH_THREADS=1`). Fresh moderator, topics and group
per run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from bench.pipeline import drain_run, latency_run
from bench.stack import ModeratorConfig
from bench.texts import bench_texts
from loadgen.hop import measure_hop
from moderator.loop import run

log = logging.getLogger(__name__)

WITHSPIN_MODULE = "bench.withspin"


class Layout(NamedTuple):
    label: str
    threads: int
    batch_threads: int
    module: str  # run as `python -m MODULE run`


def variants(threads: int) -> list[Layout]:
    """Each way compared, the shipped one last."""
    if threads == 1:
        return [Layout("1 thread, spinning (ONNX Runtime's default)", 1, 1, WITHSPIN_MODULE),
                Layout("1 thread (as shipped)", 1, 1, "moderator")]  # fmt: skip
    return [
        Layout(f"one batch over {threads} threads, spinning (ONNX Runtime's default)",
               threads, threads, WITHSPIN_MODULE),
        Layout(f"one batch over {threads} threads, spinning off (before 2026-11-25)",
               threads, threads, "moderator"),
        Layout("one batch on 1 thread", 1, 1, "moderator"),
        Layout(f"{threads} one-thread batches at once (as shipped)", threads, 1, "moderator"),
    ]  # fmt: skip


def run_spin(
    bootstrap: str,
    shape: str,
    model_dir: Path,
    *,
    threads: int,
    rate: float,
    duration_s: float,
    backlog: int,
) -> dict[str, Any]:
    hop = run(measure_hop(bootstrap))
    texts = bench_texts(backlog)
    rows = []
    for i, layout in enumerate(variants(threads)):
        cfg = ModeratorConfig(model_dir, threads=layout.threads, cache=False,
                              batch_threads=layout.batch_threads, module=layout.module)  # fmt: skip
        drained = drain_run(bootstrap, cfg, texts, tag=f"{shape}-layout{i}")
        row = latency_run(bootstrap, cfg, rate, duration_s, hop, tag=f"{shape}-layout{i}")
        row["label"] = layout.label
        row["saturation"] = drained["drain"]["msgs_per_s"]
        rows.append(row)
    return {"rate": round(rate, 1), "hop": hop.as_dict(), "rows": rows}
