"""Export, fuse, quantize and parity-check a scoring module as a model directory.

Shared by `build` (the default model), `export` (a user's Hugging Face checkpoint) and
`speed-shape` (random weights at DistilBERT/BERT-base size). Every model directory meets the
contract in README.md ("The default model"): `model.onnx` (int8, what the runtime loads),
`tokenizer.json`, `manifest.json`; the fp32 graph is kept next to it as `model-fp32.onnx` for
evaluation.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from models.files import sha256_file

if TYPE_CHECKING:
    from moderator.decide.classifier import Classifier, ModelInfo

logger = logging.getLogger(__name__)

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "scores"
# How the built model reads emoji (manifest `emoji`): as their names, the form training encodes
# (models.training.train.encode_texts), since HatemojiBuild and most threats written with emoji
# are [UNK] to the tokenizer otherwise.
EMOJI = "names"
OPSET = 17
MODEL_FILE = "model.onnx"
FP32_FILE = "model-fp32.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"

DETOXIFY_LABELS = frozenset(
    {
        "toxicity",
        "toxic",
        "severe_toxicity",
        "severe_toxic",
        "obscene",
        "insult",
        "threat",
        "identity_attack",
        "identity_hate",
        "sexual_explicit",
        "self_harm",
    }
)

# A few chat lines of different lengths for parity checks (batch of one, dynamic shapes).
PARITY_TEXTS = (
    "gg",
    "gg wp everyone",
    "holy shit that clutch was insane lol",
    "you are the worst player i have ever seen, uninstall the game and never come back",
    "i'll destroy you in ranked tonight, bring your whole squad and we will see who is better",
    " ".join(["this stream is great and the chat is chill"] * 20),  # longer than max_length
)


class ModelExportError(RuntimeError):
    """The model could not be exported as a valid model directory."""


@dataclass(frozen=True)
class ExportResult:
    """Where the graphs went and what the optimizer and the parity checks found."""

    out_dir: Path
    fused_ops: dict[str, int]
    parity: dict[str, float]
    fp32_bytes: int
    int8_bytes: int


def choose_activation(labels: Sequence[str], problem_type: str | None) -> str:
    """Sigmoid for multi-label (Detoxify-style) models, softmax for single-label ones."""
    if problem_type == "multi_label_classification" or len(labels) == 1:
        return "sigmoid"
    if problem_type == "single_label_classification":
        return "softmax"
    known = sum(1 for label in labels if label.lower() in DETOXIFY_LABELS)
    return "sigmoid" if known >= 2 else "softmax"


def export_onnx(module: Any, path: Path) -> None:
    """Trace `module(input_ids, attention_mask) -> scores` to ONNX with dynamic batch and seq.

    The TorchScript exporter (dynamo=False) is used because its graph is what onnxruntime's
    BERT optimizer recognises; the module must already use eager attention.
    """
    import torch

    module.eval()
    # Any ids trace the same graph; taken modulo the word table's rows so that a small
    # vocabulary (a test's tiny encoder) traces too.
    rows = next(m for m in module.modules() if isinstance(m, torch.nn.Embedding)).num_embeddings
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102, 0]] * 2, dtype=torch.long) % rows
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    with torch.no_grad(), warnings.catch_warnings():
        # Known and harmless for these graphs: the tracer notes shape-dependent Python branches
        # in transformers' mask code (the exported graph is checked for parity afterwards), and
        # aten::index lowering (indices are never negative here).
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # type: ignore[attr-defined]
        warnings.filterwarnings("ignore", message=".*aten::index.*", category=UserWarning)
        # dynamo=False is deliberate (only the TorchScript graph fuses in onnxruntime's
        # optimizer); its code path is deprecated as a whole and says so on every call.
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        torch.onnx.export(
            module,
            (ids, mask),
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "seq"},
                "attention_mask": {0: "batch", 1: "seq"},
                OUTPUT_NAME: {0: "batch"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def fuse(src: Path, dst: Path, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Apply onnxruntime's transformer fusions; fail unless attention really fused."""
    from onnxruntime.transformers import optimizer

    opt = optimizer.optimize_model(
        str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden_size
    )
    stats = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
    if stats.get("Attention", 0) + stats.get("MultiHeadAttention", 0) == 0:
        raise ModelExportError(
            f"attention did not fuse ({stats}); export with eager attention (dynamo=False)"
        )
    opt.save_model_to_file(str(dst))
    return stats


GELU_OPS = frozenset({"Gelu", "BiasGelu", "FastGelu", "QuickGelu"})


