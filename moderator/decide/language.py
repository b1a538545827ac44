"""Language gate: text in a language the model does not read is named, not silently allowed.

The model reads English only: a Spanish threat scores like noise and would be allowed. The gate
says, for one message, "this is confidently language X, which the model does not read", and
otherwise nothing, so the caller can route X to `review` (reason `unsupported_language:<code>`).

It wraps py3langid (a maintained fork of langid.py: naive Bayes over byte n-grams, its model
shipped in the wheel, 4.5 MB installed, about 0.5 s to load). Chosen over
lingua-language-detector 2.1.1 on cost: measured side by side on this machine over the same 22
languages, py3langid took 22-30 µs per chat line and 0.16 ms at 1,500 characters, lingua
0.15 ms and 0.67 ms, with 96 MB installed and 2.6 s to load its models. With all their
languages and no rule, both name several percent of real English chat lines as another
language (lingua: 11% of the chitchat lines). The gate's own cost is in bench/windows.py.

A false "unsupported" sends ordinary chat to a human, so the rule below only speaks when the
evidence is plain. Every figure was chosen on the dev split of the real English chat pools
(models/realdata.py) and `models/data/other_languages.tsv`:

- **A restricted candidate set** (`CANDIDATES`: widely written languages). Among all 140 of the
  detector's labels, short English chat looks like Nigerian Pidgin, Javanese, Maori or Sotho
  (5-6% of SMS and tweet lines get a non-English top label); among these it seldom does.
  Text in a language outside the set is scored against its nearest neighbours in it.
- **Enough text**: at least `MIN_LETTERS` letters in at least `MIN_WORDS` distinct words, after
  URLs and @mentions are dropped. "gg", "xD", "lol", "ez", "brb", emoji, numbers, names and
  "a a a a" never qualify. A character of a syllabic script (Han, kana, Hangul, Thai, ...) counts
  as `SYLLABLE_LETTERS` letters (it stands for a syllable or more), and as a word where the
  script is written without spaces; the vowel signs of Indic scripts count as letters.
- **English is unlikely**: the supported languages together hold at most `MAX_SUPPORTED` of the
  probability, **and some other language is likely**: the top one holds at least
  `MIN_CONFIDENCE`. The second test drops names and fragments that fit no language well
  ("omaha nebraska", "mr. webster, i presume?"), where English is merely low among poor fits.

Held out (`python -m bench.language`, test split): 34 of 69,443 real chat-like lines named
(0.049%), 20 of them Spanish or French in fact; 68 of the 70 hostile lines in other languages.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from py3langid.langid import MODEL_FILE, LanguageIdentifier

from moderator.normalize import normalize_text

# Widely written languages (ISO 639-1), the ones chat in another language is most likely in.
CANDIDATES = (
    "en", "es", "de", "fr", "pt", "it", "ru", "nl", "pl", "tr", "sv", "da", "no", "fi", "id",
    "ar", "zh", "ja", "ko", "uk", "cs", "ro", "hu", "vi", "hi", "el", "he", "th", "fa",
)  # fmt: skip
MIN_LETTERS = 12
MIN_WORDS = 2
MAX_SUPPORTED = 0.05
MIN_CONFIDENCE = 0.6
SYLLABLE_LETTERS = 2
MAX_CHARS = 2_000  # a window of the model (128 tokens) is about 500 characters of English

_NOISE = re.compile(r"(?:https?://|www\.)\S+|@\w+", re.IGNORECASE)
# Scripts whose one character stands for a syllable or more (by Unicode character name prefix);
# all but Hangul are written without spaces between words.
_SYLLABIC = ("CJK ", "HIRAGANA", "KATAKANA", "HANGUL", "THAI", "LAO", "KHMER", "MYANMAR")


def _weight(ch: str) -> int:
    """0 for a character that is not part of a word, else the letters it counts as."""
    category = unicodedata.category(ch)[0]
    if category not in "LM":  # letters, and the vowel signs of Indic scripts (marks)
        return 0
    if ord(ch) >= 0x0E00 and unicodedata.name(ch, "").startswith(_SYLLABIC):
        return SYLLABLE_LETTERS
    return 1


def evidence(text: str, enough: tuple[int, int] | None = None) -> tuple[int, int]:
    """(letters, distinct words) of `text` as the gate counts them (see the module's doc);
    with `enough`, counting stops once both reach it."""
    letters = 0
    words: set[str] = set()
    for token in _NOISE.sub(" ", text).lower().split():
        spaced = []
        for ch in token:
            weight = _weight(ch)
            letters += weight
            if weight > 1 and not unicodedata.name(ch, "").startswith("HANGUL"):
                words.add(ch)
            elif weight:
                spaced.append(ch)
        if spaced:
            words.add("".join(spaced))
        if enough is not None and letters >= enough[0] and len(words) >= enough[1]:
            break
    return letters, len(words)


class LanguageGate:
    """Built once (loading the model takes about a second); `detect` is pure and thread-safe."""

    def __init__(
        self,
        supported: Iterable[str] = ("en",),
        *,
        candidates: Iterable[str] = CANDIDATES,
        min_letters: int = MIN_LETTERS,
        min_words: int = MIN_WORDS,
        max_supported: float = MAX_SUPPORTED,
        min_confidence: float = MIN_CONFIDENCE,
        max_chars: int = MAX_CHARS,
    ) -> None:
        self.supported = frozenset(supported)
        if not self.supported:
            raise ValueError("a language gate needs at least one supported language")
        self.candidates = tuple(dict.fromkeys([*candidates, *sorted(self.supported)]))
        self.min_letters = min_letters
        self.min_words = min_words
        self.max_supported = max_supported
        self.min_confidence = min_confidence
        self.max_chars = max_chars
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        known = set(self._identifier.labels)
        unknown = sorted(set(self.candidates) - known)
        if unknown:
            raise ValueError(f"languages the detector does not know: {', '.join(unknown)}")
        self._identifier.set_languages(list(self.candidates))

    def rank(self, text: str) -> list[tuple[str, float]]:
        """Every candidate language with its probability for `text` as given (URLs and
        @mentions dropped), best first."""
        ranked: list[tuple[str, float]] = self._identifier.rank(_NOISE.sub(" ", text))
        return ranked

    def detect(self, text: str, normalized: str | None = None) -> str | None:
        """The language code of `text` when it is confidently a language the model does not
        read, else None (supported, too short to tell, or unsure). `normalized`: the caller's
        `normalize_text(text)` (text.Text.normalized), read when the whole text is.

        Only the first `max_chars` characters are read (cut at a space): the detector walks
        every byte in Python, about 0.6 ms per 1,000 characters. A long message is judged
        window by window instead (`moderator/decide/windows.py` spans), so an English head cannot
        carry a foreign body through.
        """
        if len(text) > self.max_chars:
            cut = text.rfind(" ", 0, self.max_chars)
            text, normalized = text[: cut if cut > 0 else self.max_chars], None
        text = normalize_text(text) if normalized is None else normalized
        letters, words = evidence(text, (self.min_letters, self.min_words))
        if letters < self.min_letters or words < self.min_words:
            return None
        ranked = self.rank(text)
        top, confidence = ranked[0]
        if top in self.supported or confidence < self.min_confidence:
            return None
        supported = sum(p for lang, p in ranked if lang in self.supported)
        return top if supported <= self.max_supported else None
