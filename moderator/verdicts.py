"""Texts → verdicts: the one path the pipeline and `moderator score` share.

A policy's allowed phrases are cut out, its deny terms decide without the model, the rest is
encoded, and a text with nothing left after normalisation is allowed without the model (`screen`);
the model scores what is left, and the policy decides on the scores (`on_scores`). How the scores
are found is the caller's: the pipeline looks them up in the cache and sends misses through the
micro-batcher, `moderator score` runs the model once per chunk (`decide_texts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from moderator.classifier import Classifier, Scores, TokenIds
from moderator.policy import EMPTY_TEXT, Policy, Verdict


class Screened(NamedTuple):
    """A text before the model: decided already, or the token ids the model must score."""

    verdict: Verdict | None  # a deny term's, or EMPTY_TEXT
    ids: TokenIds | None  # set exactly when `verdict` is None


def screen(classifier: Classifier, texts: Sequence[tuple[Policy, str]]) -> list[Screened]:
    """Each (policy, text) pair screened by its policy, the undecided ones encoded in one call."""
    out: list[Screened] = []
    undecided: list[tuple[int, str]] = []
    for policy, text in texts:
        text = policy.without_allowed(text)
        denied = policy.deny_verdict(text)
        if denied is None:
            undecided.append((len(out), text))
        out.append(Screened(denied, None))
    encoded = classifier.encode([text for _, text in undecided])
    for (i, _), ids in zip(undecided, encoded, strict=True):
        has_content = classifier.has_content(ids)
        out[i] = Screened(None, ids) if has_content else Screened(EMPTY_TEXT, None)
    return out


def on_scores(
    classifier: Classifier, policy: Policy, row: Scores
) -> tuple[Verdict, dict[str, float]]:
    """The policy's verdict on one row of the model's scores, and the scores by label."""
    named = classifier.as_dict(row)
    return policy.decide(named), named


def decide_texts(
    classifier: Classifier, policy: Policy, texts: Sequence[str]
) -> list[tuple[Verdict, dict[str, float]]]:
    """Verdict and scores by label for each text (no scores when the model was not asked), the
    texts the model must score run as one padded batch."""
    screened = screen(classifier, [(policy, text) for text in texts])
    asked = [i for i, s in enumerate(screened) if s.ids is not None]
    rows = classifier.score_ids([ids for s in screened if (ids := s.ids) is not None])
    by_index = dict(zip(asked, rows, strict=True))
    out: list[tuple[Verdict, dict[str, float]]] = []
    for i, s in enumerate(screened):
        if s.verdict is not None:
            out.append((s.verdict, {}))
        else:
            out.append(on_scores(classifier, policy, by_index[i]))
    return out
