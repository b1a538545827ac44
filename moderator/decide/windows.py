"""Long messages are read whole: overlapping windows of the model's length, highest score per label.

The classifier reads a message up to the model's `max_length` (128 tokens, about 500 characters
of English), so a hostile line after 600 characters of friendly chat was never scored. Here the
token ids of the whole normalised text are cut into windows of the model's length, each wrapped
in the model's special tokens, sliding by `stride` tokens (half a window by default, so any run of
up to half a window of tokens, a whole chat line, lies inside one window, whatever its place).
Every window is a row of one model call; a label's score is its highest over the windows, and
the window that gave it is reported as character offsets of the original text (`span`), so a
moderator sees which part acted.

The work is bounded by `max_windows` per message. A full window costs about 21 ms of CPU with
the shipped int8 model on this project's 2-core AVX-512 VNNI machine (`python -m bench.windows`;
each extra window adds 21 ms of wall time at 1 intra-op thread, 10 ms at 2): 16 windows (1,071
tokens, about 4 KB of English, beyond any chat message: platforms cap them at 500 to 4,000
characters) cost 0.34 s at 1 thread and 0.17 s at 2, a 64 KiB message included (plus 19 ms
to prepare its windows), and stay under a second on a machine up to 2.5 times slower. Past the
cap the first `max_windows - 1` windows and the last one are read (where a message starts and
ends) and the result is marked `truncated`: the caller must not treat the unread middle as
clean, so a truncated message that nothing flagged goes to `review` (reason `truncated`), not
`allow`.

Reading more windows also gives the model more chances to be wrong. On held-out real chat
(bench/windows.py --probe) the windows find a hostile line in the middle or at the end of
1,500 characters 77-81% of the time (the first window alone: 2-5%), but flag 24% of long
benign messages (the first window alone: 5%): the model, trained on single lines, misreads
windows of joined chat, and max over windows multiplies that. Raising the thresholds for
windows trades one for the other (raised 80% of the way to 1, on the dev split: 5% of long
benign flagged, 64% of middle hostile lines found); the model must learn such windows.

A text of at most one window is one row with exactly the ids `Classifier.encode` gives it, so
scored alone its scores are today's. (In a batch they are not quite: the dynamic int8
quantization scales activations per batch tensor, so batch-mates move a score, by up to 0.19
on the load generator's lines; the batcher does the same today.)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from moderator.decide.classifier import HEAD_CHARS_PER_TOKEN, Classifier, Scores, TokenIds
from moderator.normalize import (
    REPEATS,
    fold_lookalikes,
    name_emoji_with_origins,
    normalize_text,
)

MAX_WINDOWS = 16

Span = tuple[int, int]


class WindowPlan(NamedTuple):
    """Content-token ranges `[start, end)` to score, and whether the cap cut the plan (then
    some tokens may be in no window, and a line across the cut in none whole)."""

    windows: tuple[Span, ...]
    truncated: bool


def plan_windows(n_tokens: int, size: int, stride: int, max_windows: int) -> WindowPlan:
    """Windows of `size` tokens every `stride` tokens over `n_tokens`, the last one flush with
    the end; past `max_windows`, the first `max_windows - 1` and the last."""
    if size < 1 or not 1 <= stride <= size or max_windows < 1:
        raise ValueError(f"bad window plan: size {size}, stride {stride}, cap {max_windows}")
    if n_tokens <= size:
        return WindowPlan(((0, n_tokens),), False)
    last = n_tokens - size
    starts = [*range(0, last, stride), last]
    if len(starts) <= max_windows:
        return WindowPlan(tuple((s, s + size) for s in starts), False)
    # Past the cap even a contiguous read would lose the overlap that keeps a line whole.
    starts = [*starts[: max_windows - 1], last] if max_windows > 1 else [0]
    return WindowPlan(tuple((s, s + size) for s in starts), True)


def highest(rows: Scores) -> tuple[Scores, npt.NDArray[np.intp]]:
    """Each label's highest score over a text's windows (`rows`, `[n_windows, n_labels]`) and
    the window that gave it: a hostile line anywhere in a long message acts."""
    best = np.argmax(rows, axis=0)
    return rows[best, np.arange(rows.shape[1])], best


class WindowScores(NamedTuple):
    """A message's scores over its windows."""

    scores: Scores  # [n_labels]: each label's highest score over the windows
    best: npt.NDArray[np.intp]  # [n_labels]: the window that gave it
    spans: tuple[Span, ...]  # each window's characters in the original text, [start, end)
    truncated: bool  # more than `max_windows` windows were needed: the middle was not all read

    def span_of(self, label: int) -> Span:
        """Characters of the window that gave label `label` (its index) its score."""
        return self.spans[int(self.best[label])]

    @property
    def span(self) -> Span:
        """Characters of the window that gave the highest score of any label."""
        return self.span_of(int(np.argmax(self.scores)))


