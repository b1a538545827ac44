"""RELIABILITY.md rendering and the small parsers the chaos run relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.hostile import CASES, CaseOutcome
from chaos.procs import ModeratorEnv
from chaos.report import add, render
from chaos.results import ScenarioResult
from chaos.scenarios import SCENARIOS, Plan, reject_window_schema
from devstack.child import ModeratorChild, Samples, moderator_env
from loadgen.kafka import TopicSet

METRICS = """\
# HELP moderator_commits_total Offset commits
# TYPE moderator_commits_total counter
moderator_commits_total{result="ok"} 12.0
moderator_commits_total{result="failed"} 3.0
moderator_in_flight 7.0
moderator_in_flight_extra 100.0
"""


def test_samples_read_one_sample_or_the_sum_of_a_family() -> None:
    samples = Samples(METRICS)
    assert samples.total("moderator_commits_total", result="failed") == 3.0
    assert samples.total("moderator_commits_total") == 15.0
    assert samples.total("moderator_in_flight") == 7.0
    assert samples.total("moderator_absent") == 0.0
    assert samples.by("moderator_commits_total", "result") == {"ok": 12.0, "failed": 3.0}


def result(key: str, *, ok: bool) -> ScenarioResult:
    r = ScenarioResult(key, f"title {key}", "a | fault")
    r.sent, r.decided, r.lost, r.duplicated = 100, 100 if ok else 99, 0 if ok else 1, 2
    r.first_s, r.settled_s, r.p99_ms = 1.234, None, 42.0
    r.check("no message lost", ok, "seen")
    r.figure("a figure", "3 s")
    return r


def test_the_report_has_the_machine_the_tables_and_what_failed() -> None:
    good, bad = result("a", ok=True), result("b", ok=False)
    bad.logs.append(("b (pid 1)", "a log line"))
    good.hostile = [
        CaseOutcome(CASES["zalgo"], sent=3, outcomes={"decision": 3}),
        CaseOutcome(CASES["tombstone"], sent=2, outcomes={"empty_value": 2}),
    ]
    text = render([good, bad], quick=True, wall_s=90, command="python -m chaos --quick")
    assert "Machine: **" in text
    assert "**1 of 2 scenarios passed.**" in text
    assert (
        "| 1 | title a: a \\| fault | 100 | 100 | 0 | 2 | 1.23 s | - | 42 ms | **pass** |" in text
    )
    assert "**FAIL**" in text
    assert "## Hostile inputs" in text
    assert "| `zalgo` |" in text
    assert "a decision ×3" in text
    assert "DLQ `empty_value` ×2" in text
    assert "What failed in this run:" in text
    assert "a log line" in text


def test_a_scenario_run_alone_is_added_to_the_report_or_replaces_its_row() -> None:
    hostile = result("h", ok=True)
    hostile.hostile = [CaseOutcome(CASES["zalgo"], sent=3, outcomes={"decision": 3})]
    whole = render([result("a", ok=True), result("b", ok=False), hostile], quick=False,
                   wall_s=60, command="python -m chaos")  # fmt: skip
    assert "**2 of 3 scenarios passed.**" in whole

    added = add(whole, [result("c", ok=True)], quick=False, command="python -m chaos --only c")
    assert "**3 of 4 scenarios passed.**" in added
    assert "| 4 | title c: a \\| fault |" in added
    assert added.index("### 3. title h") < added.index("### 4. title c") < added.index("## Hostile")
    assert "Row 4 (title c) added by `python -m chaos --only c` on " in added
    assert "| `zalgo` |" in added, "the hostile table stays"

    again = add(added, [result("b", ok=True)], quick=True, command="python -m chaos --only b")
    assert "**4 of 4 scenarios passed.**" in again
    assert "| 2 | title b: a \\| fault | 100 | 100 | 0 |" in again
    assert again.count("### 2. title b") == 1
    assert again.index("### 2. title b") < again.index("### 3. title h")
    assert "Row 2 (title b) added by `python -m chaos --only b`" in again
    assert "(quick run)" in again
    assert "Row 4 (title c) added" in again
    assert "\n\n\n" not in again
    assert add(again, [result("b", ok=True)], quick=True, command="c").count("Row 2 (") == 1

    with pytest.raises(ValueError, match="whole run"):
        add(whole, [hostile], quick=False, command="python -m chaos --only h")


def test_every_scenario_is_listed_and_quick_is_shorter() -> None:
    assert list(SCENARIOS) == ["sigkill", "sigkill-3s", "sigkill-10s", "rebalance", "sigterm",
                               "sigterm-workers",
                               "redis-kill", "redis-freeze", "broker-freeze",
                               "broker-freeze-long", "publish-fail", "publish-hold", "overload",
                               "hostile", "loop", "redis-restart-held",
                               "promotion-kill"]  # fmt: skip
    full, quick = Plan.make(quick=False), Plan.make(quick=True)
    assert quick.after_s < full.after_s
    assert quick.junk < full.junk == 10_000


def test_the_refusal_schema_names_the_window_and_the_ids() -> None:
    refused = reject_window_schema(10, 20)["properties"]["value"]["not"]
    assert refused == {"properties": {"decided_at_ms": {"minimum": 10, "maximum": 20}},
                       "required": ["decided_at_ms"]}  # fmt: skip
    refused = reject_window_schema(10, 20, "[37]$")["properties"]["value"]["not"]
    assert refused["properties"]["message_id"] == {"pattern": "[37]$"}
    assert refused["required"] == ["decided_at_ms", "message_id"]


def test_child_env_maps_settings_to_moderator_variables(tmp_path: Path) -> None:
    cfg = ModeratorEnv("127.0.0.1:1", "", TopicSet("i", "o", "d", "g"), tmp_path, threads=2,
                       extra=(("session_timeout_ms", "3000"),))  # fmt: skip
    env = cfg.env()
    assert env["MODERATOR_SESSION_TIMEOUT_MS"] == "3000"
    assert env["MODERATOR_METRICS_PORT"] == "0"
    assert (env["MODERATOR_IN_TOPIC"], env["MODERATOR_GROUP_ID"]) == ("i", "g")


def test_child_env_ignores_the_shells_moderator_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODERATOR_SESSION_TIMEOUT_MS", "999999")
    env = moderator_env(kafka_bootstrap="h:1", model_dir=tmp_path, threads=1, redis_url="")
    assert "MODERATOR_SESSION_TIMEOUT_MS" not in env


def test_a_scenario_may_turn_redis_off(tmp_path: Path) -> None:
    cfg = ModeratorEnv("h:1", "redis://r:6379/0", TopicSet("i", "o", "d", "g"), tmp_path,
                       extra=(("redis_url", ""), ("degraded_mode", "off")))  # fmt: skip
    env = cfg.env()
    assert env["MODERATOR_REDIS_URL"] == ""
    assert env["MODERATOR_DEGRADED_MODE"] == "off"


def test_a_started_child_used_as_a_context_manager_is_one_process(tmp_path: Path) -> None:
    """`with child.start():` must not start a second process (which nothing would stop)."""
    env = moderator_env(model_dir=tmp_path / "none")
    child = ModeratorChild(["run"], env).start()
    first = child.pid
    with child as same:
        assert same is child
        assert child.pid == first
    assert child.exit_code is not None
    assert not child.alive()
