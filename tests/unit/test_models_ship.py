"""`python -m models ship`: the comparison it prints and the files it copies, on tiny models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx  # the model extra
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.export import ship
from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide.classifier import Classifier
from moderator.policy.rules import Policy

LABELS = ("toxicity", "insult", "threat", "identity_attack")
VOCAB = 30522  # the shipped tokenizer's (BERT uncased WordPiece)


def tiny_model(out: Path, *, seed: int, metrics: dict[str, object] | None = None) -> Path:
    """A model directory meeting the runtime's contract: a bag of token embeddings, one score
    per label (mean over the unmasked tokens, sigmoid), with the shipped tokenizer."""
    out.mkdir(parents=True)
    table = np.random.default_rng(seed).normal(0, 2, (VOCAB, len(LABELS))).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["emb"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "minus1"], ["mask3"]),
        helper.make_node("Mul", ["emb", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "one"], ["total"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "one"], ["count"], keepdims=0),
        helper.make_node("Div", ["total", "count"], ["mean"]),
        helper.make_node("Sigmoid", ["mean"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", len(LABELS)])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.asarray([-1], dtype=np.int64), "minus1"),
            numpy_helper.from_array(np.asarray([1], dtype=np.int64), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(out / "model.onnx"))
    (out / "model-fp32.onnx").write_bytes(b"not shipped")
    shutil.copyfile(DEFAULT_MODEL_DIR / "tokenizer.json", out / "tokenizer.json")
    sha = ship.sha256_file(out / "model.onnx")
    manifest = {
        "name": "tiny", "version": sha[:6], "labels": list(LABELS), "activation": "sigmoid",
        "activation_in_graph": True, "max_length": 128, "sha256": sha,
        "inputs": ["input_ids", "attention_mask"], "fp32_model": "model-fp32.onnx",
        "metrics": metrics or {},
    }  # fmt: skip
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def lines_file(tmp_path: Path) -> Path:
    path = tmp_path / "lines.tsv"
    texts = ["gg wp", "you are trash", "i will find you", "nice clutch", "lol", "go away"]
    path.write_text("".join(f"{t}\tlabel\n" for t in texts) + "\n")
    return path


def run(src: Path, dst: Path, tmp_path: Path, **kwargs: object) -> tuple[int, str]:
    out: list[str] = []
    status = ship.run(src, dst, lines_file=lines_file(tmp_path), say=out.append, **kwargs)  # type: ignore[arg-type]
    return status, "\n".join(out)


def test_a_first_ship_copies_exactly_the_three_runtime_files(tmp_path: Path) -> None:
    src, dst = tiny_model(tmp_path / "build", seed=1), tmp_path / "shipped"
    status, said = run(src, dst, tmp_path)
    assert status == 0
    assert "(none)" in said
    assert sorted(p.name for p in dst.iterdir()) == sorted(ship.SHIPPED_FILES)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert "fp32_model" not in manifest  # that file stays in the build folder
    assert (dst / "model.onnx").read_bytes() == (src / "model.onnx").read_bytes()
    assert Classifier(dst).labels == LABELS  # the runtime loads it, sha256 verified


def test_an_identical_model_touches_nothing(tmp_path: Path) -> None:
    src, dst = tiny_model(tmp_path / "build", seed=1), tmp_path / "shipped"
    run(src, dst, tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in dst.iterdir()}
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["metrics"] = {"latency_ms": 3.0}  # re-evaluated: metrics vary with the machine
    (src / "manifest.json").write_text(json.dumps(manifest))
    status, said = run(src, dst, tmp_path)
    assert status == 0
    assert "byte-identical" in said
    assert {p.name: p.stat().st_mtime_ns for p in dst.iterdir()} == before


def test_a_changed_model_is_compared_side_by_side_then_shipped(tmp_path: Path) -> None:
    old = tiny_model(tmp_path / "old", seed=1, metrics={"f1": 0.5, "only_old": 1, "run": "x"})
    new = tiny_model(tmp_path / "new", seed=2, metrics={"f1": 0.75, "only_new": 2})
    dst = tmp_path / "shipped"
    run(old, dst, tmp_path)
    status, said = run(new, dst, tmp_path)
    assert status == 0
    assert "sha256" in said
    assert "shipped" in said
    assert "rebuilt" in said
    assert "f1" in said
    assert "+0.25" in said  # the metric both have, old and new side by side
    assert "only_old" not in said
    assert "only_new" not in said
    assert "on 6 lines of lines.tsv" in said
    assert "actions under the default policy" in said
    assert json.loads((dst / "manifest.json").read_text())["sha256"] == ship.sha256_file(
        new / "model.onnx"
    )


def test_check_compares_but_copies_nothing(tmp_path: Path) -> None:
    dst = tmp_path / "shipped"
    run(tiny_model(tmp_path / "old", seed=1), dst, tmp_path)
    before = (dst / "model.onnx").read_bytes()
    status, said = run(tiny_model(tmp_path / "new", seed=2), dst, tmp_path, check_only=True)
    assert status == 0
    assert "nothing copied" in said
    assert (dst / "model.onnx").read_bytes() == before


def test_an_incomplete_or_tampered_build_is_refused(tmp_path: Path) -> None:
    src, dst = tiny_model(tmp_path / "build", seed=1), tmp_path / "shipped"
    (src / "model.onnx").write_bytes((src / "model.onnx").read_bytes()[:-1] + b"\0")
    status, said = run(src, dst, tmp_path)
    assert status == 2
    assert "sha256" in said
    (src / "tokenizer.json").unlink()
    status, said = run(src, dst, tmp_path)
    assert status == 2
    assert "missing tokenizer.json" in said
    assert not dst.exists()


def test_the_same_model_agrees_with_itself(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "m", seed=3)
    texts = ship.read_lines(lines_file(tmp_path))
    agreement = ship.compare_scores(model, model, texts, Policy.load())
    assert agreement.lines == 6
    assert agreement.action_agreement == 1.0
    assert agreement.mean_abs_score_diff == 0.0
    assert agreement.common_labels == LABELS


def test_metric_rows_pair_the_numbers_both_manifests_have() -> None:
    old = {"metrics": {"a": {"f1": 0.5, "n": 3}, "flag": True, "name": "x", "x": 1}}
    new = {"metrics": {"a": {"f1": 0.6}, "flag": False, "y": 2}}
    assert ship.metric_rows(old, new) == [("a.f1", 0.5, 0.6)]
    assert ship.metric_rows({}, new) == []


@pytest.mark.parametrize("limit", [None, 2])
def test_read_lines_takes_the_text_column(tmp_path: Path, limit: int | None) -> None:
    texts = ship.read_lines(lines_file(tmp_path), limit)
    assert texts[:2] == ["gg wp", "you are trash"]
    assert len(texts) == (6 if limit is None else 2)


def test_headline_keeps_the_figures_a_reviewer_reads_first() -> None:
    rows = [
        ("int8.actions.flagged.f1", 0.8, 0.9),
        ("real.scorers.int8.toxic.all.flagged", 0.5, 0.7),
        ("real.scorers.int8.toxic.all.lines", 10.0, 10.0),
        ("real.identity.int8.per_term.gay.benign_flagged", 0.0, 0.1),
    ]
    assert [r[0] for r in ship.headline(rows)] == [
        "int8.actions.flagged.f1",
        "real.scorers.int8.toxic.all.flagged",
    ]
    assert ship.headline([("a.f1", 0.5, 0.6)]) == [("a.f1", 0.5, 0.6)]
