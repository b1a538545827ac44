"""Deny and allow terms, matched the way users spell them to get past filters.

The text and every term are reduced to the same skeleton: NFKC, zero-width and other format
characters dropped, lower case, look-alike letters from other scripts folded to Latin, leetspeak
read as letters inside words (`b1tch`, `@ss`, `sh!t`, but never in a plain number), and runs of
three or more single letters joined (`f u c k`, `f.u.c.k`). Matching is by whole words, so an
innocent word that contains a term (`class`, `assassin`, `Scunthorpe`) never matches: each word
(and each run of up to as many words as the longest term has) is looked up once in a dict keyed
by its letters with repeats collapsed (`fuuuck` finds `fuck`; `as` does not find `ass`, a repeat
in a term must be there in the text), also with a common ending cut off (`-s`, `-ing`, `-er`). A
`*` or `#` between letters stands for one letter (`f*ck`). Pure: no I/O beyond reading the
packaged list. A matcher reads a plain string, or a text whose words are made already (`Worded`,
moderator/decide/text.py), so a message's words are made once for its allowed phrases and deny
terms.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple, Protocol

from moderator.errors import PolicyError
from moderator.normalize import fold_lookalikes

SEVERITIES = ("low", "medium", "high")
DEFAULT_LIST = "default_terms.csv"

# Read as letters anywhere in a word that has a letter; `!` and `|` only between two letters
# (else "kill yourself!" would end in an `i`).
_LEET = dict(zip("01345789@$€£", "oieastbgasel", strict=True))
_LEET_BETWEEN = {"!": "i", "|": "l"}
_MASKS = frozenset("*#")  # one unknown letter, between letters
_WILD = "?"
# Endings a term may carry and still match (collapsed: `-tty` of `shitty` is `-ty` → `-y`).
_SUFFIXES = ("s", "es", "ed", "er", "ers", "ing", "in", "y", "ies", "z", "a", "as")
_TOKEN = re.compile(r"\S+")
_SUFFIX_ENDS = frozenset(x[-1] for x in _SUFFIXES)
_JOIN_AT = 3  # this many single letters in a row are one word spelled apart


@dataclass(frozen=True)
class Term:
    """One deny-list entry."""

    term: str  # as written: "potato", "kill yourself"
    category: str
    severity: str = "high"  # one of SEVERITIES
    action: str | None = None  # what it does; None: the policy decides
    source: str = "policy"  # "policy" (its own list) or "default" (the packaged one)


class Match(NamedTuple):
    """A deny term found in a text, with its span in the original text."""

    term: Term
    start: int
    end: int


class Word(NamedTuple):
    """One word of a text as terms are matched against it."""

    letters: str  # the skeleton of one word (may hold `?` for a masked letter)
    start: int  # span in the original text
    end: int


class Worded(Protocol):
    """A text whose words are made once for every matcher that reads them
    (moderator/decide/text.py)."""

    @property
    def raw(self) -> str: ...

    @property
    def words(self) -> Sequence[Word]: ...


def _words_of(text: str | Worded) -> Sequence[Word]:
    return words(text) if isinstance(text, str) else text.words


def _fold(ch: str) -> str:
    """One character's skeleton: NFKC, lower case, look-alikes folded; "" to drop it."""
    if ch.isascii():
        return ch.lower()
    if unicodedata.category(ch) in ("Cf", "Cc", "Mn"):  # zero-width, controls, accents
        return ""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", ch).lower())
    return fold_lookalikes("".join(c for c in folded if unicodedata.category(c) != "Mn"))


def words(text: str, *, leet_always: bool = False) -> list[Word]:
    """The words of `text` as skeletons with their original spans, single letters spelled
    apart joined. `leet_always`: read `4`, `@`, ... as letters even in a word without one (a
    term like `@55`)."""
    out: list[Word] = []
    if text.isascii():  # the common case: plain words need no character-by-character pass
        for tok in _TOKEN.finditer(text):
            word = tok.group(0)
            if word.isalpha():
                out.append(Word(word.lower(), tok.start(), tok.end()))
            else:
                start = tok.start()
                chars = [(c, start + k) for k, c in enumerate(word.lower())]
                out.extend(_token_words(chars, leet_always))
        return _join_spelled_apart(out)
    folded = [(c, i) for i, ch in enumerate(text) for c in _fold(ch)]
    n, i = len(folded), 0
    while i < n:  # one whitespace-separated token at a time
        if folded[i][0].isspace():
            i += 1
            continue
        j = i
        while j < n and not folded[j][0].isspace():
            j += 1
        out.extend(_token_words(folded[i:j], leet_always))
        i = j
    return _join_spelled_apart(out)


