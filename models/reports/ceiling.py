"""How far a threshold alone can carry a model on the hateful and threatening test lines.

Issue 27 asks for hateful caught >= 85% and real threats caught >= 85% while ordinary chat
stays under 1% flagged and neutral statements about groups under 5%. A policy can only move
thresholds, so this module asks the question a policy cannot dodge: with one threshold on the
highest acting score, chosen *on the test split itself* (an oracle no build may use), how much
of each hateful and threatening source is caught within those benign limits, and what would
catching 85% cost? It also shows how much of the trainable sources' train lines a model that
trained on them fits, which tells a capacity or label-noise limit apart from one of missing
training data.

A figure here is an upper bound for the model as it stands, never a tuned result: the tuner
(`models.evaluation.realtext.tune`) works on the dev split only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext
from models.files import MODELS_DIR
from models.lines import realdata
from models.lines.realdata import Line

CEILING_FILE = MODELS_DIR / "CEILING.md"
CHAT_LIMIT = 0.01  # benign chat-like flagged
GROUP_LIMIT = 0.05  # neutral statements about groups flagged
WANT = 0.85  # hateful / threats caught
Scores = npt.NDArray[np.float32]


def _caught(scores: Scores, t: float) -> float:
    return float(np.mean(scores >= t)) if len(scores) else float("nan")


def oracle_threshold(benign: Scores, neutral: Scores) -> float:
    """The lowest threshold at which both benign pools stay within their limits."""
    for t in np.unique(np.concatenate([benign, neutral, [np.float32(1.0)]])):
        groups_ok = not len(neutral) or _caught(neutral, t) <= GROUP_LIMIT
        if _caught(benign, t) <= CHAT_LIMIT and groups_ok:
            return float(t)
    return float("inf")


def threshold_for(hostile: Scores, share: float = WANT) -> float:
    """The highest threshold that still catches `share` of the hostile lines."""
    if not len(hostile):
        return float("nan")
    return float(np.sort(hostile)[::-1][max(0, int(np.ceil(share * len(hostile))) - 1)])


def pools(lines: Sequence[Line], trained: Collection[str] = ()) -> dict[str, list[Line]]:
    """Test pools by role, and the hateful train-split lines of the sources a build may train
    on, named by whether this model (`trained`: its manifest's sources) did."""
    test = [ln for ln in lines if ln.split == "test"]
    out: dict[str, list[Line]] = {
        "benign chat-like": [ln for ln in test if ln.source in realdata.CHAT_LIKE and not ln.toxic],
        "neutral about groups": realdata.group_neutral(test, "test"),
    }
    for family in (realdata.HATE, realdata.THREAT):
        for name in realdata.LABELLED:
            mine = [ln for ln in test if ln.source == name and ln.family == family]
            if mine:
                out[f"{family}: {name}"] = mine
        out[f"{family}: pooled"] = [  # the fixed pools, comparable with earlier builds
            ln for ln in test if ln.source in realdata.FIXED and ln.family == family
        ]
    for name in realdata.LABELLED:
        if name in realdata.EVAL_ONLY:
            continue
        fit = [
            ln
            for ln in lines
            if ln.split == "train" and ln.source == name and ln.family == realdata.HATE
        ]
        if fit:
            seen = "trained on" if name in trained else "never trained on by this model"
            out[f"train split: {name} hateful ({seen})"] = fit
    return out


def measure(
    score: Callable[[Sequence[str]], Scores], lines: Sequence[Line], trained: Collection[str] = ()
) -> dict[str, Any]:
    """One model's scores on every pool, the oracle threshold and what it catches."""
    by_pool = {name: score([ln.text for ln in ps]) for name, ps in pools(lines, trained).items()}
    benign, neutral = by_pool["benign chat-like"], by_pool["neutral about groups"]
    t = oracle_threshold(benign, neutral)
    t_chat = oracle_threshold(benign, np.zeros(0, np.float32))
    rows = {}
    for name, s in by_pool.items():
        need = threshold_for(s)
        rows[name] = {
            "lines": len(s),
            "caught_at_oracle": _caught(s, t),
            "caught_chat_limit_only": _caught(s, t_chat),
            "auc_vs_chat": realtext.auc(s, benign),
            "auc_vs_groups": realtext.auc(s, neutral),
            "for_85": need,
            "chat_flagged_for_85": _caught(benign, need),
            "groups_flagged_for_85": _caught(neutral, need),
        }
    return {"threshold": t, "threshold_chat_only": t_chat, "rows": rows}


def model_score(model_dir: Path) -> Callable[[Sequence[str]], Scores]:
    """The highest acting label's score (every label but `obscene`), as the policy sees it."""
    from moderator.decide.classifier import Classifier

    classifier = Classifier(model_dir, threads=2)
    acting = [j for j, label in enumerate(classifier.labels) if label != "obscene"]

    def score(texts: Sequence[str]) -> Scores:
        if not texts:
            return np.zeros(0, np.float32)
        m = realtext.batch_scores(classifier, texts)
        return np.asarray(m[:, acting].max(axis=1), dtype=np.float32)

    return score


PROBE_NAME = "linear probe on frozen all-MiniLM-L6-v2, every source's train and dev lines"
PROBE_BENIGN_CAP = 8000  # chat-like benign train/dev lines the probe learns from


def probe_score(lines: Sequence[Line]) -> Callable[[Sequence[str]], Scores]:
    """A logistic regression on the pretrained encoder's mean-pooled embeddings, trained on the
    train and dev splits of every labelled source, the evaluation-only ones included (hateful
    and threatening lines against their benign ones) and on chat-like benign lines: what the
    encoder could tell apart with every source's own lines to learn from. A measurement only:
    it never ships, and it sees no test line."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from models.training import train

    encoder = train.build_module(1)
    encoder.eval()

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        ids = train.encode_texts(texts)
        out = np.zeros((len(ids), encoder.head.in_features), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with torch.no_grad():
            for start in range(0, len(order), 64):
                rows = order[start : start + 64]
                x, m = train.pad(ids, rows)
                out[rows] = encoder.pooled(x, m).numpy()
        return out

    learn = [ln for ln in lines if ln.split in ("train", "dev")]
    hostile = [ln for ln in learn if ln.source in realdata.LABELLED
               and ln.family in (realdata.HATE, realdata.THREAT)]  # fmt: skip
    benign = [ln for ln in learn if ln.source in realdata.LABELLED and not ln.toxic]
    chat = [ln for ln in learn if ln.source in realdata.CHAT_LIKE and not ln.toxic]
    chat = chat[:PROBE_BENIGN_CAP]
    texts = [ln.text for ln in (*hostile, *benign, *chat)]
    y = np.asarray([1] * len(hostile) + [0] * (len(benign) + len(chat)))
    model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    model.fit(embed(texts), y)

    def score(texts: Sequence[str]) -> Scores:
        if not texts:
            return np.zeros(0, np.float32)
        return np.asarray(model.predict_proba(embed(texts))[:, 1], dtype=np.float32)

    return score


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.1%}"


def render(results: dict[str, dict[str, Any]], seconds: float) -> str:
    out = [
        "# What a threshold alone can reach on hateful and threatening text",
        "",
        "Generated by `python -m models ceiling` (models/reports/ceiling.py); do not edit by hand.",
        "",
        "Score: the highest acting label (every label but `obscene`). Oracle threshold: the"
        f" lowest at which benign chat-like test lines stay <= {CHAT_LIMIT:.0%} flagged and"
        f" neutral statements about groups <= {GROUP_LIMIT:.0%}, **picked on the test split"
        " itself**: an upper bound for any policy on this model, not a tuned result. 'For"
        f" {WANT:.0%}': the threshold that would catch {WANT:.0%} of the row's lines, and what it"
        " would flag of the two benign pools. 'Chat limit alone': caught at the lowest"
        " threshold that keeps benign chat alone within its limit, which shows which limit"
        " binds. The `train split` rows are the hateful train lines of the sources a build"
        " trains on (Davidson et al., ToxiGen): for a model that trained on them (its manifest"
        " says), one that cannot catch what it was fit to is limited by capacity or by labels"
        " that contradict each other, not by missing data.",
        "",
    ]
    for model, r in results.items():
        out += [f"## {model}", ""]
        if model == PROBE_NAME:
            out += [
                "Not a model we ship: a logistic regression (class weights balanced) on the"
                " pretrained encoder's mean-pooled embeddings, learnt from the train and dev"
                " splits of every labelled source, the evaluation-only ones (ETHOS, Stormfront)"
                " included, and from chat-like benign lines; OpenAI's set has no train or dev"
                " split, so it stays unseen. It asks what the encoder's features could separate"
                " with each source's own lines to learn from. Its scores and threshold are its"
                " own.",
                "",
            ]
        out += [
            f"Oracle threshold: {r['threshold']:.4f} (with the chat limit alone:"
            f" {r['threshold_chat_only']:.4f})",
            "",
            "| pool (test split unless named) | lines | caught at oracle | chat limit alone"
            " | AUC vs chat | AUC vs groups | for 85%: threshold | chat flagged | groups flagged |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, row in r["rows"].items():
            out.append(
                f"| {name} | {row['lines']} | {_pct(row['caught_at_oracle'])}"
                f" | {_pct(row['caught_chat_limit_only'])}"
                f" | {row['auc_vs_chat']:.3f} | {row['auc_vs_groups']:.3f}"
                f" | {row['for_85']:.4f} | {_pct(row['chat_flagged_for_85'])}"
                f" | {_pct(row['groups_flagged_for_85'])} |"
            )
        out.append("")
    out.append(f"Took {seconds:.0f} s.")
    return "\n".join(out) + "\n"


def model_name(model_dir: Path) -> tuple[str, set[str]]:
    """`name@version` from the model's manifest, and the real sources it was trained on."""
    m = json.loads((model_dir / "manifest.json").read_text())
    trained = set(m.get("training", {}).get("real_by_source") or {})
    return f"{m['name']}@{m['version']}", trained


def run(
    models: Sequence[Path],
    out: Path = CEILING_FILE,
    progress: Callable[[str], None] = print,
    *,
    probe: bool = False,
) -> dict[str, dict[str, Any]]:
    """Score the pools with every model in `models` (and the linear probe), write the report."""
    t0 = time.perf_counter()
    lines = realdata.load()
    results = {}
    for path in models:
        name, trained = model_name(path)
        progress(f"scoring the pools with {name} ({path})")
        results[name] = measure(model_score(path), lines, trained)
    if probe:
        progress(f"training and scoring the {PROBE_NAME}")
        results[PROBE_NAME] = measure(probe_score(lines), lines, ("davidson", "toxigen"))
    out.write_text(render(results, time.perf_counter() - t0))
    return results
