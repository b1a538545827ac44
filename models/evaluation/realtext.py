"""Scoring real text: batched model scores, teacher verdicts, rates, AUC, threshold tuning.

Pure functions over score matrices, so the same figures come out for our model (fp32 and int8),
each teacher, and the identity probe. Actions for our model come from the policy itself
(`moderator.policy.rules.Policy.decide`); a teacher has no policy, so its verdict is its own
published rule: flagged when its toxic score reaches 0.5 (see `models.lines.teachers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from moderator.decide.classifier import Classifier
from moderator.policy.rules import DEFAULT_ACTIONS, Ruling

Decide = Callable[[Mapping[str, float]], Ruling]  # Policy.decide
Matrix = npt.NDArray[np.float32]


def batch_scores(classifier: Classifier, texts: Sequence[str], batch: int = 32) -> Matrix:
    """Model scores for many lines, in input order, through the runtime's `Classifier`:
    length-sorted batches padded per batch.

    The graph pools with the attention mask, so padding does not change a line's scores beyond
    float rounding; batching only makes tens of thousands of lines affordable.
    """
    encoded = classifier.encode(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    out = np.zeros((len(texts), len(classifier.labels)), dtype=np.float32)
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        out[rows] = classifier.score_ids([encoded[i] for i in rows])
    return out


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


# Labels whose `nudge` and `block` thresholds the tuner moves together (a label the group limit
# lifts gets its own: `_raise_for_groups`); obscene never acts.
NUDGE_LABELS = ("toxicity", "insult", "sexual_explicit")
BLOCK_LABELS = ("threat", "identity_attack", "self_harm", "severe_toxicity", "sexual_explicit")
INSULT_BLOCK_FLOOR = 0.9  # an insult alone is blocked only when the model is sure
# The labels for the messages that hurt most (threats, hate against groups, self-harm urging,
# the gravest abuse): besides a block for the sure cases, each gets a grey zone of its own below
# it, sent to `review` (a human looks) or `nudge`, so a score of 0.9 is not simply allowed.
HURTING_LABELS = ("threat", "identity_attack", "self_harm", "severe_toxicity")
REVIEW = "review"
GREY_ACTIONS = (REVIEW, "nudge")  # preferred first: a human should see these
ACTIONS = DEFAULT_ACTIONS[1:]  # nudge, review, block: least severe first


def thresholds(nudge: float, block: float) -> dict[str, dict[str, float]]:
    """The default policy's thresholds from its two tuned numbers (grey zones come on top)."""
    table: dict[str, dict[str, float]] = {label: {"block": block} for label in BLOCK_LABELS}
    for label in NUDGE_LABELS:
        table.setdefault(label, {})["nudge"] = nudge
    table["insult"]["block"] = max(block, INSULT_BLOCK_FLOOR)
    return table


# Candidate thresholds, plain floats (the policy accepts int and float, not numpy scalars).
GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998)

Table = Mapping[str, Mapping[str, float]]


def action_ranks(matrix: Matrix, labels: Sequence[str], table: Table) -> npt.NDArray[np.int8]:
    """Per row, the rank of its action (0 allow, then `ACTIONS` in order) under a threshold
    table, vectorised: the same rule as `Policy.decide`, the most severe action any label
    reaches."""
    inf = np.float32(np.inf)
    ranks = np.zeros(len(matrix), np.int8)
    for rank, action in enumerate(ACTIONS, start=1):  # a more severe action overwrites
        at = np.asarray([table.get(lb, {}).get(action, inf) for lb in labels], np.float32)
        ranks[np.asarray((matrix >= at).any(axis=1))] = rank
    return ranks


