"""models/evaluation/group_limit.py: the three pools a tuner is held to, and what a row says."""

from __future__ import annotations

import numpy as np

from models.evaluation import realtext
from models.evaluation.group_limit import limits, row


def test_the_pools_are_every_line_toxigens_and_none() -> None:
    groups = np.asarray([[0.9, 0.0], [0.1, 0.0], [0.6, 0.0]], np.float32)
    pools = limits(groups, ["toxigen", "hatemoji", "toxigen"])
    assert [name for name, _ in pools] == ["every group-neutral line", "ToxiGen's only", "none"]
    every, toxigen, none = (pool for _, pool in pools)
    assert every is groups
    assert toxigen is not None
    assert toxigen.tolist() == groups[[0, 2]].tolist()
    assert none is None


def test_a_row_counts_every_group_line_at_the_chosen_table_whatever_the_limit() -> None:
    groups = np.asarray([[0.9, 0.0], [0.1, 0.0], [0.6, 0.2]], np.float32)
    result = {
        "nudge": 0.5,
        "block": 0.95,
        "table": realtext.thresholds(0.5, 0.95),
        "dev_benign_flag_rate": 0.004,
        "dev_toxic_recall": 0.5,
    }
    got = row("ToxiGen's only", result, groups, ["toxicity", "insult"])
    assert got == "| ToxiGen's only | 0.5 / 0.95 | 0.40% | 50.0% | 66.7% |"


def test_a_row_names_its_model_when_several_are_compared() -> None:
    groups = np.asarray([[0.9, 0.0]], np.float32)
    result = {
        "nudge": 0.9,
        "block": 0.99,
        "table": realtext.thresholds(0.9, 0.99),
        "dev_benign_flag_rate": 0.001,
        "dev_toxic_recall": 0.25,
    }
    got = row("none", result, groups, ["toxicity", "insult"], "`chat-e5@abc123`")
    assert got == "| `chat-e5@abc123` | none | 0.9 / 0.99 | 0.10% | 25.0% | 100.0% |"
