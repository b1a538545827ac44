"""BENCHMARKS.md from a results dict: ratios, tables, verdicts, partial runs."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report

BASELINE = {"key": "torch-padded", "label": "BERT-base", "mode": "batch1", "threads": 2,
            "p50_ms": 180.0, "msgs_per_s": 5.0, "note": ""}  # fmt: skip


def rung(
    key: str, mode: str, rate: float, p50: float | None = None, **extra: Any
) -> dict[str, Any]:
    return {"key": key, "label": key, "mode": mode, "threads": 2, "p50_ms": p50,
            "msgs_per_s": rate, "note": "", **extra}  # fmt: skip


RUNGS = [
    rung("torch-padded", "batch1", 10.0, 100.0),
    rung("fused", "batch1", 200.0, 5.0),
    rung("threads-1", "batch1", 120.0, 8.0),
    rung("threads-2", "batch1", 200.0, 5.0),
    rung("threads-4", "batch1", 50.0, 20.0),
    rung("batch-32", "backlog", 400.0),
    rung("repeats-nocache", "backlog", 500.0),
    rung("cache", "backlog", 800.0),
]


def results(**sections: Any) -> dict[str, Any]:
    return {"machine_label": "2 cores, avx512f avx512_vnni", "started": "today", "quick": False,
            "duration_s": 600, **sections}  # fmt: skip


def test_ratio_handles_missing_and_zero() -> None:
    assert report.ratio(10.0, 4.0) == pytest.approx(2.5)
    assert report.ratio(None, 4.0) is None
    assert report.ratio(1.0, 0.0) is None


@pytest.mark.parametrize(
    ("value", "text"), [(None, "-"), (0.854, "0.85x"), (31.24, "31.2x"), (250.0, "250x")]
)
def test_speedups_are_formatted_with_sensible_precision(value: float | None, text: str) -> None:
    assert report.fmt_x(value) == text


def test_table_right_aligns_numeric_columns() -> None:
    out = report.table(["name", "rate"], [["a", "1,200"], ["b", "-"]])
    lines = out.splitlines()
    assert lines[0] == "| name | rate |"
    assert lines[1] == "| --- | ---: |"
    assert lines[2] == "| a | 1,200 |"


def test_ladder_rows_give_each_rung_its_ratio_to_the_baseline() -> None:
    rows = report.ladder_rows(BASELINE, RUNGS)
    by_key = {r[0]: r for r in rows}
    assert by_key["fused"][3] == "36.0x"  # per message: 180 ms / 5 ms
    assert by_key["fused"][5] == "40.0x"  # throughput: 200 / 5
    assert by_key["batch-32"][2] == "-"  # a backlog rung has no per-message p50
    assert by_key["batch-32"][5] == "80.0x"


def test_thread_alternatives_do_not_break_the_step_chain() -> None:
    rows = {r[0]: r for r in report.ladder_rows(BASELINE, RUNGS)}
    # batch-32's step is measured from threads = 2, not from the oversubscribed threads = 4
    assert rows["batch-32"][6] == "2.00x"
    # the cache's step skips the no-cache comparison row and is measured from batch-32
    assert rows["cache"][6] == "2.00x"


def test_best_ladder_ratio_is_the_fastest_rung() -> None:
    assert report.best_ladder_x(BASELINE, RUNGS) == pytest.approx(160.0)


def test_a_partial_run_still_renders_every_section_heading() -> None:
    ladder = {"baseline": BASELINE, "rungs": {"distilbert-base": RUNGS}, "texts_note": "n"}
    text = report.render(results(ladder=ladder))
    for heading in ("## 1. The ladder", "## 2. Scale-up", "## 3. The whole pipeline",
                    "## 4. Memory"):  # fmt: skip
        assert heading in text
    assert text.count("_Not run (partial run)._") == 3
    assert "2 cores, avx512f avx512_vnni" in text
    assert "Random weights are exact for speed" in text
    assert "Target ≥ 30x over the baseline for the DistilBERT shape: **met**" in text


def pipeline_result(p50: float, p99: float, on: float = 900.0) -> dict[str, Any]:
    drain = {"msgs_per_s": 450.0, "decided": 1000, "cached": 10}
    return {
        "threads": 2,
        "bare": {"msgs_per_s": 600.0},
        "pipeline": {"drain": drain, "rss_warm_kb": [{"VmRSS": 204800}],
                     "rss_after_kb": [{"VmRSS": 307200, "VmHWM": 409600}]},
        "hop": {"p50_ms": 2.0, "p99_ms": 4.0},
        "latency": [{"fraction": f, "rate": 450 * f, "throughput_per_s": 450 * f,
                     "p50_ms": p50, "p90_ms": p50, "p99_ms": p99, "p999_ms": p99,
                     "server_total_p50_ms": 1.0, "decided": 10, "sent": 10,
                     "over_budget_ratio": 0.0} for f in (0.25, 0.5, 0.9)],
        "cache_off": {"drain": drain},
        "cache_on": {"drain": {**drain, "msgs_per_s": on, "cached": 400}},
        "cache_ratio": on / 450.0,
    }  # fmt: skip


def test_missed_targets_say_by_how_much() -> None:
    text = report.render(results(pipeline={"distilbert-base": pipeline_result(30.0, 100.0)}))
    assert "pipeline / bare" in text
    assert "75%" in text  # 450 / 600
    assert "**missed**: p50 30.0 ms, p99 100.0 ms at half saturation (2.00x the p50 target" in text
    assert "| cache on / off at 40% repeats, DistilBERT-shape | ≥ 1.5x | 2.00x | met |" in text


def test_met_latency_target_is_reported_as_met() -> None:
    text = report.render(results(pipeline={"distilbert-base": pipeline_result(9.0, 30.0)}))
    assert "**met**: p50 9.00 ms, p99 30.0 ms at half saturation" in text


def test_memory_table_reads_rss_in_megabytes() -> None:
    memory = {"minilm-l6": {"model_mb": "23 MB", "rss_warm_kb": [{"VmRSS": 204800}],
                            "rss_after_kb": [{"VmRSS": 307200, "VmHWM": 409600}]}}  # fmt: skip
    text = report.render(results(memory=memory))
    assert "| MiniLM-L6 (default model) | 23 MB | 200 MB | 300 MB | 400 MB |" in text


def test_observations_read_the_thread_and_batch_rungs() -> None:
    ladder = {"baseline": BASELINE, "rungs": {"distilbert-base": RUNGS}}
    notes = report.observations(results(ladder=ladder))
    text = "\n".join(notes)
    assert "1 thread p50 8.00 ms vs 2 threads 5.00 ms." in text  # 2 threads won: no excuse
    assert "4 threads on 2 cores is 4.00x the p50 of 2 threads" in text
    assert "max_batch 8" not in text  # there is no max_batch 8 rung to compare


def test_load_during_the_run_is_reported() -> None:
    during = [{"section": "ladder distilbert-base", "loadavg": "2.50 2.00 1.00",
               "others": ["130% `python -m models build` (running 05:00)"]}]  # fmt: skip
    text = report.render(results(load_during=during))
    assert "- ladder distilbert-base: load 2.50 2.00 1.00; 130% `python -m models build`" in text


def test_spin_diagnosis_judges_the_best_layout_against_the_target() -> None:
    rows = [
        {"label": "2 threads, spinning (ONNX Runtime's default)", "p50_ms": 500.0, "p99_ms": 900.0},
        {"label": "2 threads, spinning off", "p50_ms": 12.0, "p99_ms": 30.0},
    ]
    text = report.render(results(spin={"distilbert-base": {"rate": 90.0, "rows": rows}}))
    assert "## 5. Diagnosis" in text
    assert "2 threads, spinning off, **met**: p50 12.0 ms, p99 30.0 ms" in text


def test_the_terms_section_shows_the_matchers_figures() -> None:
    terms = {"terms": 10000, "packaged_terms": 1598, "lines": 3000, "mean_chars": 39.6,
             "compile_s": 0.229, "mean_us": 139.0, "p50_us": 104.2, "p99_us": 650.0,
             "lines_per_s": 7192.6, "matched_share": 0.128}  # fmt: skip
    text = "\n".join(report.section_terms(terms, "test host"))
    assert "10,000 terms on one core (test host)" in text
    assert "| 10,000 (1,598 packaged) | 229 ms | 139 µs | 104 µs | 650 µs | 7,193 |" in text
    assert report.section_terms(None, "x") == []


def test_the_cpu_split_says_where_each_message_goes_and_why_half_load_queues() -> None:
    res = pipeline_result(300.0, 600.0)
    res["cores"] = 2
    cpu = {"event loop": 1.5, "scorer": 4.0, "model pool & other": 2.0, "broker": 2.0,
           "load generator": 1.5, "total": 11.0}  # fmt: skip
    batches = {"batches": 100.0, "mean_size": 7.0, "queue_ms": 200.0, "model_ms": 40.0}
    for row in res["latency"]:
        row.update(cpu_ms_per_msg=cpu, batches=batches)
    text = report.render(results(pipeline={"minilm-l6": res}), report.observations(
        results(pipeline={"minilm-l6": res})))  # fmt: skip
    # 50%: 225 msgs/s × 11 CPU-ms on 2 cores; the bare model: 2 threads / 600 msgs/s = 3.33 ms
    row = "| 50% | 225 | 1.50 | 4.00 | 2.00 | 2.00 | 1.50 | 11.0 | 124% | 7.00 | 200.0 | 40.0 |"
    assert row in text
    assert "The bare model spends 3.33 CPU-ms per message" in text
    assert "At 50% load the machine is 124% busy" in text
    assert "the model 6.00 (1.80x the bare model's 3.33" in text
    assert "the harness (broker and load generator) 3.50" in text


def test_the_harness_bound_adds_the_bare_model_and_the_harness_at_50_and_80_percent() -> None:
    res = pipeline_result(900.0, 2000.0)
    res["cores"] = 2
    res["latency"] = [{**res["latency"][0], "fraction": f, "rate": 450 * f,
                       "cpu_ms_per_msg": {"broker": 1.0, "load generator": 0.5, "event loop": 1.0,
                                          "scorer": 4.0, "model pool & other": 0.0,
                                          "total": 6.5}} for f in (0.25, 0.5, 0.8)]  # fmt: skip
    text = "\n".join(report.observations(results(pipeline={"minilm-l6": res})))
    # bare: 2 threads / 600 msg/s = 3.33 CPU-ms; (3.33 + 1.5) x 225 = 1.09; x 360 = 1.74
    assert "at 50% (225 msgs/s) the bare model (3.33 CPU-ms/msg) and the harness (1.50)" in text
    assert "alone need 1.09 of the 2 cores" in text
    assert "alone need 1.74 of the 2 cores" in text
    assert "at 25%" not in text.split("harness's bound")[1]
