"""Diagnosis: what ONNX Runtime's spin-waiting threads cost the moderator's latency.

One process, open-loop load at half the pipeline's saturation rate (the latency target's load),
three ways: 2 intra-op threads spinning (ONNX Runtime's default, `bench.withspin`),
2 threads with spinning off (the moderator as shipped), and 1 thread. Fresh moderator, topics
and group per run, cache off.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bench.pipeline import latency_run
from bench.stack import ModeratorConfig
from loadgen.hop import measure_hop
from moderator.loop import run

log = logging.getLogger(__name__)

WITHSPIN_MODULE = "bench.withspin"


def variants(threads: int) -> list[tuple[str, int, str]]:
    """(label, threads, module run as `python -m MODULE run`) for each way compared."""
    out = [(f"{threads} threads, spinning (ONNX Runtime's default)", threads, WITHSPIN_MODULE),
           (f"{threads} threads, spinning off", threads, "moderator")]  # fmt: skip
    if threads > 1:
        out.append(("1 thread, spinning off", 1, "moderator"))
    return out


def run_spin(
    bootstrap: str, shape: str, model_dir: Path, *, threads: int, rate: float, duration_s: float
) -> dict[str, Any]:
    hop = run(measure_hop(bootstrap))
    rows = []
    for label, t, module in variants(threads):
        cfg = ModeratorConfig(model_dir, threads=t, cache=False, module=module)
        row = latency_run(bootstrap, cfg, rate, duration_s, hop, tag=f"{shape}-spin{t}")
        row["label"] = label
        rows.append(row)
    return {"rate": round(rate, 1), "hop": hop.as_dict(), "rows": rows}
