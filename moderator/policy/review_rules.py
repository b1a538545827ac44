"""A policy's review settings: how long a held message waits for a human, and what it gets then.

`review_timeout_s` (default 600) and `review_fallback` (default `allow`) are top-level policy
keys, merged like any other (a channel's policy inherits the default's unless it sets its own).
They are validated with the rest of the policy (moderator/policy/rules.py) and read where a message
is held (moderator/review/hold.py), which keeps them with it: a later policy change leaves messages
already held as they were.

Why `allow` by default: `review` is the model's grey zone (the shipped policy sends 0.08% of
benign chat there), where a human is wanted because the model is unsure. When no human looked
within the timeout, blocking would punish the sender for the moderators' queue; a channel that
prefers silence sets `review_fallback = "block"`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from moderator.errors import PolicyError

REVIEW = "review"
MAX_TIMEOUT_S = 7 * 86400.0  # held messages live in Redis at least this long: keep it bounded


class ReviewRules(NamedTuple):
    """Seconds a held message waits for a verdict, and the action it gets when none came."""

    timeout_s: float = 600.0
    fallback: str = "allow"


DEFAULT = ReviewRules()


def review_rules(spec: Mapping[str, Any], actions: Sequence[str], source: str) -> ReviewRules:
    """The review settings of a policy `spec` whose actions (allow first) are `actions`, or
    PolicyError naming `source` and the key."""
    timeout_s = spec.get("review_timeout_s", DEFAULT.timeout_s)
    if type(timeout_s) not in (int, float) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise PolicyError(
            f"{source}: 'review_timeout_s' must be a number of seconds in (0, {MAX_TIMEOUT_S:.0f}]"
        )
    fallback = spec.get("review_fallback", DEFAULT.fallback)
    allowed = [a for a in actions if a != REVIEW]
    if fallback not in allowed:
        raise PolicyError(f"{source}: 'review_fallback' must be one of {', '.join(allowed)}")
    return ReviewRules(float(timeout_s), fallback)
