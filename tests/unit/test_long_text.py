"""long_text: thresholds raised with the number of windows a message is read in."""

from __future__ import annotations

import numpy as np
import pytest

from moderator.decide.screen import Reader, Screened, judge
from moderator.errors import PolicyError
from moderator.policy.long_text import discounted, windows_raise
from moderator.policy.rules import Policy


def test_one_window_or_no_raise_leaves_the_scores_alone() -> None:
    scores = {"threat": 0.9, "insult": 0.2}
    assert discounted(scores, 0.5, 1) is scores
    assert discounted(scores, 0.0, 8) is scores


@pytest.mark.parametrize(("threshold", "raise_by", "windows"), [(0.5, 0.6, 2), (0.98, 0.3, 16)])
def test_a_discounted_score_passes_exactly_where_the_raised_threshold_is_met(
    threshold: float, raise_by: float, windows: int
) -> None:
    r = raise_by * (1 - 1 / windows)
    raised = threshold + (1 - threshold) * r
    for score in (raised - 1e-6, raised + 1e-6, 0.0, 1.0):
        (seen,) = discounted({"x": score}, raise_by, windows).values()
        assert (seen >= threshold) is (score >= raised)
    assert discounted({"x": 0.0}, raise_by, windows)["x"] == 0.0  # never below 0


def test_more_windows_raise_more_up_to_the_setting() -> None:
    seen = [discounted({"x": 0.8}, 0.5, n)["x"] for n in (2, 4, 16, 10_000)]
    assert seen == sorted(seen, reverse=True)
    assert seen[-1] == pytest.approx((0.8 - 0.5) / 0.5, abs=1e-3)


@pytest.mark.parametrize("value", [-0.1, 1.0, "0.5", True])
def test_a_raise_outside_zero_to_one_is_refused(value: object) -> None:
    with pytest.raises(PolicyError, match="windows_raise"):
        windows_raise({"windows_raise": value})
    spec = {**Policy.load().spec, "windows_raise": value}
    with pytest.raises(PolicyError, match="windows_raise"):
        Policy.from_mapping(spec)


def test_a_long_message_s_grey_zone_score_allows_under_a_raise_and_one_line_does_not(
    reader: Reader,
) -> None:
    base = Policy.load()
    raised = Policy.from_mapping({**base.spec, "windows_raise": 0.8})
    threat = list(reader.classifier.labels).index("threat")
    row = np.zeros(len(reader.classifier.labels), np.float32)
    row[threat] = 0.6  # in the default policy's threat grey zone (review from 0.5)
    four = np.stack([row, np.zeros_like(row), np.zeros_like(row), np.zeros_like(row)])
    screened = Screened(None, tuple(four.astype(np.int64)), ((0, 1),) * 4, 4)
    one = Screened(None, (four[0].astype(np.int64),), ((0, 4),), 4)
    assert judge(reader, base, screened, four).ruling.action == "review"
    assert judge(reader, raised, screened, four).ruling.action == "allow"
    assert judge(reader, raised, one, four[:1]).ruling.action == "review"
    assert judge(reader, raised, screened, four).scores["threat"] == pytest.approx(0.6)
