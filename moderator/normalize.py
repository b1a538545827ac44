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


def name_emoji(text: str) -> str:
    """`text` with each emoji read as its name in words ("i will 🔪 you" → "i will kitchen knife
    you"), for a model whose manifest says `"emoji": "names"`.

    A word-piece vocabulary has no piece for most emoji ("🔪", "🤮" become `[UNK]`), so a threat
    or an insult written with them reads as nothing at all. The names are the Unicode CLDR short
    names the `emoji` library keeps up to date with each Unicode release; a skin tone stays in the
    name ("man dark skin tone"), since which person an emoji shows can be what a message attacks.
    Applied after `normalize_text`, never inside it: the override digest and the score cache of
    a model that reads emoji as they are must not change.
    """
    return name_emoji_with_origins(text)[0]


def name_emoji_with_origins(text: str) -> tuple[str, list[int]]:
    """`name_emoji(text)` and, for each of its characters, the index in `text` it came from (an
    emoji's name points at the emoji), so a window's span still marks the message's own text."""
    if text.isascii():
        return text, list(range(len(text)))
    import emoji  # here: its tables cost a process ~7 MB, and only models that name emoji ask

    out: list[str] = []
    origins: list[int] = []
    last = 0
    for found in emoji.emoji_list(text):
        start, end = found["match_start"], found["match_end"]
        out.append(text[last:start])
        origins += range(last, start)
        words = f" {_emoji_words(found['emoji'])} "
        out.append(words)
        origins += [start] * len(words)
        last = end
    if not out:
        return text, list(range(len(text)))
    out.append(text[last:])
    origins += range(last, len(text))
    return _collapse_spaces("".join(out), origins)


def _emoji_words(found: str) -> str:
    """ "🔪" → "kitchen knife": the CLDR name with its colons, underscores and hyphens as spaces."""
    import emoji

    name = emoji.demojize(found, delimiters=("", ""))
    return " ".join(name.replace("_", " ").replace("-", " ").replace(":", " ").split())


def _collapse_spaces(text: str, origins: list[int]) -> tuple[str, list[int]]:
    """Runs of spaces as one, none at either end (as `normalize_text` leaves them)."""
    chars: list[str] = []
    kept: list[int] = []
    for ch, origin in zip(text, origins, strict=True):
        if ch.isspace() and (not chars or chars[-1] == " "):
            continue
        chars.append(" " if ch.isspace() else ch)
        kept.append(origin)
    if chars and chars[-1] == " ":
        chars.pop()
        kept.pop()
    return "".join(chars), kept
