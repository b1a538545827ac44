"""Scoring real text: batched model scores, teacher verdicts, rates, AUC, threshold tuning.

Pure functions over score matrices, so the same figures come out for our model (fp32 and int8),
each teacher, and the identity probe. Actions for our model come from the policy itself
(`moderator.policy.Policy.decide`); a teacher has no policy, so its verdict is its own
published rule: flagged when its toxic score reaches 0.5 (see `models.teachers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from models import onnx_export
from moderator.policy import Verdict

Decide = Callable[[Mapping[str, float]], Verdict]  # Policy.decide
Matrix = npt.NDArray[np.float32]


def batch_scores(sess: Any, tok: Any, texts: Sequence[str], batch: int = 32) -> Matrix:
    """Model scores for many lines, in input order: length-sorted batches padded per batch.

    The graph pools with the attention mask, so padding does not change a line's scores beyond
    float rounding; batching only makes tens of thousands of lines affordable.
    """
    from moderator.normalize import normalize_text

    encoded = [enc.ids for enc in tok.encode_batch([normalize_text(t) for t in texts])]
    n_labels = int(sess.get_outputs()[0].shape[1]) if sess.get_outputs()[0].shape[1] else 0
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    out: Matrix | None = None
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        width = max(1, max(len(encoded[i]) for i in rows))
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, i in enumerate(rows):
            ids[r, : len(encoded[i])] = encoded[i]
            mask[r, : len(encoded[i])] = 1
        scores = onnx_export.run_session(sess, ids, mask)
        if out is None:
            out = np.zeros((len(texts), n_labels or scores.shape[1]), dtype=np.float32)
        out[rows] = scores
    return out if out is not None else np.zeros((0, n_labels), dtype=np.float32)


def auc(positive: npt.NDArray[Any], negative: npt.NDArray[Any]) -> float:
    """Area under the ROC curve: P(score of a random positive > a random negative), ties 1/2."""
    if len(positive) == 0 or len(negative) == 0:
        return float("nan")
    scores = np.concatenate([positive, negative])
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    # Average ranks over ties.
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    ranks = (sums / counts)[inverse]
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rate(flags: Sequence[bool] | npt.NDArray[Any]) -> float:
    """Share of True, 0.0 for an empty list."""
    arr = np.asarray(flags, dtype=bool)
    return float(arr.mean()) if arr.size else 0.0


# Labels whose `nudge` and `block` thresholds the tuner moves together; obscene never acts.
NUDGE_LABELS = ("toxicity", "insult", "sexual_explicit")
BLOCK_LABELS = ("threat", "identity_attack", "self_harm", "severe_toxicity", "sexual_explicit")
INSULT_BLOCK_FLOOR = 0.9  # an insult alone is blocked only when the model is sure


def thresholds(nudge: float, block: float) -> dict[str, dict[str, float]]:
    """The default policy's thresholds from its two tuned numbers."""
    table: dict[str, dict[str, float]] = {label: {"block": block} for label in BLOCK_LABELS}
    for label in NUDGE_LABELS:
        table.setdefault(label, {})["nudge"] = nudge
    table["insult"]["block"] = max(block, INSULT_BLOCK_FLOOR)
    return table


# Candidate thresholds, plain floats (the policy accepts int and float, not numpy scalars).
GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998)


def flag_block(
    matrix: Matrix, labels: Sequence[str], table: Mapping[str, Mapping[str, float]]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(flagged, blocked) per row under a threshold table, vectorised.

    The same rule as `Policy.decide`: the action is the most severe one any label reaches.
    """
    inf = np.float32(np.inf)
    nudge = np.asarray([table.get(lb, {}).get("nudge", inf) for lb in labels], np.float32)
    block = np.asarray([table.get(lb, {}).get("block", inf) for lb in labels], np.float32)
    blocked = np.asarray((matrix >= block).any(axis=1))
    return np.asarray(blocked | (matrix >= nudge).any(axis=1)), blocked


def tune(
    benign: Matrix,
    toxic: Matrix,
    labels: Sequence[str],
    *,
    max_flag: float,
    max_block: float,
    groups: Matrix | None = None,
    max_group_flag: float = 1.0,
) -> dict[str, Any]:
    """The (nudge, block) pair that catches the most dev toxic lines within the benign limits.

    Chosen on the real benign dev split only for the limits (flag rate, block rate) and on the
    real toxic dev split for recall; the test splits are never seen here. `groups`, benign
    statements about identity groups, must be flagged at most `max_group_flag`: chat rarely
    talks about groups, so the chat limit alone would let a pair flag them freely. Among pairs that
    flag as much, the one that blocks the most toxic lines wins (a block threshold above the
    nudge one changes only the severity, never whether a line is flagged); remaining ties go to
    the higher thresholds.
    """
    best: tuple[float, float, float, float] | None = None  # recall, blocked, nudge, block
    tried = 0
    for nudge in GRID:
        for block in GRID:
            if block < nudge:
                continue
            tried += 1
            table = thresholds(nudge, block)
            flagged, blocked = flag_block(benign, labels, table)
            if rate(flagged) > max_flag or rate(blocked) > max_block:
                continue
            if groups is not None and rate(flag_block(groups, labels, table)[0]) > max_group_flag:
                continue
            t_flagged, t_blocked = flag_block(toxic, labels, table)
            key = (rate(t_flagged), rate(t_blocked), nudge, block)
            if best is None or key > best:
                best = key
    if best is None:  # nothing meets the limits: the strictest pair, and say so
        nudge, block, met = GRID[-1], GRID[-1], False
    else:
        nudge, block, met = best[2], best[3], True
    table = thresholds(nudge, block)
    flagged, blocked = flag_block(benign, labels, table)
    t_flagged, t_blocked = flag_block(toxic, labels, table)
    group_flagged = flag_block(groups, labels, table)[0] if groups is not None else None
    return {
        "nudge": nudge,
        "block": block,
        "limits_met": met,
        "pairs_tried": tried,
        "dev_benign_flag_rate": rate(flagged),
        "dev_benign_block_rate": rate(blocked),
        "dev_toxic_recall": rate(t_flagged),
        "dev_toxic_blocked": rate(t_blocked),
        "max_flag": max_flag,
        "max_block": max_block,
        **(
            {"dev_group_flag_rate": rate(group_flagged), "max_group_flag": max_group_flag}
            if group_flagged is not None
            else {}
        ),
    }