def ffn_down_projections(path: Path) -> list[str]:
    """The MatMuls that read a GELU's output: each layer's feed-forward down-projection.

    Their inputs carry a few huge outliers (Bondarenko et al. 2021, "Understanding and
    Overcoming the Challenges of Efficient Transformer Quantization"), so one dynamic int8
    scale per tensor flattens everything else; quantized, they lowered every score of this
    model and cost 2-4 points of recall against fp32 at the same thresholds. Kept in fp32 they
    remove that gap, at a price measured on an AVX2 host (2 threads, interleaved): a message
    takes 1.14-1.18x the all-int8 time (fp32: 1.33-1.44x), and the file grows 23 → 33 MB.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return [node.name for node in down_projection_nodes(model)]


def down_projection_nodes(model: Any) -> list[Any]:
    """The fp32 MatMul nodes of an ONNX model that read a GELU's output (`ffn_down_projections`;
    `models.export.outliers` splits them)."""
    producer = {out: node.op_type for node in model.graph.node for out in node.output}
    return [
        node
        for node in model.graph.node
        if node.op_type == "MatMul" and producer.get(node.input[0]) in GELU_OPS
    ]


def quantize(src: Path, dst: Path, *, per_channel: bool) -> None:
    """Dynamic int8 quantization of the weights (QInt8), activations quantized at run time.

    The feed-forward down-projections stay fp32 (`ffn_down_projections` says why).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        src,
        dst,
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        nodes_to_exclude=ffn_down_projections(src),
        # Needed on an optimizer-fused graph: fused nodes lack type info for some tensors.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def candidate_info(labels: Sequence[str], max_length: int) -> ModelInfo:
    """What the manifest will say of an exported graph, before it is written: enough for the
    runtime's `Classifier` to score it (the graph applies its own activation)."""
    from moderator.decide.classifier import ModelInfo

    return ModelInfo(
        name="candidate",
        version="0",
        labels=tuple(labels),
        activation="none",
        activation_in_graph=True,
        max_length=max_length,
        sha256="",
        inputs=INPUT_NAMES,
        speed_only=False,
        emoji=EMOJI,
    )


def classifier(
    model_dir: Path,
    graph: Path | None = None,
    *,
    threads: int = 2,
    info: ModelInfo | None = None,
) -> Classifier:
    """The runtime's `Classifier` on a model directory's tokenizer and `graph` (its model.onnx
    by default; the fp32 graph, a quantization candidate), so the tools score text exactly as
    the service does. `info` stands in for a manifest not written yet (`candidate_info`)."""
    from moderator.decide.classifier import Classifier

    return Classifier(model_dir, threads=threads, verify=False, graph=graph, info=info)


def check_parity(
    module: Any, out_dir: Path, max_length: int, texts: Sequence[str] = PARITY_TEXTS
) -> dict[str, float]:
    """Max/mean absolute differences: fp32 ONNX vs torch, int8 vs fp32 (same inputs: each text
    alone, then all of them in one padded batch, whose padding the masked pooling must ignore)."""
    import torch

    from moderator.decide.classifier import padded

    module.eval()
    with torch.no_grad():  # the label count, for the runtime's output check
        probe = torch.ones((1, 2), dtype=torch.long)
        n_labels = int(module(probe, probe).shape[1])
    info = candidate_info([f"label_{i}" for i in range(n_labels)], max_length)
    fp32 = classifier(out_dir, out_dir / FP32_FILE, threads=1, info=info)
    int8 = classifier(out_dir, out_dir / MODEL_FILE, threads=1, info=info)
    encoded = fp32.encode(texts)
    ref_diffs: list[float] = []
    q_diffs: list[float] = []
    for batch in [*([ids] for ids in encoded), encoded]:
        ids, mask = padded(batch, fp32.pad_id)
        with torch.no_grad():
            ref = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        out32 = fp32.score_ids(batch)
        out8 = int8.score_ids(batch)
        ref_diffs.extend(np.abs(out32 - ref).ravel().tolist())
        q_diffs.extend(np.abs(out8 - out32).ravel().tolist())
    return {
        "fp32_vs_torch_max_abs": float(max(ref_diffs)),
        "fp32_vs_torch_mean_abs": float(np.mean(ref_diffs)),
        "int8_vs_fp32_max_abs": float(max(q_diffs)),
        "int8_vs_fp32_mean_abs": float(np.mean(q_diffs)),
    }


