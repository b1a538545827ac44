from __future__ import annotations

import pytest

from moderator.normalize import fold_lookalikes, normalize_text
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
