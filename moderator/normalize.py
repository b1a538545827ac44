"""Text normalisation shared by training and serving.

The model is trained on normalised text and the score cache is keyed on the token ids of
normalised text, so both sides must call this one function: a change here is a model change.
"""

from __future__ import annotations

import re
import unicodedata

# Look-alike letters used to dodge filters ("hеllo" with a Cyrillic е), each over the Latin letter
# it imitates. The one table: deny-term matching folds with it too (moderator/policy/terms.py).
_LOOKALIKES = (
    ("авеёкмнорстухіїјѕԁһӏѵ", "abeekmhopctyxiijsdhlv"),  # Cyrillic
    ("οαβεικνρτυχ", "oabeikvptux"),  # Greek
    ("ɡıɑƒɩɪʀᴄᴋᴜɢ", "giafiirckug"),  # Latin letters that are not ASCII: IPA, small capitals
    ("ߋս", "ou"),  # N'Ko, Armenian
)
_CONFUSABLES = str.maketrans(
    {k: v for lookalikes, latin in _LOOKALIKES for k, v in zip(lookalikes, latin, strict=True)}
)
_WORD = re.compile(r"\S+")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
# A run of one character longer than two; moderator/decide/windows.py finds the same runs to map
# spans.
REPEATS = re.compile(r"(.)\1{2,}", re.DOTALL)
_SPACES = re.compile(r"\s+")
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def fold_lookalikes(text: str) -> str:
    """`text` with each look-alike letter replaced by the Latin letter it imitates."""
    return text.translate(_CONFUSABLES)


def _fold_word(match: re.Match[str]) -> str:
    # Only inside words that also hold an ASCII letter: real Cyrillic or Greek text is untouched.
    word = match.group(0)
    if word.isascii() or not _ASCII_LETTER.search(word):
        return word
    return fold_lookalikes(word)


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
    text = REPEATS.sub(r"\1\1", text)
    return _SPACES.sub(" ", text).strip()
