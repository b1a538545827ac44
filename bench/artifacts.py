"""The model graphs the ladder climbs, built once under `models/build/bench/` and reused.

For each shape (DistilBERT-base, MiniLM-L6) there are three ONNX model directories, each a full
model directory (README.md, "The default model") so the runtime's own `Classifier` loads every rung:

- `raw-fp32/`: the plain TorchScript export, fp32, no transformer fusions;
- `raw-int8/`: the same graph with dynamic int8 quantization, still unfused;
- `fused-int8/`: attention fused by onnxruntime's BERT optimizer, then int8 (`model.onnx`), with
  the fused fp32 graph beside it (`model-fp32.onnx`). For the DistilBERT shape this is exactly
  what `moderator model speed-shape` builds; for MiniLM it is the default model itself.

The weights are random (seeded): the speed of a graph does not depend on its weights' values.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moderator.config import DEFAULT_MODEL_DIR, REPO_ROOT

__all__ = [
    "BENCH_BUILD_DIR",
    "DEFAULT_MODEL_DIR",
    "DEFAULT_TOKENIZER",
    "SHAPES",
    "ShapeArtifacts",
    "build_all",
    "build_shape",
    "distilbert_model_dir",
    "shipped_like_dir",
    "speed_model_dir",
    "torch_module",
]

log = logging.getLogger(__name__)

BENCH_BUILD_DIR = REPO_ROOT / "models" / "build" / "bench"
DEFAULT_TOKENIZER = DEFAULT_MODEL_DIR / "tokenizer.json"
SPEED_LABELS = ("label_0", "label_1", "label_2", "label_3", "label_4", "label_5")

# MiniLM-L6 (all-MiniLM-L6-v2): a 6-layer, 384-wide BERT with 12 heads.
MINILM_SHAPE = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
}
SHAPES = ("distilbert-base", "minilm-l6")


@dataclass(frozen=True)
class ShapeArtifacts:
    """Where one shape's rung graphs are."""

    shape: str
    raw_fp32: Path
    raw_int8: Path
    fused_int8: Path  # a model directory whose model.onnx is fused + int8


def torch_module(shape: str, seed: int = 0) -> Any:
    """A random-weight sequence classifier of `shape` in eval mode (eager attention)."""
    if shape in ("distilbert-base", "bert-base"):
        from models.export.checkpoint import speed_shape_module

        return speed_shape_module(shape, n_labels=len(SPEED_LABELS), seed=seed)
    if shape == "minilm-l6":
        import torch
        from transformers import BertConfig, BertForSequenceClassification

        torch.manual_seed(seed)
        config = BertConfig(
            hidden_size=MINILM_SHAPE["hidden_size"],
            num_hidden_layers=MINILM_SHAPE["num_hidden_layers"],
            num_attention_heads=MINILM_SHAPE["num_attention_heads"],
            intermediate_size=MINILM_SHAPE["intermediate_size"],
        )
        config.num_labels = len(SPEED_LABELS)
        config._attn_implementation = "eager"
        model: Any = BertForSequenceClassification(config)
        return model.eval()
    raise ValueError(f"unknown shape {shape!r}")


def heads_and_hidden(shape: str) -> tuple[int, int]:
    if shape == "minilm-l6":
        return MINILM_SHAPE["num_attention_heads"], MINILM_SHAPE["hidden_size"]
    return 12, 768


def _manifest(out_dir: Path, shape: str, what: str) -> None:
    from models.export.onnx_export import write_manifest

    write_manifest(
        out_dir,
        name=f"bench-{shape}-{out_dir.name}",
        labels=list(SPEED_LABELS),
        activation="sigmoid",
        max_length=128,
        source=f"random weights, {shape} shape, {what} (speed benchmarks only)",
        per_channel=True,
        extra={"speed_only": True},
    )


def _ready(model_dir: Path) -> bool:
    return (model_dir / "manifest.json").is_file() and (model_dir / "model.onnx").is_file()


def build_shape(shape: str, root: Path = BENCH_BUILD_DIR) -> ShapeArtifacts:
    """Build (or reuse) the three rung graphs of `shape`."""
    from models.export import onnx_export

    base = root / shape
    art = ShapeArtifacts(
        shape=shape,
        raw_fp32=base / "raw-fp32",
        raw_int8=base / "raw-int8",
        fused_int8=DEFAULT_MODEL_DIR if shape == "minilm-l6" else base / "fused-int8",
    )
    if shape == "distilbert-base" and not _ready(art.fused_int8):
        from models.export.checkpoint import build_speed_shape

        log.info("building the fused int8 %s speed-shape model", shape)
        build_speed_shape(art.fused_int8, shape, DEFAULT_TOKENIZER)
    if _ready(art.raw_fp32) and _ready(art.raw_int8):
        return art
    from models.export.checkpoint import scoring_module

    module = scoring_module(torch_module(shape), "sigmoid").eval()
    for out_dir in (art.raw_fp32, art.raw_int8):
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DEFAULT_TOKENIZER, out_dir / onnx_export.TOKENIZER_FILE)
    log.info("exporting the unfused %s graph", shape)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        raw = Path(tmp) / "raw.onnx"
        onnx_export.export_onnx(module, raw)
        shutil.copyfile(raw, art.raw_fp32 / onnx_export.MODEL_FILE)
    _manifest(art.raw_fp32, shape, "fp32, unfused TorchScript export")
    log.info("quantizing the unfused %s graph", shape)
    onnx_export.quantize(
        art.raw_fp32 / onnx_export.MODEL_FILE, art.raw_int8 / onnx_export.MODEL_FILE,
        per_channel=True,
    )  # fmt: skip
    _manifest(art.raw_int8, shape, "dynamic int8, unfused")
    return art


def build_all(root: Path = BENCH_BUILD_DIR) -> dict[str, ShapeArtifacts]:
    return {shape: build_shape(shape, root) for shape in SHAPES}


def distilbert_model_dir(root: Path = BENCH_BUILD_DIR) -> Path:
    """The DistilBERT-shape int8 fused model directory the pipeline runs load."""
    return build_shape("distilbert-base", root).fused_int8


def speed_model_dir(shape: str, root: Path = BENCH_BUILD_DIR) -> Path:
    """The fused int8 model directory of a speed shape (`distilbert-base`, `bert-base`: random
    weights), built once (about a minute for BERT-base) and reused."""
    out = root / shape / "fused-int8"
    if not _ready(out):
        from models.export.checkpoint import build_speed_shape

        log.info("building the fused int8 %s speed-shape model", shape)
        build_speed_shape(out, shape, DEFAULT_TOKENIZER)
    return out


def shipped_like_dir(shape: str, root: Path = BENCH_BUILD_DIR) -> Path:
    """A speed shape quantized as the shipped model is (per-tensor int8, the feed-forward
    down-projections int8 too with their 8 largest input channels fp32): what a built model of
    that shape would cost, where `speed_model_dir`'s keeps the down-projections fp32."""
    out = root / shape / "shipped-int8"
    if not _ready(out):
        from models.export.checkpoint import build_speed_shape
        from models.export.outliers import CHANNELS

        log.info("building the %s speed-shape model, quantized as shipped", shape)
        build_speed_shape(out, shape, DEFAULT_TOKENIZER, per_channel=False,
                          outlier_channels=CHANNELS)  # fmt: skip
    return out


if __name__ == "__main__":  # pragma: no cover - `python -m bench.artifacts`
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for name, built in build_all().items():
        print(name, built)