class Windows(NamedTuple):
    """A text's windows, ready to score: ids with the special tokens, and their spans."""

    ids: list[TokenIds]
    spans: tuple[Span, ...]
    truncated: bool


class _Piece(NamedTuple):
    """Content token ids of a piece of text, and each token's characters in the whole text."""

    ids: TokenIds
    starts: list[int]
    ends: list[int]


class WindowScorer:
    """Scores whole texts with `classifier` in windows; built once per classifier (it keeps an
    untruncated copy of the classifier's tokenizer)."""

    def __init__(
        self,
        classifier: Classifier,
        *,
        max_windows: int = MAX_WINDOWS,
        size: int | None = None,
        stride: int | None = None,
    ) -> None:
        self.classifier = classifier
        self._emoji_names = classifier.info.emoji == "names"  # read as Classifier.encode reads
        self.tokenizer = Tokenizer.from_str(classifier.tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        sample = self.tokenizer.encode("a")  # the special tokens around one content token
        mask = sample.special_tokens_mask
        self._specials = (mask.index(0), len(mask) - 1 - mask.index(0))
        ids = sample.ids
        self._head_ids = np.asarray(ids[: self._specials[0]], dtype=np.int64)
        self._tail_ids = np.asarray(ids[len(ids) - self._specials[1] :], dtype=np.int64)
        room = classifier.info.max_length - sum(self._specials)
        self.size = min(size, room) if size is not None else room  # content tokens per window
        if self.size < 1:
            limit = classifier.info.max_length
            raise ValueError(f"windows of {self.size} tokens hold no text (max_length {limit})")
        self.stride = stride if stride is not None else max(1, self.size // 2)
        self.max_windows = max_windows
        self.plan(0)  # checks the stride and the cap
        # Tokens the first max_windows - 1 windows read, and the characters that surely hold
        # them (and the last window's): a longer text is read only at its two ends.
        self._head_tokens = (max_windows - 2) * self.stride + self.size if max_windows > 1 else 0
        self._head_chars = self._head_tokens * HEAD_CHARS_PER_TOKEN
        self._tail_chars = self.size * HEAD_CHARS_PER_TOKEN

    def plan(self, n_tokens: int) -> WindowPlan:
        return plan_windows(n_tokens, self.size, self.stride, self.max_windows)

    def windows(self, text: str, normalized: str | None = None) -> Windows:
        """The windows of `text` (normalised here, as `Classifier.encode` does, unless the caller
        has `normalized`, its `normalize_text(text)`).

        A text longer than the characters the capped windows can read is tokenized only at its
        two ends, each cut at whitespace (so its tokens are the whole text's): a 64 KiB message
        costs what 20 KB do.
        """
        ends = self._ends(text)
        if ends is not None:
            return ends
        piece = self._piece(text, 0, normalized)
        plan = self.plan(len(piece.ids))
        rows = [self._row(piece.ids[a:b]) for a, b in plan.windows]
        spans = tuple(_span(piece, a, b, len(text)) for a, b in plan.windows)
        return Windows(rows, spans, plan.truncated)

    def score(self, text: str) -> WindowScores:
        """Scores of `text` over its windows, all windows in one model call."""
        return self.score_windows(self.windows(text))

    def score_windows(self, windows: Windows) -> WindowScores:
        scores, best = highest(self.classifier.score_ids(windows.ids))
        return WindowScores(scores, best, windows.spans, windows.truncated)

    def _row(self, content: TokenIds) -> TokenIds:
        return np.concatenate([self._head_ids, content, self._tail_ids])

    def _piece(self, text: str, base: int, normalized: str | None = None) -> _Piece:
        normalized, origins = normalize_with_origins(text, normalized)
        if self._emoji_names:
            normalized, inner = name_emoji_with_origins(normalized)
            origins = [origins[i] for i in inner]
        encoding = self.tokenizer.encode(normalized)
        head, tail = self._specials
        n = len(encoding.ids)
        offsets = encoding.offsets[head : n - tail]
        return _Piece(
            np.asarray(encoding.ids[head : n - tail], dtype=np.int64),
            [base + origins[a] for a, _ in offsets],
            [base + origins[b - 1] + 1 for _, b in offsets],
        )

    def _ends(self, text: str) -> Windows | None:
        """The capped windows of a text too long to read whole, from its two ends only; None
        when it is not that long, or its ends hold too few tokens (then it is read whole)."""
        if self.max_windows < 2 or len(text) <= self._head_chars + self._tail_chars:
            return None
        before = _LAST_SPACE.search(text, 0, self._head_chars)
        after = _SPACE.search(text, len(text) - self._tail_chars)
        if before is None or after is None or before.start() == 0:
            return None
        cut_head, cut_tail = before.start(), after.start()
        head = self._piece(text[:cut_head], 0)
        tail = self._piece(text[cut_tail:], cut_tail)
        if len(head.ids) < self._head_tokens or len(tail.ids) < self.size:
            return None
        windows = [(a, a + self.size) for a in range(0, self._head_tokens - self.size + 1,
                                                     self.stride)]  # fmt: skip
        last = len(tail.ids) - self.size
        rows = [self._row(head.ids[a:b]) for a, b in windows] + [self._row(tail.ids[last:])]
        spans = [_span(head, a, b, len(text)) for a, b in windows]
        spans.append(_span(tail, last, len(tail.ids), len(text)))
        return Windows(rows, tuple(spans), True)


_SPACE = re.compile(r"\s")
_LAST_SPACE = re.compile(r"\s\S*\Z")


def _span(piece: _Piece, start: int, end: int, length: int) -> Span:
    """Characters of the original text that the piece's tokens `[start, end)` came from."""
    if start >= end:
        return (0, length)
    return (piece.starts[start], piece.ends[end - 1])


# ---------------------------------------------------------------------------------------------
# Normalisation that remembers where each character came from

# What normalize_text changes in ASCII text: control characters, and whitespace other than a
# lone space (its runs of one character are found by REPEATS).
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]+")
_ODD_SPACES = re.compile(r"\s{2,}|[^\S ]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_DROPPED = ("Cf", "Cc", "Cs", "Co", "Cn")


def normalize_with_origins(text: str, expected: str | None = None) -> tuple[str, list[int]]:
    """`normalize_text(text)` (`expected`, when the caller has it) and, for each of its
    characters, the index in `text` it came from.

    The steps of `normalize_text`, each keeping the origin of what it keeps. Should they ever
    disagree with `normalize_text` (a composition across characters that the per-character
    steps do not see), the origins are spread evenly instead: a span is then approximate,
    never outside the text.
    """
    if expected is None:
        expected = normalize_text(text)
    if text.isascii():
        drops = [(m.start(), m.end()) for m in _ASCII_CONTROLS.finditer(text)]
        folded, origins = _drop(text, list(range(len(text))), drops)
    else:
        folded, origins = _fold(text)
    drops = [(m.start() + 2, m.end()) for m in REPEATS.finditer(folded)]
    squeezed, origins = _drop(folded, origins, drops)
    spaced, origins = _spaces(squeezed, origins)
    if spaced == expected:
        return expected, origins
    n = max(1, len(expected))
    return expected, [min(len(text) - 1, i * len(text) // n) for i in range(len(expected))]


def _drop(text: str, origins: list[int], drops: Sequence[Span]) -> tuple[str, list[int]]:
    """`text` and `origins` without the character ranges `drops` (in order, disjoint)."""
    if not drops:
        return text, origins
    keep_text: list[str] = []
    keep_origins: list[int] = []
    last = 0
    for start, end in drops:
        keep_text.append(text[last:start])
        keep_origins += origins[last:start]
        last = end
    keep_text.append(text[last:])
    keep_origins += origins[last:]
    return "".join(keep_text), keep_origins


def _spaces(text: str, origins: list[int]) -> tuple[str, list[int]]:
    """Every whitespace run one space (from the run's first character), the ends stripped."""
    parts: list[str] = []
    kept: list[int] = []
    last = 0
    for match in _ODD_SPACES.finditer(text):
        parts.append(text[last : match.start()])
        kept += origins[last : match.start()]
        parts.append(" ")
        kept.append(origins[match.start()])
        last = match.end()
    parts.append(text[last:])
    kept += origins[last:]
    out = "".join(parts)
    start = 1 if out.startswith(" ") else 0
    end = len(out) - 1 if len(out) > start and out.endswith(" ") else len(out)
    return out[start:end], kept[start:end]


def _fold(text: str) -> tuple[str, list[int]]:
    """For non-ASCII text: NFKC (per base character with its combining marks), format, control
    and private characters dropped, lookalikes folded inside words with an ASCII letter."""
    chars: list[str] = []
    origins: list[int] = []
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and unicodedata.combining(text[j]):
            j += 1
        for ch in unicodedata.normalize("NFKC", text[i:j]):
            if ch.isspace() or unicodedata.category(ch) not in _DROPPED:
                chars.append(ch)
                origins.append(i)
        i = j
    start = 0
    for k in range(len(chars) + 1):  # fold word by word, as normalize_text does
        if k == len(chars) or chars[k].isspace():
            word = "".join(chars[start:k])
            if word and not word.isascii() and _ASCII_LETTER.search(word):
                chars[start:k] = list(fold_lookalikes(word))
            start = k + 1
    return "".join(chars), origins
