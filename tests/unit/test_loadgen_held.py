"""Held lines: new every time, and named by the language gate as a language the model does not
read, which the default policy holds for review."""

from __future__ import annotations

from collections import Counter

from loadgen.held import TEMPLATES, held_text
from loadgen.traffic import Kind, TrafficGenerator
from moderator.decide.language import LanguageGate
from moderator.normalize import normalize_text
from moderator.policy.rules import read_spec


def test_every_held_line_is_new_even_after_normalising() -> None:
    lines = [held_text(n) for n in range(20 * len(TEMPLATES))]
    assert len({normalize_text(line) for line in lines}) == len(lines)


def test_the_gate_names_every_held_line_and_the_default_policy_reviews_that() -> None:
    gate = LanguageGate()
    named = Counter(gate.detect(held_text(n)) for n in range(3 * len(TEMPLATES)))
    assert None not in named, "each one named as a language the model does not read"
    assert read_spec()["unsupported_language"] == "review"


def test_held_lines_come_at_their_share_and_are_never_repeated() -> None:
    gen = TrafficGenerator(run_id="t", seed=3, dup_ratio=0.5, held_ratio=0.2)
    texts = [gen.next_text() for _ in range(2000)]
    held = [(text, repeat) for text, kind, repeat in texts if kind is Kind.HELD]
    assert 300 < len(held) < 500
    assert not any(repeat for _, repeat in held)
    assert len({text for text, _ in held}) == len(held)
    others = {text for text, kind, _ in texts if kind is not Kind.HELD}
    assert not others & {text for text, _ in held}, "no other line repeats a held one"
