"""The shipped default model (`moderator/default_model/`, rebuilt by `make model`) meets the
contract and decides sensibly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.evaluation import evaluate
from models.evaluation.quantization import QUANT_MAX_DEV_GAP_POINTS
from models.export import onnx_export
from models.lines import corpus
from moderator.config import DEFAULT_MODEL_DIR

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model_dir() -> Path:
    if not (DEFAULT_MODEL_DIR / "manifest.json").is_file():
        pytest.fail(f"no default model at {DEFAULT_MODEL_DIR} (it is committed in git)")
    return DEFAULT_MODEL_DIR


def test_default_model_meets_the_contract(model_dir: Path) -> None:
    manifest = onnx_export.validate_model_dir(model_dir)
    assert manifest["name"] == "chat-minilm"
    assert manifest["labels"] == list(corpus.LABELS)
    assert manifest["activation"] == "sigmoid"
    assert manifest["activation_in_graph"] is True
    assert manifest["inputs"] == ["input_ids", "attention_mask"]
    assert manifest["fused_operators"]["Attention"] == 6
    requantized = manifest.get("requantized")
    if requantized is None:  # int8 against the fp32 graph it was built beside
        assert manifest["metrics"]["int8_vs_fp32"]["label_macro_f1_delta_points"] < 1.0
    else:  # no fp32 graph of its own: its source's gap to fp32, and its own to its source
        assert requantized["source_int8_vs_fp32"]["label_macro_f1_delta_points"] < 1.0
        gap = requantized["real_dev_vs_source"]["dev_gap_points"]
        assert gap <= QUANT_MAX_DEV_GAP_POINTS
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    assert tokenizer["model"]["type"] == "WordPiece"


@pytest.mark.parametrize(
    ("text", "allowed"),
    [
        ("gg wp", {"allow"}),
        ("headshot that guy on the roof lol", {"allow"}),
        ("fuck yeah we won", {"allow"}),
        ("kys", {"block"}),
        ("i know where you live and i'm coming for you", {"block"}),
        ("you are a worthless idiot", {"nudge", "block"}),
    ],
)
def test_default_model_decisions(model_dir: Path, text: str, allowed: set[str]) -> None:
    scores = evaluate.score_each(onnx_export.classifier(model_dir), [text])
    decide, _ = evaluate.load_policy()  # the runtime's default policy
    action = decide(scores.row(0)).action
    assert action in allowed, (text, scores.row(0))
    assert np.isfinite(scores.matrix).all()