def export_model_dir(
    module: Any,
    out_dir: Path,
    *,
    num_heads: int,
    hidden_size: int,
    tokenizer_path: Path,
    max_length: int,
    per_channel: bool = True,
) -> ExportResult:
    """Export → fuse → int8 → parity into out_dir (model.onnx, model-fp32.onnx, tokenizer.json).

    The manifest is written separately (write_manifest) because its metrics come later.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32_path = out_dir / FP32_FILE
    int8_path = out_dir / MODEL_FILE
    with tempfile.TemporaryDirectory(prefix="onnx-export-") as tmp:
        raw = Path(tmp) / "raw.onnx"
        logger.info("exporting to ONNX (opset %d)", OPSET)
        export_onnx(module, raw)
        logger.info("fusing transformer operators")
        stats = fuse(raw, fp32_path, num_heads, hidden_size)
    logger.info("fused operators: %s", stats)
    logger.info("quantizing to int8 (per_channel=%s)", per_channel)
    quantize(fp32_path, int8_path, per_channel=per_channel)
    if tokenizer_path.resolve() != (out_dir / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer_path, out_dir / TOKENIZER_FILE)
    parity = check_parity(module, out_dir, max_length)
    logger.info("parity: %s", parity)
    return ExportResult(
        out_dir=out_dir,
        fused_ops=stats,
        parity=parity,
        fp32_bytes=fp32_path.stat().st_size,
        int8_bytes=int8_path.stat().st_size,
    )


def quantization_text(per_channel: bool, channels: int) -> str:
    """The manifest's `quantization` text (`channels` 0: down-projections kept fp32; else the
    split of `models.export.outliers`)."""
    weights = "per-channel" if per_channel else "per-tensor"
    if not channels:
        return (
            f"dynamic-int8 (QInt8 weights, {weights}, onnxruntime quantize_dynamic;"
            " feed-forward down-projections kept fp32)"
        )
    return (
        f"dynamic-int8 (QInt8 weights, {weights}, onnxruntime quantize_dynamic; feed-forward"
        f" down-projections int8 with their {channels} largest input channels fp32,"
        " models/export/outliers.py)"
    )


def write_manifest(
    out_dir: Path,
    *,
    name: str,
    labels: Sequence[str],
    activation: str,
    max_length: int,
    source: str,
    per_channel: bool,
    outlier_channels: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write manifest.json for the int8 model.onnx in out_dir and return it (`outlier_channels`:
    the down-projections' split, `models.export.outliers`; 0 when they were kept fp32), with
    its self-check lines (`checks`)."""
    from moderator.decide import selfcheck

    sha = sha256_file(out_dir / MODEL_FILE)
    manifest: dict[str, Any] = {
        "name": name,
        "version": sha[:6],
        "labels": list(labels),
        "activation": activation,
        "activation_in_graph": True,
        "max_length": max_length,
        "sha256": sha,
        "quantization": quantization_text(per_channel, outlier_channels),
        "source": source,
        "inputs": list(INPUT_NAMES),
        "output": OUTPUT_NAME,
        "emoji": EMOJI,
        "fp32_model": FP32_FILE,
    }
    if extra:
        manifest.update(extra)
    manifest.setdefault("metrics", {})
    path = out_dir / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    # The scores the directory gives its parity lines, read back through the manifest just
    # written: a model promoted live is held to them (moderator/decide/selfcheck.py).
    manifest[selfcheck.FIELD] = selfcheck.recorded(classifier(out_dir, threads=1), PARITY_TEXTS)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest


def validate_model_dir(out_dir: Path) -> dict[str, Any]:
    """Check a model directory against the contract; return its manifest."""
    manifest_path = out_dir / MANIFEST_FILE
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    for key in ("name", "version", "labels", "activation", "max_length", "sha256", "source"):
        if key not in manifest:
            raise ModelExportError(f"{manifest_path}: missing {key!r}")
    if sha256_file(out_dir / MODEL_FILE) != manifest["sha256"]:
        raise ModelExportError(f"{manifest_path}: sha256 does not match {MODEL_FILE}")
    if not (out_dir / TOKENIZER_FILE).is_file():
        raise ModelExportError(f"{out_dir}: no {TOKENIZER_FILE}")
    scorer = classifier(out_dir, threads=1)  # the runtime checks the graph's inputs
    outputs = [o.name for o in scorer.session.get_outputs()]
    names = [i.name for i in scorer.session.get_inputs()]
    if names[:2] != list(INPUT_NAMES) or outputs != [OUTPUT_NAME]:
        raise ModelExportError(f"{out_dir}: unexpected graph inputs/outputs {names} {outputs}")
    # ids from its own tokenizer: valid whatever the vocabulary (101 is not in a tiny one)
    out = scorer.score_ids(scorer.encode(["gg"]))
    if out.shape != (1, len(manifest["labels"])) or out.dtype != np.float32:
        raise ModelExportError(f"{out_dir}: output shape {out.shape} {out.dtype}")
    return manifest
