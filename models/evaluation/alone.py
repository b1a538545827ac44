"""What an encoder learns of stance from the stance data alone: issue 39's ceiling for its recipe.

Every stance build mixes the contrast sources into the whole recipe (real chat, teachers,
templates), and none came near issue 39's goals. This asks whether the mixture or the encoder
holds it back: the encoder is fine-tuned (the build's optimiser, schedule and frozen word table,
`models.training.train.train_finetune`) with one output on one task's train lines and nothing
else, the epoch with the best dev AUC is kept, the threshold is chosen on dev as issue 39's goal
reads, and the figures are the test split's. A task's model is judged only on its own task, so
each figure is an upper bound for what the shared recipe could reach with that encoder, not a
model we could ship (it has never seen chat).

- `hatemoji`: HatemojiBuild, hate and threats against not hate (the pairs split as the build
  splits them); the threshold with the best dev F1. Goal: test F1 >= 0.75.
- `hatexplain`: HateXplain's hatespeech against normal (offensive left out, as the build leaves
  it); the lowest threshold with dev normal flagged <= 15%. Goal: hate caught >= 80%.
- `groups`: the hateful train lines of every trained source against every neutral or normal
  train line about groups that they hold (GROUP_NEUTRAL, HateXplain's normal, SBIC's not
  offensive); judged as issue 39 judges it, the fixed labelled test lines' hate against the
  test split's group-neutral lines (Stormfront, ETHOS and OpenAI's are never trained on by any
  build). The lowest threshold with dev group-neutral flagged <= 5%. Goals: AUC pooled >= 0.85,
  Stormfront >= 0.78, each other >= 0.90; hateful caught >= 60%.

`--model DIR` judges a built model the same way (its highest acting label, as the service
scores a line, thresholds chosen the same way on dev), for a like-for-like row. Pools under
1,000 lines get a bootstrap 95% interval.

`--task cold_zh` (and the other non-English labelled sources, `LANGUAGES`) asks the same of
issue 40's bar: hostile caught with benign flagged <= 3%, on one language's real labelled text.

    python -m models.evaluation.alone --encoder minilm --encoder e5 [--model DIR] [--epochs N]
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext
from models.evaluation.stance import SEED, Decided, f1, interval
from models.lines import realdata
from models.lines.realdata import Line

EPOCHS = 3
Floats = npt.NDArray[np.float64]
Scorer = Callable[[Sequence[Line]], Floats]


@dataclass(frozen=True)
class Task:
    """Lines to learn and judge, and how the threshold is read from dev."""

    name: str
    positive: Callable[[Line], bool]
    negative: Callable[[Line], bool]
    rule: str  # "f1": the best dev F1; else the lowest threshold with dev negatives <= `limit`
    limit: float = 0.0
    # the test positives reported apart (name -> lines), beside the whole pool
    parts: Callable[[Line], str | None] = lambda line: None
    # a second threshold reported: the lowest with these dev negatives flagged <= `held_at`
    held: Callable[[Line], bool] | None = None
    held_at: float = 0.0

    def pool(self, lines: Sequence[Line], split: str) -> tuple[list[Line], list[Line]]:
        """(positives, negatives) of one split."""
        lines = [ln for ln in lines if ln.split == split]
        return [ln for ln in lines if self.positive(ln)], [ln for ln in lines if self.negative(ln)]


def _neutral(line: Line) -> bool:
    return (line.source, line.family) in realdata.GROUP_NEUTRAL


def _group_hate(line: Line) -> bool:
    """Train: every trained source's hate; dev and test: the fixed sources', as issue 39 judges."""
    sources = realdata.TRAINED if line.split == "train" else realdata.FIXED
    return line.family == realdata.HATE and line.source in sources


TALK = frozenset({("hatexplain", "normal"), ("sbic", "not_offensive")})


def _group_talk(line: Line) -> bool:
    """The group-neutral lines; in train also the other stance sources' harmless posts."""
    return _neutral(line) or (line.split == "train" and (line.source, line.family) in TALK)


