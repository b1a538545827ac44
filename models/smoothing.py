"""SmoothQuant for the feed-forward down-projections: int8 without their outliers' error.

The MatMuls that read a GELU's output see a few input channels with huge values (Bondarenko et
al. 2021). One dynamic int8 scale per activation tensor then flattens every other channel, which
cost 2-4 points of recall against fp32, so they were kept fp32, at about 40% of the int8 model's
time on an AVX-512 VNNI host (onnxruntime's profiler, 16 tokens, 1 thread). SmoothQuant (Xiao et
al. 2023, "SmoothQuant: Accurate and Efficient Post-Training Quantization for Large Language
Models") moves the difficulty into the weights, which are quantized offline per column: each
input channel j is divided by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) (a `Mul` before the
MatMul) and row j of the weights multiplied by it, which leaves the product unchanged in exact
arithmetic. The activation maxima come from calibration text of the training split (template
and real lines: on templates alone, real insults lost 1 point of recall against fp32).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

ALPHA = 0.75  # 0.5 (the paper's default) lost 3 points of action agreement here; 0.75 and 0.9 ~1
CALIBRATION_LINES = 1500


def smooth_down_projections(
    model: Path, names: Sequence[str], calibration: Sequence[npt.NDArray[np.int64]]
) -> None:
    """Rewrite the fp32 MatMuls `names` of `model` (in place) as `Mul` by 1/s, then a
    `DynamicQuantizeMatMul` with per-column int8 weights, s calibrated on `calibration` (token
    id arrays, one text each)."""
    import onnx
    from onnx import helper, numpy_helper

    proto = onnx.load(str(model))
    graph = proto.graph
    targets = [node for node in graph.node if node.name in set(names)]
    maxima = _input_maxima(proto, targets, calibration)
    weights = {init.name: init for init in graph.initializer}
    nodes = []
    for node in graph.node:
        if node not in targets:
            nodes.append(node)
            continue
        w = numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
        x_max = np.maximum(maxima[node.name], 1e-5)
        s = x_max**ALPHA / (np.abs(w).max(axis=1) + 1e-8) ** (1 - ALPHA)
        smoothed = w * s[:, None]
        scale = (np.abs(smoothed).max(axis=0) / 127.0).astype(np.float32)
        q = np.clip(np.round(smoothed / scale), -127, 127).astype(np.int8)
        base = node.name
        graph.initializer.extend([
            numpy_helper.from_array((1.0 / s).astype(np.float32), f"{base}_smooth"),
            numpy_helper.from_array(q, f"{base}_w_int8"),
            numpy_helper.from_array(scale, f"{base}_w_scale"),
            numpy_helper.from_array(np.zeros_like(q[0]), f"{base}_w_zero"),
        ])  # fmt: skip
        nodes.append(helper.make_node("Mul", [node.input[0], f"{base}_smooth"],
                                      [f"{base}_smoothed"], name=f"{base}_Smooth"))  # fmt: skip
        nodes.append(helper.make_node(
            "DynamicQuantizeMatMul",
            [f"{base}_smoothed", f"{base}_w_int8", f"{base}_w_scale", f"{base}_w_zero"],
            list(node.output), name=f"{base}_quant", domain="com.microsoft",
        ))  # fmt: skip
    used = {name for node in nodes for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.save(proto, str(model))


def _input_maxima(
    proto: object, targets: Sequence[object], calibration: Sequence[npt.NDArray[np.int64]]
) -> dict[str, npt.NDArray[np.float32]]:
    """max |x| per input channel of each target MatMul, over the calibration texts."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    for node in targets:
        probe.graph.output.append(
            helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None)  # type: ignore[attr-defined]
        )
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    wanted = [node.input[0] for node in targets]  # type: ignore[attr-defined]
    maxima: dict[str, npt.NDArray[np.float32]] = {}
    for ids in calibration:
        batch = ids[None, :]
        outs = session.run(wanted, {"input_ids": batch, "attention_mask": np.ones_like(batch)})
        for node, out in zip(targets, outs, strict=True):
            channel_max = np.abs(out).reshape(-1, out.shape[-1]).max(axis=0)
            name = node.name  # type: ignore[attr-defined]
            maxima[name] = np.maximum(maxima.get(name, channel_max), channel_max)
    return maxima


def calibration_ids(
    tokenizer: Path, texts: Sequence[str], max_length: int
) -> list[npt.NDArray[np.int64]]:
    """Token ids of every `len(texts) // CALIBRATION_LINES`-th text, as the runtime encodes."""
    from models.onnx_export import encode, load_tokenizer

    tok = load_tokenizer(tokenizer, max_length)
    step = max(1, len(texts) // CALIBRATION_LINES)
    return [encode(tok, text)[0][0] for text in texts[::step]]
