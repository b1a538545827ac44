"""How far the synthetic held-out split and real text pull apart, measured on weight mixes.

The template-only recipe (models/training/train.py with no real lines) scores best on the
synthetic held-out split and flags about one chat message in six; the shipped recipe meets the
real-text targets and scores lower on the synthetic split. Both start from the same pretrained
encoder, so their weights can be mixed, w = a * shipped + (1 - a) * template-only (Wortsman et
al. 2022, "Robust fine-tuning of zero-shot models"), which traces the models in between without
training each one. Every mix gets its policy tuned on the real dev split exactly as the build
tunes the shipped model's (models/evaluation/tuning.py limits), then is measured on the
synthetic held-out split and the real test splits. `moderator model tradeoff` writes TRADEOFF.md.

Scores are the fp32 torch module's (no export per mix); the shipped int8 graph is within a point.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext, tuning
from models.files import MODELS_DIR
from models.lines import corpus, realdata
from models.training import train
from models.training.metrics import f1_counts

TRADEOFF_FILE = MODELS_DIR / "TRADEOFF.md"
ALPHAS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.0)
SYNTHETIC_F1_TARGET = 0.886  # the template-only model's flagged F1 before real text came in
RTP_TARGET = 0.8


def mix(shipped: Mapping[str, Any], template: Mapping[str, Any], a: float) -> dict[str, Any]:
    """a * shipped + (1 - a) * template for float tensors; integer buffers from `shipped`."""
    return {
        k: a * v + (1 - a) * template[k] if v.is_floating_point() else v for k, v in shipped.items()
    }


def _flag_f1(flags: npt.NDArray[np.bool_], gold: npt.NDArray[np.bool_]) -> dict[str, float]:
    out = f1_counts(flags, gold)
    out["benign_flagged"] = float(flags[~gold].mean()) if (~gold).any() else 0.0
    return out


def measure(
    scores: Mapping[str, npt.NDArray[np.float32]], synthetic_gold: npt.NDArray[np.float32]
) -> dict[str, Any]:
    """Tune on the dev scores, then the synthetic and real test figures under that policy.

    `scores` holds matrices for "synthetic", "dev_benign", "dev_toxic", "test_benign",
    "test_toxic" and "test_rtp" (and "dev_groups", held to the build's group limit, when
    present), and `synthetic_gold` the synthetic lines' 0/1 labels (columns
    in corpus.LABELS order).
    """
    labels = corpus.LABELS
    tuned = tuning.tune_within_limits(
        scores["dev_benign"], scores["dev_toxic"], labels, scores.get("dev_groups")
    )
    table = tuned["table"]
    syn_flag, _ = realtext.flag_block(scores["synthetic"], labels, table)
    benign_flag, benign_block = realtext.flag_block(scores["test_benign"], labels, table)
    flagged_gold = np.asarray(synthetic_gold[:, list(corpus.ACTING)].any(axis=1))
    return {
        "nudge": tuned["nudge"],
        "block": tuned["block"],
        "limits_met": tuned["limits_met"],
        "synthetic": _flag_f1(syn_flag, flagged_gold),
        "synthetic_f1_at_half": train.selection_score(scores["synthetic"], synthetic_gold)[
            "flag_f1"
        ],
        "test_benign_flagged": realtext.rate(benign_flag),
        "test_benign_blocked": realtext.rate(benign_block),
        "test_toxic_flagged": realtext.rate(
            realtext.flag_block(scores["test_toxic"], labels, table)[0]
        ),
        "test_rtp_flagged": realtext.rate(
            realtext.flag_block(scores["test_rtp"], labels, table)[0]
        ),
    }


def _texts() -> tuple[dict[str, list[str]], npt.NDArray[np.float32]]:
    held = corpus.read_tsv(corpus.HELDOUT_FILE)
    lines = realdata.load()

    def pick(split: str, names: Sequence[str], toxic: bool) -> list[str]:
        return [ln.text for ln in realdata.select(lines, split, names) if ln.toxic == toxic]

    texts = {
        "synthetic": [t for t, _ in held],
        "dev_benign": pick("dev", realdata.CHAT_LIKE, False),
        "dev_toxic": pick("dev", realdata.TOXIC + realdata.LABELLED, True),
        "dev_groups": [ln.text for ln in realdata.group_neutral(lines, "dev")],
        "test_benign": pick("test", realdata.CHAT_LIKE, False),
        "test_toxic": pick("test", realdata.TOXIC, True),
        "test_rtp": pick("test", ("rtp_scored",), True),
    }
    return texts, np.asarray(corpus.label_matrix(held), dtype=np.float32)


def run(
    weights: Path,
    out: Path = TRADEOFF_FILE,
    alphas: Sequence[float] = ALPHAS,
    progress: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Train the template-only model, measure every mix with `weights`, write the report."""
    import torch

    t0 = time.perf_counter()
    progress("training the template-only model (models/training/train.py without real lines)")
    template = train.train((), train.TrainConfig(template_toxic_repeat=1), progress=progress)
    template_state = {k: v.detach().clone() for k, v in template.module.state_dict().items()}
    shipped_state = torch.load(weights, map_location="cpu")
    texts, gold = _texts()
    ids = {name: train.encode_texts(t) for name, t in texts.items()}
    module = template.module
    rows = []
    for a in alphas:
        module.load_state_dict(mix(shipped_state, template_state, a))
        row = measure({name: train.predict(module, i) for name, i in ids.items()}, gold)
        row["alpha"] = a
        rows.append(row)
        progress(
            f"  a={a:.2f}: synthetic F1 {row['synthetic']['f1']:.3f},"
            f" chat-like flagged {row['test_benign_flagged']:.2%},"
            f" rtp flagged {row['test_rtp_flagged']:.1%}"
        )
    out.write_text(
        render(rows, {k: len(v) for k, v in texts.items()}, weights, time.perf_counter() - t0)
    )
    return rows


