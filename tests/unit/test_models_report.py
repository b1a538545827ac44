"""REPORT.md's policy paragraph: what tuning chose, per label."""

from __future__ import annotations

from typing import Any

from models.reports import report

TUNING: dict[str, Any] = {
    "nudge": 0.75, "block": 0.98, "pairs_tried": 120, "policy_version": 6,
    "max_flag": 0.008, "max_review": 0.004, "max_block": 0.001,
    "dev_benign_lines": 11474, "dev_toxic_lines": 839,
    "dev_benign_flag_rate": 0.0078, "dev_benign_review_rate": 0.0008,
    "dev_benign_block_rate": 0.0007, "dev_toxic_recall": 0.753,
}  # fmt: skip


def test_each_grey_zone_is_reported_with_its_action_threshold_and_dev_figures() -> None:
    grey = {
        "threat": {"action": "review", "threshold": 0.5, "block": 0.98, "dev_benign_added": 0,
                   "dev_toxic_added": 1, "dev_family_lines": 5, "dev_family_caught": 2,
                   "dev_family_caught_without": 1},
        "self_harm": {"action": "nudge", "threshold": 0.85, "block": 0.98,
                      "dev_benign_added": 3, "dev_toxic_added": 0},
    }  # fmt: skip
    text = "\n".join(report.render_tuning({**TUNING, "grey": grey, "no_grey": ["severe_toxicity"]}))
    assert "at most 0.4% sent to review (got 0.1%)" in text
    assert "| threat | `review` | 0.5 | 0.98 | 0 | 1 | 2 of 5 (1) |" in text
    assert "| self_harm | `nudge` | 0.85 | 0.98 | 3 | 0 | no dev lines |" in text
    assert "| severe_toxicity | none" in text


def test_a_manifest_tuned_before_grey_zones_still_renders() -> None:
    old = {k: v for k, v in TUNING.items() if k not in ("max_review", "dev_benign_review_rate")}
    text = "\n".join(report.render_tuning(old))
    assert "nudge 0.75, block 0.98" in text
    assert "review" not in text
