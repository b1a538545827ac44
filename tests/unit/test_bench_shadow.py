"""The shadow section's pure parts (bench/pairs.py, bench/shadow.py, bench/shadow_report.py):
the arms' order, medians and ranges, the verdict against the off arm's range, the CPU split
between the primary's threads and the shadow's, the counters read from the moderator's own
metrics, and the section spliced into an existing report."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from bench import cpu, loop, pairs, shadow, shadow_report
from bench.stack import ModeratorConfig
from devstack.child import Samples
from loadgen.kafka import TopicSet
from moderator.metrics import Metrics
from moderator.shadow import scorer


def test_rounds_reverse_so_a_steady_drift_costs_every_arm_alike() -> None:
    order = pairs.interleaved(4, shadow.ARMS)
    assert [arm for _, arm in order[:6]] == ["off", "on", "slow", "slow", "on", "off"]
    for pair in range(4):
        assert sorted(arm for p, arm in order if p == pair) == sorted(shadow.ARMS)
    positions = {arm: sum(i for i, (_, a) in enumerate(order) if a == arm) for arm in shadow.ARMS}
    assert len(set(positions.values())) == 1, positions
    assert loop.arm_order(2) == [(0, "off"), (0, "on"), (1, "on"), (1, "off")]


def test_a_spread_is_the_median_and_the_range() -> None:
    assert pairs.spread([30.0, 10.0, 20.0]) == (20.0, 10.0, 30.0)
    assert pairs.spread([4.0, 1.0]) == (2.5, 1.0, 4.0)
    assert pairs.spread([]) is None


def test_a_figure_above_the_reference_range_is_affected_below_or_within_is_not() -> None:
    off = pairs.Spread(20.0, 15.0, 25.0)
    assert [pairs.place(v, off) for v in (14.9, 15.0, 25.0, 25.1)] == [
        "below", "within", "within", "above"]  # fmt: skip
    assert pairs.unaffected(25.0, off) is True
    assert pairs.unaffected(10.0, off) is True, "faster is no harm"
    assert pairs.unaffected(25.1, off) is False
    assert pairs.unaffected(None, off) is None
    assert pairs.unaffected(20.0, None) is None


def test_the_shadows_process_is_a_cpu_role_of_its_own() -> None:
    def role(pid: int, tid: int, name: str) -> str:
        return cpu.role_of(pid, tid, name, moderators=[100], broker=200, shadows=[300])

    assert role(300, 300, scorer.THREAD_NAME) == cpu.SHADOW
    assert role(300, 301, "python") == cpu.SHADOW, "every thread of the child"
    assert role(100, 100, scorer.THREAD_NAME) == "event loop"
    assert role(100, 102, "scorer") == "scorer"
    assert role(400, 400, "python") == "load generator"
    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            assert child.pid in cpu.children([os.getpid()])
            assert child.pid not in cpu.children([child.pid])
        finally:
            child.kill()
    with_shadow = cpu.per_message_ms({"event loop": 0.1, "scorer": 0.2, cpu.SHADOW: 0.3}, 100)
    assert with_shadow[cpu.SHADOW] == pytest.approx(3.0)
    assert with_shadow["total"] == pytest.approx(6.0)
    without = cpu.per_message_ms(dict.fromkeys(cpu.ROLES, 0.1), 100)
    assert set(without) == {*cpu.ROLES, "total"}, "the other sections' splits are unchanged"


def scrape(metrics: Metrics) -> Samples:
    return Samples(generate_latest(metrics.registry).decode())


def test_the_counters_are_the_moderators_own_between_two_scrapes() -> None:
    metrics = Metrics()
    metrics.kafka.consumed.inc(64)
    before = scrape(metrics)
    metrics.kafka.consumed.inc(100)
    m = metrics.shadow
    m.by_label["allow", "allow", "none"].inc(70)
    m.by_label["nudge", "allow", "toxicity"].inc(5)
    m.disagreed["toxicity", "en"].inc(5)
    m.skipped.inc(25)
    m.records_sent.inc(4)
    m.records_failed.inc(1)
    m.queued.set(7)
    got = shadow.shadow_counters(before, scrape(metrics))
    assert got == {"consumed": 100, "compared": 75, "disagreed": 5, "skipped": 25,
                   "records_sent": 4, "records_failed": 1, "queued": 7}  # fmt: skip


def test_the_measured_run_waits_until_the_shadow_has_read_the_warm_up() -> None:
    metrics = Metrics()
    metrics.kafka.consumed.inc(64)
    metrics.shadow.by_label["allow", "allow", "none"].inc(40)
    metrics.shadow.skipped.inc(20)
    assert not shadow.settled(scrape(metrics)), "4 still waiting or being read"
    metrics.shadow.by_label["block", "allow", "threat"].inc(4)
    assert shadow.settled(scrape(metrics))


def test_an_arm_with_a_shadow_names_it_and_a_fresh_topic_for_its_records(tmp_path: Path) -> None:
    base = ModeratorConfig(tmp_path / "primary", threads=2, cache=True)
    assert shadow.arm_config(base, None, "t") is base
    model = shadow.ShadowModel(tmp_path / "slow", threads=1, queue=shadow.SLOW_QUEUE)
    one, two = (shadow.arm_config(base, model, "t") for _ in range(2))
    env = one.env("broker:9092", TopicSet.fresh("bench", "t"), "redis://x")
    assert env["MODERATOR_SHADOW_MODEL"] == str(tmp_path / "slow")
    assert env["MODERATOR_SHADOW_THREADS"] == "1"
    assert env["MODERATOR_SHADOW_QUEUE"] == str(shadow.SLOW_QUEUE)
    assert env["MODERATOR_SHADOW_TOPIC"].startswith("bench.shadow.t.")
    assert dict(one.settings)["shadow_topic"] != dict(two.settings)["shadow_topic"]
    assert env["MODERATOR_MODEL_DIR"] == str(tmp_path / "primary")


def run(arm: str, pair: int, p99: float, **extra: Any) -> dict[str, Any]:
    cpu_ms = {"event loop": 1.0, "scorer": 2.0, "model pool & other": 0.5, "broker": 3.0,
              "load generator": 1.0}  # fmt: skip
    row: dict[str, Any] = {"arm": arm, "pair": pair, "rate": 50.0, "p50_ms": p99 / 2,
                           "p99_ms": p99, "p999_ms": p99 * 2, "decided": 1000, "sent": 1000,
                           "cpu_ms_per_msg": cpu_ms, "cpu_seconds": {}}  # fmt: skip
    if arm != "off":
        row["cpu_seconds"] = {cpu.SHADOW: 2.0}
        row["counters"] = {"consumed": 1000, "compared": 800, "skipped": 200, "queued": 0,
                           "disagreed": 30}  # fmt: skip
    return {**row, **extra}


RUNS = [run("off", 0, 20.0), run("on", 0, 22.0), run("slow", 0, 40.0),
        run("slow", 1, 35.0), run("on", 1, 18.0), run("off", 1, 24.0),
        run("off", 2, 30.0), run("on", 2, 21.0), run("slow", 2, 33.0)]  # fmt: skip


def test_the_primarys_cpu_leaves_the_shadows_threads_out() -> None:
    on = RUNS[1]
    assert shadow_report.primary_ms(on) == pytest.approx(3.5)
    assert shadow_report.shadow_ms(on) == pytest.approx(2.5), "2 s over 800 compared"
    assert shadow_report.skipped_share(on) == pytest.approx(0.2)
    assert shadow_report.shadow_ms(RUNS[0]) is None
    assert shadow_report.skipped_share(RUNS[0]) is None


def test_the_verdict_sets_the_median_p99_against_offs_range() -> None:
    assert shadow_report.verdict(RUNS, 50.0, "on") == (
        True, "median p99 21.0 ms, within off's 20.0–30.0 ms")  # fmt: skip
    met, how = shadow_report.verdict(RUNS, 50.0, "slow")
    assert met is False
    assert "35.0 ms, above" in how
    assert shadow_report.verdict(RUNS, 100.0, "on") == (None, "not measured")
    one = [RUNS[0], RUNS[1]]
    assert shadow_report.verdict(one, 50.0, "on") == (
        False,
        "median p99 22.0 ms, above off's 20.0 ms",
    )


def results() -> dict[str, Any]:
    return {
        "machine_label": "2 cores, avx512f", "started": "now", "load_before": "1.00",
        "machine": {"cpu_model": "Test CPU @ 2GHz", "cpu_count": 2},
        "shadow": {"rates": [50.0], "runs": RUNS, "order": ["off", "on", "slow"],
                   "shadows": {"on": {"model": "m-candidate@1", "threads": 1, "queue": 1000},
                               "slow": {"model": "speed-bert-base@2", "threads": 1,
                                        "queue": 100}}},
    }  # fmt: skip


def test_the_section_reports_each_run_the_medians_and_the_verdicts() -> None:
    text = "\n".join(shadow_report.section_shadow(results()["shadow"], "2 cores", {}))
    assert text.startswith(shadow_report.HEADING)
    assert "| 3 | slow: too slow to keep up | 1000/1000 | 16.5 | 33.0 | 66.0 | 3.50 | 2.50 |" in (
        text)  # fmt: skip
    assert "| off | 3 | 12.0 (10.0–15.0) | 24.0 (20.0–30.0) | reference |" in text
    assert "| on: candidate | 3 | 10.5 (9.0–11.0) | 21.0 (18.0–22.0) | yes: " in text
    assert "20.0% (20.0%–20.0%)" not in text, "one value is shown once"
    assert "fell behind: 600 messages skipped" in text
    assert "shadow on: primary p99 vs no shadow: the median p99 no higher than the highest of " \
        "off's runs: **met**" in text  # fmt: skip
    assert "**missed** (at 50.0 msgs/s median p99 35.0 ms, above off's 20.0–30.0 ms)" in text


def test_a_merge_puts_the_section_and_its_targets_in_and_keeps_the_rest(tmp_path: Path) -> None:
    document = ("# Benchmarks\n\n## Targets\n\n| measure | target | measured |  |\n"
                "| --- | --- | --- | --- |\n| loop | x | y | met |\n\n## 9. Goodput\n\nkept\n\n"
                "## Reading the numbers\n\n- a note\n")  # fmt: skip
    merged = shadow_report.merge_shadow(results(), document)
    assert "## 9. Goodput\n\nkept\n\n" + shadow_report.HEADING in merged
    assert merged.index(shadow_report.HEADING) < merged.index("## Reading the numbers")
    assert "Host: Test CPU @ 2GHz, 2 cores, avx512f (2 CPUs on the machine)." in merged
    assert "| loop | x | y | met |\n| shadow on: primary p99 vs no shadow |" in merged
    assert "| shadow too slow: primary p99 vs no shadow | within off's range |" in merged
    again = shadow_report.merge_shadow(results(), merged)
    assert again == merged, "a second merge replaces the section and the rows, adds nothing"
    assert shadow_report.merge_shadow({"shadow": None}, document) == document


def test_whose_threads_waited_for_a_core_is_each_arms_median_by_role() -> None:
    waits = [{"event loop": w, "broker": 3 * w, cpu.SHADOW: 2 * w} for w in (0.5, 1.0, 2.0)]
    runs = [run(arm, i, 20.0, wait_ms_per_msg={**waits[i], **({} if arm != "off" else
            {cpu.SHADOW: None})}) for arm in ("off", "on") for i in range(3)]  # fmt: skip
    rows = {row[0]: row[1:] for row in shadow_report.wait_rows(runs, 50.0)}
    assert rows["event loop"] == ["1.00", "1.00", "–"], "off, on; no slow runs"
    assert rows["broker"] == ["3.00", "3.00", "–"]
    assert rows[cpu.SHADOW] == ["–", "2.00", "–"]
    assert rows["scorer"] == ["–", "–", "–"], "not recorded: no figure, not zero"
