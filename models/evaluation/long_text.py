"""Choose the default policy's `windows_raise` on dev: long benign chat against hostile lines in it.

A message longer than one window is read in several and a label's score is its highest over
them (moderator/decide/windows.py), so a long benign message is many chances for one window to
misfire: with the thresholds tuned on single lines, a tenth of long benign messages were
flagged. `windows_raise` (moderator/policy/long_text.py) raises every threshold with the number
of windows. It is chosen here on the dev split only, from two sets of texts made the way the
benchmark's probe makes its test texts (bench/windows.py --probe):

- long benign: chat-like dev lines the policy does not flag alone, joined by spaces to at least
  `LONG_CHARS` characters;
- padded hostile: each toxic dev line the policy flags alone, put at the start, in the middle
  or at the end of such padding.

The smallest raise on `GRID` that keeps long benign messages within `MAX_LONG_FLAG` wins (the
least change to what the windows catch); when none does, the one that flags fewest.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext
from models.lines import realdata

LONG_CHARS = 1_500
MAX_LONG_FLAG = 0.02  # long benign messages flagged (issue 39's goal)
GRID = tuple(round(0.05 * i, 2) for i in range(20))  # 0 .. 0.95
TEXTS = 300  # of each kind
CHAT_SAMPLE = 6_000  # chat-like dev lines drawn for padding (those the policy flags alone are not)
SEED = 20261127


def joined(lines: Sequence[str], chars: int, rng: random.Random) -> str:
    """Random lines joined by spaces until at least `chars` characters (the benchmark's probe
    pads its test texts with this too: bench/windows.py)."""
    parts: list[str] = []
    total = 0
    while total < chars:
        parts.append(rng.choice(lines))
        total += len(parts[-1]) + 1
    return " ".join(parts)


def dev_texts(flagged_alone: Any, lines: Sequence[realdata.Line]) -> tuple[list[str], list[str]]:
    """(long benign, padded hostile) dev texts; `flagged_alone(texts)` is the policy's verdict
    on single lines."""
    rng = random.Random(SEED)
    chat = [ln.text for ln in realdata.select(lines, "dev", realdata.CHAT_LIKE) if not ln.toxic]
    chat = rng.sample(chat, min(len(chat), CHAT_SAMPLE))
    quiet = [t for t, hot in zip(chat, flagged_alone(chat), strict=True) if not hot]
    pool = realdata.TOXIC + realdata.LABELLED
    toxic = [ln.text for ln in realdata.select(lines, "dev", pool) if ln.toxic]
    hostile = [t for t, hot in zip(toxic, flagged_alone(toxic), strict=True) if hot]
    hostile = rng.sample(hostile, min(len(hostile), TEXTS))
    benign = [joined(quiet, LONG_CHARS, rng) for _ in range(TEXTS)]
    padded = []
    for i, line in enumerate(hostile):
        pad = joined(quiet, LONG_CHARS, rng)
        cut = (0, pad.find(" ", len(pad) // 2), len(pad))[i % 3]
        padded.append(f"{pad[:cut]} {line} {pad[cut:]}".strip())
    return benign, padded


def window_maxima(model_dir: Path, texts: Sequence[str]) -> list[tuple[dict[str, float], int]]:
    """Each text's highest score per label over its windows, and how many windows it took."""
    from moderator.decide.classifier import Classifier
    from moderator.decide.windows import WindowScorer

    scorer = WindowScorer(Classifier(model_dir, threads=2))
    out = []
    for text in texts:
        windows = scorer.windows(text)
        scores = scorer.score_windows(windows).scores
        out.append((scorer.classifier.as_dict(scores), len(windows.ids)))
    return out


def flag_rate(policy: Any, maxima: Sequence[tuple[dict[str, float], int]], r: float) -> float:
    """Share of texts the policy flags with `windows_raise` = r."""
    from moderator.policy.long_text import discounted

    if not maxima:
        return float("nan")
    hits = [policy.decide(discounted(s, r, n)).action != "allow" for s, n in maxima]
    return float(np.mean(hits))


def choose(model_dir: Path, policy: Any) -> dict[str, Any]:
    """The raise for `policy` (thresholds tuned already) and what each raise on GRID does."""
    from moderator.decide.classifier import Classifier

    classifier = Classifier(model_dir, threads=2)

    def flagged_alone(texts: Sequence[str]) -> list[bool]:
        rows: npt.NDArray[np.float32] = realtext.batch_scores(classifier, texts)
        return [policy.decide(classifier.as_dict(row)).action != "allow" for row in rows]

    benign, padded = dev_texts(flagged_alone, realdata.load())
    long_benign, hostile = window_maxima(model_dir, benign), window_maxima(model_dir, padded)
    grid = [
        {"raise": r, "long_benign": flag_rate(policy, long_benign, r),
         "padded_hostile": flag_rate(policy, hostile, r)}
        for r in GRID
    ]  # fmt: skip
    within = [row for row in grid if row["long_benign"] <= MAX_LONG_FLAG]
    best = within[0] if within else min(grid, key=lambda row: row["long_benign"])
    return {
        "windows_raise": best["raise"],
        "dev_long_benign_flagged": best["long_benign"],
        "dev_padded_hostile_flagged": best["padded_hostile"],
        "dev_long_texts": len(long_benign),
        "dev_padded_texts": len(hostile),
        "max_long_flag": MAX_LONG_FLAG,
        "grid": grid,
    }


def _main(argv: Sequence[str] | None = None) -> int:
    from moderator.policy.rules import Policy

    parser = argparse.ArgumentParser(
        prog="python -m models.evaluation.long_text", description=__doc__
    )
    parser.add_argument("--model", type=Path, required=True, help="a built model directory")
    parser.add_argument("--policy", type=Path, default=None, help="default: the packaged one")
    args = parser.parse_args(argv)
    result = choose(args.model, Policy.load(args.policy))
    print("| windows_raise | long benign dev flagged | padded hostile dev flagged |")
    print("|---:|---:|---:|")
    for row in result["grid"]:
        print(f"| {row['raise']:.2f} | {row['long_benign']:.1%} | {row['padded_hostile']:.1%} |")
    print(f"\nchosen: {result['windows_raise']} ({result['dev_long_texts']} long benign,"
          f" {result['dev_padded_texts']} padded hostile dev texts)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(_main())