TASKS = {
    "hatemoji": Task(
        "hatemoji",
        lambda ln: ln.source == "hatemoji" and ln.toxic,
        lambda ln: ln.source == "hatemoji" and not ln.toxic,
        "f1",
        # the shipped policy must hold these (the pair names a group) to issue 39's 5%
        held=_neutral,
        held_at=0.05,
    ),
    "hatexplain": Task(
        "hatexplain",
        lambda ln: ln.source == "hatexplain" and ln.family == realdata.HATE,
        lambda ln: ln.source == "hatexplain" and ln.family == "normal",
        "fpr",
        0.15,
    ),
    "groups": Task("groups", _group_hate, _group_talk, "fpr", 0.05, lambda ln: ln.source),
}
# Issue 40's bar per language, on the non-English labelled sources (e5 only): hostile against
# not hostile, the lowest threshold with dev benign flagged <= 3%. Asked for by name.
LANGUAGES = ("cold_zh", "gahd_de", "germeval_de", "mlma_ar", "mlma_fr", "trac_hi")


def _language(source: str) -> Task:
    return Task(
        source,
        lambda ln: ln.source == source and ln.toxic,
        lambda ln: ln.source == source and not ln.toxic,
        "fpr",
        0.03,
    )


TASKS.update({source: _language(source) for source in LANGUAGES})
DEFAULT_TASKS = ("hatemoji", "hatexplain", "groups")


def threshold(task: Task, positive: Floats, negative: Floats, limit: float | None = None) -> float:
    """The task's threshold on dev scores (a line is flagged at score >= threshold); with
    `limit`, the lowest that flags at most that share of `negative`, whatever the task's rule."""
    candidates = np.unique(np.concatenate([positive, negative]))
    if task.rule == "f1" and limit is None:
        gold = np.concatenate([np.ones(len(positive), bool), np.zeros(len(negative), bool)])
        scores = np.concatenate([positive, negative])
        return float(max(candidates, key=lambda t: f1(scores >= t, gold)))
    share = task.limit if limit is None else limit
    allowed = [t for t in candidates if np.mean(negative >= t) <= share]
    return float(min(allowed)) if allowed else float("inf")


def _f1_interval(flags: npt.NDArray[np.bool_], gold: npt.NDArray[np.bool_]) -> str:
    if len(gold) >= 1_000:
        return ""
    rng = np.random.default_rng(SEED)
    draws = []
    for _ in range(1_000):
        rows = rng.integers(0, len(gold), len(gold))
        draws.append(f1(flags[rows], gold[rows]))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return f" [{lo:.3f}, {hi:.3f}]"


def judge(task: Task, lines: Sequence[Line], score: Scorer) -> list[str]:
    """Figure lines of one model on one task: dev threshold, test figures."""
    dev_pos, dev_neg = task.pool(lines, "dev")
    dev_scores = score(dev_pos), score(dev_neg)
    t = threshold(task, *dev_scores)
    test_pos, test_neg = task.pool(lines, "test")
    pos, neg = score(test_pos), score(test_neg)
    out = [
        f"threshold {t:.4f} (dev: {len(dev_pos):,} positive, {len(dev_neg):,} negative);"
        f" test {len(pos):,} positive, {len(neg):,} negative",
        f"AUC {realtext.auc(pos, neg):.3f}",
        *_at(task, t, pos, neg),
    ]
    names = sorted({n for ln in test_pos if (n := task.parts(ln)) is not None})
    for name in names:
        rows = np.asarray([task.parts(ln) == name for ln in test_pos])
        caught = pos[rows] >= t
        out.append(
            f"  {name}: {int(rows.sum()):,} lines, AUC {realtext.auc(pos[rows], neg):.3f},"
            f" caught {caught.mean():.1%}{interval(caught)}"
        )
    if task.held is not None:
        held = np.asarray([task.held(ln) for ln in dev_neg])
        t = threshold(task, dev_scores[0], dev_scores[1][held], task.held_at)
        out.append(
            f"at {t:.4f}, the lowest with {held.sum():,} dev lines held to {task.held_at:.0%}:"
        )
        out += [f"  {row}" for row in _at(task, t, pos, neg)]
        kept = np.asarray([task.held(ln) for ln in test_neg])
        flagged = neg[kept] >= t
        out.append(
            f"  of them in test ({kept.sum():,}) flagged {flagged.mean():.1%}{interval(flagged)}"
        )
    return out


