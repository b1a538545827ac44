"""Text normalisation shared by training and serving.

The model is trained on normalised text and the verdict cache is keyed on the token ids of
normalised text, so both sides must call this one function: a change here is a model change.
"""

from __future__ import annotations

import re
import unicodedata

# Lookalike letters used to dodge filters ("hеllo" with a Cyrillic е). They are folded to Latin
# only inside words that also contain an ASCII letter, so real Cyrillic or Greek text is untouched.
_CONFUSABLES = str.maketrans(
    {
        "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o",
        "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s",
        "ԁ": "d", "һ": "h", "ӏ": "l", "ο": "o", "α": "a", "ε": "e", "ι": "i", "κ": "k",
        "ν": "v", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ѵ": "v", "ɡ": "g",
    }
)  # fmt: skip
_WORD = re.compile(r"\S+")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_REPEATS = re.compile(r"(.)\1{2,}", re.DOTALL)
_SPACES = re.compile(r"\s+")
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _fold_word(match: re.Match[str]) -> str:
    word = match.group(0)
    if word.isascii() or not _ASCII_LETTER.search(word):
        return word
    return word.translate(_CONFUSABLES)


def normalize_text(text: str) -> str:
    """Return the canonical form of a chat line.

    NFKC folds width and compatibility forms (fullwidth, circled, math letters); format
    characters (zero-width joiners, bidi controls) and control characters are dropped; mixed-script
    lookalikes fold to Latin; any run of one character longer than two becomes two ("sooo" → "soo",
    "!!!!!" → "!!"); whitespace collapses. Case is left to the tokenizer.
    """
    if text.isascii():  # the common case: nothing to fold, only controls to drop
        text = _ASCII_CONTROLS.sub("", text)
    else:
        text = unicodedata.normalize("NFKC", text)
        text = "".join(
            ch
            for ch in text
            if ch.isspace() or unicodedata.category(ch) not in ("Cf", "Cc", "Cs", "Co", "Cn")
        )
        text = _WORD.sub(_fold_word, text)
    text = _REPEATS.sub(r"\1\1", text)
    return _SPACES.sub(" ", text).strip()
