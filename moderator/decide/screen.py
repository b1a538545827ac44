"""Texts → the policy's rulings: the one path the pipeline and `moderator score` share.

A policy's allowed phrases are blanked out, its deny terms decide without the model, the rest is
encoded, and a text with nothing left after normalisation is allowed without the model (`screen`).
A text longer than one window of the model is cut into windows (moderator/decide/windows.py), and
the language gate names a language the model does not read, window by window, so an English start
cannot carry a foreign body. The model scores every window; a label's score is its highest over
them, and the policy decides on the scores (`judge`): a message the cap left partly unread
that nothing flagged goes to review (unread text is not silently allowed), and the policy's
action for an unsupported language applies when it is the more severe (English insults inside
foreign text still act). How the scores are found is the caller's: the pipeline looks them up
in the cache and sends misses through the micro-batcher, window by window, `moderator score`
runs the model once per chunk (`decide_texts`). Each text is a `text.Text`: its deny terms and
allowed phrases, the model, the windows and the language gate read its forms, made once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from moderator.decide.cache import cache_key
from moderator.decide.classifier import Classifier, Scores, TokenIds
from moderator.decide.language import LanguageGate
from moderator.decide.text import Text
from moderator.decide.windows import MAX_WINDOWS, Span, WindowScorer, highest
from moderator.errors import ModelError
from moderator.policy.long_text import discounted, windows_raise
from moderator.policy.rules import ALLOW, EMPTY_TEXT, Policy, Ruling

TRUNCATED_REASON = "truncated"
UNSUPPORTED_LANGUAGE_REASON = "unsupported_language"  # reason "unsupported_language:<code>"


class Reader:
    """How this process reads a text: the classifier, its windows and the language gate (None:
    every language passes); built once per process (the gate's model takes ~0.5 s to load)."""

    def __init__(
        self,
        classifier: Classifier,
        *,
        max_windows: int = MAX_WINDOWS,
        gate: LanguageGate | None = None,
    ) -> None:
        self.classifier = classifier
        self.windows = WindowScorer(classifier, max_windows=max_windows)
        self.gate = gate

    def language(self, text: Text, spans: Sequence[Span]) -> str | None:
        """The first unsupported language the gate names in the windows `spans` of `text`."""
        if self.gate is None:
            return None
        if spans == ((0, len(text.raw)),):  # one window: the whole text, normalised already
            return self.gate.detect(text.raw, text.normalized)
        for start, end in spans:
            if (code := self.gate.detect(text.raw[start:end])) is not None:
                return code
        return None


class Screened(NamedTuple):
    """A text before the model: decided already, or the windows the model must score."""

    ruling: Ruling | None  # a deny term's, or EMPTY_TEXT
    rows: tuple[TokenIds, ...]  # a row of token ids per window; empty exactly when decided
    spans: tuple[Span, ...]  # each window's characters in the text
    length: int  # characters in the text
    truncated: bool = False  # past the window cap: the middle was not all read
    language: str | None = None  # a language the model does not read

    @property
    def ids(self) -> TokenIds | None:
        """The token ids of a one-window text (exactly what `Classifier.encode` gives it)."""
        return self.rows[0] if len(self.rows) == 1 else None

    def key(self, model_sha256: str, reader: Reader) -> bytes:
        """The score cache key: a one-window text's is today's (its token ids); a longer one's
        hashes every window and the plan (size, stride, cap) that cut them."""
        if len(self.rows) == 1:
            return cache_key(model_sha256, self.rows[0])
        w = reader.windows
        # -1 first: no token id is negative, so no window list hashes like one text's ids.
        plan = np.asarray([-1, w.size, w.stride, w.max_windows], dtype=np.int64)
        lengths = np.asarray([len(r) for r in self.rows], dtype=np.int64)
        return cache_key(model_sha256, np.concatenate([plan, lengths, *self.rows]))


class Judged(NamedTuple):
    """The decision on one text: the ruling, scores by label, and what the record says."""

    ruling: Ruling
    scores: dict[str, float]  # empty when the model was not asked
    span: Span  # the window behind the acting (or, when allowed, the highest) label
    truncated: bool = False
    language: str | None = None


def screen(reader: Reader, texts: Sequence[tuple[Policy, Text]]) -> list[Screened]:
    """Each (policy, text) pair screened by its policy, the undecided ones encoded in one call."""
    out: list[Screened] = []
    undecided: list[tuple[int, Text]] = []
    for policy, text in texts:
        blanked = policy.without_allowed(text)  # the same length: spans stay the text's
        left = text if blanked is text.raw else Text(blanked)
        denied = policy.deny_ruling(left)
        if denied is None:
            undecided.append((len(out), left))
        out.append(Screened(denied, (), (), len(text.raw)))
    classifier = reader.classifier
    encoded = classifier.encode_normalized([text.normalized for _, text in undecided])
    for (i, text), ids in zip(undecided, encoded, strict=True):
        if not classifier.has_content(ids):
            out[i] = out[i]._replace(ruling=EMPTY_TEXT)
            continue
        rows: tuple[TokenIds, ...] = (ids,)
        spans: tuple[Span, ...] = ((0, len(text.raw)),)
        truncated = False
        if len(ids) >= classifier.info.max_length:  # it may go on past one window
            windows = reader.windows.windows(text.raw, text.normalized)
            if len(windows.ids) > 1:
                rows, spans, truncated = tuple(windows.ids), windows.spans, windows.truncated
        language = reader.language(text, spans)
        out[i] = Screened(None, rows, spans, len(text.raw), truncated, language)
    return out


def judge(reader: Reader, policy: Policy, screened: Screened, rows: Scores | None) -> Judged:
    """The policy's decision on a screened text and its windows' scores (`[n_windows,
    n_labels]`, or one row), or on the screen's own ruling when the model was not asked."""
    whole = (0, screened.length)
    if screened.ruling is not None or rows is None:
        assert screened.ruling is not None, "a text the model must score needs its scores"
        return Judged(screened.ruling, {}, whole)
    rows = np.atleast_2d(rows)
    scores, best = highest(rows)
    named = reader.classifier.as_dict(scores)
    # One window (nearly every message) is judged as written: no policy lookup on that path.
    seen = discounted(named, windows_raise(policy.spec), len(rows)) if len(rows) > 1 else named
    ruling = policy.decide(seen)
    labels = reader.classifier.labels
    acting = labels.index(ruling.reason) if ruling.reason in labels else int(np.argmax(scores))
    span = screened.spans[int(best[acting])] if len(screened.spans) > 1 else whole
    if screened.truncated and ruling.action == ALLOW:
        ruling = Ruling(policy.review_action, TRUNCATED_REASON)
    if screened.language is not None:
        action = policy.unsupported_language
        if policy.rank(action) > policy.rank(ruling.action):
            ruling = Ruling(action, f"{UNSUPPORTED_LANGUAGE_REASON}:{screened.language}")
    return Judged(ruling, named, span, screened.truncated, screened.language)


def reader_for(classifier: Classifier, *, max_windows: int = MAX_WINDOWS) -> Reader:
    """How a process reads with `classifier`: windows up to the cap, and the language gate for
    the languages its manifest names (English unless it names others). The gate takes ~0.5 s."""
    try:
        gate = LanguageGate(classifier.info.languages)
    except ValueError as exc:  # a code the detector does not know
        raise ModelError(f"{classifier.model_dir / 'manifest.json'}: 'languages': {exc}") from None
    return Reader(classifier, max_windows=max_windows, gate=gate)


def decide_texts(reader: Reader, policy: Policy, texts: Sequence[str]) -> list[Judged]:
    """The decision on each text, the windows the model must score run as one padded batch."""
    screened = screen(reader, [(policy, Text(text)) for text in texts])
    rows = reader.classifier.score_ids([row for s in screened for row in s.rows])
    out: list[Judged] = []
    start = 0
    for s in screened:
        mine = rows[start : start + len(s.rows)] if s.rows else None
        start += len(s.rows)
        out.append(judge(reader, policy, s, mine))
    return out
