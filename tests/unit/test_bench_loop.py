"""The loop-cost section's pure parts (bench/loop.py, bench/loop_report.py): the pairs' order,
the load generator's traffic, the users' limits the traffic cannot reach, the counters read
from the metrics, the ratios, and the report section spliced into an existing report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import loop, loop_report, report
from devstack.child import Samples
from loadgen.traffic import TrafficGenerator
from moderator.metrics import Metrics
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage
from moderator.users.escalation import Escalation

N = 1500


def chats(n: int) -> list[ChatMessage]:
    return [ChatMessage(**orjson.loads(value)) for _, value, _ in loop.traffic("t", n, 0)]


def test_pairs_alternate_so_each_arm_runs_first_as_often_as_second() -> None:
    order = loop.arm_order(4)
    assert order[:4] == [(0, "off"), (0, "on"), (1, "on"), (1, "off")]
    for pair in range(4):
        assert sorted(arm for p, arm in order if p == pair) == ["off", "on"]
    positions = {arm: sum(i for i, (_, a) in enumerate(order) if a == arm) for arm in loop.ARMS}
    assert positions["off"] == positions["on"], "a linear drift costs both arms the same"


def test_the_traffic_is_the_load_generators_for_the_seed_with_users_spread() -> None:
    gen = TrafficGenerator(run_id="lg", seed=loop.SEED, dup_ratio=loop.DUP_RATIO,
                           toxic_ratio=loop.TOXIC_RATIO, channels=loop.CHANNELS)  # fmt: skip
    expected = [orjson.loads(gen.next_record(0).value) for _ in range(200)]
    got = [orjson.loads(value) for _, value, _ in loop.traffic("x", 200, 0)]
    strip = ("message_id",)
    assert [{k: v for k, v in m.items() if k not in strip} for m in got] == [
        {k: v for k, v in m.items() if k not in strip} for m in expected
    ]
    users = {c.user_id for c in chats(N)}
    assert len(users) > N / 3, "many users, not a handful"


def on_policy(tmp_path: Path, limit: int) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(loop.policy_text(loop.users_table(limit)))
    return Policy.load(path)


def test_every_users_rule_is_on_and_the_traffic_trips_none(tmp_path: Path) -> None:
    policy = on_policy(tmp_path, loop.limit_for(N))
    rules = policy.users
    assert rules.strikes
    assert rules.mute_s
    assert rules.flood_messages
    assert rules.repeat_channels
    assert rules.links_deny
    msgs = chats(N)  # one backlog: every message in the same instant, the flood's worst case
    users = Escalation(Metrics().users)
    assert users.before_local([(m, policy) for m in msgs]) == [None] * N
    flagged = Ruling("nudge", "insult")  # as if the model flagged every message
    after = users.after_local([(m, policy, flagged) for m in msgs])
    assert not any(e.escalated for e in after)
    assert {e.action for e in after} == {"nudge"}


def test_a_limit_the_busiest_user_passes_would_trip(tmp_path: Path) -> None:
    policy = on_policy(tmp_path, loop.limit_for(N) - 2)  # the flood: more than the limit
    verdicts = Escalation(Metrics().users).before_local([(m, policy) for m in chats(N)])
    assert any(v is not None and v.reason == "rate_limited" for v in verdicts)


def test_the_deny_list_refuses_its_domain(tmp_path: Path) -> None:
    policy = on_policy(tmp_path, loop.limit_for(N))
    assert policy.users.link_domain(f"see https://{loop.DENIED_DOMAIN}/x") == loop.DENIED_DOMAIN
    assert policy.users.link_domain("gg wp") is None


def metrics_text(consumed: int, cache_read: int, review: int, before: int, held: int) -> Samples:
    return Samples(
        f"moderator_messages_consumed_total {consumed}\n"
        f'moderator_redis_round_trips_total{{part="cache_read"}} {cache_read}\n'
        f'moderator_redis_round_trips_total{{part="review"}} {review}\n'
        f'moderator_user_state_round_trips_total{{step="before"}} {before}\n'
        f"moderator_review_records_total {held}\n"
        f'moderator_user_rules_total{{rule="escalated"}} 1\n'
    )


def test_counters_are_the_differences_and_round_trips_are_per_message() -> None:
    got = loop.counters(metrics_text(64, 10, 5, 8, 1), metrics_text(164, 30, 15, 28, 4))
    assert got["consumed"] == 100
    assert got["held"] == 3
    assert got["rules"]["escalated"] == 0
    trips = got["round_trips"]
    assert (trips["cache_read"], trips["review"], trips["users_before"]) == (20, 10, 20)
    assert trips["sweep"] == 0
    assert trips["users_after"] == 0
    per = loop.per_message(got)
    assert per["cache_read"] == pytest.approx(0.2)
    assert per["total"] == pytest.approx(0.5)


def drain(arm: str, pair: int, rate: float, **extra: Any) -> dict[str, Any]:
    return {"arm": arm, "pair": pair, "drain": {"msgs_per_s": rate, "decided": 1000,
            "messages": 1000, "cached": 250}, **extra}  # fmt: skip


DRAINS = [drain("off", 0, 500.0), drain("on", 0, 450.0), drain("on", 1, 420.0),
          drain("off", 1, 480.0)]  # fmt: skip


def test_the_ratio_is_of_the_arms_mean_rates_and_each_pair_has_its_own() -> None:
    assert loop.ratio_of_means(DRAINS) == pytest.approx(435 / 490, abs=1e-4)
    assert loop.pair_ratios(DRAINS) == [pytest.approx(0.9), pytest.approx(0.875)]
    assert loop.ratio_of_means(DRAINS[:1]) is None


def test_module_shares_count_the_samples_with_a_frame_in_each_module() -> None:
    lines = [
        "thread (1): MainThread;process (moderator/pipeline.py:1);"
        "before (moderator/users/escalation.py:2) 30",
        "thread (1): MainThread;hold (moderator/review/held.py:3);"
        "x (moderator/users/escalation.py:4) 10",
        "thread (2): scorer_0;run (moderator/decide/batcher.py:5) 60",
    ]
    shares = loop.module_shares(lines)
    assert shares["moderator/users/escalation.py"] == pytest.approx(0.4)
    assert shares["moderator/review/held.py"] == pytest.approx(0.1)
    assert shares["any"] == pytest.approx(0.4)


def loop_results(on_rate: float) -> dict[str, Any]:
    counted = {"consumed": 1000, "held": 7, "rules": {"escalated": 0}, "overridden": 0,
               "round_trips": {"cache_read": 100, "review": 50}}  # fmt: skip
    drains = [{**d, "counters": counted, "round_trips_per_msg": loop.per_message(counted),
               "cpu_ms_per_msg": {"event loop": 1.0, "scorer": 2.0, "total": 5.0}}
              for d in (drain("off", 0, 500.0), drain("on", 0, on_rate))]  # fmt: skip
    return {"threads": 2, "backlog": 1000, "order": ["off", "on"], "users": loop.users_table(9),
            "overrides": 1000, "dup_ratio": 0.3, "toxic_ratio": 0.05, "channels": 16,
            "drains": drains, "ratio": loop.ratio_of_means(drains),
            "pair_ratios": loop.pair_ratios(drains), "rate": 120.0, "rate_fraction": 0.25,
            "latency": [{"arm": "off", "pair": 0, "p50_ms": 12.0, "p99_ms": 40.0,
                         "p999_ms": 50.0, "decided": 1800, "sent": 1800, "duration_s": 15.0,
                         "cpu_ms_per_msg": {"event loop": 1.5, "total": 9.0}}]}  # fmt: skip


def test_the_section_shows_the_pairs_the_ratio_and_the_round_trips() -> None:
    text = report.render({"machine_label": "2 cores, no avx512", "started": "today",
                          "load_before": "1.00 1.00 1.00", "loop": loop_results(460.0),
                          "load_during": [{"section": "loop minilm-l6", "loadavg": "2.0 2.0 2.0",
                                           "others": []}]})  # fmt: skip
    assert loop_report.HEADING in text
    assert "**met**: on drained 92% of the rate of off" in text
    assert "| loop on / off, backlog drain, MiniLM-L6 (default model) | ≥ 90% | 92% | met |" in text
    assert "| **total** | 0.150 | 0.150 | - | - |" in text, "the open-loop run counted nothing"
    assert "20.0 messages per fetched batch in the drain" in text
    assert "the moderator's own CPU per message" in text
    assert "at the end of this section 2.0 2.0 2.0" in text
    assert "Open loop at 120.0 msgs/s" in text
    assert "off: p50 12.0 ms (median 12.0), p99 40.0 ms (median 40.0); on: p50 -" in text
    missed = report.render({"machine_label": "m", "loop": loop_results(400.0)})
    assert "**missed**: on drained 80%" in missed


def test_a_loop_run_alone_replaces_only_its_section_of_an_existing_report() -> None:
    section = loop_report.section_loop(loop_results(460.0), "m")
    old = "# Benchmarks\n\n## 6. Deny-term matching\n\nterms\n\n## Reading the numbers\n\n- x\n"
    once = loop_report.splice(old, section)
    assert once.index("## 6. Deny") < once.index(loop_report.HEADING) < once.index("## Reading")
    again = loop_report.splice(once, loop_report.section_loop(loop_results(400.0), "m"))
    assert again.count(loop_report.HEADING) == 1
    assert "drained 80%" in again
    assert "drained 92%" not in again
    assert again.endswith("- x\n")
    assert "terms" in again
    assert loop_report.splice("# B\n", section).startswith("# B\n\n" + loop_report.HEADING)


def test_a_loop_run_alone_puts_its_row_in_the_targets_table_once() -> None:
    old = "# B\n\n## Targets\n\n| measure | target |\n| --- | --- |\n| ladder | met |\n\n## 1. L\n"
    row = loop_report.headline_row(loop_results(460.0))
    once = loop_report.splice_target(old, row)
    assert once.index("| ladder | met |") < once.index("| loop on / off") < once.index("## 1.")
    again = loop_report.splice_target(once, loop_report.headline_row(loop_results(400.0)))
    assert again.count("| loop on / off") == 1
    assert "| 80% | missed |" in again
    assert loop_report.splice_target("# B\n", row) == "# B\n"


def test_the_cpu_estimate_is_the_moderators_cpu_per_message_off_over_on() -> None:
    def cpu(arm: str, loop_ms: float, model: float) -> dict[str, Any]:
        return {**drain(arm, 0, 1.0), "cpu_ms_per_msg": {
            "event loop": loop_ms, "scorer": model, "broker": 1.0, "load generator": 1.0,
            "total": loop_ms + model + 2.0}}  # fmt: skip

    got = loop_report.cpu_share([cpu("off", 0.3, 1.5), cpu("on", 0.5, 1.5), cpu("on", 0.3, 1.5)])
    assert got == (pytest.approx(1.8), pytest.approx(1.9), pytest.approx(1.8 / 1.9))
    assert loop_report.cpu_share([cpu("off", 0.3, 1.5)]) is None


def test_the_open_loop_note_names_the_round_trips_on_the_path_and_the_p50_difference() -> None:
    def row(arm: str, p50: float, per_msg: float) -> dict[str, Any]:
        trips = {"users_before": per_msg, "users_after": per_msg, "review": per_msg}
        return {"arm": arm, "pair": 0, "p50_ms": p50, "round_trips_per_msg": trips}

    note = " ".join(loop_report._path_note([row("off", 10.0, 0.0), row("on", 19.0, 0.5)]))
    assert "1.50 more Redis round trips per message" in note
    assert "a fetched batch is 2.0 messages" in note
    assert "The median p50 is 9.0 ms higher on." in note
    assert loop_report._path_note([row("off", 10.0, 0.0), row("on", 19.0, 0.0)]) == []
