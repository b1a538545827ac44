"""Overlap between texts, containment included: which training lines repeat evaluation text.

Exact duplicates are not enough. The Social Bias Frames posts hold Stormfront sentences and
Davidson tweets verbatim inside longer posts, and a test suite's case can sit inside a forum
post; training on such a post trains on the evaluation line. Two texts overlap here when, in
their normalised lower-case words (`words`), they are equal, one holds the other whole (the
shorter having at least `MIN_CONTAINED` words), or they share a run of `RUN` words (a quote).
Every check is a set lookup of hashed word runs, so tens of thousands of lines take seconds.
"""

from __future__ import annotations

from collections.abc import Iterable

from models.sources.lineids import SUITE_OVERLAP_COLUMNS, line_id
from moderator.normalize import normalize_text

__all__ = ["SUITE_OVERLAP_COLUMNS", "Overlap", "line_id", "words"]

RUN = 8  # a shared run of this many words is the same text quoted
MIN_CONTAINED = 4  # a shorter text held whole counts from this many words (equal texts always)
TEST_LINES = "test_lines.tsv"  # the fixed evaluation pools: source, line id
SUITE_OVERLAP = "suite_overlap.tsv"  # stance lines that overlap a public suite


def words(text: str) -> tuple[str, ...]:
    """The text's words, normalised, lower-cased, without punctuation at their edges."""
    out = (w.strip(".,!?;:\"'()[]*-") for w in normalize_text(text).lower().split())
    return tuple(w for w in out if w)


def _grams(seq: tuple[str, ...], low: int, high: int) -> Iterable[int]:
    """Hashes of every run of `low` to `high` words (a run as long as `seq` at most)."""
    for n in range(low, min(high, len(seq)) + 1):
        for i in range(len(seq) - n + 1):
            yield hash(seq[i : i + n])


class Overlap:
    """The evaluation texts a training line must not overlap, indexed once."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._equal: set[int] = set()  # every text whole
        self._short: set[int] = set()  # texts of MIN_CONTAINED to RUN - 1 words, whole
        self._inner: set[int] = set()  # every run of MIN_CONTAINED to RUN words of every text
        for text in texts:
            seq = words(text)
            if not seq:
                continue
            self._equal.add(hash(seq))
            if MIN_CONTAINED <= len(seq) < RUN:
                self._short.add(hash(seq))
            self._inner.update(_grams(seq, MIN_CONTAINED, RUN))

    def hits(self, text: str) -> bool:
        """Whether `text` overlaps an indexed text (equal, either inside the other, a shared
        run of `RUN` words)."""
        seq = words(text)
        if not seq:
            return False
        if hash(seq) in self._equal:
            return True
        if MIN_CONTAINED <= len(seq) <= RUN and hash(seq) in self._inner:
            return True  # the line inside a longer evaluation text
        if len(seq) >= RUN and any(g in self._inner for g in _grams(seq, RUN, RUN)):
            return True  # a shared run (or a longer evaluation text inside the line)
        return any(g in self._short for g in _grams(seq, MIN_CONTAINED, RUN - 1))
