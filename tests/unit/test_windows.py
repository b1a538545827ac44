from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from moderator.decide.classifier import Classifier
from moderator.decide.windows import (
    MAX_WINDOWS,
    WindowScorer,
    highest,
    normalize_with_origins,
    plan_windows,
)
from moderator.normalize import normalize_text

FRIENDLY = (
    "hey everyone, hope you are all having a great day, the stream was fun yesterday "
    "and I loved the new song you played at the end. "
)
HOSTILE = "you are a worthless piece of shit, go die"


@pytest.fixture(scope="module")
def scorer(classifier: Classifier) -> WindowScorer:
    return WindowScorer(classifier)


def test_a_labels_score_is_its_highest_over_the_windows_with_the_window_that_gave_it() -> None:
    rows = np.asarray([[0.1, 0.9, 0.3], [0.8, 0.2, 0.3]], dtype=np.float32)
    scores, best = highest(rows)
    assert scores.tolist() == pytest.approx([0.8, 0.9, 0.3])
    assert best.tolist() == [1, 0, 0], "a tie goes to the first window"


@given(
    n=st.integers(0, 5000),
    size=st.integers(1, 200),
    stride_share=st.floats(0.01, 1.0),
    cap=st.integers(1, 40),
)
def test_a_plan_covers_the_text_in_windows_of_the_model_length(
    n: int, size: int, stride_share: float, cap: int
) -> None:
    stride = max(1, int(size * stride_share))
    plan = plan_windows(n, size, stride, cap)
    starts = [a for a, _ in plan.windows]
    assert starts[0] == 0
    assert starts == sorted(set(starts))
    assert 1 <= len(plan.windows) <= cap
    if n <= size:
        assert plan.windows == ((0, n),)
    else:
        assert all(b - a == size for a, b in plan.windows)
        assert plan.windows[-1][1] == n or cap == 1  # the end is read, unless one window only
    read = set().union(*(range(a, b) for a, b in plan.windows))
    assert plan.truncated == (len(range(0, n - size, stride)) + 1 > cap and n > size)
    if not plan.truncated:
        assert read == set(range(n))
        # Any run of size - stride + 1 tokens (a hostile line) lies whole inside one window.
        run = size - stride + 1
        for first in range(0, max(1, n - run + 1), max(1, n // 50)):
            assert any(a <= first and first + min(run, n) <= b for a, b in plan.windows)


def test_past_the_cap_the_first_windows_and_the_last_are_read() -> None:
    plan = plan_windows(10_000, 126, 63, 16)
    assert plan.truncated
    assert len(plan.windows) == 16
    assert plan.windows[:15] == tuple((63 * k, 63 * k + 126) for k in range(15))
    assert plan.windows[-1] == (10_000 - 126, 10_000)
    assert not plan_windows(126 + 63 * 15, 126, 63, 16).truncated


@pytest.mark.parametrize(
    ("size", "stride", "cap"), [(0, 1, 1), (10, 0, 1), (10, 11, 1), (10, 5, 0)]
)
def test_a_bad_plan_is_refused(size: int, stride: int, cap: int) -> None:
    with pytest.raises(ValueError, match="bad window plan"):
        plan_windows(100, size, stride, cap)


def test_a_short_text_is_one_window_with_the_classifier_s_own_ids(
    scorer: WindowScorer, classifier: Classifier
) -> None:
    for text in ["gg", HOSTILE, FRIENDLY, "Ｈｅｌｌｏ   wörld!!!!!! ﬁne  "]:
        windows = scorer.windows(text)
        assert len(windows.ids) == 1
        assert not windows.truncated
        np.testing.assert_array_equal(windows.ids[0], classifier.encode([text])[0])
        scored = scorer.score(text)
        alone = classifier.score_ids(classifier.encode([text]))[0]
        np.testing.assert_allclose(scored.scores, alone, atol=1e-6)


def test_the_first_window_of_a_long_text_is_what_the_classifier_reads_today(
    scorer: WindowScorer, classifier: Classifier
) -> None:
    text = FRIENDLY * 8
    windows = scorer.windows(text)
    assert len(windows.ids) > 1
    np.testing.assert_array_equal(windows.ids[0], classifier.encode([text])[0])
    assert all(len(row) == classifier.info.max_length for row in windows.ids)


@pytest.mark.parametrize("before", [0, 2, 5, 9])
def test_a_hostile_line_is_found_wherever_it_stands(
    scorer: WindowScorer, classifier: Classifier, before: int
) -> None:
    text = FRIENDLY * before + HOSTILE + " " + FRIENDLY * (9 - before)
    alone = classifier.score_ids(classifier.encode([HOSTILE]))[0]
    label = int(np.argmax(alone))
    scored = scorer.score(text)
    assert scored.scores[label] > 0.5 * alone[label]
    start, end = scored.span_of(label)
    at = text.index(HOSTILE)
    assert start <= at
    assert at + len(HOSTILE) <= end


def test_a_very_long_text_is_read_at_both_ends_and_marked_truncated(
    scorer: WindowScorer, classifier: Classifier
) -> None:
    text = (FRIENDLY * 600)[: 64 * 1024 - len(HOSTILE) - 1] + " " + HOSTILE
    windows = scorer.windows(text)
    assert len(windows.ids) == MAX_WINDOWS
    assert windows.truncated
    assert windows.spans[0][0] == 0
    assert windows.spans[-1][1] == len(text)
    scored = scorer.score_windows(windows)
    label = int(np.argmax(classifier.score_ids(classifier.encode([HOSTILE]))[0]))
    assert scored.span_of(label)[1] == len(text)
    assert scored.scores[label] > 0.5


def test_reading_the_ends_only_gives_the_windows_of_the_whole_text(scorer: WindowScorer) -> None:
    words = [f"w{i % 97}x" if i % 3 else "the" for i in range(12_000)]
    text = "  ".join(words) + " end"
    windows = scorer.windows(text)
    assert windows.truncated
    # The reference: the whole text tokenized, then planned.
    normalized, origins = normalize_with_origins(text)
    encoding = scorer.tokenizer.encode(normalized)
    content, offsets = encoding.ids[1:-1], encoding.offsets[1:-1]
    plan = scorer.plan(len(content))
    assert len(plan.windows) == len(windows.ids)
    for (a, b), row, span in zip(plan.windows, windows.ids, windows.spans, strict=True):
        assert row[1:-1].tolist() == content[a:b]
        assert span == (origins[offsets[a][0]], origins[offsets[b - 1][1] - 1] + 1)


@given(st.text(st.characters(codec="utf-8"), max_size=80))
def test_origins_follow_normalisation(text: str) -> None:
    normalized, origins = normalize_with_origins(text)
    assert normalized == normalize_text(text)
    assert len(origins) == len(normalized)
    assert origins == sorted(origins)
    assert all(0 <= o < len(text) for o in origins)


@given(st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=80))
def test_an_ascii_character_comes_from_itself(text: str) -> None:
    normalized, origins = normalize_with_origins(text)
    for ch, origin in zip(normalized, origins, strict=True):
        assert text[origin] == ch or (ch == " " and text[origin].isspace())


def test_origins_see_through_width_ligatures_marks_and_lookalikes() -> None:
    text = "ｙｏｕ  ﬁne\u200b idiоt e\u0301!!!!"  # fullwidth, ligature, zero-width, Cyrillic о
    normalized, origins = normalize_with_origins(text)
    assert normalized == "you fine idiot é!!"
    assert [text[o] for o in origins[:3]] == ["ｙ", "ｏ", "ｕ"]
    assert text[origins[normalized.index("fi")]] == "ﬁ"
    assert text[origins[normalized.index("idiot") + 3]] == "о"
    assert origins[normalized.index("é")] == text.index("e\u0301")


def test_windows_of_a_model_that_reads_emoji_names_mark_the_emoji(
    model_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "emoji": "names"}))
    named = Classifier(copy)
    scorer = WindowScorer(named)
    [alone] = scorer.windows("i will 🔪 you").ids
    assert alone.tolist() == named.encode(["i will 🔪 you"])[0].tolist()
    ids = np.concatenate(scorer.windows("gg all " * 60 + "i will 🔪 you").ids).tolist()
    knife = named.encode(["kitchen knife"])[0].tolist()[1:-1]
    assert any(ids[i : i + len(knife)] == knife for i in range(len(ids)))


