"""A policy's rule for text read in several windows: each window is one more chance to misfire.

A long message is scored in overlapping windows and a label's score is its highest over them
(moderator/decide/windows.py). Ten windows of ordinary chat give the model ten chances to
misread one of them, so a threshold that flags 0.5% of single lines flags far more long benign
messages. `windows_raise` (a top-level policy key, 0 by default: every window judged as a line
alone) raises every threshold for a text read in `n` windows `windows_raise * (1 - 1/n)` of the
way to 1: one window is judged as today, and the raise approaches `windows_raise` as the
windows multiply. It is applied to the scores (`discounted`), which is the same test:
`s >= t + (1 - t) * r` exactly when `(s - r) / (1 - r) >= t`, so every rule of the policy
(its grey zones, ties and margins) stays as written. The model build chooses it on dev: the
smallest raise that keeps long benign dev messages within their flag limit
(models/evaluation/tuning.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moderator.errors import PolicyError

KEY = "windows_raise"


def windows_raise(spec: Mapping[str, Any], source: str = "policy") -> float:
    """The policy's `windows_raise` (0 when unset); a value outside [0, 1) is a PolicyError."""
    value = spec.get(KEY, 0.0)
    if type(value) not in (int, float) or not 0.0 <= value < 1.0:
        raise PolicyError(f"{source}: '{KEY}' must be a number from 0 up to (not including) 1")
    return float(value)


def discounted(scores: Mapping[str, float], raise_by: float, windows: int) -> Mapping[str, float]:
    """`scores` as the thresholds see them for a text read in `windows` windows."""
    if windows <= 1 or raise_by <= 0.0:
        return scores
    r = raise_by * (1.0 - 1.0 / windows)
    return {label: max(0.0, (s - r) / (1.0 - r)) for label, s in scores.items()}
