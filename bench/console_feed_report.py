"""BENCHMARKS.md's section on a console's memory at a platform's decision rate
(bench/console_feed.py's results): pure formatting and arithmetic, no timing, no servers.

Issue 44 asks for memory that stays flat over an hour at 1,000 decisions a second. A console's
memory first grows while its bounded state fills (the held messages waiting for their review
timeout, the overview's minutes, the user panel's and the joins' newest entries), so the slope is
fitted over the last SLOPE_WINDOW_S only. Flat means that slope, kept up for a day, still leaves
the console under its memory limit (deploy/k8s/console/deployment.yaml's 512 MiB) from the run's
highest figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.shadow_report import figure
from console.board import KEPT_MESSAGES

HEADING = "## 12. The console's memory at 1,000 decisions a second"
TARGET = "console memory flat over an hour at 1,000 decisions/s"
KEEP_UP = "console keeps up at 1,000 decisions/s on the embedded broker"
SLOPE_WINDOW_S = 45 * 60.0
EVERY_S = 10 * 60.0  # a row of the table this often
LIMIT_MIB = 512.0
DAY_H = 24.0

Sample = Mapping[str, Any]


def after_warmup(feed: Mapping[str, Any]) -> list[Sample]:
    """The samples from the first one at or after the plan's warm-up on."""
    warmup = float(feed["plan"]["warmup_s"])
    return [s for s in feed.get("samples") or [] if float(s["t_s"]) >= warmup]


def slope_mib_per_h(samples: Sequence[Sample], window_s: float = SLOPE_WINDOW_S) -> float | None:
    """The least-squares slope of RSS over time (MiB an hour) for the samples within `window_s`
    of the last one; None with fewer than three."""
    if not samples:
        return None
    end = float(samples[-1]["t_s"])
    return _slope([s for s in samples if float(s["t_s"]) >= end - window_s])


def joins_full(samples: Sequence[Sample], kept: int = KEPT_MESSAGES) -> Sample | None:
    """The first sample by which `kept` messages had been held (written for review): from then
    on the board's joins (console/bounded.py) are full; None before that, or in a run that did
    not count them."""
    return next((s for s in samples if int(s.get("held_written") or 0) >= kept), None)


def _slope(samples: Sequence[Sample]) -> float | None:
    points = [(float(s["t_s"]) / 3600, float(s["rss_mib"])) for s in samples]
    if len(points) < 3:
        return None
    mean_t = sum(t for t, _ in points) / len(points)
    mean_m = sum(m for _, m in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (m - mean_m) for t, m in points) / spread


def judged(samples: Sequence[Sample]) -> list[Sample]:
    """The samples whose judged minute had decisions written in it."""
    return [s for s in samples if s.get("minute_written")]


def kept_up(samples: Sequence[Sample]) -> bool | None:
    """Whether the console counted every decision of each judged minute (None: none judged)."""
    rows = judged(samples)
    if not rows:
        return None
    return all(s.get("minute_counted") == s["minute_written"] for s in rows)


