"""Precision, recall and F1 of boolean predictions: how training picks a model and how the
evaluation reports one, by one definition."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def f1_counts(pred: npt.NDArray[Any], gold: npt.NDArray[Any]) -> dict[str, float]:
    """Precision, recall, F1 and support of boolean predictions."""
    tp = float(np.sum(pred & gold))
    fp = float(np.sum(pred & ~gold))
    fn = float(np.sum(~pred & gold))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": float(np.sum(gold))}
