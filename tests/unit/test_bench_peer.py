"""The peer section's pure parts (bench/quix_peer.py, bench/peer.py, bench/peer_report.py): the
peer's settings, its decision records, the pin, the order of the runs and the report section."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from bench import loop_report, peer, peer_report, quix_peer
from moderator.config import REPO_ROOT
from moderator.decide.classifier import Classifier
from moderator.policy.rules import Policy, Ruling

MESSAGE = {"message_id": "m-1", "channel_id": "c-1", "user_id": "u-1", "text": "hi",
           "sent_at_ms": 1}  # fmt: skip


def schema() -> dict[str, Any]:
    path = REPO_ROOT / "moderator" / "schemas" / "decision.schema.json"
    loaded: dict[str, Any] = orjson.loads(path.read_bytes())
    return loaded


def test_the_settings_keep_delivery_and_cut_the_waits() -> None:
    kwargs = quix_peer.app_settings("host:9092", "g")
    assert kwargs["broker_address"] == "host:9092"
    assert kwargs["consumer_group"] == "g"
    assert kwargs["processing_guarantee"] == "at-least-once"
    assert kwargs["producer_extra_config"]["acks"] == "all"
    assert kwargs["producer_extra_config"]["enable.idempotence"] is True
    assert kwargs["producer_extra_config"]["linger.ms"] == 0
    assert kwargs["consumer_extra_config"]["fetch.wait.max.ms"] == 5
    kwargs["consumer_extra_config"]["fetch.wait.max.ms"] = 500
    assert quix_peer.CONSUMER_CONFIG["fetch.wait.max.ms"] == 5, "each call gets its own copy"


def test_the_settings_table_lists_every_setting_the_peer_sets() -> None:
    kwargs = quix_peer.app_settings("b", "g")
    listed = {name for _, name, _ in quix_peer.settings_table()}
    set_here = (set(kwargs) - {"broker_address", "consumer_group", "consumer_extra_config",
                               "producer_extra_config"})  # fmt: skip
    set_here |= set(kwargs["consumer_extra_config"]) | set(kwargs["producer_extra_config"])
    assert listed == set_here


def test_the_pin_is_the_extras_and_the_constraints() -> None:
    tools = tomllib.loads((REPO_ROOT / "tools" / "pyproject.toml").read_text())
    assert tools["project"]["optional-dependencies"]["peer"] == [quix_peer.QUIXSTREAMS]
    lines = (REPO_ROOT / "constraints.txt").read_text().splitlines()
    pins = [line.split("#")[0].strip() for line in lines]
    assert quix_peer.QUIXSTREAMS in pins


@pytest.mark.parametrize(
    ("verdict", "scores"),
    [(Ruling("allow", None), {"toxicity": 0.01}),
     (Ruling("block", "threat", "high"), {"threat": 0.991234, "toxicity": 0.5}),
     (Ruling("allow", "empty_text"), {})],
)  # fmt: skip
def test_a_decision_is_a_valid_record_of_its_message(
    verdict: Ruling, scores: dict[str, float]
) -> None:
    record = quix_peer.decision(MESSAGE, verdict, scores, model="m@1", policy="p@1",
                                score_ms=2.34567, now_ms=1000)  # fmt: skip
    jsonschema.validate(record, schema())
    assert (record["message_id"], record["channel_id"], record["user_id"]) == ("m-1", "c-1", "u-1")
    assert (record["action"], record["reason"], record["severity"]) == tuple(verdict)
    assert record["scores"] == {k: round(v, 4) for k, v in scores.items()}
    assert record["latency_ms"]["total"] == 2.346
    assert record["final"] is False


def test_the_decider_decides_as_the_policy_does_on_the_models_scores(model_dir: Path) -> None:
    decide = quix_peer.Decider(model_dir, threads=1)
    clf, policy = Classifier(model_dir, threads=1), Policy.load()
    for text in ("good game everyone", "you are a worthless piece of shit, go die"):
        record = decide({**MESSAGE, "text": text})
        (ids,) = clf.encode([text])
        expected = policy.decide(clf.as_dict(clf.score_ids([ids])[0]))
        assert (record["action"], record["reason"]) == (expected.action, expected.reason)
    assert decide({**MESSAGE, "text": "\u200b"})["reason"] == "empty_text"


def test_the_child_finds_quixstreams_first_then_the_checkout(tmp_path: Path) -> None:
    path = quix_peer.child_env(tmp_path)["PYTHONPATH"].split(":")
    assert path[:2] == [str(tmp_path), str(REPO_ROOT)]


def test_the_arms_alternate_so_each_runs_first_as_often_as_second() -> None:
    order = peer.arm_order(4)
    assert order[:4] == [(0, "moderator"), (0, "quix"), (1, "quix"), (1, "moderator")]
    positions = {arm: sum(i for i, (_, a) in enumerate(order) if a == arm) for arm in peer.ARMS}
    assert positions["moderator"] == positions["quix"]


def run_row(arm: str, pair: int, rate: float, p99: float, loop_ms: float) -> dict[str, Any]:
    return {"arm": arm, "pair": pair, "rate": rate, "sent": 100, "decided": 100, "missing": 0,
            "p50_ms": p99 / 2, "p99_ms": p99, "p999_ms": p99 + 1, "over_budget_ratio": 0.01,
            "cpu_ms_per_msg": {"event loop": loop_ms, "scorer": 3.0, "model pool & other": 0.5,
                               "broker": 2.0, "load generator": 1.0, "total": loop_ms + 6.5},
            "loadavg": "1.00 1.00 1.00"}  # fmt: skip


def results() -> dict[str, Any]:
    runs = [run_row("moderator", 0, 55.0, 20.0, 1.0), run_row("quix", 0, 55.0, 40.0, 2.0),
            run_row("quix", 1, 55.0, 60.0, 3.0),
            run_row("moderator", 1, 55.0, 30.0, 2.0)]  # fmt: skip
    return {"runs": runs, "rates": [55.0], "pairs": 2, "duration_s": 15.0, "hop": {},
            "settings": [list(r) for r in quix_peer.settings_table()],
            "quixstreams": quix_peer.QUIXSTREAMS}  # fmt: skip


def test_the_summary_takes_each_arms_median_latency_and_mean_process_cpu() -> None:
    runs = results()["runs"]
    ours = peer_report.arm_summary(runs, 55.0, "moderator")
    theirs = peer_report.arm_summary(runs, 55.0, "quix")
    assert (ours["p99_ms"], theirs["p99_ms"]) == (25.0, 50.0)
    assert ours["process_ms"] == pytest.approx(1.5 + 3.5)  # without the broker and load generator
    assert theirs["process_ms"] == pytest.approx(2.5 + 3.5)
    assert peer_report.arm_summary(runs, 130.0, "quix") == {}


def test_the_section_lists_the_settings_and_every_run_and_splices_in_once() -> None:
    section = peer_report.section_peer(results(), "m", "note")
    text = "\n".join(section)
    for _, name, _ in quix_peer.settings_table():
        assert f"`{name}`" in text
    assert text.count("| Quix Streams |") == 2
    assert text.count("| moderator |") == 2
    assert "moderator / peer 0.83" in text
    old = "# B\n\n## 7. Loop\n\nx\n\n## Reading the numbers\n\n- y\n"
    once = loop_report.splice(old, section, peer_report.HEADING)
    again = loop_report.splice(once, section, peer_report.HEADING)
    assert again == once
    assert again.count(peer_report.HEADING) == 1
    assert once.index("## 7. Loop") < once.index(peer_report.HEADING) < once.index("## Reading")
    assert peer_report.section_peer(None, "m") == []
