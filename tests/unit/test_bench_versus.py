"""The old-against-new benchmark's pure parts and its one process rule (bench/versus.py,
bench/versus_report.py): another checkout's moderator really is the one started, the counters
come from the moderator's own metrics, and the targets read medians over the rounds."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from bench import versus, versus_report
from bench.stack import ModeratorConfig
from devstack.child import ModeratorChild, Samples, moderator_env
from loadgen.kafka import TopicSet
from moderator.metrics import Metrics
from tests.waiting import eventually_blocking


def test_a_run_of_another_tree_starts_that_trees_package(tmp_path: Path) -> None:
    tree = tmp_path / "old"
    (tree / "moderator").mkdir(parents=True)
    (tree / "moderator" / "__init__.py").write_text("")
    (tree / "moderator" / "__main__.py").write_text("print('old tree', __file__)\n")
    cfg = ModeratorConfig(tmp_path / "model", threads=1, tree=tree)
    env = cfg.env("127.0.0.1:9092", TopicSet.fresh("t", "x"), "")
    assert env["PYTHONPATH"] == str(tree)
    plain = ModeratorConfig(tmp_path, threads=1).env("b", TopicSet.fresh("t", "y"), "")
    assert plain.get("PYTHONPATH") == os.environ.get("PYTHONPATH"), "this tree: as it is"
    child = ModeratorChild([], env, cwd=tree)
    with child:
        child.proc.wait(timeout=30)
        eventually_blocking(lambda: any("old tree" in line for line in child.lines),
                            "the child's line", timeout_s=10)  # fmt: skip
    line = next(line for line in child.lines if "old tree" in line)
    assert str(tree / "moderator" / "__main__.py") in line, "this tree's package was imported"
    here = ModeratorChild(["--help"], moderator_env())
    assert here.cwd is None
    assert here.command[:3] == [sys.executable, "-m", "moderator"]


def scrape(metrics: Metrics) -> Samples:
    return Samples(generate_latest(metrics.registry).decode())


def test_the_counters_add_the_fetches_to_the_loop_sections() -> None:
    metrics = Metrics()
    metrics.kafka.consumed.inc(10)
    before = scrape(metrics)
    metrics.kafka.consumed.inc(120)
    for size in (4, 4, 8):
        metrics.kafka.fetched_batch.observe(size)
    got = versus.counters(before, scrape(metrics))
    assert (got["consumed"], got["fetches"]) == (120, 3)
    assert versus_report.fetched({"counters": got}) == 40.0
    assert versus_report.fetched({"counters": {"consumed": 5, "fetches": 0}}) is None, "old: none"


def run_row(arm: str, pair: int, rate: float, p50: float, p99: float, loop: float,
            **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"arm": arm, "pair": pair, "rate": rate, "sent": 1000, "decided": 1000, "p50_ms": p50,
            "p99_ms": p99, "cpu_ms_per_msg": {"event loop": loop, "scorer": 1.0,
                                              "model pool & other": 0.5, "broker": 2.0},
            **extra}  # fmt: skip


def search(arm: str, pair: int, goodput: float | None) -> dict[str, Any]:
    probes = [run_row(arm, pair, 90.0, 9.0, 20.0, 0.6, ok=True)]
    if goodput:
        probes.append(run_row(arm, pair, goodput, 12.0, 45.0, 0.5, ok=True))
    return {"arm": arm, "pair": pair, "goodput": goodput, "confirmed": True, "probes": probes}


def results() -> dict[str, Any]:
    runs = []
    for pair in range(3):
        runs.append(run_row("old", pair, 50.0, 9.0 + pair, 14.0, 1.3))
        runs.append(run_row("new", pair, 50.0, 10.5, 15.0, 0.9))
        runs.append(run_row("quix", pair, 50.0, 8.0, 12.0, 2.5))
        for rate in (100.0, 200.0):
            runs.append(run_row("old", pair, rate, 10.0, 20.0, 1.2))
            loop = (0.6, 0.7, 0.8)[pair] if rate == 200.0 else 0.6
            trips = {"mget": 100, "users_step": 50}
            counted = {"consumed": 300, "fetches": 100, "round_trips": trips}
            runs.append(run_row("new", pair, rate, 10.0, 20.0, loop, counters=counted))
    searches = [search("old", p, g) for p, g in enumerate((180.0, 200.0, 150.0))]
    searches += [search("new", p, g) for p, g in enumerate((270.0, 300.0, 250.0))]
    searches += [search("heavy", p, g) for p, g in enumerate((170.0, 160.0, None))]
    return {"machine_label": "2 cores", "machine": {"cpu_model": "Test CPU"}, "versus": {
        "old_commit": "aaa", "new_commit": "bbb", "threads": 2, "partitions": 4,
        "rates": [50.0, 100.0, 200.0], "pairs": 3, "duration_s": 30.0, "budget_ms": 50.0,
        "goodput_plan": {"start": 90.0, "duration_s": 30.0, "factor": 1.5, "resolution": 0.08,
                         "max_probes": 10},
        "users_limit": 100000, "runs": runs, "searches": searches,
        "cost": {"default_ms": 1.2, "heavy_ms": 3.0, "ratio": 2.5, "rounds": 3,
                 "heavy_model": "speed-e5-small@1"}}}  # fmt: skip


def test_the_targets_read_medians_over_the_rounds() -> None:
    rows = {row[0]: row for row in versus_report.targets(results()["versus"])}
    ratio = rows["goodput new / old (p99 <= 50 ms)"]
    assert ratio[2:] == ["1.50x (270.0 / 180.0 msgs/s)", "met"]
    loop = rows["event loop CPU-ms per message, new"]
    assert loop[2:] == ["100/s: 0.60; 200/s: 0.70", "met"], "the median of 0.6, 0.7, 0.8"
    heavy = rows["goodput, new with a heavier model / old"]
    assert heavy[2:] == ["92% (165.0 / 180.0 msgs/s; the model 2.5x as costly)", "met"], (
        "a search finding none: left out"
    )
    quiet = rows["p50 at 50 msgs/s, new vs old"]
    assert quiet[2:] == ["10.5 ms (old 9.0–11.0)", "met"]


def test_a_target_missed_says_so() -> None:
    v = results()["versus"]
    for s in v["searches"]:
        if s["arm"] == "new":
            s["goodput"] = 240.0
    for r in v["runs"]:
        if r["arm"] == "new" and r["rate"] == 50.0:
            r["p50_ms"] = 11.5
        if r["arm"] == "new" and r["rate"] == 100.0:
            r["cpu_ms_per_msg"]["event loop"] = 0.75
    verdicts = {row[0]: row[3] for row in versus_report.targets(v)}
    assert verdicts["goodput new / old (p99 <= 50 ms)"] == "missed", "1.33x"
    assert verdicts["p50 at 50 msgs/s, new vs old"] == "missed", "above old's highest"
    assert verdicts["event loop CPU-ms per message, new"] == "missed"
    assert versus_report.targets({"runs": [], "searches": []}) == []


def test_the_section_shows_every_run_search_and_probe() -> None:
    r = results()
    text = "\n".join(versus_report.section_versus(r["versus"], "2 cores", r["machine"]))
    assert text.startswith(versus_report.HEADING)
    assert "Old `aaa` against new `bbb`" in text
    assert "**2.5x**" in text
    assert "| 1 | new | 1000/1000 | 10.0 | 20.0 | 0.60 | 2.10 | 2.00 | 3.00 | – | 0.50 |" in text
    assert "| old | 3 | 10.0 (9.0–11.0) | 14.0 | 1.30 | 2.80 | – | – |" in text
    assert "| 3 | new, heavy stand-in | – | confirmed | 1 | – | – | – |" in text
    assert "old 180.0 (150.0–200.0); new 270.0 (250.0–300.0)" in text
    assert text.count("| Quix Streams |") == 3 + 1, "three runs and the arm's summary"
    assert "Targets (issue 42):" in text


def test_a_merge_replaces_the_section_and_the_target_rows(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n## Targets\n\n| measure | target | measured |  |\n"
                   "| --- | --- | --- | --- |\n| loop | x | y | met |\n\n## 10. Shadow\n\nkept\n\n"
                   "## Reading the numbers\n\n- a note\n")  # fmt: skip
    versus_report.merge_versus(results(), out)
    once = out.read_text()
    assert "## 10. Shadow\n\nkept\n\n" + versus_report.HEADING in once
    assert once.index(versus_report.HEADING) < once.index("## Reading the numbers")
    assert "| loop | x | y | met |\n| goodput new / old (p99 <= 50 ms) | >= 1.4x |" in once
    versus_report.merge_versus(results(), out)
    assert out.read_text() == once, "a second merge adds nothing"
    versus_report.merge_versus({"versus": {"runs": [], "searches": []}}, out)
    assert out.read_text() == once
