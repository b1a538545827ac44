"""The oracle threshold of models/reports/ceiling.py: the lowest one that keeps both benign
pools in."""

from __future__ import annotations

import numpy as np

from models.reports import ceiling


def _f(*xs: float) -> np.ndarray:
    return np.asarray(xs, dtype=np.float32)


def test_oracle_threshold_obeys_both_limits() -> None:
    chat = _f(*([0.1] * 990), *([0.6] * 10))  # at 0.6, 1% of chat: just inside its limit
    groups = _f(*([0.1] * 18), 0.8, 0.95)  # 5% of 20 allows one line at most
    assert ceiling.oracle_threshold(chat, np.zeros(0, np.float32)) == np.float32(0.6)
    # 0.6 and 0.8 would flag 2 of 20 statements about groups (10%); 0.95 flags one (5%).
    assert ceiling.oracle_threshold(chat, groups) == np.float32(0.95)


def test_threshold_for_catches_the_share_asked() -> None:
    hostile = np.arange(1, 21, dtype=np.float32) / 20  # 0.05 .. 1.0
    t = ceiling.threshold_for(hostile, 0.85)
    assert np.mean(hostile >= t) >= 0.85
    assert np.mean(hostile > t) < 0.85  # and no higher threshold would