def _meets(row: Mapping[str, Any]) -> str:
    missed = []
    if row["synthetic"]["f1"] < SYNTHETIC_F1_TARGET:
        missed.append("synthetic F1")
    if row["test_benign_flagged"] > 0.01 or row["test_benign_blocked"] > 0.002:
        missed.append("chat-like")
    if row["test_rtp_flagged"] < RTP_TARGET:
        missed.append("toxic")
    return "all" if not missed else "misses " + ", ".join(missed)


def render(
    rows: Sequence[Mapping[str, Any]], sizes: Mapping[str, int], weights: Path, seconds: float
) -> str:
    """TRADEOFF.md: one row per mix, the issue's targets in the last column."""
    out = [
        "# Synthetic held-out split vs real text: the trade-off, measured",
        "",
        "Generated by `moderator model tradeoff` (models/reports/tradeoff.py); do not edit by"
        " hand.",
        "",
        f"Each row mixes the weights of the shipped recipe (`{weights.name}`, a = 1) and of the"
        " template-only recipe (a = 0, the model before real text came in), w = a * shipped +"
        " (1 - a) * template-only, tunes the mix's default policy on the real dev split with the"
        " build's limits (at most"
        f" {tuning.MAX_FLAG:.1%} of {sizes['dev_benign']} chat-like dev lines flagged, at most"
        f" {tuning.MAX_REVIEW:.1%} sent to review, at most {tuning.MAX_BLOCK:.1%} blocked, then"
        f" the most of {sizes['dev_toxic']} real toxic dev lines caught, grey zones included),"
        " and measures it under that policy. Targets: synthetic flagged F1 >="
        f" {SYNTHETIC_F1_TARGET}; chat-like test ({sizes['test_benign']} lines) flagged <= 1%"
        f" and blocked <= 0.2%; real toxic web snippets (rtp_scored, {sizes['test_rtp']} lines)"
        f" flagged >= {RTP_TARGET:.0%}. Scores are the fp32 torch module's.",
        "",
        "| a | tuned nudge / block | synthetic flagged F1 (P / R) | synthetic benign flagged"
        " | synthetic F1 at 0.5 | chat-like flagged / blocked | rtp_scored flagged"
        " | all real toxic flagged | targets |",
        "|---:|---|---|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        s = r["synthetic"]
        limits = "" if r["limits_met"] else " (limits not met)"
        out.append(
            f"| {r['alpha']:.2f} | {r['nudge']:g} / {r['block']:g}{limits}"
            f" | {s['f1']:.3f} ({s['precision']:.3f} / {s['recall']:.3f})"
            f" | {s['benign_flagged']:.1%} | {r['synthetic_f1_at_half']:.3f}"
            f" | {r['test_benign_flagged']:.2%} / {r['test_benign_blocked']:.2%}"
            f" | {r['test_rtp_flagged']:.1%} | {r['test_toxic_flagged']:.1%} | {_meets(r)} |"
        )
    meeting = sum(_meets(r) == "all" for r in rows)
    out += [
        "",
        "How to read it: the tuned thresholds are whatever keeps ordinary chat under the limits,"
        " so a mix that scores ordinary chat higher gets higher thresholds and then misses real"
        " toxic text; where the synthetic F1 at 0.5 rises and the tuned one does not, that is"
        f" what happened. {meeting} of {len(rows)} mixes meet every target.",
        "",
        f"Took {seconds:.0f} s (template-only training included).",
    ]
    return "\n".join(out) + "\n"
