"""Resident memory of one moderator process per model, taken from the pipeline's drain runs.

The pipeline section reads `/proc/PID/status` (VmRSS, VmHWM) of each fresh `moderator run`
after its warm-up and after the timed drain; this module picks those out per model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def model_mb(model_dir: str | Path) -> str:
    path = Path(model_dir) / "model.onnx"
    return f"{path.stat().st_size / 1e6:.0f} MB" if path.is_file() else "-"


def memory_from_pipeline(pipeline: Mapping[str, Any]) -> dict[str, Any]:
    """{shape: {model_mb, rss_warm_kb, rss_after_kb}} from the cache-off drain of each model."""
    out: dict[str, Any] = {}
    for shape, res in pipeline.items():
        run = res.get("pipeline")
        if not run:
            continue
        out[shape] = {
            "model_mb": model_mb(res.get("model_dir", "")),
            "rss_warm_kb": run.get("rss_warm_kb", []),
            "rss_after_kb": run.get("rss_after_kb", []),
        }
    return out
