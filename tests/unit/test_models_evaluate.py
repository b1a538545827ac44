"""Metric helpers and the gold-action derivation the report stands on."""

from __future__ import annotations

import numpy as np
import pytest

from models.evaluation import evaluate
from models.training.metrics import f1_counts


def test_f1_counts() -> None:
    pred = np.asarray([True, True, False, False])
    gold = np.asarray([True, False, True, False])
    m = f1_counts(pred, gold)
    assert m["precision"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(0.5)
    assert m["support"] == 2


def test_f1_counts_with_no_positives_is_zero_not_an_error() -> None:
    none = np.zeros(3, dtype=bool)
    assert f1_counts(none, none)["f1"] == 0.0


def test_gold_actions_follow_the_packaged_policy() -> None:
    decide, source = evaluate.load_policy()
    assert "default_policy.toml" in source
    assert evaluate.gold_actions(decide, [(), ("obscene",)]) == ["allow", "allow"]
    assert evaluate.gold_actions(decide, [("toxicity",)]) == ["nudge"]
    for label in ("threat", "identity_attack", "self_harm", "severe_toxicity"):
        assert evaluate.gold_actions(decide, [("toxicity", label)]) == ["block"]


def test_a_grey_zone_action_never_gold_is_shown_but_not_averaged() -> None:
    gold = ["allow", "block", "block", "allow"]
    pred = ["allow", "block", "review", "review"]
    m = evaluate._action_metrics(pred, gold)
    assert set(m["per_action"]) == {"allow", "review", "block"}  # nudge: neither gold nor said
    assert m["per_action"]["review"]["f1"] == 0.0
    allow, block = m["per_action"]["allow"]["f1"], m["per_action"]["block"]["f1"]
    assert m["macro_f1"] == pytest.approx((allow + block) / 2)
    assert m["flagged"]["recall"] == 1.0  # review counts as flagged
    assert m["benign_flag_rate"] == 0.5
