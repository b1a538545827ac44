"""Plots of one run: the latency percentile curve (HDR style) and latency over time.

matplotlib is an optional dependency (`pip install chat-moderator-tools[plot]`); it is imported here
only, when a plot is asked for.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from loadgen.machine import machine_label
from loadgen.stats import percentile_ms
from loadgen.summary import LoadSummary

CURVE_NINES = 5  # the curve goes out to the 99.999th percentile
PLOT_EXTRA_HINT = "pip install 'chat-moderator-tools[plot]'"


def unavailable() -> str | None:
    """Why no plot can be drawn here (matplotlib is missing), or None. Asked before a run, so a
    missing extra is not found out after minutes of load."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"--plot needs matplotlib ({exc}), which the plot extra installs: {PLOT_EXTRA_HINT}"
    return None


def percentile_curve(summary: LoadSummary, points: int = 200) -> tuple[list[float], list[float]]:
    """(1 / (1 - p)) and latency in ms, for percentiles p spread evenly on a log scale."""
    xs: list[float] = []
    ys: list[float] = []
    for i in range(points + 1):
        nines = CURVE_NINES * i / points
        percentile = 100.0 * (1.0 - 10.0 ** (-nines))
        value = percentile_ms(summary.latency, percentile)
        if value is not None:
            xs.append(10.0**nines)
            ys.append(value)
    return xs, ys


def plot_summary(summary: LoadSummary, path: Path | str) -> Path:
    """Draw both charts into one PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curve_ax, time_ax) = plt.subplots(1, 2, figsize=(13, 5))
    fig.suptitle(
        f"loadgen {summary.run_id}: {summary.arrivals} {summary.rate:g} msg/s for "
        f"{summary.duration_s:g} s, {summary.decided}/{summary.sent} decided — {machine_label()}"
    )
    _draw_curve(curve_ax, summary)
    _draw_timeline(time_ax, summary)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _draw_curve(ax: Any, summary: LoadSummary) -> None:
    xs, ys = percentile_curve(summary)
    if xs:
        label = "end to end (from scheduled send)"
        if summary.missing:
            label += f"; decided only, {summary.missing} never decided"
        ax.plot(xs, ys, label=label)
    ax.set_xscale("log")
    ticks = [10.0**n for n in range(CURVE_NINES + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([_percentile_label(t) for t in ticks])
    ax.axhline(
        summary.budget_ms, color="red", linestyle="--", label=f"budget {summary.budget_ms:g} ms"
    )
    hop = summary.broker_hop
    if hop is not None and hop.p99_ms is not None and hop.p50_ms is not None:
        ax.axhline(2 * hop.p50_ms, color="grey", linestyle=":", label="2 × broker hop p50")
        ax.axhline(2 * hop.p99_ms, color="grey", linestyle="-.", label="2 × broker hop p99")
    ax.minorticks_off()
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title("latency by percentile")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def _draw_timeline(ax: Any, summary: LoadSummary) -> None:
    timeline = summary.timeline()
    seconds = [row["second"] for row in timeline]
    ax.plot(seconds, [row["p50_ms"] for row in timeline], marker=".", label="p50")
    ax.plot(seconds, [row["p99_ms"] for row in timeline], marker=".", label="p99")
    ax.axhline(summary.budget_ms, color="red", linestyle="--", label="budget")
    if summary.missing_offsets_s:
        ax.scatter(
            [int(s) for s in summary.missing_offsets_s],
            [summary.budget_ms] * len(summary.missing_offsets_s),
            marker="x", color="black", label=f"never decided ({summary.missing})",
        )  # fmt: skip
    values = [v for row in timeline for v in (row["p50_ms"], row["p99_ms"]) if v]
    if values and max(values) > 20 * max(min(values), summary.budget_ms / 20):
        ax.set_yscale("log")  # overload: seconds of queueing next to milliseconds
        ax.yaxis.set_major_formatter(_plain_formatter())
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("scheduled send time (s from start)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("latency over time, per second")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def _plain_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: f"{value:g}")


def _percentile_label(x: float) -> str:
    nines = round(math.log10(x))
    if nines == 0:
        return "0%"
    return f"{100.0 * (1.0 - 10.0 ** (-nines)):.{max(nines - 2, 0)}f}%"
