"""Evaluate a model directory: every figure that models/REPORT.md states and the manifest keeps.

Everything the report states is measured here, by one command (`python -m models evaluate`;
`models.reports.publish` writes it down): per-label and per-action precision/recall/F1 on the
synthetic held-out split, the real test splits and the identity probe side by side with the
teachers, int8 vs fp32 agreement, sizes, latency at several lengths and thread counts, and
tables of hand-written unseen chat.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import suite
from models.evaluation.realtext import Decide
from models.export import onnx_export
from models.lines import corpus
from models.training.metrics import f1_counts
from moderator.decide.classifier import Classifier
from moderator.policy.rules import DEFAULT_ACTIONS, Policy

logger = logging.getLogger(__name__)

ACTIONS = DEFAULT_ACTIONS  # the report speaks of the default policy's actions
LATENCY_LENGTHS = (8, 16, 32, 64, 128)
LATENCY_THREADS = (1, 2)
CANDIDATE_MAX_LENGTH = 128  # tokens, of the graphs compared before their manifest is written


def load_policy() -> tuple[Decide, str]:
    """The runtime's packaged default policy: the report judges what the runtime would do."""
    policy = Policy.load()
    decide: Decide = policy.decide
    return decide, f"moderator/default_policy.toml ({policy.ident})"


@dataclass(frozen=True)
class ScoreMatrix:
    """Scores of one model on a list of lines, as {label: score} rows and a matrix."""

    matrix: npt.NDArray[np.float32]
    labels: tuple[str, ...]

    def row(self, i: int) -> dict[str, float]:
        return {label: float(self.matrix[i, j]) for j, label in enumerate(self.labels)}


def score_each(classifier: Classifier, texts: Sequence[str]) -> ScoreMatrix:
    """Batch of one per line, through the runtime's `Classifier`: exactly what the service does
    for a lone message."""
    out = np.zeros((len(texts), len(classifier.labels)), dtype=np.float32)
    for i, ids in enumerate(classifier.encode(texts)):
        out[i] = classifier.score_ids([ids])[0]
    return ScoreMatrix(out, classifier.labels)


