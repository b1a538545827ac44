"""Issue 39's figures on the test split: stance, threats and the chat it must leave alone.

Every line is decided as the service decides it (`moderator.decide.screen.decide_texts`: the
windows, the language gate and the policy with its `windows_raise`), so a figure here is what a
chat platform would see; `flagged` is any action but `allow`. The score behind an AUC is the
highest acting label (every label but `obscene`), as the policy reads it. Pools under 1,000
lines get a bootstrap 95% interval (resampled `BOOTSTRAP` times, lines drawn with replacement).

    python -m models.evaluation.stance --model DIR [--policy FILE]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext
from models.lines import realdata
from models.lines.realdata import Line

BOOTSTRAP = 1_000
SEED = 20261127
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]


def interval(values: Bools | Floats, stat: Callable[[Any], float] = np.mean) -> str:
    """` [lo, hi]`: a bootstrap 95% interval of `stat`, for a pool under 1,000 lines."""
    if len(values) >= 1_000 or not len(values):
        return ""
    rng = np.random.default_rng(SEED)
    draws = [stat(values[rng.integers(0, len(values), len(values))]) for _ in range(BOOTSTRAP)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return f" [{lo:.1%}, {hi:.1%}]"


def f1(flagged: Bools, gold: Bools) -> float:
    tp = float(np.sum(flagged & gold))
    denom = float(np.sum(flagged) + np.sum(gold))
    return 2 * tp / denom if denom else float("nan")


class Decided:
    """Each test line's flag and highest acting score, decided once."""

    def __init__(self, model_dir: Path, policy_file: Path | None, lines: Sequence[Line]) -> None:
        from moderator.decide.classifier import Classifier
        from moderator.decide.language import LanguageGate
        from moderator.decide.screen import Reader, decide_texts
        from moderator.policy.rules import ALLOW, Policy

        reader = Reader(Classifier(model_dir, threads=2), gate=LanguageGate())
        policy = Policy.load(policy_file)
        acting = [label for label in reader.classifier.labels if label != "obscene"]
        self.flag: dict[str, bool] = {}
        self.score: dict[str, float] = {}
        texts = sorted({ln.text for ln in lines})
        for i in range(0, len(texts), 256):
            chunk = texts[i : i + 256]
            for text, judged in zip(chunk, decide_texts(reader, policy, chunk), strict=True):
                self.flag[text] = judged.ruling.action != ALLOW
                self.score[text] = max((judged.scores.get(k, 0.0) for k in acting), default=0.0)

    def flags(self, lines: Sequence[Line]) -> Bools:
        return np.asarray([self.flag[ln.text] for ln in lines], dtype=bool)

    def scores(self, lines: Sequence[Line]) -> Floats:
        return np.asarray([self.score[ln.text] for ln in lines], dtype=np.float64)


def _pick(lines: Sequence[Line], sources: Sequence[str], families: Sequence[str]) -> list[Line]:
    return [ln for ln in lines if ln.source in sources and ln.family in families]


def figures(decided: Decided, test: Sequence[Line]) -> list[str]:
    """The rows of the figures table, as Markdown."""
    rows = []

    def rate(name: str, pool: Sequence[Line], goal: str) -> None:
        flags = decided.flags(pool)
        rows.append(f"| {name} | {len(pool):,} | {flags.mean():.1%}{interval(flags)} | {goal} |")

    emoji = _pick(test, ("hatemoji",), ("hate", "threat", "neutral", "not_hate"))
    gold = np.asarray([ln.toxic for ln in emoji])
    flags = decided.flags(emoji)
    rows.append(
        f"| HatemojiBuild test: F1 (hate) | {len(emoji):,} | {f1(flags, gold):.3f}"
        f" (hate caught {flags[gold].mean():.1%}, not hate flagged {flags[~gold].mean():.1%})"
        " | >= 0.75 |"
    )
    rate("HateXplain test: hatespeech caught", _pick(test, ("hatexplain",), ("hate",)), ">= 80%")
    rate("HateXplain test: normal flagged", _pick(test, ("hatexplain",), ("normal",)), "<= 15%")
    rate("SBIC test: offensive at a group caught", _pick(test, ("sbic",), ("hate",)), "report")
    rate("SBIC test: not offensive flagged", _pick(test, ("sbic",), ("not_offensive",)), "report")
    neutral = [ln for ln in test if (ln.source, ln.family) in realdata.GROUP_NEUTRAL]
    negatives = decided.scores(neutral)
    for name in (*realdata.FIXED, "pooled"):
        sources = realdata.FIXED if name == "pooled" else (name,)
        hate = _pick(test, sources, (realdata.HATE,))
        if not hate:
            continue
        goal = {"pooled": ">= 0.85 (stretch 0.90)", "stormfront": ">= 0.78"}.get(name, ">= 0.90")
        auc = realtext.auc(decided.scores(hate), negatives)
        rows.append(f"| AUC hate vs group-neutral: {name} | {len(hate):,} | {auc:.3f} | {goal} |")
    rate("fixed hateful caught (policy)", _pick(test, realdata.FIXED, (realdata.HATE,)), ">= 60%")
    rate("group-neutral negatives flagged (policy)", neutral, "<= 5%")
    rate("held-out threats caught", _pick(test, realdata.FIXED, (realdata.THREAT,)), ">= 60%")
    chat = [ln for ln in test if ln.source in realdata.CHAT_LIKE and not ln.toxic]
    rate("real chat-like test lines flagged", chat, "<= 1%")
    return rows


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.evaluation.stance", description=__doc__)
    parser.add_argument("--model", type=Path, required=True, help="a built model directory")
    parser.add_argument("--policy", type=Path, default=None, help="default: the packaged one")
    parser.add_argument(
        "--chat", type=int, default=0, help="chat-like test lines drawn (default 0: all 22k)"
    )
    args = parser.parse_args(argv)
    test = [ln for ln in realdata.load() if ln.split == "test"]
    chat = [ln for ln in test if ln.source in realdata.CHAT_LIKE and not ln.toxic]
    if args.chat:
        chat = random.Random(SEED).sample(chat, min(args.chat, len(chat)))
    wanted = [ln for ln in test if ln.source in realdata.LABELLED] + chat
    decided = Decided(args.model, args.policy, wanted)
    print("| figure (test split) | lines | value [95% interval under 1,000 lines] | goal |")
    print("|---|---:|---|---|")
    print("\n".join(figures(decided, wanted)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
