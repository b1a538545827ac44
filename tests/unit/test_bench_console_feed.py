"""The console feed section's pure parts (bench/console_feed_report.py, bench/console_traffic.py,
bench/console_feed.py's overview arithmetic): the slope over the last 45 minutes, whether the
console kept up, the table and Targets row, the section spliced into a report, and the traffic's
records as the console reads them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench import console_feed, console_feed_report
from bench.console_traffic import Traffic
from console.records import parse_decision, parse_review, read_verdict

NOW = 1_800_000_000_000


def feed(rss: list[float], *, every_s: float = 300.0, counted_ok: bool = True) -> dict[str, Any]:
    samples = []
    for i, mib in enumerate(rss):
        written = 60_000 if i else 0
        counted = written if counted_ok else written - 5
        samples.append({"t_s": i * every_s, "rss_mib": mib, "cpu_s": i * 6.0, "waiting": 100,
                        "minute_ms": NOW + 60_000 * (i // 2),  # two samples judge each minute
                        "behind": 900, "minute_written": written,
                        "minute_counted": counted if written else None})  # fmt: skip
    plan = {"duration_s": every_s * (len(rss) - 1), "rate": 1000.0, "held_share": 0.02,
            "sample_s": every_s, "warmup_s": 0.0}  # fmt: skip
    return {"plan": plan, "partitions": 4, "idle_rss_mib": 80.0, "samples": samples}


def test_the_slope_is_fitted_over_the_last_45_minutes_only() -> None:
    # growing for the first 15 minutes (the bounded state filling), then flat at 200 MiB
    rss = [100.0, 150.0, 200.0, *[200.0] * 10]  # every 5 min: 0..60 min
    run = feed(rss)
    assert console_feed_report.slope_mib_per_h(run["samples"]) == 0.0
    summary = console_feed_report.summary(run)
    assert (summary["start_mib"], summary["end_mib"], summary["max_mib"]) == (100.0, 200.0, 200.0)
    assert summary["flat"] is True
    assert summary["judged"] == 7  # minutes (12 samples judged them), not samples


def test_memory_that_keeps_growing_is_not_flat() -> None:
    rss = [100.0 + 10 * i for i in range(13)]  # 120 MiB an hour
    summary = console_feed_report.summary(feed(rss))
    assert round(summary["slope"], 6) == 120.0
    assert summary["flat"] is False
    assert console_feed_report.headline_row(feed(rss))[-1] == "missed"  # type: ignore[index]


def test_the_slope_after_the_joins_are_full_is_reported_beside_the_verdict() -> None:
    # every 5 min: growing 12 MiB a sample while the joins fill (held 6,000 a sample), then 1
    rss = [100.0 + 12 * min(i, 4) + max(0, i - 4) for i in range(13)]
    run = feed(rss)
    for i, sample in enumerate(run["samples"]):
        sample["held_written"] = 6_000 * i
    full = console_feed_report.joins_full(run["samples"], kept=20_000)
    assert (full or {}).get("t_s") == 4 * 300.0  # 24,000 held by then
    summary = console_feed_report.summary(run)
    assert (summary["joins_full_min"], round(summary["slope_after_full"], 6)) == (20.0, 12.0)
    assert summary["slope"] > summary["slope_after_full"]  # the 45 minutes include the filling
    assert "all held by minute 20; the slope from then to the end 12.0 MiB/h" in "\n".join(
        console_feed_report.section(run, "m")
    )
    assert console_feed_report.summary(feed(rss))["joins_full_min"] is None  # not counted


def test_a_minute_counted_short_means_the_console_fell_behind() -> None:
    assert console_feed_report.kept_up(feed([100.0] * 4)["samples"]) is True
    short = feed([100.0] * 4, counted_ok=False)
    assert console_feed_report.kept_up(short["samples"]) is False
    assert console_feed_report.summary(short)["short"] == 2  # minutes, each judged twice at most
    assert "2 of them not yet counted in full" in "\n".join(console_feed_report.section(short, "m"))
    assert console_feed_report.behind_s(short["samples"], 1000.0) == (0.9, 0.9)
    assert console_feed_report.kept_up(feed([100.0])["samples"]) is None  # nothing judged


def test_the_section_has_a_row_every_ten_minutes_and_the_targets_row() -> None:
    run = feed([100.0, 150.0, 200.0, *[200.0] * 10])
    lines = console_feed_report.section(run, "test machine")
    assert lines[0] == console_feed_report.HEADING
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[0] for row in rows] == [f"| {m}" for m in (0, 10, 20, 30, 40, 50, 60)]
    assert "| 10 | 200.0 | 2.0 | 100 | 0.9 | 60,000 / 60,000 | – | – |" in rows  # no broker figures
    for i, sample in enumerate(run["samples"]):
        sample["broker_cpu_s"], sample["broker_rss_mib"] = i * 270.0, 500.0 + 100 * i
    rows = [line for line in console_feed_report.section(run, "m") if line.startswith("| 20 ")]
    assert rows == ["| 20 | 200.0 | 2.0 | 100 | 0.9 | 60,000 / 60,000 | 90.0 | 900.0 |"]
    row = console_feed_report.headline_row(run)
    assert row is not None
    assert row[0] == console_feed_report.TARGET
    assert row[2].startswith("100.0 → 200.0 MiB over 60 min (max 200.0), 0.0 MiB/h")
    assert row[3] == "met"
    kept = console_feed_report.keep_up_row(run)
    assert kept is not None
    assert kept[0] == console_feed_report.KEEP_UP
    assert kept[2:] == ["0 of 7 whole minutes not counted in full in time; behind 0.9 s at the "
                        "median, 0.9 s at most", "met"]  # fmt: skip
    behind = console_feed_report.keep_up_row(feed([100.0] * 13, counted_ok=False))
    assert (behind or [])[-1] == "missed"
    assert console_feed_report.headline_row(feed([100.0] * 13, counted_ok=False))[-1] == "met"  # type: ignore[index]


def test_the_merge_replaces_the_section_and_the_target_row_and_keeps_the_rest() -> None:
    doc = "\n".join(["# Benchmarks", "", "## Targets", "", "| measure | target | measured |  |",
                     "| --- | --- | --- | --- |", "| other | x | y | met |", "", "## 1. Other", "",
                     "kept", "", "## Reading the numbers", "", "end", ""])  # fmt: skip
    results = {"console_feed": feed([100.0, *[120.0] * 12]), "machine_label": "m",
               "started": "today", "load_before": "1.0"}  # fmt: skip
    once = console_feed_report.merge_console_feed(results, doc)
    twice = console_feed_report.merge_console_feed(results, once)
    assert once == twice
    assert once.count(console_feed_report.HEADING) == 1
    assert once.count(console_feed_report.TARGET) == 1
    assert "kept" in once
    assert once.index(console_feed_report.HEADING) < once.index("## Reading the numbers")
    assert console_feed_report.merge_console_feed({}, doc) == doc


def test_behind_counts_what_the_overview_has_not_yet() -> None:
    written = Counter({NOW: 60_000, NOW + 60_000: 1_500, NOW - 60_000 * 20: 7})
    overview = {"per_minute": [{"minute_ms": NOW, "allow": 59_000, "review": 1_000, "final": 9},
                               {"minute_ms": NOW + 60_000, "allow": 500}]}  # fmt: skip
    seen = console_feed.counted(overview)
    assert seen == {NOW: 60_000, NOW + 60_000: 500}  # `final` counts decisions already counted
    assert console_feed.behind(written, seen) == 1_000
    assert console_feed.behind(written, {}) is None


def test_the_traffic_is_read_by_the_console_as_the_moderators_records() -> None:
    traffic = Traffic("t", held_share=0.5, seed=1)
    made = [out for n in range(200) for out in traffic.message(NOW + n)]
    reviews = [parse_review(o.value, NOW) for o in made if o.kind == "review"]
    decisions = [parse_decision(o.value, NOW) for o in made if o.kind == "decision"]
    assert len(decisions) == 200
    assert len({d.message_id for d in decisions}) == 200
    assert 50 < len(reviews) < 150
    assert {d.action for d in decisions} >= {"allow", "review"}
    later = list(traffic.due(NOW + traffic.timeout_ms + 1_000))
    verdicts = [read_verdict(o.value, max_bytes=1 << 20) for o in later if o.kind == "verdict"]
    finals = [parse_decision(o.value, NOW) for o in later if o.kind == "decision"]
    assert {f.message_id for f in finals} == {r["message_id"] for r in reviews}
    assert all(f.final for f in finals)
    assert {v.message_id for v in verdicts} < {r["message_id"] for r in reviews}
    assert traffic.waiting == 0
    assert traffic.held == len(reviews)