def behind_s(samples: Sequence[Sample], rate: float) -> tuple[float, float] | None:
    """The median and the most the page's overview was behind, in seconds of traffic."""
    seen = sorted(float(s["behind"]) / rate for s in samples if s.get("behind") is not None)
    return (seen[len(seen) // 2], seen[-1]) if seen else None


def rows_every(samples: Sequence[Sample], every_s: float = EVERY_S) -> list[Sample]:
    """The first sample, the first at or after each `every_s`, and the last."""
    if not samples:
        return []
    start = float(samples[0]["t_s"])
    chosen = [samples[0]]
    mark = start + every_s
    for s in samples[1:]:
        if float(s["t_s"]) >= mark:
            chosen.append(s)
            while mark <= float(s["t_s"]):
                mark += every_s
    if chosen[-1] is not samples[-1]:
        chosen.append(samples[-1])
    return chosen


def flat(samples: Sequence[Sample]) -> bool | None:
    """The slope kept up for a day stays under the limit from the run's highest RSS."""
    slope = slope_mib_per_h(samples)
    if slope is None:
        return None
    highest = max(float(s["rss_mib"]) for s in samples)
    return highest + max(slope, 0.0) * DAY_H <= LIMIT_MIB


def table(samples: Sequence[Sample], rate: float) -> list[str]:
    out = ["| minute | RSS (MiB) | console CPU (% of a core) | waiting | behind (s) | whole minute "
           "counted / written | broker CPU (% of a core) | broker RSS (MiB) |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    previous: Sample | None = None
    for s in rows_every(samples):
        lag = None if s.get("behind") is None else float(s["behind"]) / rate
        whole = (f"{s.get('minute_counted') or 0:,} / {s['minute_written']:,}"
                 if s.get("minute_written") else "–")  # fmt: skip
        broker_rss = s.get("broker_rss_mib")
        out.append(f"| {float(s['t_s']) / 60:.0f} | {figure(float(s['rss_mib']))} "
                   f"| {figure(_per_core(s, previous, 'cpu_s'))} "
                   f"| {s.get('waiting') if s.get('waiting') is not None else '–'} "
                   f"| {figure(lag)} | {whole} | {figure(_per_core(s, previous, 'broker_cpu_s'))} "
                   f"| {figure(None if broker_rss is None else float(broker_rss))} |")  # fmt: skip
        previous = s
    return out


def _per_core(s: Sample, previous: Sample | None, key: str) -> float | None:
    """The CPU-seconds `key` counts between two samples, in % of a core; None without both."""
    if previous is None or s.get(key) is None or previous.get(key) is None:
        return None
    span = float(s["t_s"]) - float(previous["t_s"])
    return 100 * (float(s[key]) - float(previous[key])) / span if span > 0 else None


def summary(feed: Mapping[str, Any]) -> dict[str, Any]:
    samples = after_warmup(feed)
    rss = [float(s["rss_mib"]) for s in samples]
    full = joins_full(samples)
    return {
        "start_mib": rss[0] if rss else None,
        "end_mib": rss[-1] if rss else None,
        "max_mib": max(rss) if rss else None,
        "slope": slope_mib_per_h(samples),
        "kept_up": kept_up(samples),
        "judged": len({s["minute_ms"] for s in judged(samples)}),
        "short": len(
            {
                s["minute_ms"]
                for s in judged(samples)
                if s.get("minute_counted") != s["minute_written"]
            }
        ),
        "behind_s": behind_s(samples, float(feed["plan"]["rate"])),
        "flat": flat(samples),
        "minutes": float(samples[-1]["t_s"]) / 60 if samples else 0.0,
        "joins_full_min": None if full is None else float(full["t_s"]) / 60,
        # what is left of the growth once the largest bounded state has filled
        "slope_after_full": None
        if full is None
        else _slope([s for s in samples if s["t_s"] >= full["t_s"]]),
    }


def verdict(ok: bool | None) -> str:
    return "–" if ok is None else ("met" if ok else "missed")


def headline_row(feed: Mapping[str, Any] | None) -> list[str] | None:
    """The Targets row of the memory: flat over the run (issue 44's figure)."""
    if not feed or not feed.get("samples"):
        return None
    s = summary(feed)
    after = (f"; {figure(s['slope_after_full'])} MiB/h from minute {s['joins_full_min']:.0f}, "
             "when the joins were full" if s["joins_full_min"] is not None else "")  # fmt: skip
    measured = (f"{figure(s['start_mib'])} → {figure(s['end_mib'])} MiB over "
                f"{s['minutes']:.0f} min (max {figure(s['max_mib'])}), {figure(s['slope'])} "
                f"MiB/h over the last 45 min{after}")  # fmt: skip
    return [TARGET, f"slope × 24 h within {LIMIT_MIB:.0f} MiB", measured, verdict(s["flat"])]


def keep_up_row(feed: Mapping[str, Any] | None) -> list[str] | None:
    """The Targets row of keeping up in the same run: a console that reads less uses less, so
    the memory row stands on the minutes it kept up (the section's table says which)."""
    if not feed or not feed.get("samples"):
        return None
    s = summary(feed)
    measured = (f"{s['short']} of {s['judged']} whole minutes not counted in full in time; "
                f"behind {_behind(s['behind_s'])}")  # fmt: skip
    return [KEEP_UP, "every whole minute counted within 15 s", measured, verdict(s["kept_up"])]


def section(feed: Mapping[str, Any] | None, label: str, note: str = "") -> list[str]:
    if not feed or not feed.get("samples"):
        return []
    plan = feed["plan"]
    s = summary(feed)
    samples = after_warmup(feed)
    kept = {True: "**yes**", False: "**no**", None: "not judged"}[s["kept_up"]]
    return [
        HEADING,
        "",
        f"Machine: **{label}**. One `python -m moderator console` process on the embedded Tansu "
        f"broker ({feed.get('partitions')} partitions) and a real redis-server, one page open on "
        f"it (its event stream, read as a browser reads it), following fresh topics while "
        f"`python -m bench.console_feed` writes {plan['rate']:,.0f} decisions a second for "
        f"{plan['duration_s'] / 60:.0f} minutes (the load generator's traffic in the moderator's "
        f"own records, bench/console_traffic.py): {plan['held_share']:.0%} held for review with "
        "their review records, half of those decided by a verdict within two minutes (the verdict "
        "and its final decision), the rest by the review timeout's final decision after 600 s. "
        f"RSS is VmRSS every {plan['sample_s']:.0f} s; the start is the first sample after "
        f"{plan['warmup_s']:.0f} s (idle before the traffic: {figure(feed.get('idle_rss_mib'))} "
        "MiB). Behind: decisions written that the page's overview does not count yet, in "
        "seconds of traffic; a whole minute is judged 15 s after it ended.",
        "",
        *table(samples, float(plan["rate"])),
        "",
        f"- RSS: start {figure(s['start_mib'])} MiB, end {figure(s['end_mib'])} MiB, max "
        f"{figure(s['max_mib'])} MiB; slope over the last 45 minutes {figure(s['slope'])} MiB/h "
        f"({'flat' if s['flat'] else 'not flat' if s['flat'] is not None else 'not judged'}: a "
        f"day of it from the max {'stays' if s['flat'] else 'does not stay'} under "
        f"{LIMIT_MIB:.0f} MiB, the console's memory limit).",
        *([_bounded(s)] if s["joins_full_min"] is not None else []),
        f"- Kept up: {kept} ({s['judged']} whole minutes judged 15 to 45 s after they ended, "
        f"{s['short']} of them not yet counted in full at least once; behind "
        f"{_behind(s['behind_s'])}).",
        *([f"- {note}"] if note else []),
        "",
    ]


def _bounded(s: Mapping[str, Any]) -> str:
    return (
        f"- Bounded state: the board's joins keep the newest {KEPT_MESSAGES:,} held messages "
        f"(console/bounded.py), all held by minute {s['joins_full_min']:.0f}; the slope from then "
        f"to the end {figure(s['slope_after_full'])} MiB/h (the verdict is the 45-minute slope's)."
    )


def _behind(seconds: tuple[float, float] | None) -> str:
    return (
        "not measured"
        if seconds is None
        else (f"{seconds[0]:.1f} s at the median, {seconds[1]:.1f} s at most")
    )


def merge_console_feed(results: Mapping[str, Any], document: str) -> str:
    """`document` (a BENCHMARKS.md) with this run's section and Targets row put in, the rest as
    it was; unchanged when the run has no console feed results."""
    from bench.loop_report import run_note, splice, splice_target

    feed = results.get("console_feed")
    lines = section(feed, str(results.get("machine_label", "")),
                    run_note(results, "console_feed"))  # fmt: skip
    if not lines:
        return document
    merged = splice_target(splice(document, lines, HEADING), headline_row(feed))
    return splice_target(merged, keep_up_row(feed))
