"""The report's PNGs: the ladder's speed-ups and latency percentiles against load (Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.report import SHAPE_NAMES, ratio

PERCENTILES = (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ladder(ladder: Mapping[str, Any], path: Path, label: str) -> Path | None:
    """Horizontal bars: each rung's throughput speed-up over the baseline, one panel per shape."""
    base = ladder.get("baseline")
    shapes = ladder.get("rungs") or {}
    if not base or not shapes:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(shapes), figsize=(7.5 * len(shapes), 7), squeeze=False)
    for ax, (shape, rungs) in zip(axes[0], shapes.items(), strict=True):
        rows = [base, *rungs]
        names = [r["label"] + (" [backlog]" if r.get("mode") == "backlog" else "") for r in rows]
        values = [ratio(r["msgs_per_s"], base["msgs_per_s"]) or 0.0 for r in rows]
        colors = ["#888888" if r.get("key") in ("repeats-nocache",) or
                  (r.get("key", "").startswith("threads-") and r.get("key") != "threads-2")
                  else "#3b75af" for r in rows]  # fmt: skip
        colors[0] = "#c44e52"
        y = list(range(len(rows)))[::-1]
        ax.barh(y, values, color=colors)
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=8)
        ax.set_xscale("log")
        ax.axvline(30, color="red", linestyle="--", linewidth=1, label="30x target")
        for yy, v in zip(y, values, strict=True):
            ax.text(v * 1.05, yy, f"{v:.1f}x", va="center", fontsize=8)
        ax.set_xlabel("throughput vs BERT-base fp32 PyTorch padded (log scale)")
        ax.set_title(SHAPE_NAMES.get(shape, shape))
        ax.set_xlim(right=max(values) * 3)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(f"Speed-up ladder (grey: alternatives off the chain) — {label}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_latency(
    pipeline: Mapping[str, Any], path: Path, label: str, spin: Mapping[str, Any] | None = None
) -> Path | None:
    """End-to-end latency percentiles vs offered load, one panel per model, hop floor shown."""
    shapes = {s: r for s, r in pipeline.items() if r.get("latency")}
    if not shapes:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 5), squeeze=False)
    for ax, (shape, res) in zip(axes[0], shapes.items(), strict=True):
        rows = res["latency"]
        xs = [r["rate"] for r in rows]
        for key, name in PERCENTILES:
            ax.plot(xs, [r.get(key) for r in rows], marker="o", label=name)
        pinned = (res.get("latency_pinned") or {}).get("rows") or []
        if pinned:
            xs_pin, p99_pin = [r["rate"] for r in pinned], [r.get("p99_ms") for r in pinned]
            ax.plot(xs_pin, p99_pin, marker="x", linestyle="--", color="black",
                    label="p99, moderator on its own core")  # fmt: skip
        hop = res.get("hop") or {}
        if hop.get("p50_ms") is not None:
            ax.axhline(2 * hop["p50_ms"], color="grey", linestyle=":", label="2 x broker hop p50")
        ax.axhline(50, color="red", linestyle="--", linewidth=1, label="50 ms budget")
        for row in ((spin or {}).get(shape) or {}).get("rows", [])[1:-1]:
            marker = "s" if "spinning off" in row["label"] else "^"
            ax.scatter([row["rate"]] * 2, [row.get("p50_ms"), row.get("p99_ms")], marker=marker,
                       color="black", zorder=5, label=f"{row['label']}: p50, p99")  # fmt: skip
        for r in rows:
            ax.annotate(f"{r['fraction']:.0%}", (r["rate"], r.get("p50_ms") or 0),
                        textcoords="offset points", xytext=(0, -12), fontsize=8,
                        ha="center")  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (msgs/s); labels: share of saturation")
        ax.set_ylabel("end-to-end latency (ms, log)")
        ax.set_title(f"{SHAPE_NAMES.get(shape, shape)}: saturation "
                     f"{res['pipeline']['drain']['msgs_per_s']:.0f} msgs/s")  # fmt: skip
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"End-to-end latency vs load (open loop, through Kafka) — {label}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
