"""Seeded generator of the labelled chat corpus (`models/data/train.tsv`, `heldout.tsv`).

No labelled toxicity data set can be downloaded here, so the corpus is written as templates and
word lists, reviewable in this file. Each template has a fixed set of labels; slots are filled from
word lists; lines are then "chatified" (lowercase, dropped apostrophes, u/ur, typos, emoji,
laughter) and a share is obfuscated the way people dodge filters (leetspeak, spacing, asterisks,
repeated letters, homoglyphs, dots) without changing the labels. `obscene` is lexical: any line
with a vulgar word gets it, whatever its intent, so friendly profanity is labelled `obscene` only.

The held-out split is honest about generalisation: whole templates (every fifth of each
category) AND a share of every word list (every sixth word) are held out, so a held-out line
uses a phrasing, and often words, that training never saw. Training never reads heldout.tsv.

Label meanings:
  toxicity        hostile, rude or demeaning toward a person or group (not mere profanity)
  severe_toxicity very hateful or violent (dehumanising, graphic, urging death)
  obscene         vulgar or profane words, whatever the intent
  insult          demeaning a specific person ("you're a clown")
  threat          intent or wish to harm a real person ("i know where you live")
  identity_attack hostility toward people for who they are (religion, race, sexuality, ...)
  sexual_explicit sexual content or sexual harassment
  self_harm       encouraging someone to hurt or kill themselves ("kys")

Run `python -m models.lines.corpus` to regenerate the files (deterministic).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.files import DATA_DIR
from models.lines.templates import CATEGORIES, W
from moderator.normalize import normalize_text

LABELS = (
    "toxicity",
    "severe_toxicity",
    "obscene",
    "insult",
    "threat",
    "identity_attack",
    "sexual_explicit",
    "self_harm",
)
# Indices of the labels that can make a line flagged: `obscene` alone never acts.
ACTING = tuple(i for i, label in enumerate(LABELS) if label != "obscene")
TRAIN_FILE = DATA_DIR / "train.tsv"
HELDOUT_FILE = DATA_DIR / "heldout.tsv"
UNSEEN_FILE = DATA_DIR / "unseen_chat.tsv"
UNSEEN_DEV_FILE = DATA_DIR / "unseen_dev.tsv"
UNSEEN_SHORT_FILE = DATA_DIR / "unseen_short.tsv"
SEED = 20261122
HELDOUT_TEMPLATE_EVERY = 5
HELDOUT_WORD_EVERY = 6
OBFUSCATE_SHARE = 0.22

VULGAR = re.compile(
    r"\b(fuck\w*|f\*ck\w*|shit\w*|bullshit|bitch\w*|asshole\w*|ass|dumbass|jackass|dick\w*|"
    r"cock\w*|pussy|cunt\w*|twat|prick|bastard\w*|motherfuck\w*|dipshit|douche\w*|tits|"
    r"boobs|bellend|goddamn|damn|crap|wtf|stfu|piss\w*|hella|ffs|shiiit|cum|jerking|jerk off|"
    r"horny|blowjob|nudes|slut\w*|whore\w*|fuckin|wank\w*)\b"
)


# ---------------------------------------------------------------------------------------------
# Chat style and obfuscation.
# ---------------------------------------------------------------------------------------------
_LEET = {"a": "4", "e": "3", "i": "1", "o": "0", "s": "5", "t": "7", "g": "9", "b": "8"}
_LEET_ALT = {"a": "@", "i": "!", "s": "$", "o": "0", "e": "3", "u": "v"}
_HOMOGLYPH = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "y": "у", "x": "х", "i": "і"}
_SLOT = re.compile(r"\{(\w+)\}")
_TOKEN = re.compile(r"[A-Za-z]{3,}")


@dataclass(frozen=True)
class Example:
    """One labelled line, with the template it came from (for the split)."""

    text: str
    labels: tuple[str, ...]
    template: str


def split_words(heldout: bool) -> dict[str, list[str]]:
    """Every HELDOUT_WORD_EVERY-th word of each list is held out; held-out lines may use all."""
    if heldout:
        return {k: list(v) for k, v in W.items()}
    return {
        k: [w for i, w in enumerate(v) if i % HELDOUT_WORD_EVERY != HELDOUT_WORD_EVERY - 1]
        for k, v in W.items()
    }


def fill(template: str, words: dict[str, list[str]], rng: random.Random) -> str:
    """`template` with each `{slot}` replaced by a word drawn from `words[slot]`."""
    return _SLOT.sub(lambda m: rng.choice(words[m.group(1)]), template)


def _typo(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
    if not idx:
        return text
    i = rng.choice(idx)
    w = words[i]
    j = rng.randrange(1, len(w) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        w = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    elif kind == 1:
        w = w[:j] + w[j + 1 :]
    else:
        w = w[:j] + w[j] + w[j:]
    words[i] = w
    return " ".join(words)


def chatify(text: str, rng: random.Random, words: dict[str, list[str]]) -> str:
    """Make a template line look like real chat: case, apostrophes, u/ur, typos, tails."""
    if rng.random() < 0.5:
        text = text.replace("'", "")
    if rng.random() < 0.3:
        text = re.sub(r"\byou're\b|\byoure\b", "ur", text)
        text = re.sub(r"\byour\b", "ur", text)
    if rng.random() < 0.25:
        text = re.sub(r"\byou\b", "u", text)
    if rng.random() < 0.1:
        text = re.sub(r"\bare\b", "r", text)
    if rng.random() < 0.12:
        text = _typo(text, rng)
    if rng.random() < 0.12:
        text = rng.choice(words["pre"]) + " " + text
    r = rng.random()
    if r < 0.12:
        text = text + " " + rng.choice(words["laugh"])
    elif r < 0.22:
        text = text + " " + rng.choice(words["emoji"])
    elif r < 0.28:
        text = text + rng.choice(["!", "!!", "?", "...", " !!!", ".", " fr", " ngl", " tbh"])
    r = rng.random()
    if r < 0.05:
        text = text.upper()
    elif r < 0.2:
        text = text[:1].upper() + text[1:]
    return text


def _obfuscate_word(word: str, rng: random.Random) -> str:
    kind = rng.randrange(7)
    low = word.lower()
    if kind == 0:  # leetspeak
        return "".join(_LEET[c] if c in _LEET and rng.random() < 0.7 else c for c in low)
    if kind == 1:  # alternative leet with symbols
        return "".join(_LEET_ALT[c] if c in _LEET_ALT and rng.random() < 0.6 else c for c in low)
    if kind == 2 and len(low) <= 7:  # spacing: "k y s"
        return " ".join(low)
    if kind == 3 and len(low) >= 3:  # asterisks: "f*ck", "id**t"
        inner = [i for i in range(1, len(low) - 1) if low[i] in "aeiou"] or [1]
        chars = list(low)
        for i in rng.sample(inner, k=min(len(inner), rng.choice([1, 1, 2]))):
            chars[i] = "*"
        return "".join(chars)
    if kind == 4:  # repeated letters: "fuuuuck"
        i = rng.randrange(len(low))
        return low[:i] + low[i] * rng.randrange(3, 7) + low[i + 1 :]
    if kind == 5:  # homoglyphs (Cyrillic lookalikes)
        return "".join(_HOMOGLYPH[c] if c in _HOMOGLYPH and rng.random() < 0.6 else c for c in low)
    return ".".join(low)  # dots: "k.y.s"


_SALIENT = re.compile(
    r"\b(kys|kill\w*|die|dead|yourself|hang|rope|neck|idiot|moron|loser|clown|trash|stupid|"
    r"dumb\w*|retard\w*|fat|ugly|hate|gay|muslims?|jews?|black|trans|immigrants?|women|"
    r"shoot|stab|murder|nudes|naked|sex|horny|suck|cunt|bitch|fuck\w*|shit\w*|ass\w*|dick|"
    r"cock|pussy|bastard|prick|twat|whore|slut|worthless|pathetic|disgusting|vermin)\b"
)


def obfuscate(text: str, rng: random.Random) -> str:
    """Disguise one or two words (the salient ones when there are any), labels unchanged."""
    spans = [m.span() for m in _SALIENT.finditer(text.lower())]
    if not spans:
        spans = [m.span() for m in _TOKEN.finditer(text)]
    if not spans:
        return text
    for start, end in sorted(rng.sample(spans, k=min(len(spans), rng.choice([1, 1, 2]))))[::-1]:
        text = text[:start] + _obfuscate_word(text[start:end], rng) + text[end:]
    return text


def _labels_for(text: str, labels: tuple[str, ...]) -> tuple[str, ...]:
    found = set(labels)
    if VULGAR.search(text.lower()):
        found.add("obscene")
    return tuple(label for label in LABELS if label in found)


def generate(seed: int = SEED) -> tuple[list[Example], list[Example]]:
    """Return (train, heldout): disjoint by template, by normalised text, and partly by word."""
    rng = random.Random(seed)
    train_words = split_words(heldout=False)
    all_words = split_words(heldout=True)
    train: dict[str, Example] = {}
    held: dict[str, Example] = {}
    for category, (count, templates) in CATEGORIES.items():
        per_template = max(1, round(count / len(templates)))
        for t_index, (template, labels) in enumerate(templates):
            is_held = t_index % HELDOUT_TEMPLATE_EVERY == HELDOUT_TEMPLATE_EVERY - 1
            words = all_words if is_held else train_words
            target = held if is_held else train
            made = 0
            for _ in range(per_template * 6):
                if made >= per_template:
                    break
                raw = fill(template, words, rng)
                line = chatify(raw, rng, words)
                if rng.random() < OBFUSCATE_SHARE:
                    line = obfuscate(line, rng)
                line = line.replace("\t", " ").strip()
                key = normalize_text(line).lower()
                if not key or key in train or key in held:
                    continue
                target[key] = Example(line, _labels_for(raw, labels), f"{category}/{t_index}")
                made += 1
    heldout = [ex for key, ex in held.items() if key not in train]
    train_list = list(train.values())
    rng.shuffle(train_list)
    rng.shuffle(heldout)
    return train_list, heldout


def write_tsv(path: Path, examples: Iterable[Example]) -> int:
    """Write `text<TAB>labels` lines; returns the count."""
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(f"{ex.text}\t{','.join(ex.labels)}\n")
            n += 1
    return n


def read_tsv(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """Read a corpus file: (raw text, labels). Unknown labels are an error."""
    rows: list[tuple[str, tuple[str, ...]]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        text, _, labels = line.partition("\t")
        parsed = tuple(label for label in labels.split(",") if label)
        unknown = set(parsed) - set(LABELS)
        if unknown:
            raise ValueError(f"{path}:{lineno}: unknown labels {sorted(unknown)}")
        rows.append((text, parsed))
    return rows


def label_matrix(rows: Sequence[tuple[str, tuple[str, ...]]]) -> list[list[float]]:
    """0/1 targets in LABELS order."""
    return [[1.0 if label in labels else 0.0 for label in LABELS] for _, labels in rows]


def main() -> None:
    """Regenerate models/data/train.tsv and heldout.tsv."""
    train, heldout = generate()
    n_train = write_tsv(TRAIN_FILE, train)
    n_held = write_tsv(HELDOUT_FILE, heldout)
    benign = sum(1 for ex in train if not (set(ex.labels) - {"obscene"}))
    print(f"train {n_train} lines ({benign} benign or profanity-only), heldout {n_held} lines")


if __name__ == "__main__":
    main()
