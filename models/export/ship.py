"""`python -m models ship`: make a rebuilt model the shipped default, saying how it differs.

The runtime's default model is `moderator/default_model/` (`model.onnx` int8, `tokenizer.json`,
`manifest.json`), committed to git and installed as package data, so a fresh clone or a plain
`pip install` scores without building anything. `make model` builds into `models/build/` and then
runs this step, which prints, for the rebuilt model next to the shipped one: sha256, size,
version, every numeric manifest metric both have, and how the two models decide the same fixed
lines (`models/data/heldout.tsv`: action agreement under the runtime's default policy, mean
absolute score difference, the first lines whose action changed). Then it copies the three files
over, unless `model.onnx` is byte-identical (then nothing is touched, not even the manifest's
metrics, which vary with the machine) or `--check` was given.

Every committed copy of `model.onnx` stays in git history (about 23 MB each): commit a new one only
when the model really changed, and say in the commit what the comparison printed.

Needs only the runtime (onnxruntime, tokenizers): no torch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from models.files import MODELS_DIR, sha256_file
from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide.classifier import Classifier
from moderator.errors import ModeratorError
from moderator.policy.rules import Policy

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
SHIPPED_FILES = (MODEL_FILE, TOKENIZER_FILE, MANIFEST_FILE)
# Manifest keys naming files that stay in the build folder and are not shipped.
UNSHIPPED_KEYS = ("fp32_model",)

DEFAULT_FROM = MODELS_DIR / "build" / "chat-minilm"
DEFAULT_TO = DEFAULT_MODEL_DIR
DEFAULT_LINES = MODELS_DIR / "data" / "heldout.tsv"
BATCH = 32
SHOWN_CHANGES = 10


class ShipError(ModeratorError):
    """The rebuilt model directory cannot be shipped."""


@dataclass(frozen=True)
class ModelSide:
    """One model directory as the comparison shows it."""

    path: Path
    name: str
    version: str
    sha256: str
    size_bytes: int
    manifest: dict[str, Any]

    @property
    def ident(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Agreement:
    """How two models decide the same lines."""

    lines: int
    common_labels: tuple[str, ...]
    mean_abs_score_diff: float
    max_abs_score_diff: float
    action_agreement: float | None  # None when the policy does not fit both label sets
    changed: tuple[tuple[str, str, str], ...]  # (text, old action, new action), the first few
    changed_count: int


def describe(model_dir: Path) -> ModelSide | None:
    """The model in `model_dir`, or None when there is none (no manifest)."""
    path = model_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    manifest: dict[str, Any] = json.loads(path.read_text())
    model = model_dir / MODEL_FILE
    return ModelSide(
        path=model_dir,
        name=str(manifest.get("name", "?")),
        version=str(manifest.get("version", "?")),
        sha256=str(manifest.get("sha256", "")),
        size_bytes=model.stat().st_size if model.is_file() else 0,
        manifest=manifest,
    )


def check_complete(model_dir: Path) -> ModelSide:
    """`model_dir` has the three shipped files and model.onnx matches the manifest's sha256."""
    missing = [name for name in SHIPPED_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ShipError(f"{model_dir}: missing {', '.join(missing)} (run `make model` first)")
    side = describe(model_dir)
    assert side is not None
    digest = sha256_file(model_dir / MODEL_FILE)
    if digest != side.sha256:
        raise ShipError(
            f"{model_dir / MODEL_FILE}: sha256 {digest[:12]}… does not match the manifest's "
            f"{side.sha256[:12]}…"
        )
    return side


def flatten_numbers(value: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts as {"a.b.c": number} (lists and strings are skipped)."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)} if prefix else {}
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(flatten_numbers(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {}


def metric_rows(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(key, old, new) for every numeric `metrics` entry both manifests have, in key order."""
    a = flatten_numbers(old.get("metrics", {}))
    b = flatten_numbers(new.get("metrics", {}))
    return [(key, a[key], b[key]) for key in sorted(a.keys() & b.keys())]


# The figures a reviewer reads first; the manifest holds hundreds (per term, per family, ...).
HEADLINE = (
    "size_mb.int8",
    "int8.label_macro_f1",
    "int8.actions.flagged.f1",
    "int8.actions.benign_flag_rate",
    "int8.actions.benign_block_rate",
    "int8_vs_fp32.action_agreement",
    "real.scorers.int8.benign.chat-like.",
    "real.scorers.int8.toxic.",
    "real.scorers.int8.insults.",
    "real.scorers.int8.auc",
    "real.identity.int8.benign_flagged",
    "real.identity.int8.hostile_caught",
    "real.identity.int8.worst_term",
)


def headline(rows: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The HEADLINE rows (line counts dropped), or every row when none of them is there."""
    picked = [
        r for r in rows if r[0].startswith(HEADLINE) and not r[0].endswith((".lines", "support"))
    ]
    return picked or list(rows)


def read_lines(path: Path, limit: int | None = None) -> list[str]:
    """The text column of a TSV (first field), blank lines skipped, at most `limit` lines."""
    texts = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        text = raw.split("\t", 1)[0]
        if text.strip():
            texts.append(text)
        if limit is not None and len(texts) >= limit:
            break
    return texts


def _scores(classifier: Classifier, texts: Sequence[str]) -> np.ndarray[Any, Any]:
    """Scores of every text as the runtime computes them (length-sorted batches of BATCH)."""
    encoded = classifier.encode(texts)
    out = np.zeros((len(texts), len(classifier.labels)), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    for start in range(0, len(order), BATCH):
        chunk = order[start : start + BATCH]
        out[chunk] = classifier.score_ids([encoded[i] for i in chunk])
    return out


def _actions(policy: Policy, labels: Sequence[str], scores: np.ndarray[Any, Any]) -> list[str]:
    return [policy.decide(dict(zip(labels, map(float, row), strict=True)))[0] for row in scores]


def compare_scores(
    old_dir: Path, new_dir: Path, texts: Sequence[str], policy: Policy, *, threads: int = 1
) -> Agreement:
    """Score `texts` with both models (the runtime's own classifier) and compare."""
    old = Classifier(old_dir, threads=threads)
    new = Classifier(new_dir, threads=threads)
    common = tuple(label for label in new.labels if label in old.labels)
    s_old, s_new = _scores(old, texts), _scores(new, texts)
    if common:
        diff = np.abs(
            s_old[:, [old.labels.index(x) for x in common]]
            - s_new[:, [new.labels.index(x) for x in common]]
        )
        mean_diff, max_diff = float(diff.mean()), float(diff.max())
    else:
        mean_diff = max_diff = float("nan")
    try:
        policy.check_labels(old.labels)
        policy.check_labels(new.labels)
    except ModeratorError:
        return Agreement(len(texts), common, mean_diff, max_diff, None, (), 0)
    a_old, a_new = _actions(policy, old.labels, s_old), _actions(policy, new.labels, s_new)
    changed = [(t, a, b) for t, a, b in zip(texts, a_old, a_new, strict=True) if a != b]
    agreement = 1.0 - len(changed) / len(texts) if texts else 1.0
    return Agreement(
        len(texts), common, mean_diff, max_diff, agreement,
        tuple(changed[:SHOWN_CHANGES]), len(changed),
    )  # fmt: skip


def ship_files(src: Path, dst: Path) -> None:
    """Copy the three shipped files from `src` to `dst`; model.onnx and manifest.json change
    together (each is written to a temporary name, then renamed, the manifest last)."""
    dst.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = json.loads((src / MANIFEST_FILE).read_text())
    for key in UNSHIPPED_KEYS:
        manifest.pop(key, None)
    staged: list[tuple[Path, Path]] = []
    try:
        for name in (MODEL_FILE, TOKENIZER_FILE):
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=dst)
            os.close(fd)
            shutil.copyfile(src / name, tmp)
            staged.append((Path(tmp), dst / name))
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST_FILE}.", dir=dst)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(manifest, indent=2) + "\n")
        staged.append((Path(tmp), dst / MANIFEST_FILE))
        for tmp_path, final in staged:
            tmp_path.chmod(0o644)
            tmp_path.replace(final)
    finally:
        for tmp_path, _ in staged:
            tmp_path.unlink(missing_ok=True)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def render_sides(old: ModelSide | None, new: ModelSide) -> Iterator[str]:
    """The identity lines: name@version, sha256, size, old next to new."""
    width = 14
    yield f"  {'':<{width}} {'shipped':<28} rebuilt"
    if old is None:
        yield f"  {'model':<{width}} {'(none)':<28} {new.ident}"
        yield f"  {'sha256':<{width}} {'-':<28} {new.sha256[:16]}…"
        yield f"  {'size':<{width}} {'-':<28} {_mb(new.size_bytes)}"
        return
    yield f"  {'model':<{width}} {old.ident:<28} {new.ident}"
    yield f"  {'sha256':<{width}} {old.sha256[:16] + '…':<28} {new.sha256[:16]}…"
    delta = new.size_bytes - old.size_bytes
    yield f"  {'size':<{width}} {_mb(old.size_bytes):<28} {_mb(new.size_bytes)} ({delta:+,} bytes)"


def render_metrics(rows: Sequence[tuple[str, float, float]]) -> Iterator[str]:
    if not rows:
        yield "  manifest metrics: none in common"
        return
    width = max(len(key) for key, _, _ in rows)
    yield f"  manifest metrics both have ({len(rows)}):"
    yield f"    {'metric':<{width}} {'shipped':>12} {'rebuilt':>12} {'change':>12}"
    for key, a, b in rows:
        yield f"    {key:<{width}} {a:>12.4g} {b:>12.4g} {b - a:>+12.4g}"


def render_agreement(agreement: Agreement, lines_file: Path) -> Iterator[str]:
    yield (
        f"  on {agreement.lines} lines of {lines_file.name}, scored by both: mean |score diff| "
        f"{agreement.mean_abs_score_diff:.4f} (max {agreement.max_abs_score_diff:.4f}) over "
        f"{len(agreement.common_labels)} common labels"
    )
    if agreement.action_agreement is None:
        yield "  actions: not compared (the default policy does not fit both label sets)"
        return
    yield (
        f"  actions under the default policy: {100 * agreement.action_agreement:.2f}% agree "
        f"({agreement.changed_count} changed)"
    )
    for text, a, b in agreement.changed:
        yield f"    {a:>5} -> {b:<5} {text[:90]}"


def run(
    src: Path = DEFAULT_FROM,
    dst: Path = DEFAULT_TO,
    *,
    lines_file: Path = DEFAULT_LINES,
    limit: int | None = None,
    check_only: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """Compare the model in `src` with the one in `dst`, then copy it there; the exit status
    (2, with one line saying why, when `src` is not a complete model directory)."""
    try:
        return _run(src, dst, lines_file, limit, check_only, say)
    except ShipError as exc:
        say(f"ship: error: {exc}")
        return 2


def _run(
    src: Path,
    dst: Path,
    lines_file: Path,
    limit: int | None,
    check_only: bool,
    say: Callable[[str], None],
) -> int:
    new = check_complete(src)
    old = describe(dst)
    say(f"ship {src} -> {dst}")
    for line in render_sides(old, new):
        say(line)
    if old is not None and old.sha256 == new.sha256:
        say("  model.onnx is byte-identical to the shipped one: nothing to ship")
        return 0
    try:
        comparable = old is not None and check_complete(dst) is not None
    except ShipError as exc:
        say(f"  the shipped model is broken ({exc}): not compared")
        comparable = False
    if old is not None and comparable:
        for line in render_metrics(headline(metric_rows(old.manifest, new.manifest))):
            say(line)
        texts = read_lines(lines_file, limit)
        agreement = compare_scores(dst, src, texts, Policy.load())
        for line in render_agreement(agreement, lines_file):
            say(line)
    if check_only:
        say("  --check: nothing copied")
        return 0
    ship_files(src, dst)
    check_complete(dst)
    say(f"  shipped {new.ident}: {', '.join(SHIPPED_FILES)} in {dst}")
    say("  commit them only if the model really changed: each committed model.onnx stays in git")
    say("  history; say in the commit message what this comparison printed")
    return 0
