"""models/evaluation/alone.py: which lines each task learns and is judged on, and its thresholds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from models.evaluation.alone import TASKS, judge, threshold
from models.lines.realdata import Line


def _line(text: str, source: str, split: str, family: str, toxic: bool = False) -> Line:
    return Line(text, source, split, toxic, family, ())


def test_the_f1_rule_takes_the_threshold_with_the_best_dev_f1() -> None:
    positive = np.asarray([0.9, 0.8, 0.3])
    negative = np.asarray([0.7, 0.5, 0.4])
    # at 0.8: 2 of 3 caught, none flagged (F1 0.8); at 0.7 one false flag (0.667); at 0.3 all
    # caught and all flagged (0.667)
    assert threshold(TASKS["hatemoji"], positive, negative) == 0.8


def test_the_limit_rule_takes_the_lowest_threshold_within_the_negatives_limit() -> None:
    negative = np.linspace(0.0, 0.99, 100)  # 0.00, 0.01, ... 0.99
    positive = np.asarray([0.995])
    # HateXplain's 15%: at 0.85 the 15 lines 0.85 .. 0.99 are flagged, at 0.84 16 of them
    assert threshold(TASKS["hatexplain"], positive, negative) == pytest.approx(0.85)
    # the group limit's 5%
    assert threshold(TASKS["groups"], positive, negative) == pytest.approx(0.95)


def test_the_group_task_trains_on_every_trained_source_and_is_judged_on_the_fixed_ones() -> None:
    task = TASKS["groups"]
    lines = [
        _line("hate a", "hatemoji", "train", "hate", True),
        _line("hate b", "davidson", "train", "hate", True),
        _line("normal c", "hatexplain", "train", "normal"),
        _line("neutral d", "toxigen", "train", "neutral"),
        _line("hate e", "hatemoji", "test", "hate", True),
        _line("hate f", "stormfront", "test", "hate", True),
        _line("normal g", "hatexplain", "test", "normal"),
        _line("neutral h", "hatemoji", "test", "neutral"),
        _line("insult i", "insults", "train", "insult", True),
    ]
    train = task.pool(lines, "train")
    assert [[ln.text for ln in side] for side in train] == [
        ["hate a", "hate b"],
        ["normal c", "neutral d"],
    ]
    test = task.pool(lines, "test")
    assert [[ln.text for ln in side] for side in test] == [["hate f"], ["neutral h"]]


def test_judge_reads_the_threshold_on_dev_and_counts_the_test_lines_by_it() -> None:
    lines = [
        _line("dev hate", "hatexplain", "dev", "hate", True),
        *(_line(f"dev normal {i}", "hatexplain", "dev", "normal") for i in range(10)),
        _line("test hate 1", "hatexplain", "test", "hate", True),
        _line("test hate 2", "hatexplain", "test", "hate", True),
        _line("test normal", "hatexplain", "test", "normal"),
    ]
    scores = {"dev hate": 0.9, "test hate 1": 0.95, "test hate 2": 0.5, "test normal": 0.85}
    scores.update({f"dev normal {i}": i / 10 for i in range(10)})  # 0.0 .. 0.9

    def score(pool: Sequence[Line]) -> np.ndarray:
        return np.asarray([scores[ln.text] for ln in pool])

    got = judge(TASKS["hatexplain"], lines, score)
    # 15% of 10 dev normals: one may be flagged, so the threshold is 0.9 (ties flagged)
    assert got[0].startswith("threshold 0.9000 (dev: 1 positive, 10 negative)")
    assert "AUC 0.500" in got  # 0.95 above 0.85, 0.5 below it
    assert got[2].startswith("caught 50.0%")
    assert got[3].startswith("negatives flagged 0.0%")


def test_hatemoji_also_reports_the_threshold_that_holds_its_group_lines_to_five_percent() -> None:
    lines = [
        _line("dev hate", "hatemoji", "dev", "hate", True),
        *(_line(f"dev neutral {i}", "hatemoji", "dev", "neutral") for i in range(20)),
        _line("dev other", "hatemoji", "dev", "not_hate"),
        _line("test hate 1", "hatemoji", "test", "hate", True),
        _line("test hate 2", "hatemoji", "test", "hate", True),
        _line("test neutral", "hatemoji", "test", "neutral"),
        _line("test other", "hatemoji", "test", "not_hate"),
    ]
    scores = {"dev hate": 0.99, "dev other": 0.999, "test hate 1": 0.97, "test hate 2": 0.5}
    scores.update({f"dev neutral {i}": i / 20 for i in range(20)})  # 0.0 .. 0.95
    scores.update({"test neutral": 0.9, "test other": 0.96})

    def score(pool: Sequence[Line]) -> np.ndarray:
        return np.asarray([scores[ln.text] for ln in pool])

    got = judge(TASKS["hatemoji"], lines, score)
    # one of the 20 dev neutral lines may be flagged: 0.95; the not-hateful one is not held
    held = got.index("at 0.9500, the lowest with 20 dev lines held to 5%:")
    assert got[held + 1].startswith("  F1 0.500")  # one of two caught, one of two flagged
    assert got[held + 2].startswith("  caught 50.0%")
    assert got[held + 3].startswith("  negatives flagged 50.0%")
    assert got[held + 4].startswith("  of them in test (1) flagged 0.0%")
