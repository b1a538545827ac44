"""Two model directories' CPU per message at batch 1, paired: `python -m bench.model_ab A B`.

Each round scores the same load-generator lines one message per call (tokenizing included, the
moderator's intra-op threads) with A, then B, then B, then A, so drift in the host's load falls
on both; the ratio of each round's sums is reported, with its spread over rounds. For a model
change (a requantized graph, a rebuild) against the one it replaces, on one host.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.goodput import BARE_TEXTS, bare_model_ms
from bench.texts import bench_texts
from loadgen.machine import machine_label
from moderator.config import Settings


def paired_ms(
    a: Path, b: Path, threads: int, texts: Sequence[str], rounds: int
) -> tuple[float, float, list[float]]:
    """A's and B's CPU-ms per message over `rounds` rounds of A, B, B, A (a drift in the host's
    load falls on both), and each round's B / A."""
    sums = {"a": 0.0, "b": 0.0}
    ratios: list[float] = []
    for _ in range(rounds):
        a1 = bare_model_ms(a, threads, texts)
        b1 = bare_model_ms(b, threads, texts)
        b2 = bare_model_ms(b, threads, texts)
        a2 = bare_model_ms(a, threads, texts)
        sums["a"] += a1 + a2
        sums["b"] += b1 + b2
        ratios.append((b1 + b2) / (a1 + a2))
    n = 2 * rounds
    return sums["a"] / n, sums["b"] / n, ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_ab", description=__doc__)
    p.add_argument("a", type=Path, help="the model directory compared against (the old one)")
    p.add_argument("b", type=Path, help="the model directory measured (the new one)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--texts", type=int, default=BARE_TEXTS)
    args = p.parse_args(argv)
    texts = bench_texts(args.texts)
    threads = Settings().threads
    a_ms, b_ms, ratios = paired_ms(args.a, args.b, threads, texts, args.rounds)
    per_call, _ = Settings(threads=threads).scoring_layout
    print(f"host: {machine_label()}; {per_call} intra-op thread(s) a call; {len(texts)} lines")
    print(f"A {args.a}: {a_ms:.3f} CPU-ms/msg")
    print(f"B {args.b}: {b_ms:.3f} CPU-ms/msg")
    ratio = statistics.median(ratios)
    print(
        f"B / A: {ratio:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f});"
        f" B uses {100 * abs(1 - ratio):.1f}% {'less' if ratio <= 1 else 'more'} CPU per message"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
