from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moderator.normalize import (
    fold_lookalikes,
    name_emoji,
    name_emoji_with_origins,
    normalize_text,
)
from moderator.policy.terms import words


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  gg   wp  ", "gg wp"),
        ("soooo gooood!!!!!", "soo good!!"),
        ("ｆｕｌｌｗｉｄｔｈ", "fullwidth"),
        ("ze\u200bro\u200dwidth", "zerowidth"),
        ("bidi\u202eoverride", "bidioverride"),
        ("nul\x00byte", "nulbyte"),
        ("hеllo", "hello"),  # Cyrillic е inside a Latin word
        ("ƒuck ʀekt", "fuck rekt"),  # look-alikes deny-term matching folded and this did not
        ("привет мир", "привет мир"),  # real Cyrillic stays Cyrillic
        ("lone \ud800 surrogate", "lone surrogate"),
        ("\u200b \t\n", ""),
        ("private\ue000use", "privateuse"),  # category Co
        ("un\u0378assigned", "unassigned"),  # category Cn
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_normalize_is_idempotent() -> None:
    for text in ("Ｙｏｕ  ａｒｅ sooooo  bad!!!", "k y s", "f*ck", "hеllo wоrld"):
        once = normalize_text(text)
        assert normalize_text(once) == once


def test_deny_terms_fold_the_lookalikes_the_model_input_folds() -> None:
    lookalikes = "".join(chr(c) for c in range(0x80, 0x2000) if fold_lookalikes(chr(c)) != chr(c))
    assert len(lookalikes) > 40
    for ch in lookalikes:
        folded = normalize_text(f"x{ch}")
        assert folded != f"x{ch}", ch
        assert words(f"x{ch}")[0].letters == folded, ch


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("i will 🔪 you", "i will kitchen knife you"),
        ("🐀 make me 🤢", "rat make me nauseated face"),
        ("some 👨🏿 here", "some man dark skin tone here"),  # whom it shows counts
        ("gg😂😂", "gg face with tears of joy face with tears of joy"),
        ("❤️ you", "red heart you"),  # with its variation selector
        ("no emoji here", "no emoji here"),
        ("Привет всем", "Привет всем"),  # other scripts untouched
    ],
)
def test_emoji_are_read_as_their_names(text: str, named: str) -> None:
    assert name_emoji(normalize_text(text)) == named


def test_naming_emoji_is_not_part_of_normalisation() -> None:
    # The override digest and the cache keys of models that read emoji as they are hang on it.
    assert normalize_text("i will 🔪 you") == "i will 🔪 you"


def test_an_emoji_s_name_comes_from_the_emoji() -> None:
    text = "so 🔪 you"
    named, origins = name_emoji_with_origins(text)
    assert named == "so kitchen knife you"
    assert [text[o] for o in origins[: len("so ")]] == list("so ")
    assert {text[o] for o in origins[len("so ") : len("so kitchen knife")]} == {"🔪"}
    assert text[origins[named.index("you")]] == "y"


@given(st.text(st.characters(codec="utf-8"), max_size=60))
def test_named_origins_point_into_the_text_in_order(text: str) -> None:
    text = normalize_text(text)
    named, origins = name_emoji_with_origins(text)
    assert named == name_emoji(text)
    assert len(origins) == len(named)
    assert origins == sorted(origins)
    assert all(0 <= o < len(text) for o in origins)
    assert named == " ".join(named.split())
