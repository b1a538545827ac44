"""Deny/allow term matching: evasions that must match, innocent text that must not."""

from __future__ import annotations

import pytest

from moderator.errors import PolicyError
from moderator.policy.terms import (
    SEVERITIES,
    Term,
    TermMatcher,
    default_terms,
    deny_entries,
    words,
)

DENY = [
    Term(t, "test")
    for t in ("fuck", "ass", "bitch", "shit", "cunt", "dick", "kill yourself", "potato", "slur")
]
MATCHER = TermMatcher(DENY, allow=["kill la kill", "dickens"])

MUST_MATCH = [
    ("fuck", "fuck"),
    ("FUCK off", "fuck"),
    ("f u c k you", "fuck"),  # spaced apart
    ("f.u.c.k", "fuck"),  # punctuated apart
    ("f-u-c-k", "fuck"),
    ("f_u_c_k", "fuck"),
    ("s h i t", "shit"),
    ("fuuuuuck", "fuck"),  # repeated letters
    ("ffffuck", "fuck"),
    ("shiiiiit", "shit"),
    ("b1tch", "bitch"),  # leetspeak
    ("@ss", "ass"),
    ("a$$", "ass"),
    ("sh!t", "shit"),
    ("5h1t", "shit"),
    ("f*ck", "fuck"),  # a masked letter
    ("sh*t", "shit"),
    ("fu\u200bck", "fuck"),  # zero-width space
    ("f\u200du\u200cck", "fuck"),  # zero-width joiner and non-joiner
    ("ｆｕｃｋ", "fuck"),  # fullwidth
    ("𝐟𝐮𝐜𝐤", "fuck"),  # mathematical bold
    ("fսck", "fuck"),  # Armenian look-alike
    ("ƒuck", "fuck"),  # Latin f with hook
    ("сunt", "cunt"),  # Cyrillic с
    ("bіtch", "bitch"),  # Cyrillic і
    ("ρotato", "potato"),  # Greek rho
    ("fúck", "fuck"),  # an accent
    ("fucking", "fuck"),  # endings
    ("fucker", "fuck"),
    ("fuckers", "fuck"),
    ("shitty", "shit"),
    ("bitches", "bitch"),
    ("asses", "ass"),
    ("dicks", "dick"),
    ("kill yourself", "kill yourself"),  # more than one word
    ("kill    yourself!!", "kill yourself"),
    ("k1ll y0urself", "kill yourself"),
    ("kill. your.self", None),  # a word split apart is not a spaced-out word
    ("go kill-yourself", "kill yourself"),
    ("u are a b1tch!!!", "bitch"),
    ("what the fuck?", "fuck"),
    ("(shit)", "shit"),
    ("'potato'", "potato"),
    ("potatoes", "potato"),
]

MUST_NOT_MATCH = [
    "class",  # the Scunthorpe problem: a term inside an innocent word
    "assassin",
    "Scunthorpe",
    "cocktail",
    "shiitake",
    "therapist",
    "grape",
    "analysis",
    "Sussex and Essex",
    "hello there",
    "button",
    "assume nothing",
    "a bass guitar",
    "compass",
    "cumulative",
    "document",
    "Dickinson",
    "pass me the salt",
    "as far as i know",  # `as` is not `ass`: a repeat in a term must be in the text
    "i was at the bash",
    "2024 was great, gg 10/10",  # numbers are not leetspeak
    "score: 5318008",
    "what?!",
    "no way!!!",
    "i a m here",  # single letters joined make no term
    "привет, как дела",  # real Cyrillic text
    "Καλημέρα",  # real Greek text
    "kill the boss",
    "the shitake mushrooms",
    "sweet yam pie",
    "c|_|nt",  # two-character letters are beyond it
]

ALLOWED = [
    ("watching kill la kill tonight", []),
    ("Kill La Kill is the best", []),
    ("kill la kill, then kill yourself", ["kill yourself"]),  # only its own effect goes
    ("reading Dickens", []),
    ("reading dickens, you dick", ["dick"]),
]


@pytest.mark.parametrize(("text", "term"), MUST_MATCH)
def test_evasions_match(text: str, term: str | None) -> None:
    found = [m.term.term for m in MATCHER.find(text)]
    assert found == ([term] if term else [])


@pytest.mark.parametrize("text", MUST_NOT_MATCH)
def test_innocent_text_does_not_match(text: str) -> None:
    assert MATCHER.find(text) == []


@pytest.mark.parametrize(("text", "terms"), ALLOWED)
def test_an_allowed_phrase_takes_away_only_its_own_match(text: str, terms: list[str]) -> None:
    assert [m.term.term for m in MATCHER.find(text)] == terms


def test_the_table_is_large_enough() -> None:
    assert len(MUST_MATCH) + len(MUST_NOT_MATCH) + len(ALLOWED) >= 60


def test_a_match_spans_the_original_text() -> None:
    text = "well f.u.c.k that"
    (match,) = MATCHER.find(text)
    assert text[match.start : match.end] == "f.u.c.k"
    (match,) = MATCHER.find("oh fu\u200bck")
    assert (match.start, match.end) == (3, 8)


def test_without_allowed_cuts_the_phrase_out_and_keeps_the_rest() -> None:
    assert MATCHER.without_allowed("we love Kill La Kill, ok") == "we love             , ok"
    text = "nothing allowed here"
    assert MATCHER.without_allowed(text) is text
    plain = TermMatcher(DENY)
    assert plain.without_allowed("kill la kill") == "kill la kill"


