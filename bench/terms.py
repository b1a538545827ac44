"""Deny-term matching speed at 10,000 terms: the packaged list plus made-up words.

A matcher is compiled once per policy change, then `find` runs on every message, so the figures
are the compile time and the per-line time over the benchmark's chat lines (no repeats).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from bench.texts import bench_texts
from moderator.policy.terms import Term, TermMatcher, default_terms

TERMS = 10_000
LINES = 3_000
ROUNDS = 3


def _made_up(rng: random.Random) -> str:
    """A made-up word standing in for a platform's own terms; `xq` keeps it off real words."""
    syllables = rng.randint(2, 4)
    return "xq" + "".join(
        rng.choice("bcdfghjklmnprstvz") + rng.choice("aeiou") for _ in range(syllables)
    )


def run_terms(n_terms: int = TERMS, n_lines: int = LINES) -> dict[str, Any]:
    rng = random.Random(7)
    terms = default_terms()
    packaged = len(terms)
    while len(terms) < n_terms:
        terms.append(Term(_made_up(rng), "made-up", "low"))
    started = time.perf_counter()
    matcher = TermMatcher(terms, allow=["kill la kill"])
    compile_s = time.perf_counter() - started
    lines = bench_texts(n_lines)
    per_line: list[float] = []
    matched = 0
    for _ in range(ROUNDS):
        for line in lines:
            t0 = time.perf_counter()
            found = matcher.find(line)
            per_line.append(time.perf_counter() - t0)
            matched += bool(found)
    per_line.sort()
    return {
        "terms": len(terms),
        "packaged_terms": packaged,
        "lines": len(lines),
        "mean_chars": statistics.mean(len(line) for line in lines),
        "compile_s": compile_s,
        "mean_us": 1e6 * statistics.mean(per_line),
        "p50_us": 1e6 * per_line[len(per_line) // 2],
        "p99_us": 1e6 * per_line[int(0.99 * len(per_line))],
        "lines_per_s": len(per_line) / sum(per_line),
        "matched_share": matched / len(per_line),
    }


if __name__ == "__main__":
    print(run_terms())
