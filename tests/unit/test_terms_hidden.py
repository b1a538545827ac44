"""Deny terms hidden by characters that read as nothing or as two letters, and terms written in
leetspeak by whoever wrote the policy (moderator/policy/terms.py). The main evasions list is
tests/unit/test_terms.py."""

from __future__ import annotations

import pytest

from moderator.policy.terms import Term, TermMatcher

MATCHER = TermMatcher([Term(t, "test") for t in ("waffle", "fish", "potato", "455")])


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("pot\x85ato", "potato"),  # a control character (NEL) inside
        ("po\x9ftato", "potato"),
        ("wa\ufb04e", "waffle"),  # the ffl ligature
        ("\ufb01sh", "fish"),  # the fi ligature
        ("ass", "455"),  # a term written in leetspeak matches the word it spells
    ],
)
def test_a_hidden_term_is_found(text: str, term: str) -> None:
    assert [m.term.term for m in MATCHER.find(text)] == [term]


def test_the_span_of_a_term_with_a_ligature_covers_the_characters_written() -> None:
    [found] = MATCHER.find("no wa\ufb04e here")
    assert (found.start, found.end) == (3, 7)
