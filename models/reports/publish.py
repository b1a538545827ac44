"""`python -m models evaluate`'s writing half: a model's measured figures into its manifest,
models/REPORT.md and models/DATA.md, from one evaluation so the three never disagree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.evaluation import evaluate
from models.reports import datasheet, report
from models.reports.report import REPORT_FILE


def run(model_dir: Path, report_file: Path = REPORT_FILE, latency_runs: int = 40) -> dict[str, Any]:
    """Evaluate, update the manifest, write the report and DATA.md beside it; returns the
    metrics."""
    metrics = evaluate.evaluate(model_dir, latency_runs=latency_runs)
    manifest = evaluate.update_manifest(model_dir, metrics)
    report_file.write_text(report.render(manifest, metrics))
    datasheet.write(
        metrics["real"]["teachers"],
        manifest.get("training", {}).get("real_by_source", {}),
        report_file.with_name(datasheet.DATA_FILE.name),
        manifest.get("training", {}).get("verdicts"),
    )
    return metrics