def test_lookalikes_are_folded_word_by_word_each_character_keeping_its_origin() -> None:
    # Cyrillic а, е and о at the start and the end of words with ASCII letters (folded), a
    # zero-width space (dropped), a word without ASCII letters (kept), a combining accent
    # (composed with its base, the next letter its own).
    text = "аpе\u200b мир e\u0301x оk"
    normalized, origins = normalize_with_origins(text)
    assert normalized == "ape мир éx ok"
    assert origins == [0, 1, 2, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14]


class Spy:
    """A tokenizer that counts the characters it is given."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.chars = 0

    def encode(self, text: str) -> Any:
        self.chars += len(text)
        return self.tokenizer.encode(text)


@pytest.mark.parametrize("cap", [2, 3])
def test_a_long_text_costs_what_its_two_ends_do(classifier: Classifier, cap: int) -> None:
    scorer = WindowScorer(classifier, max_windows=cap)  # its own: built for this test
    words = [f"w{i % 97}x" if i % 3 else "the" for i in range(12_000)]
    text = "  ".join(words) + " end"
    normalized, origins = normalize_with_origins(text)
    encoding = scorer.tokenizer.encode(normalized)
    content, offsets = encoding.ids[1:-1], encoding.offsets[1:-1]
    plan = scorer.plan(len(content))
    spy = Spy(scorer.tokenizer)
    scorer.tokenizer = cast(Tokenizer, spy)
    windows = scorer.windows(text)
    assert spy.chars < len(text) // 4, "the ends only"
    assert windows.truncated
    assert len(plan.windows) == len(windows.ids) == cap
    for (a, b), row, span in zip(plan.windows, windows.ids, windows.spans, strict=True):
        assert row.tolist() == [encoding.ids[0], *content[a:b], encoding.ids[-1]]
        assert span == (origins[offsets[a][0]], origins[offsets[b - 1][1] - 1] + 1)


def test_origins_are_spread_over_the_text_where_the_steps_disagree_with_normalisation() -> None:
    # Hangul jamo compose across characters (ᄀ + ᅡ = 가), which the per-character steps do not
    # see: the origins are then spread evenly, approximate but never outside the text.
    text = "\u1100\u1161 ok"
    normalized, origins = normalize_with_origins(text)
    assert normalized == "\uac00 ok"
    assert origins == [0, 1, 2, 3]


def test_a_long_text_without_spaces_between_lines_is_read_at_both_ends(
    scorer: WindowScorer,
) -> None:
    text = "\n".join(["good game everyone, see you tomorrow"] * 2_000)
    windows = scorer.windows(text)
    assert len(windows.ids) == MAX_WINDOWS
    assert windows.truncated
    assert windows.spans[-1][1] == len(text)
    assert text[windows.spans[-1][0] :].startswith(("good", "game", "everyone", "see", "you"))


def test_a_window_must_hold_text(classifier: Classifier) -> None:
    with pytest.raises(ValueError, match="hold no text"):
        WindowScorer(classifier, size=0)
    with pytest.raises(ValueError, match="bad window plan"):
        WindowScorer(classifier, stride=500)