def test_terms_of_less_than_two_letters_are_ignored() -> None:
    assert TermMatcher([Term("69", "x"), Term("a", "x")]).find("69 a g") == []


def test_the_packaged_list_has_every_severity_and_its_categories() -> None:
    terms = default_terms()
    assert len(terms) > 1500
    assert {t.severity for t in terms} == set(SEVERITIES)
    assert {t.source for t in terms} == {"default"}
    categories = {t.category for t in terms}
    assert {"racial / ethnic slurs", "sexual anatomy / sexual acts"} <= categories
    assert len(categories) >= 8
    matcher = TermMatcher(terms)
    assert [m.term.severity for m in matcher.find("you f*cking c.u.n.t")] == ["medium", "high"]
    assert matcher.find("a classic assassin from Scunthorpe") == []


# -- how a token becomes words: each rule at its edges, in the ASCII and the Unicode pass ------

WORDS = [
    ("a!b", [("aib", 0, 3)]),  # `!` between two letters is an `i`
    ("5!t", [("sit", 0, 3)]),  # ... and between a leet digit and a letter
    ("!ab", [("ab", 1, 3)]),  # not at a token's start (nothing before it)
    ("ab!", [("ab", 0, 2)]),  # nor at its end
    ("k1ll!", [("kill", 0, 4)]),
    ("b!!ch", [("b", 0, 1), ("ch", 3, 5)]),  # two marks are punctuation, not one letter
    ("a|b", [("alb", 0, 3)]),
    ("|ab", [("ab", 1, 3)]),
    ("a*b", [("a?b", 0, 3)]),  # a mask between letters is one unknown letter
    ("a#b", [("a?b", 0, 3)]),
    ("*ab", [("ab", 1, 3)]),
    ("ab*", [("ab", 0, 2)]),
    ("2024", []),  # a plain number holds no letters
    ("x2024", [("xoa", 0, 5)]),  # a word with a letter reads its digits as letters
    ("a b", [("a", 0, 1), ("b", 2, 3)]),  # two single letters stay apart
    ("a b c", [("abc", 0, 5)]),  # three are one word spelled apart
    ("ab cd ef", [("ab", 0, 2), ("cd", 3, 5), ("ef", 6, 8)]),
    ("ü!x", [("uix", 0, 3)]),  # the Unicode pass keeps the same rules
    ("¡ab", [("ab", 1, 3)]),
    ("ab¡", [("ab", 0, 2)]),
]


@pytest.mark.parametrize(("text", "expected"), WORDS)
def test_a_token_becomes_words(text: str, expected: list[tuple[str, int, int]]) -> None:
    assert [tuple(w) for w in words(text)] == expected


def test_leet_always_reads_a_term_without_letters() -> None:
    assert words("@55") == []
    assert [tuple(w) for w in words("@55", leet_always=True)] == [("ass", 0, 3)]


def test_a_two_letter_term_a_three_word_term_and_a_masked_word_match() -> None:
    matcher = TermMatcher([Term("fk", "x"), Term("go kill yourself", "x"), Term("pot ato", "x")])
    found = matcher.find("fk, just go kill yourself")
    assert [(m.term.term, m.start, m.end) for m in found] == [
        ("fk", 0, 2),
        ("go kill yourself", 9, 25),
    ]
    assert [m.term.term for m in matcher.find("f* that")] == []  # a mask needs a letter after it
    assert [m.term.term for m in matcher.find("p*t ato")] == []  # only one-word terms are masked
    assert [m.term.term for m in TermMatcher([Term("potato", "x")]).find("p*t*to")] == ["potato"]


def test_an_allowed_phrase_without_words_is_ignored() -> None:
    matcher = TermMatcher([Term("ass", "x")], allow=["!!!", "   "])
    assert matcher.without_allowed("hello there") == "hello there"
    assert [m.term.term for m in matcher.find("hello ass")] == ["ass"]


ACTIONS = ("allow", "nudge", "review", "block")


def test_deny_entries_fill_in_what_an_entry_leaves_out() -> None:
    terms = deny_entries(
        ["potato", {"term": "yam", "category": "veg", "action": "nudge", "severity": "low"}],
        ACTIONS,
        "deny",
    )
    assert terms == [
        Term("potato", "custom", "high", "block", "policy"),
        Term("yam", "veg", "low", "nudge", "policy"),
    ]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("potato", "deny must be a list of {term, category, action} tables"),
        ([3], r"deny\[0\] may only set term, category, action, severity"),
        (["ok", {"term": "x", "colour": "red"}], r"deny\[1\] may only set"),
        ([{"category": "x"}], r"deny\[0\]\.term must be a non-empty string"),
        ([{"term": 3}], r"deny\[0\]\.term must be a non-empty string"),
        (
            [{"term": "x", "action": "allow"}],
            r"deny\[0\]\.action: 'allow' is not one of nudge, review, block",
        ),
        ([{"term": "x", "action": "warn"}], r"deny\[0\]\.action: 'warn'"),
        ([{"term": "x", "category": 3}], r"deny\[0\]: category is a string, severity one of"),
        ([{"term": "x", "severity": "extreme"}], r"deny\[0\]: category is a string"),
    ],
)
def test_deny_entries_name_what_is_wrong(entries: object, message: str) -> None:
    with pytest.raises(PolicyError, match=f"^{message}"):
        deny_entries(entries, ACTIONS, "deny")