def _token_words(token: Sequence[tuple[str, int]], leet_always: bool) -> list[Word]:
    has_letter = leet_always or any(c.isalpha() for c, _ in token)
    letters: list[tuple[str, int]] = []
    for k, (c, i) in enumerate(token):
        if c.isalpha():
            letters.append((c, i))
            continue
        before = k > 0 and (token[k - 1][0].isalpha() or token[k - 1][0] in _LEET)
        after = k + 1 < len(token) and (token[k + 1][0].isalpha() or token[k + 1][0] in _LEET)
        if has_letter and c in _LEET:
            letters.append((_LEET[c], i))
        elif (before and after) and c in _LEET_BETWEEN:
            letters.append((_LEET_BETWEEN[c], i))
        elif (before and after) and c in _MASKS:
            letters.append((_WILD, i))
        else:
            letters.append((" ", i))  # punctuation splits the token into words
    out: list[Word] = []
    run: list[tuple[str, int]] = []
    for c, i in [*letters, (" ", -1)]:
        if c != " ":
            run.append((c, i))
        elif run:
            out.append(Word("".join(x for x, _ in run), run[0][1], run[-1][1] + 1))
            run = []
    return out


def _join_spelled_apart(ws: list[Word]) -> list[Word]:
    out: list[Word] = []
    i = 0
    while i < len(ws):
        j = i
        while j < len(ws) and len(ws[j].letters) == 1:
            j += 1
        if j - i >= _JOIN_AT:
            out.append(Word("".join(w.letters for w in ws[i:j]), ws[i].start, ws[j - 1].end))
            i = j
        else:
            out.append(ws[i])
            i += 1
    return out


def _shape(letters: str) -> tuple[str, tuple[int, ...]]:
    """Letters with repeats collapsed, and each run's length."""
    runs = [(ch, len(list(group))) for ch, group in itertools.groupby(letters)]
    return "".join(ch for ch, _ in runs), tuple(n for _, n in runs)


def _covers(have: Sequence[int], need: Sequence[int]) -> bool:
    return len(have) >= len(need) and all(h >= n for h, n in zip(have, need, strict=False))


class TermMatcher:
    """Deny terms and allow phrases, compiled once; `find` and `without_allowed` per text."""

    def __init__(self, deny: Iterable[Term], allow: Iterable[str] = ()) -> None:
        # key: the collapsed words joined by spaces → (repeat counts per word, term)
        self._deny: dict[str, list[tuple[tuple[tuple[int, ...], ...], Term]]] = {}
        self._masked: dict[int, list[tuple[str, Term]]] = {}  # one-word terms by length
        self._longest = 1
        self._starts: set[str] = set()  # first words of the terms of more than one word
        for term in deny:
            ws = words(term.term, leet_always=True)
            shapes = [_shape(w.letters) for w in ws]
            if not ws or sum(len(w.letters) for w in ws) < 2:  # "69" is no word to match
                continue
            if len(ws) > 1:
                self._starts.add(shapes[0][0])
            key = " ".join(s[0] for s in shapes)
            self._deny.setdefault(key, []).append((tuple(s[1] for s in shapes), term))
            self._longest = max(self._longest, len(ws))
            if len(ws) == 1:
                self._masked.setdefault(len(ws[0].letters), []).append((ws[0].letters, term))
        self._allow = [
            tuple(_shape(w.letters)[0] for w in words(a, leet_always=True)) for a in allow
        ]
        self._allow = [a for a in self._allow if a]

    def find(self, text: str | Worded) -> list[Match]:
        """Deny terms in `text`, in text order, except those inside an allowed phrase."""
        ws = _words_of(text)
        shapes = [_shape(w.letters) for w in ws]
        allowed = self._allowed_spans(shapes)
        found: list[Match] = []
        for i in range(len(ws)):
            longest = min(self._longest, len(ws) - i) if shapes[i][0] in self._starts else 1
            for n in range(1, longest + 1):
                if allowed and any(a <= i and i + n <= b for a, b in allowed):
                    continue
                term = self._lookup(ws[i : i + n], shapes[i : i + n])
                if term is not None:
                    found.append(Match(term, ws[i].start, ws[i + n - 1].end))
        return found

    def without_allowed(self, text: str | Worded) -> str:
        """`text` with each allowed phrase blanked by spaces (the same object if none): the same
        length, so character offsets stay the text's, and the same tokens (normalisation folds
        a run of spaces into one)."""
        raw = text if isinstance(text, str) else text.raw
        if not self._allow:
            return raw
        ws = _words_of(text)
        spans = self._allowed_spans([_shape(w.letters) for w in ws])
        if not spans:
            return raw
        out, last = [], 0
        for a, b in spans:
            out += [raw[last : ws[a].start], " " * (ws[b - 1].end - ws[a].start)]
            last = ws[b - 1].end
        return "".join(out) + raw[last:]

    def _allowed_spans(self, shapes: Sequence[tuple[str, Any]]) -> list[tuple[int, int]]:
        """(first word, past the last word) of each allowed phrase in the text."""
        keys = [s[0] for s in shapes]
        spans = [
            (i, i + len(phrase))
            for phrase in self._allow
            for i in range(len(keys) - len(phrase) + 1)
            if tuple(keys[i : i + len(phrase)]) == phrase
        ]
        return sorted(spans)

    def _lookup(
        self, ws: Sequence[Word], shapes: Sequence[tuple[str, tuple[int, ...]]]
    ) -> Term | None:
        head = [s[0] for s in shapes[:-1]]
        last, counts = shapes[-1]
        candidates = [(last, counts)]
        if last[-1:] in _SUFFIX_ENDS:
            for suffix in _SUFFIXES:  # the last word with a common ending cut off
                keep = len(last) - len(suffix)
                if keep >= 2 and last.endswith(suffix):
                    candidates.append((last[:keep], counts[:keep]))
        for key_last, key_counts in candidates:
            entries = self._deny.get(" ".join([*head, key_last]))
            for need, term in entries or ():
                have = (*(s[1] for s in shapes[:-1]), key_counts)
                if all(_covers(h, n) for h, n in zip(have, need, strict=True)):
                    return term
        if len(ws) == 1 and _WILD in ws[0].letters:
            pattern = re.compile(re.escape(ws[0].letters).replace(r"\?", "."))
            for letters, term in self._masked.get(len(ws[0].letters), ()):
                if pattern.fullmatch(letters):
                    return term
        return None


