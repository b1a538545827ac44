"""The forced-batch benchmark's pure parts (bench/linger.py, bench/linger_report.py): what each
arm sets, the fit of the event loop's cost on the batch size, and the section it writes."""

from __future__ import annotations

from typing import Any

import pytest

from bench import linger, linger_report


def run(arm: str, batch: float, loop: float, p99: float) -> dict[str, Any]:
    consumed = 3000
    return {"arm": arm, "rate": 100.0, "p50_ms": p99 / 2, "p99_ms": p99,
            "cpu_ms_per_msg": {"event loop": loop, "scorer": 2.0, "model pool & other": 0.1},
            "counters": {"consumed": consumed, "fetches": consumed / batch}}  # fmt: skip


ARMS = {"as shipped": {}, "wait 40 ms": linger.forced(40.0),
        "fetch wait 500 ms": {"fetch_max_wait_ms": "500"}}  # fmt: skip


def modelled(arm: str, batch: float) -> dict[str, Any]:
    """A run whose event loop is 0.6 a message + 1.8 a fetch + 0.6 a poll, exactly."""
    wait = 500.0 if arm == "fetch wait 500 ms" else 5.0
    polls = max(1000.0 / wait / 100.0, 1.0 / batch)
    return run(arm, batch, 0.6 + 1.8 / batch + 0.6 * polls, 40.0)


def test_each_arm_adds_only_its_own_settings() -> None:
    assert linger.ARMS["as shipped"] == {}
    assert linger.ARMS["wait 40 ms"] == {"budget_ms": "1000", "fetch_linger_max_ms": "40"}
    assert linger.ARMS["fetch wait 500 ms"] == {"fetch_max_wait_ms": "500"}


def test_the_fit_recovers_the_costs_of_a_message_a_fetch_and_a_poll() -> None:
    runs = [modelled("as shipped", 1.4), modelled("wait 40 ms", 4.3),
            modelled("fetch wait 500 ms", 14.0), modelled("fetch wait 500 ms", 13.0)]  # fmt: skip
    f = linger_report.fit(runs, ARMS)
    assert f is not None
    assert f.per_message == pytest.approx(0.6)
    assert f.per_fetch == pytest.approx(1.8)
    assert f.per_poll == pytest.approx(0.6)
    assert f.runs == 4
    assert f.at(4.3, 2.0) == pytest.approx(runs[1]["cpu_ms_per_msg"]["event loop"])
    assert f.batch_for(0.7, 2.0) is None, "2 idle polls a message cost 1.2 ms: out of reach"
    assert f.batch_for(0.7, 0.0) == pytest.approx(24.0), "(1.8 + 0.6) / (0.7 - 0.6)"
    few = f.batch_for(2.0, 1.0)
    assert few is not None
    assert f.at(few, 1.0) == pytest.approx(2.0), "idle polls outnumber fetches there"


def test_a_poll_per_fetch_at_least_and_the_shipped_wait_by_default() -> None:
    assert linger_report.polls_per_message(run("as shipped", 1.4, 3.0, 40.0), ARMS) == 2.0
    slow = run("fetch wait 500 ms", 14.0, 0.8, 300.0)
    assert linger_report.polls_per_message(slow, ARMS) == pytest.approx(1 / 14), "fetches > 2/s"


def test_no_fit_without_three_distinct_arms() -> None:
    two = [modelled("as shipped", 1.4), modelled("wait 40 ms", 4.3)]
    assert linger_report.fit(two, ARMS) is None
    assert linger_report.fit([{"arm": "old", "rate": 100.0}], ARMS) is None


def test_the_section_holds_each_arm_against_the_budget_and_says_the_floor() -> None:
    results = {
        "rate": 100.0,
        "duration_s": 30.0,
        "forced_budget_ms": 1000.0,
        "arms": ARMS,
        "runs": [
            run("as shipped", 1.4, 3.6, 46.0),
            run("wait 40 ms", 4.3, 2.35, 71.0),
            run("as shipped", 1.45, 3.66, 51.0),
            run("wait 40 ms", 4.3, 2.43, 74.9),
            modelled("fetch wait 500 ms", 14.0),
        ],
    }
    lines = linger_report.section_linger(results, "2 cores", {"cpu_model": "X"})
    text = "\n".join(lines)
    assert lines[0] == linger_report.HEADING
    shipped = next(line for line in lines if line.startswith("| as shipped |"))
    forced = next(line for line in lines if line.startswith("| wait 40 ms |"))
    assert "| 1 of 2 |" in shipped, "p99 46 within 50 ms, 51 not"
    assert "| 0 of 2 |" in forced, "p99 71-75 not"
    assert "`fetch_linger_max_ms=40`" in forced
    assert "no batch size brings it to 0.7 ms" in text
    assert linger_report.section_linger({"runs": []}, "", {}) == []


def test_merge_puts_the_section_before_reading_the_numbers() -> None:
    doc = "# B\n\n## 12. Other\n\ntext\n\n## Reading the numbers\n\nend\n"
    results = {
        "machine_label": "2 cores",
        "machine": {},
        "started": "t",
        "load_before": "0",
        "linger": {"rate": 100.0, "runs": [run("as shipped", 1.0, 3.0, 40.0)]},
    }
    merged = linger_report.merge_linger(results, doc)
    assert merged.index(linger_report.HEADING) < merged.index("## Reading the numbers")
    assert "## 12. Other" in merged
    assert merged.count(linger_report.HEADING) == 1
    assert linger_report.merge_linger(results, merged).count(linger_report.HEADING) == 1
    assert linger_report.merge_linger({}, doc) == doc
