from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from moderator.config import REPO_ROOT
from moderator.decide.language import CANDIDATES, LanguageGate, evidence

DATA = REPO_ROOT / "models" / "data"
OTHER_LANGUAGES = [DATA / "other_languages.tsv", DATA / "other_languages_heldout.tsv"]


@pytest.fixture(scope="module")
def gate() -> LanguageGate:
    return LanguageGate()


def _lines(path: Path) -> list[str]:
    """The text column of a corpus file (comments and blank lines skipped)."""
    rows = path.read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[0] for r in rows if r.strip() and not r.startswith("#")]


def _other_languages(path: Path) -> list[tuple[str, str, str]]:
    """(text, language, hostile | benign) of each hand-written line in another language."""
    rows = path.read_text(encoding="utf-8").splitlines()
    fields = [r.split("\t") for r in rows if r.strip() and not r.startswith("#")]
    return [(text, lang, kind) for text, lang, kind in fields]


SHORT_OR_AMBIGUOUS = [
    "gg", "GG", "gg ez", "xD", "XD XD XD", "lol", "LOL", "lmao", "ez", "ok", "okk", "brb", "afk",
    "ty", "np", "wp", "glhf", "kekw", "pog", "pogchamp", "omegalul", "F", "?", "???", "!!",
    "😂😂😂", "❤️", "👍", "🔥🔥", ":)", ":D", "<3", "o7", "1v1", "12345", "3-0", "69", "420",
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "www.twitch.tv/some_streamer",
    "@Jean-Pierre", "Jean-Pierre", "Giacomo", "Nguyen", "Müller", "Søren", "Álvaro",
    "gracias", "danke", "merci", "hola", "ciao", "привет", "hola amigo", "danke schön",
    "a a a a a a a a a a a a", "blah blah blah blah", "hahahahahahahaha", "jajajaja",
    "kkkkkkkk", "你好", "ありがとう",
]  # fmt: skip


@pytest.mark.parametrize("text", SHORT_OR_AMBIGUOUS)
def test_short_or_ambiguous_lines_are_never_unsupported(gate: LanguageGate, text: str) -> None:
    assert gate.detect(text) is None


# The hand-written chat sets greet in other languages too: these three are Spanish, German and
# French (unseen_short.tsv, kind "greeting"), long enough to tell, so naming them is right.
GREETINGS = {"buenas noches chat": "es", "hallo zusammen": "de", "salut tout le monde": "fr"}


def test_english_chat_is_never_unsupported(gate: LanguageGate) -> None:
    corpus = REPO_ROOT / "loadgen" / "corpus"
    lines = [line for path in sorted(corpus.glob("*.txt")) for line in _lines(path)]
    lines += [line for path in sorted(DATA.glob("unseen_*.tsv")) for line in _lines(path)]
    assert len(lines) > 500
    named = {line: code for line in lines if (code := gate.detect(line)) is not None}
    assert named == GREETINGS


@pytest.mark.parametrize("path", OTHER_LANGUAGES, ids=lambda p: p.name)
def test_other_languages_are_named(gate: LanguageGate, path: Path) -> None:
    rows = _other_languages(path)
    named: Counter[str] = Counter()
    for text, lang, _kind in rows:
        named[lang] += gate.detect(text) == lang
    per_language = Counter(lang for _text, lang, _kind in rows)
    assert set(per_language) == {"es", "de", "fr", "pt", "it", "ru", "nl"}
    for lang, total in per_language.items():
        assert named[lang] > total // 2, (lang, named[lang], total)


@pytest.mark.parametrize("path", OTHER_LANGUAGES, ids=lambda p: p.name)
def test_hostile_lines_in_other_languages_are_named(gate: LanguageGate, path: Path) -> None:
    hostile = [(text, lang) for text, lang, kind in _other_languages(path) if kind == "hostile"]
    # Routing needs "not English", not the exact language ("иди нахуй, сука" is also Ukrainian).
    named = sum(gate.detect(text) is not None for text, _lang in hostile)
    assert named > len(hostile) * 3 // 4


def test_a_supported_language_is_not_named() -> None:
    spanish = "alguien sabe a qué hora empieza el torneo mañana?"
    assert LanguageGate().detect(spanish) == "es"
    assert LanguageGate(supported=("en", "es")).detect(spanish) is None


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("去死吧你这个垃圾", "zh"),
        ("お前は本当にバカだな", "ja"),
        ("너 진짜 멍청하다 꺼져", "ko"),
        ("هذا غبي جدا اخرج من هنا", "ar"),
        ("मैं तुम्हें मार दूंगा", "hi"),
    ],
)
def test_scripts_the_model_cannot_read_are_named(gate: LanguageGate, text: str, code: str) -> None:
    assert gate.detect(text) == code


def test_urls_and_mentions_are_not_evidence() -> None:
    assert evidence("@verylongusername https://example.com/abcdefghijklmnop") == (0, 0)
    assert evidence("Hola hola HOLA amigo!") == (17, 2)
    # A character of a script written without spaces is a word and weighs like a short word.
    letters, words = evidence("去死吧")
    assert words == 3
    assert letters > words
    # Hangul is written with spaces; Devanagari's vowel signs are part of its words.
    assert evidence("안녕 친구")[1] == 2
    assert evidence("दूंगा") == (5, 1)


def test_only_known_languages_are_accepted() -> None:
    with pytest.raises(ValueError, match="xx"):
        LanguageGate(supported=("xx",))
    with pytest.raises(ValueError, match="at least one"):
        LanguageGate(supported=())
    assert "en" in CANDIDATES


def test_only_the_head_of_a_long_text_is_read() -> None:
    spanish = "alguien sabe a qué hora empieza el torneo mañana?"
    english = " anyway I think we should queue again after dinner, who is in?" * 40
    gate = LanguageGate(max_chars=len(spanish) + 10)
    assert gate.detect(spanish + english) == "es"
    assert gate.detect(english + " " + spanish) is None
