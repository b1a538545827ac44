from __future__ import annotations

import pytest

from moderator.normalize import normalize_text


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
