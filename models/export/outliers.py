"""The feed-forward down-projections in int8, their few outlier input channels kept fp32.

A down-projection reads a GELU's output, where a handful of channels run 3-13x larger than the
rest (`onnx_export.ffn_down_projections`). One dynamic int8 scale per tensor is set by those
few, so every other channel loses its resolution: quantized plainly, the default model's scores
drifted (mean absolute difference 0.006, biased low) and real toxic dev lines flagged fell 5.7
points. Kept whole in fp32 they were about 40% of a message's CPU on an AVX-512 VNNI host (16
tokens, 1 thread: 2.8 ms with them, 1.7 ms with all six in int8).

The split keeps both: from calibration lines we find, for each down-projection, the `channels`
input channels with the largest absolute value. Those are multiplied in fp32 (a Gather and a
`[channels x hidden]` MatMul); the input with those channels zeroed goes through int8, its
scale now set by ordinary channels. (LLM.int8(), Dettmers et al. 2022, splits the same way,
finding the outlier channels at run time; here they are fixed at build time.)
Before quantization the split graph computes exactly what the original did.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from models.export.onnx_export import down_projection_nodes

if TYPE_CHECKING:
    from moderator.decide.classifier import Classifier

# Chosen on the shipped model's real dev split (chat-like and toxic lines), against its graph with
# the down-projections fp32: 4, 8 and 16 channels all gave a mean absolute score difference of
# 0.0016; 8 gave the smallest 99th percentile (0.101) and figure gap (0.52 points: one line).
CHANNELS = 8
CALIBRATION_LINES = 1500
OUTLIER_SUFFIX = "/outlier_channels"


def input_maxima(
    graph: Path, batches: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]
) -> dict[str, np.ndarray[Any, Any]]:
    """Per input channel, the largest absolute value each down-projection reads over `batches`
    (padding positions left out), keyed by the tensor's name."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(graph))
    names = [node.input[0] for node in down_projection_nodes(model)]
    for name in names:
        model.graph.output.append(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(
        model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    maxima: dict[str, np.ndarray[Any, Any]] = {}
    for ids, mask in batches:
        outputs = session.run(names, {"input_ids": ids, "attention_mask": mask})
        for name, value in zip(names, outputs, strict=True):
            top = np.abs(value[mask.astype(bool)]).max(axis=0)
            maxima[name] = np.maximum(maxima[name], top) if name in maxima else top
    return maxima


def split(
    src: Path, dst: Path, maxima: dict[str, np.ndarray[Any, Any]], channels: int
) -> list[str]:
    """Write `src` with each down-projection split in two (module docstring); return the names
    of the fp32 outlier MatMuls, which quantization must leave alone."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    kept: list[str] = []
    for node in down_projection_nodes(model):
        x, name = node.input[0], node.name
        weight = numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
        outliers = np.sort(np.argsort(-maxima[x], kind="stable")[:channels])
        keep = np.ones(weight.shape[0], dtype=np.float32)
        keep[outliers] = 0.0
        weights[node.input[1]].CopyFrom(
            numpy_helper.from_array(weight * keep[:, None], node.input[1])
        )
        graph.initializer.extend(
            [
                numpy_helper.from_array(keep, f"{name}/keep"),
                numpy_helper.from_array(outliers.astype(np.int64), f"{name}/outlier_index"),
                numpy_helper.from_array(weight[outliers], f"{name}/outlier_weight"),
            ]
        )
        fp32_mm = name + OUTLIER_SUFFIX
        at = list(graph.node).index(node)
        for offset, new in enumerate(
            [
                helper.make_node("Mul", [x, f"{name}/keep"], [f"{name}/kept"], name=f"{name}/keep"),
                helper.make_node(
                    "Gather", [x, f"{name}/outlier_index"], [f"{name}/outliers"],
                    name=f"{name}/gather", axis=-1,
                ),
                helper.make_node(
                    "MatMul", [f"{name}/outliers", f"{name}/outlier_weight"],
                    [f"{name}/outlier_out"], name=fp32_mm,
                ),
            ]
        ):  # fmt: skip
            graph.node.insert(at + offset, new)
        out = node.output[0]
        node.input[0] = f"{name}/kept"
        node.output[0] = f"{name}/kept_out"
        graph.node.insert(
            list(graph.node).index(node) + 1,
            helper.make_node(
                "Add", [f"{name}/kept_out", f"{name}/outlier_out"], [out], name=f"{name}/sum"
            ),
        )
        kept.append(fp32_mm)
    onnx.save(model, str(dst))
    return kept


def quantize(
    src: Path,
    dst: Path,
    batches: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    *,
    per_channel: bool,
    channels: int = CHANNELS,
) -> None:
    """Dynamic int8 of every MatMul in `src` but the outlier channels'.

    `src` is an fp32 graph (the build) or an int8 one whose down-projections were kept fp32 (a
    shipped model, `requantize`); only the down-projections are new to int8 in the second case.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = onnx.load(str(src), load_external_data=False)
    downs = [node.name for node in down_projection_nodes(source)]
    already_int8 = any(node.op_type == "MatMulInteger" for node in source.graph.node)
    with tempfile.TemporaryDirectory(prefix="outliers-") as tmp:
        split_path = Path(tmp) / "split.onnx"
        fp32_mms = split(src, split_path, input_maxima(src, batches), channels)
        quantize_dynamic(
            split_path,
            dst,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            nodes_to_quantize=downs if already_int8 else None,
            nodes_to_exclude=fp32_mms,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )


def calibration_batches(
    scorer: Classifier, texts: Sequence[str], batch: int = 32
) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """`texts` encoded by the runtime's `Classifier`, in length-sorted padded batches."""
    from moderator.decide.classifier import padded

    encoded = sorted(scorer.encode(texts), key=len)
    return [padded(encoded[i : i + batch], scorer.pad_id) for i in range(0, len(encoded), batch)]


def calibration_texts(limit: int = CALIBRATION_LINES, seed: int = 0) -> list[str]:
    """Real train-split lines (chat-like and toxic), a fixed sample: never dev or test."""
    from models.lines import realdata

    lines = realdata.select(realdata.load(), "train", realdata.CHAT_LIKE + realdata.TOXIC)
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(lines), size=min(limit, len(lines)), replace=False)
    return [lines[i].text for i in sorted(pick)]
