"""The benchmark's texts: chat lines from the load generator's corpus, seeded, the same everywhere.

The corpus (`loadgen/corpus/`) is separate from the model's training data. Every rung of the
ladder and every pipeline run draws from the same seeded sequence, so their ratios compare like
with like.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from loadgen.traffic import TrafficGenerator

SEED = 20261122


def bench_texts(n: int, *, dup_ratio: float = 0.0, seed: int = SEED) -> list[str]:
    """`n` chat lines with `dup_ratio` exact or near repeats (as the load generator makes them)."""
    gen = TrafficGenerator(run_id="bench", seed=seed, dup_ratio=dup_ratio, toxic_ratio=0.05)
    return [gen.next_text()[0] for _ in range(n)]


def key_repeat_share(keys: Sequence[Hashable]) -> float:
    """Share of lines whose key an earlier line had: with the token ids as keys, the most a
    score cache can skip (its key is a hash of the token ids), first occurrences being cold."""
    seen: set[Hashable] = set()
    repeats = 0
    for key in keys:
        repeats += key in seen
        seen.add(key)
    return repeats / len(keys) if keys else 0.0


def repeat_share(texts: list[str]) -> float:
    """Share of lines that exactly repeat an earlier one (what a cache keyed on text can hit)."""
    seen: set[str] = set()
    repeats = 0
    for text in texts:
        if text in seen:
            repeats += 1
        seen.add(text)
    return repeats / len(texts) if texts else 0.0
