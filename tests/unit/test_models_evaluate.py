"""Metric helpers and the gold-action derivation the report stands on."""

from __future__ import annotations

import numpy as np
import pytest

from models import evaluate


def test_f1_counts() -> None:
    pred = np.asarray([True, True, False, False])
    gold = np.asarray([True, False, True, False])
    m = evaluate.f1_counts(pred, gold)
    assert m["precision"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(0.5)
    assert m["support"] == 2


def test_f1_counts_with_no_positives_is_zero_not_an_error() -> None:
    none = np.zeros(3, dtype=bool)
    assert evaluate.f1_counts(none, none)["f1"] == 0.0


@pytest.mark.parametrize(
    ("labels", "action"),
    [
        ((), "allow"),
        (("obscene",), "allow"),
        (("toxicity",), "nudge"),
        (("toxicity", "insult"), "block"),
        (("toxicity", "threat"), "block"),
        (("toxicity", "severe_toxicity", "self_harm"), "block"),
        (("toxicity", "identity_attack"), "block"),
        (("toxicity", "sexual_explicit"), "block"),
    ],
)
def test_gold_actions_follow_the_default_policy(labels: tuple[str, ...], action: str) -> None:
    assert evaluate.gold_actions(evaluate.fallback_decide, [labels]) == [action]


def test_fallback_policy_thresholds() -> None:
    decide = evaluate.fallback_decide
    assert decide({"obscene": 0.99}) == ("allow", None)
    assert decide({"toxicity": 0.59}) == ("allow", None)
    assert decide({"toxicity": 0.6}) == ("nudge", "toxicity")
    assert decide({"insult": 0.7}) == ("nudge", "insult")
    assert decide({"insult": 0.95}) == ("block", "insult")
    assert decide({"sexual_explicit": 0.6}) == ("nudge", "sexual_explicit")
    assert decide({"sexual_explicit": 0.85}) == ("block", "sexual_explicit")
    assert decide({"threat": 0.5, "toxicity": 0.9}) == ("block", "threat")
