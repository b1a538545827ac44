"""The run summary (JSON and text), the saturation search's logic, the CLI and the plot."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen import LoadConfig, LoadSummary, find_max, format_summary
from loadgen import cli as loadgen_cli
from loadgen.cli import build_parser, config_from_args, format_steps, main
from loadgen.hop import HopResult
from loadgen.machine import cpu_flags, machine_label
from loadgen.schedule import Arrivals
from loadgen.search import Step, next_rate
from loadgen.summary import by_severity
from loadgen.tracker import DecisionTracker
from loadgen.traffic import Kind

REQUIRED_KEYS = {
    "sent", "decided", "missing", "duplicates", "dead_letters", "malformed_sent",
    "throughput_per_s", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "over_budget_ratio",
    "cache_hit_ratio", "degraded", "actions", "broker_hop", "rate", "duration_s",
}  # fmt: skip


def make_summary(
    rate: float = 100.0,
    decided_latencies_ms: tuple[float, ...] = (5.0, 10.0, 80.0),
    missing: int = 1,
) -> LoadSummary:
    tracker = DecisionTracker("lgrun")
    n = len(decided_latencies_ms) + missing
    for i in range(n):
        tracker.on_scheduled(f"lgrun-{i}", Kind.BENIGN, due_s=float(i), offset_s=float(i))
    for i, ms in enumerate(decided_latencies_ms):
        value = orjson.dumps({"message_id": f"lgrun-{i}", "action": "allow", "cached": i == 0})
        tracker.on_decision(value, now_s=i + ms / 1000.0)
    hop = HopResult(200.0, 400, 400, 2.0, 3.0, 4.5, 9.0)
    return LoadSummary.from_tracker(
        tracker,
        rate=rate,
        duration_s=10.0,
        arrivals="constant",
        budget_ms=50.0,
        throughput_per_s=99.5,
        offered_rate_per_s=100.0,
        broker_hop=hop,
        send_lag_p99_ms=0.2,
        send_lag_max_ms=1.0,
        machine={"cores": 2, "avx512f": True, "avx512_vnni": True},
    )


def test_json_has_every_field_the_issue_asks_for() -> None:
    data = make_summary().as_dict()
    assert set(data) >= REQUIRED_KEYS
    orjson.dumps(data)  # JSON-able as is
    assert data["missing"] == 1
    assert data["decided"] == 3
    assert data["cache_hit_ratio"] == pytest.approx(1 / 3, abs=1e-3)
    assert data["over_budget_ratio"] == pytest.approx(0.5)  # one late + one never decided, of 4
    assert data["broker_hop"]["p99_ms"] == 4.5
    assert data["timeline"][0]["decided"] == 1


def test_text_summary_says_what_went_missing() -> None:
    text = format_summary(make_summary())
    assert "missing 1" in text
    assert "1 message(s) never decided, first scheduled at 3.00 s" in text
    assert "broker hop alone" in text
    assert "p99" in text


def test_a_clean_run_reports_no_problems() -> None:
    text = format_summary(make_summary(missing=0))
    assert "!" not in text.replace("!!", "")


@pytest.mark.parametrize(
    ("latencies", "missing", "held", "reason"),
    [
        ((5.0, 10.0), 0, True, "held"),
        ((5.0, 80.0), 0, False, r"p99 80\.\d ms > 50 ms"),
        ((5.0, 10.0), 2, False, "2 missing"),
        ((), 2, False, "2 missing"),
    ],
)
def test_a_step_holds_only_within_budget_with_nothing_missing(
    latencies: tuple[float, ...], missing: int, held: bool, reason: str
) -> None:
    step = Step.judge(make_summary(decided_latencies_ms=latencies, missing=missing), 50.0)
    assert step.held is held
    assert re.fullmatch(reason, step.reason)


def test_next_rate_doubles_then_bisects() -> None:
    assert next_rate(100.0, True, None, None) == (200.0, 100.0, None)
    assert next_rate(200.0, False, 100.0, None) == (150.0, 100.0, 200.0)
    assert next_rate(100.0, False, None, None) == (50.0, None, 100.0)


async def test_find_max_converges_on_the_saturation_rate() -> None:
    """A fake system that keeps p99 in budget up to 730/s and misses messages above it."""
    tried: list[float] = []
    settled: list[float] = []

    async def fake_run(cfg: LoadConfig, **_: Any) -> LoadSummary:
        tried.append(cfg.rate)
        return make_summary(rate=cfg.rate, missing=0 if cfg.rate <= 730 else 3,
                            decided_latencies_ms=(5.0, 10.0))  # fmt: skip

    async def fake_settle(cfg: LoadConfig) -> None:
        settled.append(cfg.rate)

    cfg = LoadConfig(hop=False, duration_s=1.0)
    result = await find_max(cfg, start_rate=100, run_step=fake_run, settle=fake_settle)
    assert tried[:4] == [100.0, 200.0, 400.0, 800.0]
    assert result.max_rate is not None
    assert 730 * 0.9 <= result.max_rate <= 730
    assert len(settled) == sum(not s.held for s in result.steps)
    assert "800.0    no" in format_steps(result.steps)
    assert orjson.loads(orjson.dumps(result.as_dict()))["max_rate"] == result.max_rate


async def test_find_max_reports_none_when_nothing_holds() -> None:
    async def failing(cfg: LoadConfig, **_: Any) -> LoadSummary:
        return make_summary(rate=cfg.rate, missing=1)

    async def no_settle(cfg: LoadConfig) -> None:
        return None

    result = await find_max(
        LoadConfig(hop=False), start_rate=8, min_rate=1, run_step=failing, settle=no_settle
    )
    assert result.max_rate is None
    assert [s.rate for s in result.steps] == [8.0, 4.0, 2.0, 1.0]


def test_cli_flags_make_the_config() -> None:
    args = build_parser().parse_args(
        ["--bootstrap", "127.0.0.1:1234", "--rate", "250", "--duration", "5", "--arrivals",
         "poisson", "--dup-ratio", "0.4", "--malformed-ratio", "0.01", "--no-hop", "--seed", "3",
         "--in-topic", "a", "--out-topic", "b", "--dlq-topic", "c", "--budget-ms", "20"]
    )  # fmt: skip
    cfg = config_from_args(args)
    assert cfg == dataclasses.replace(
        LoadConfig(),
        bootstrap="127.0.0.1:1234", rate=250.0, duration_s=5.0, arrivals=Arrivals.POISSON,
        dup_ratio=0.4, malformed_ratio=0.01, hop=False, seed=3, in_topic="a", out_topic="b",
        dlq_topic="c", budget_ms=20.0,
    )  # fmt: skip


def test_cli_refuses_bad_settings_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rate", "0"]) == 2
    assert "rate must be positive" in capsys.readouterr().err


def test_plot_without_matplotlib_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the plot extra, `--plot` used to crash with ModuleNotFoundError after the run."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails

    def no_run(*_: object, **__: object) -> None:
        raise AssertionError("the load ran before the missing extra was reported")

    monkeypatch.setattr(loadgen_cli, "run_load", no_run)
    monkeypatch.setattr(loadgen_cli, "find_max", no_run)
    for extra in ([], ["--find-max"]):
        assert main(["--plot", str(tmp_path / "p.png"), *extra]) == 2
        err = capsys.readouterr().err
        assert "--plot needs matplotlib" in err
        assert "pip install 'chat-moderator-tools[plot]'" in err
    assert not (tmp_path / "p.png").exists()


def test_config_refuses_the_same_topic_twice() -> None:
    with pytest.raises(ValueError, match="three different"):
        LoadConfig(out_topic="chat.messages")


def test_plot_is_written_and_labelled_with_the_machine(tmp_path: Path) -> None:
    from loadgen.plot import percentile_curve, plot_summary

    summary = make_summary()
    out = plot_summary(summary, tmp_path / "latency.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    xs, ys = percentile_curve(summary)
    assert ys == sorted(ys)
    assert xs[0] == 1.0
    assert "cores" in machine_label()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx2\n")
    assert cpu_flags(cpuinfo)["avx512f"] is True
    assert cpu_flags(cpuinfo)["avx512_vnni"] is False
    assert cpu_flags(tmp_path / "absent") == dict.fromkeys(cpu_flags(cpuinfo), False)


def test_actions_are_listed_least_severe_first() -> None:
    counts = {"block": 1, "allow": 5, "warn": 2, "review": 3, "nudge": 4}
    assert list(by_severity(counts)) == ["allow", "nudge", "review", "block", "warn"]
    assert by_severity(counts) == counts