def _label_metrics(scored: ScoreMatrix, gold_rows: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    per: dict[str, dict[str, float]] = {}
    for j, label in enumerate(scored.labels):
        gold = np.asarray([label in g for g in gold_rows])
        if not gold.any():
            continue
        per[label] = f1_counts(scored.matrix[:, j] >= 0.5, gold)
    return per


def _actions(decide: Decide, rows: Sequence[Mapping[str, float]]) -> list[str]:
    return [decide(r)[0] for r in rows]


def gold_actions(decide: Decide, gold_rows: Sequence[tuple[str, ...]]) -> list[str]:
    """The policy applied to 0/1 gold labels."""
    return _actions(decide, [{label: 1.0 for label in g} for g in gold_rows])


def _action_metrics(pred: Sequence[str], gold: Sequence[str]) -> dict[str, Any]:
    p = np.asarray(pred)
    g = np.asarray(gold)
    # Gold actions are the policy on 0/1 labels, so a grey-zone action (`review`) is never gold:
    # the macro-F1 averages the actions the gold has, and the table shows those predicted too.
    shown = [a for a in ACTIONS if (g == a).any() or (p == a).any()]
    per = {a: f1_counts(p == a, g == a) for a in shown}
    flagged = f1_counts(p != "allow", g != "allow")
    benign = g == "allow"
    return {
        "per_action": per,
        "macro_f1": float(np.mean([per[a]["f1"] for a in shown if (g == a).any()] or [0.0])),
        "flagged": flagged,
        "accuracy": float(np.mean(p == g)),
        "benign_flag_rate": float(np.mean(p[benign] != "allow")) if benign.any() else 0.0,
        "benign_block_rate": float(np.mean(p[benign] == "block")) if benign.any() else 0.0,
    }


def measure_latency(
    model_dir: Path,
    paths: Mapping[str, Path],
    lengths: Sequence[int],
    threads: Sequence[int],
    runs: int,
) -> dict[str, dict[str, dict[str, float]]]:
    """Median ms per message, batch 1, for each model x threads x length, scored as the service
    scores (the runtime's `Classifier`, its threads not spinning).

    Rounds interleave every configuration, so load from other processes on a shared machine
    spreads over all of them instead of skewing whichever ran during a busy moment.
    """
    rng = np.random.default_rng(0)
    inputs = {}
    for length in lengths:
        ids = np.concatenate([[101], rng.integers(1000, 29000, length - 2), [102]])
        inputs[length] = [ids.astype(np.int64)]
    models = {
        (kind, t): onnx_export.classifier(model_dir, path, threads=t)
        for kind, path in paths.items()
        for t in threads
    }
    times: dict[tuple[str, int, int], list[float]] = {}
    for (kind, t), model in models.items():
        for length, batch in inputs.items():
            for _ in range(3):  # warm-up
                model.score_ids(batch)
            times[(kind, t, length)] = []
    per_round = 5
    for _ in range(max(1, runs // per_round)):
        for (kind, t), model in models.items():
            for length, batch in inputs.items():
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    model.score_ids(batch)
                    times[(kind, t, length)].append((time.perf_counter() - t0) * 1000)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (kind, t, length), values in times.items():
        out.setdefault(kind, {}).setdefault(str(t), {})[str(length)] = round(
            statistics.median(values), 2
        )
    return out


def read_unseen(path: Path = corpus.UNSEEN_FILE) -> list[tuple[str, str, str]]:
    """(text, expected action, kind) rows of the hand-written unseen chat file."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        text, expected, kind = line.split("\t")
        rows.append((text, expected, kind))
    return rows


def evaluate(model_dir: Path, *, latency_runs: int = 40) -> dict[str, Any]:
    """Measure everything; returns the metrics dict (also the manifest's "metrics")."""
    manifest = json.loads((model_dir / onnx_export.MANIFEST_FILE).read_text())
    int8_path = model_dir / onnx_export.MODEL_FILE
    fp32_path = model_dir / manifest.get("fp32_model", onnx_export.FP32_FILE)
    decide, policy_source = load_policy()

    held = corpus.read_tsv(corpus.HELDOUT_FILE)
    texts = [t for t, _ in held]
    gold_rows = [g for _, g in held]
    gold_act = gold_actions(decide, gold_rows)
    classifiers = {"int8": onnx_export.classifier(model_dir)}
    if fp32_path.is_file():
        classifiers["fp32"] = onnx_export.classifier(model_dir, fp32_path)

    metrics: dict[str, Any] = {
        "heldout_lines": len(held),
        "heldout_benign_lines": int(sum(1 for a in gold_act if a == "allow")),
        "policy": policy_source,
        "threshold": 0.5,
    }
    scored: dict[str, ScoreMatrix] = {}
    acts: dict[str, list[str]] = {}
    for kind, model in classifiers.items():
        scored[kind] = score_each(model, texts)
        per_label = _label_metrics(scored[kind], gold_rows)
        acts[kind] = _actions(decide, [scored[kind].row(i) for i in range(len(texts))])
        metrics[kind] = {
            "per_label": per_label,
            "label_macro_f1": float(np.mean([v["f1"] for v in per_label.values()])),
            "actions": _action_metrics(acts[kind], gold_act),
        }
    if "fp32" in scored:
        diff = np.abs(scored["int8"].matrix - scored["fp32"].matrix)
        metrics["int8_vs_fp32"] = {
            "action_agreement": float(
                np.mean(np.asarray(acts["int8"]) == np.asarray(acts["fp32"]))
            ),
            "label_macro_f1_delta_points": 100
            * (metrics["int8"]["label_macro_f1"] - metrics["fp32"]["label_macro_f1"]),
            "action_macro_f1_delta_points": 100
            * (metrics["int8"]["actions"]["macro_f1"] - metrics["fp32"]["actions"]["macro_f1"]),
            "score_max_abs_diff": float(diff.max()),
            "score_mean_abs_diff": float(diff.mean()),
        }
    metrics["size_mb"] = {
        "int8": round(int8_path.stat().st_size / 1e6, 1),
        **({"fp32": round(fp32_path.stat().st_size / 1e6, 1)} if fp32_path.is_file() else {}),
    }
    paths = {k: p for k, p in (("int8", int8_path), ("fp32", fp32_path)) if p.is_file()}
    load_before = os.getloadavg()[0]
    metrics["latency_ms_median_batch1"] = measure_latency(
        model_dir, paths, LATENCY_LENGTHS, LATENCY_THREADS, latency_runs
    )
    metrics["latency_load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]

    metrics["real"] = evaluate_real(classifiers, decide)
    metrics["suite"] = suite.measure(model_dir)  # our functional suite and the padding probes

    for key, path in (
        ("unseen_chat", corpus.UNSEEN_FILE),
        ("unseen_short", corpus.UNSEEN_SHORT_FILE),
        ("unseen_dev", corpus.UNSEEN_DEV_FILE),
    ):
        if path.is_file():
            metrics[key] = _unseen_table(classifiers["int8"], decide, path)
    metrics["machine"] = f"{platform.machine()}, {_cpu_name()}"
    return metrics


def evaluate_real(classifiers: Mapping[str, Classifier], decide: Decide) -> dict[str, Any]:
    """Our model (each graph) and every teacher on the real test splits and identity probe."""
    from models.evaluation import realeval, realtext
    from models.lines import teachers

    scorers: dict[str, realeval.Scorer] = {}
    for kind, model in classifiers.items():

        def score(texts: Sequence[str], model: Classifier = model) -> npt.NDArray[np.float32]:
            return realtext.batch_scores(model, texts)

        scorers[kind] = realeval.model_scorer(score, model.labels, decide)
    loaded = teachers.load_all()
    for teacher in loaded:
        scorers[teacher.name] = realeval.teacher_scorer(teacher)
    result = realeval.run(scorers, with_worst=("int8",))
    result["teachers"] = {
        t.name: {"version": t.version, "provenance": t.provenance} for t in loaded
    }
    return result


def _unseen_table(classifier: Classifier, decide: Decide, path: Path) -> dict[str, Any]:
    """The action each hand-written line gets; `nudge` expected accepts any more severe one
    (`review`, `block`) too: the line was to be flagged. As at run time, a line the language
    gate names as a language the model does not read gets `review` unless the model's action is
    more severe (the default policy's `unsupported_language`)."""
    from moderator.decide.language import LanguageGate

    gate = LanguageGate()
    unseen = read_unseen(path)
    scored = score_each(classifier, [t for t, _, _ in unseen])
    rows: list[dict[str, Any]] = []
    n_ok = 0
    for i, (text, expected, kind) in enumerate(unseen):
        row = scored.row(i)
        action, reason, _ = decide(row)
        code = gate.detect(text)
        if code is not None and ACTIONS.index("review") > ACTIONS.index(action):
            action, reason = "review", f"unsupported_language:{code}"
        ok = action == expected or (expected == "nudge" and ACTIONS.index(action) > 1)
        n_ok += ok
        top = max(row.items(), key=lambda kv: kv[1])
        rows.append(
            {
                "text": text,
                "kind": kind,
                "expected": expected,
                "action": action,
                "reason": reason,
                "top": f"{top[0]} {top[1]:.2f}",
                "ok": ok,
            }
        )
    return {"file": path.name, "lines": len(rows), "as_expected": n_ok, "rows": rows}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def quantization_agreement(
    model_dir: Path, fp32_path: Path, candidates: Mapping[str, Path], labels: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Action agreement and score difference of each int8 candidate with fp32 on held-out lines
    (`model_dir`: the model being built, for its tokenizer; it has no manifest yet)."""
    decide, _ = load_policy()
    info = onnx_export.candidate_info(labels, CANDIDATE_MAX_LENGTH)
    texts = [t for t, _ in corpus.read_tsv(corpus.HELDOUT_FILE)]
    ref = score_each(onnx_export.classifier(model_dir, fp32_path, info=info), texts)
    ref_acts = np.asarray(_actions(decide, [ref.row(i) for i in range(len(texts))]))
    out: dict[str, dict[str, float]] = {}
    for name, path in candidates.items():
        got = score_each(onnx_export.classifier(model_dir, path, info=info), texts)
        acts = np.asarray(_actions(decide, [got.row(i) for i in range(len(texts))]))
        out[name] = {
            "action_agreement": float(np.mean(acts == ref_acts)),
            "score_mean_abs_diff": float(np.abs(got.matrix - ref.matrix).mean()),
        }
    return out


def real_dev_gaps(
    model_dir: Path, fp32_path: Path, candidates: Mapping[str, Path], labels: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Each int8 candidate's largest gap to fp32 (`realeval.int8_gap`, the report's 1-point bar)
    on the real dev split, under the packaged policy: how quantization is chosen without
    looking at the test split."""
    from models.evaluation import realeval, realtext
    from models.lines import realdata

    decide, _ = load_policy()
    info = onnx_export.candidate_info(labels, CANDIDATE_MAX_LENGTH)
    lines = realdata.select(realdata.load(), "dev", realdata.CHAT_LIKE + realdata.TOXIC)
    texts = [ln.text for ln in lines]

    def judged(path: Path) -> dict[str, Any]:
        model = onnx_export.classifier(model_dir, path, info=info)
        scorer = realeval.model_scorer(lambda t: realtext.batch_scores(model, t), labels, decide)
        return realeval.judge(lines, scorer(texts))

    ref = judged(fp32_path)
    out: dict[str, dict[str, float]] = {}
    for name, path in candidates.items():
        got = judged(path)
        out[name] = {
            "dev_gap_points": round(100 * realeval.int8_gap(got, ref), 3),
            "dev_benign_flagged": got["benign"]["chat-like"]["flagged"],
            "dev_toxic_flagged": got["toxic"]["all"]["flagged"],
        }
    return out


def update_manifest(model_dir: Path, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Store metrics in manifest.json (model.onnx, and so sha256/version, are unchanged)."""
    path = model_dir / onnx_export.MANIFEST_FILE
    manifest: dict[str, Any] = json.loads(path.read_text())
    manifest["metrics"] = _rounded(metrics)
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value