def _at(task: Task, t: float, pos: Floats, neg: Floats) -> list[str]:
    """F1 (for an F1 task), caught and flagged at threshold `t`."""
    caught, flagged = pos >= t, neg >= t
    out = []
    if task.rule == "f1":
        gold = np.concatenate([np.ones(len(pos), bool), np.zeros(len(neg), bool)])
        both = np.concatenate([caught, flagged])
        out.append(f"F1 {f1(both, gold):.3f}{_f1_interval(both, gold)}")
    out.append(f"caught {caught.mean():.1%}{interval(caught)}")
    out.append(f"negatives flagged {flagged.mean():.1%}{interval(flagged)}")
    return out


def fine_tuned(
    task: Task, lines: Sequence[Line], encoder: str, bf16: bool, epochs: int = EPOCHS
) -> tuple[Scorer, str]:
    """The encoder fine-tuned on the task's train lines alone; the epoch with the best dev AUC."""
    import torch

    from models.training import train

    positive, negative = task.pool(lines, "train")
    texts = [ln.text for ln in positive + negative]
    targets = torch.tensor([[1.0]] * len(positive) + [[0.0]] * len(negative))
    ids = train.encode_texts(texts, train.TRAIN_MAX_LENGTH, encoder)
    dev_pos, dev_neg = task.pool(lines, "dev")
    dev_ids = train.encode_texts([ln.text for ln in dev_pos + dev_neg], encoder=encoder)
    best: dict[str, Any] = {"auc": -1.0}
    by_epoch: list[str] = []

    def after_epoch(epoch: int, module: Any) -> None:
        scores = train.predict(module, dev_ids)[:, 0].astype(np.float64)
        auc = realtext.auc(scores[: len(dev_pos)], scores[len(dev_pos) :])
        by_epoch.append(f"{auc:.3f}")
        if auc > best["auc"]:
            best.update(auc=auc, epoch=epoch, state=copy.deepcopy(module.state_dict()))

    cfg = train.TrainConfig(epochs=epochs, encoder=encoder, bf16=bf16)
    started = time.perf_counter()
    module = train.train_finetune(ids, targets, cfg, logging.getLogger(__name__).info,
                                  after_epoch=after_epoch)  # fmt: skip
    module.load_state_dict(best["state"])
    seconds = time.perf_counter() - started
    cache: dict[str, float] = {}

    def score(pool: Sequence[Line]) -> Floats:
        missing = sorted({ln.text for ln in pool} - cache.keys())
        if missing:
            got = train.predict(module, train.encode_texts(missing, encoder=encoder))[:, 0]
            cache.update(zip(missing, got.tolist(), strict=True))
        return np.asarray([cache[ln.text] for ln in pool], dtype=np.float64)

    about = (
        f"{len(positive):,} positive and {len(negative):,} negative train lines, {epochs} epochs"
        f" in {seconds:.0f} s; dev AUC by epoch {', '.join(by_epoch)}: epoch {best['epoch']} kept"
    )
    return score, about


def built(model: Path, task: Task, lines: Sequence[Line]) -> Scorer:
    """A built model's highest acting score of each line, as the service reads it."""
    judged = [ln for split in ("dev", "test") for pool in task.pool(lines, split) for ln in pool]
    return Decided(model, None, judged).scores


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.evaluation.alone", description=__doc__)
    parser.add_argument("--encoder", action="append", default=[], choices=("minilm", "e5"))
    parser.add_argument("--model", type=Path, action="append", default=[], help="a built model")
    parser.add_argument("--task", action="append", choices=sorted(TASKS), default=[])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"default {EPOCHS}")
    parser.add_argument("--bf16", action="store_true", help="train in bfloat16 (avx512_bf16)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    lines = realdata.load() + realdata.multilingual_lines()
    for name in args.task or DEFAULT_TASKS:
        task = TASKS[name]
        for model in args.model:
            print(f"## {name}: built model {model}", *judge(task, lines, built(model, task, lines)),
                  sep="\n", flush=True)  # fmt: skip
        for encoder in args.encoder:
            score, about = fine_tuned(task, lines, encoder, args.bf16, args.epochs)
            print(f"## {name}: {encoder} fine-tuned on it alone ({about})",
                  *judge(task, lines, score), sep="\n", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