@functools.cache
def _packaged() -> tuple[Term, ...]:
    text = resources.files("moderator").joinpath(DEFAULT_LIST).read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return tuple(Term(r["term"], r["category"], r["severity"], None, "default") for r in rows)


def default_terms() -> list[Term]:
    """The packaged list (`default_terms.csv`: Surge AI's profanity list, THIRD_PARTY.md)."""
    return list(_packaged())


# A policy's own deny list and its mapping of the packaged terms' severities
# (moderator/policy/rules.py reads both; `actions` is always the policy's actions, `allow` first).
DENY_KEYS = frozenset({"term", "category", "action", "severity"})  # of one deny entry


def deny_entries(entries: object, actions: Sequence[str], where: str) -> list[Term]:
    """The policy's own deny entries (a term alone, or a table), each checked."""
    if not isinstance(entries, list):
        raise PolicyError(f"{where} must be a list of {{term, category, action}} tables")
    terms = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"term": entry}
        if not isinstance(entry, Mapping) or set(entry) - DENY_KEYS:
            raise PolicyError(f"{where}[{i}] may only set term, category, action, severity")
        term, action = entry.get("term"), entry.get("action", actions[-1])
        category, level = entry.get("category", "custom"), entry.get("severity", "high")
        if not isinstance(term, str) or not term.strip():
            raise PolicyError(f"{where}[{i}].term must be a non-empty string")
        if action not in actions or action == actions[0]:
            raise PolicyError(
                f"{where}[{i}].action: {action!r} is not one of {', '.join(actions[1:])}"
            )
        if not isinstance(category, str) or level not in SEVERITIES:
            raise PolicyError(f"{where}[{i}]: category is a string, severity one of {SEVERITIES}")
        terms.append(Term(term, category, level, action, "policy"))
    return terms


def default_term_entries(table: object, actions: Sequence[str], where: str) -> list[Term]:
    """The packaged list's terms whose severity the policy maps to an action."""
    if not isinstance(table, Mapping) or set(table) - set(SEVERITIES):
        raise PolicyError(f"{where} may only map {', '.join(SEVERITIES)} to an action")
    for key, action in table.items():
        if action not in actions:
            raise PolicyError(f"{where}.{key}: {action!r} is not one of {', '.join(actions)}")
    wanted = {k: v for k, v in table.items() if v != actions[0]}
    if not wanted:
        return []
    return [
        dataclasses.replace(t, action=wanted[t.severity])
        for t in default_terms()
        if t.severity in wanted
    ]