def flag_block(
    matrix: Matrix, labels: Sequence[str], table: Table
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(flagged, blocked) per row under a threshold table; flagged is any action but allow."""
    ranks = action_ranks(matrix, labels, table)
    return np.asarray(ranks > 0), np.asarray(ranks == ACTIONS.index("block") + 1)


def reviewed(matrix: Matrix, labels: Sequence[str], table: Table) -> npt.NDArray[np.bool_]:
    """Rows whose action is `review` under a threshold table."""
    return np.asarray(action_ranks(matrix, labels, table) == ACTIONS.index(REVIEW) + 1)


def tune(
    benign: Matrix,
    toxic: Matrix,
    labels: Sequence[str],
    *,
    max_flag: float,
    max_block: float,
    max_review: float,
    families: Sequence[str] | None = None,
    groups: Matrix | None = None,
    max_group_flag: float = 1.0,
) -> dict[str, Any]:
    """The (nudge, block) pair, the labels raised above it for the group limit, and the grey
    zones of `HURTING_LABELS` that catch the most dev toxic lines within the benign limits.

    Chosen on the real benign dev split only for the limits (flagged, blocked, reviewed) and on
    the real toxic dev split for what is caught; the test splits are never seen here. For each
    pair, `_grey_zones` lowers the hurting labels' grey thresholds while the flag limit holds;
    among pairs that flag as much, the one that blocks the most toxic lines wins (a block
    threshold above the nudge one changes only the severity, never whether a line is flagged);
    remaining ties go to the higher thresholds. Then each grey zone gets `review` while the
    review limit holds, else `nudge` (`_grey_actions`). `families` (the toxic lines' families,
    `realdata.Line.family`) adds, per hurting label, how many lines of its own family are caught.
    `groups`, benign statements about identity groups, must be flagged at most `max_group_flag`
    (grey zones included): chat rarely talks about groups, so the chat limit alone would let a
    table flag them freely. Where a pair flags more of them, `_raise_for_groups` raises the
    thresholds of the labels that flag them (chiefly `identity_attack` and `toxicity`), not the
    pair's: held to the pair alone, the shipped model tuned under this limit caught 10.9% of the
    insults of the test split (63.7% with the raise; 71.7% at the shipped policy, tuned before
    HatemojiBuild's lines joined the limit), because the labels that read talk about groups as
    hate pushed every label's threshold to 0.998 (`python -m models.evaluation.group_limit`).
    """
    best: tuple[float, float, float, float] | None = None  # recall, blocked, nudge, block
    chosen: dict[tuple[float, float], tuple[Table, dict[str, float]]] = {}
    tried = 0
    for nudge in GRID:
        for block in GRID:
            if block < nudge:
                continue
            tried += 1
            pair = thresholds(nudge, block)
            flagged, blocked = flag_block(benign, labels, pair)
            if rate(flagged) > max_flag or rate(blocked) > max_block:
                continue  # grey zones only add flags, never blocks; raising only removes them
            lifted = (
                pair
                if groups is None
                else _raise_for_groups(pair, toxic, groups, labels, max_group_flag)
            )
            if lifted is None:
                continue
            base: Table = lifted
            grey = _grey_zones(benign, toxic, labels, base, max_flag, groups, max_group_flag)
            table = _with_grey(base, {lb: (REVIEW, t) for lb, t in grey.items()})
            t_flagged, t_blocked = flag_block(toxic, labels, table)
            key = (rate(t_flagged), rate(t_blocked), nudge, block)
            if best is None or key > best:
                best, chosen[nudge, block] = key, (base, grey)
    if best is None:  # nothing meets the limits: the strictest pair, and say so
        nudge, block, met = GRID[-1], GRID[-1], False
        base, grey = thresholds(nudge, block), {}
    else:
        nudge, block, met = best[2], best[3], True
        base, grey = chosen[nudge, block]
    pair = thresholds(nudge, block)
    raised = {lb: min(v.values()) for lb, v in base.items() if dict(v) != pair.get(lb)}
    zones = _grey_actions(benign, labels, base, grey, max_review)
    table = _with_grey(base, zones)
    flagged, blocked = flag_block(benign, labels, table)
    t_flagged, t_blocked = flag_block(toxic, labels, table)
    group_flagged = flag_block(groups, labels, table)[0] if groups is not None else None
    return {
        "nudge": nudge,
        "block": block,
        "grey": _grey_report(benign, toxic, labels, table, zones, families),
        "no_grey": [lb for lb in HURTING_LABELS if lb in labels and lb not in zones],
        "group_raised": raised,
        "table": {lb: dict(v) for lb, v in table.items()},
        "limits_met": met,
        "pairs_tried": tried,
        "dev_benign_flag_rate": rate(flagged),
        "dev_benign_review_rate": rate(reviewed(benign, labels, table)),
        "dev_benign_block_rate": rate(blocked),
        "dev_toxic_recall": rate(t_flagged),
        "dev_toxic_reviewed": rate(reviewed(toxic, labels, table)),
        "dev_toxic_blocked": rate(t_blocked),
        "max_flag": max_flag,
        "max_review": max_review,
        "max_block": max_block,
        **(
            {"dev_group_flag_rate": rate(group_flagged), "max_group_flag": max_group_flag}
            if group_flagged is not None
            else {}
        ),
    }


def _with_grey(base: Table, zones: Mapping[str, tuple[str, float]]) -> dict[str, dict[str, float]]:
    """`base` with each label's grey zone (action, threshold) added."""
    table = {lb: dict(v) for lb, v in base.items()}
    for label, (action, threshold) in zones.items():
        table.setdefault(label, {})[action] = threshold
    return table


def _raise_for_groups(
    base: Table, toxic: Matrix, groups: Matrix, labels: Sequence[str], max_group_flag: float
) -> Table | None:
    """`base` with the fewest toxic lines given up to flag at most `max_group_flag` of `groups`
    (None when no table of the grid can): greedy, each step lifts one label's thresholds to the
    lowest grid point that unflags a group line, the label that unflags the most group lines per
    toxic line it unflags (one that unflags no toxic line first, then the larger gain). A label
    that does not flag talk about groups keeps the pair's thresholds."""
    table = {lb: dict(v) for lb, v in base.items()}
    limit = max_group_flag * len(groups)
    grp, tox = flag_block(groups, labels, table)[0], flag_block(toxic, labels, table)[0]
    while grp.sum() > limit:
        # (ratio, gain, table, its group flags, its toxic flags)
        move: tuple[float, int, dict[str, dict[str, float]], Any, Any] | None = None
        for label, acts in table.items():
            floor = min(acts.values())
            for point in (t for t in GRID if t > floor):
                lifted = {**table, label: {a: max(v, point) for a, v in acts.items()}}
                on_grp = flag_block(groups, labels, lifted)[0]
                on_tox = flag_block(toxic, labels, lifted)[0]
                gain, cost = int(grp.sum() - on_grp.sum()), int(tox.sum() - on_tox.sum())
                if gain > 0:
                    key = (gain / cost if cost else np.inf, gain)
                    if move is None or key > move[:2]:
                        move = (*key, lifted, on_grp, on_tox)
                    break
        if move is None:
            return None
        table, grp, tox = move[2:]
    return table


def _grey_zones(
    benign: Matrix,
    toxic: Matrix,
    labels: Sequence[str],
    base: Table,
    max_flag: float,
    groups: Matrix | None = None,
    max_group_flag: float = 1.0,
) -> dict[str, float]:
    """Grey thresholds for the hurting labels, below their block ones, over `base`.

    Greedy: each step lowers the one label's threshold that catches the most toxic lines per
    benign line it adds (one that adds none first, then the larger gain, then the higher
    threshold), while the benign flag limit holds. A label that gained nothing then gets the
    lowest threshold that flags no further benign line, so every hurting label has a lower
    action unless even its highest grid point costs ordinary chat. `groups` (benign statements
    about identity groups) stay within `max_group_flag` at every step.
    """
    ben, tox = flag_block(benign, labels, base)[0], flag_block(toxic, labels, base)[0]
    limit = max_flag * len(benign)
    grp = groups if groups is not None else np.zeros((0, len(labels)), dtype=np.float32)
    grf = flag_block(grp, labels, base)[0]
    group_limit = max_group_flag * len(grp)
    hurting = [lb for lb in HURTING_LABELS if lb in labels]
    column = {lb: list(labels).index(lb) for lb in hurting}

    def steps(label: str, below: float) -> list[float]:
        return [t for t in GRID if t < base.get(label, {}).get("block", np.inf) and t < below]

    grey: dict[str, float] = {}
    while True:
        move: tuple[float, int, float, str] | None = None  # ratio, gain, threshold, label
        for label in hurting:
            for t in steps(label, grey.get(label, np.inf)):
                nb, nt = ben | (benign[:, column[label]] >= t), tox | (toxic[:, column[label]] >= t)
                cost, gain = int(nb.sum() - ben.sum()), int(nt.sum() - tox.sum())
                if gain <= 0 or nb.sum() > limit:
                    continue
                if (grf | (grp[:, column[label]] >= t)).sum() > group_limit:
                    continue
                candidate = (gain / cost if cost else np.inf, gain, t, label)
                if move is None or candidate[:3] > move[:3]:
                    move = candidate
        if move is None:
            break
        label, t = move[3], move[2]
        grey[label] = t
        ben |= benign[:, column[label]] >= t
        tox |= toxic[:, column[label]] >= t
        grf |= grp[:, column[label]] >= t
    for label in hurting:
        if label not in grey:
            free = [t for t in steps(label, np.inf)
                    if not (~ben & (benign[:, column[label]] >= t)).any()
                    and not (~grf & (grp[:, column[label]] >= t)).any()]  # fmt: skip
            if free:
                grey[label] = free[0]
                ben |= benign[:, column[label]] >= free[0]
                grf |= grp[:, column[label]] >= free[0]
    return grey


def _grey_actions(
    benign: Matrix,
    labels: Sequence[str],
    base: Table,
    grey: Mapping[str, float],
    max_review: float,
) -> dict[str, tuple[str, float]]:
    """`review` for the grey zones the benign review limit affords, the ones that send the
    fewest benign lines to review first; `nudge` for the rest."""

    def review_rate(chosen: Mapping[str, float]) -> float:
        table = _with_grey(base, {lb: (REVIEW, t) for lb, t in chosen.items()})
        return rate(reviewed(benign, labels, table))

    order = sorted(grey, key=lambda lb: (review_rate({lb: grey[lb]}), HURTING_LABELS.index(lb)))
    zones: dict[str, tuple[str, float]] = {}
    for label in order:
        as_review = {lb: t for lb, (a, t) in zones.items() if a == REVIEW} | {label: grey[label]}
        action = REVIEW if review_rate(as_review) <= max_review else "nudge"
        zones[label] = (action, grey[label])
    return {lb: zones[lb] for lb in HURTING_LABELS if lb in zones}


def _grey_report(
    benign: Matrix,
    toxic: Matrix,
    labels: Sequence[str],
    table: Table,
    zones: Mapping[str, tuple[str, float]],
    families: Sequence[str] | None,
) -> dict[str, dict[str, Any]]:
    """Per grey zone: its action and threshold, the dev lines flagged only because of it
    (benign and toxic), and the toxic lines of the label's own family caught with and without
    it."""
    out: dict[str, dict[str, Any]] = {}
    ben, tox = flag_block(benign, labels, table)[0], flag_block(toxic, labels, table)[0]
    for label, (action, threshold) in zones.items():
        without = {lb: {a: t for a, t in v.items() if lb != label or a != action}
                   for lb, v in table.items()}  # fmt: skip
        ben_wo, tox_wo = (
            flag_block(benign, labels, without)[0],
            flag_block(toxic, labels, without)[0],
        )
        row: dict[str, Any] = {
            "action": action,
            "threshold": threshold,
            "block": table[label].get("block"),
            "dev_benign_added": int((ben & ~ben_wo).sum()),
            "dev_toxic_added": int((tox & ~tox_wo).sum()),
        }
        if families is not None:
            mine = np.asarray([f == label for f in families], dtype=bool)
            row.update(
                dev_family_lines=int(mine.sum()),
                dev_family_caught=int((tox & mine).sum()),
                dev_family_caught_without=int((tox_wo & mine).sum()),
            )
        out[label] = row
    return out
