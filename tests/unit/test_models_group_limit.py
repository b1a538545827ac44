"""models/evaluation/group_limit.py: the three pools a tuner is held to, and what a row says."""

from __future__ import annotations

import numpy as np

from models.evaluation import realtext
from models.evaluation.group_limit import figure_table, held_out_figures, limits, row
from models.lines import realdata


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


def test_test_figures_judge_each_pool_by_the_table_and_the_table_has_a_column_each() -> None:
    labels = ["toxicity", "insult", "obscene"]
    lines = [
        realdata.Line("hi all", "chat", "test", False, "benign", ()),
        realdata.Line("gg", "chat", "test", False, "benign", ()),
        realdata.Line("you idiot", "insults", "test", True, "insult", ()),
        realdata.Line("they are vermin", "toxigen", "test", True, "hate", ()),
        realdata.Line("they cook well", "toxigen", "test", False, "neutral", ()),
    ]
    matrix = np.asarray(
        [[0.1, 0.0, 0.9], [0.6, 0.0, 0.0], [0.2, 0.95, 0.0], [0.97, 0.0, 0.0], [0.8, 0.0, 0.0]],
        np.float32,
    )
    got = held_out_figures(matrix, lines, labels, realtext.thresholds(0.7, 0.99))
    assert got["benign chat-like flagged"] == 0.0  # obscene never acts
    assert got["insults flagged"] == 1.0
    assert got["labelled hate and threats caught"] == 1.0
    assert got["group-neutral flagged"] == 1.0
    assert got["AUC hate vs group-neutral"] == 1.0
    lower = held_out_figures(matrix, lines, labels, realtext.thresholds(0.5, 0.99))
    assert lower["benign chat-like flagged"] == 0.5
    table = figure_table([("a", got), ("b", lower)])
    assert table[0] == "| test split | a | b |"
    assert "| benign chat-like flagged | 0.0% | 50.0% |" in table
