"""The synthetic-vs-real trade-off table: weight mixing and the per-mix figures, no training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch  # the model extra; installed by `make test`

from models.lines import corpus
from models.reports import tradeoff

LABELS = corpus.LABELS
TOX = LABELS.index("toxicity")


def test_mix_interpolates_floats_and_keeps_integer_buffers() -> None:
    shipped = {"w": torch.tensor([1.0, 3.0]), "ids": torch.tensor([5, 6])}
    template = {"w": torch.tensor([3.0, 7.0]), "ids": torch.tensor([0, 0])}
    assert torch.equal(tradeoff.mix(shipped, template, 1.0)["w"], shipped["w"])
    assert torch.equal(tradeoff.mix(shipped, template, 0.0)["w"], template["w"])
    half = tradeoff.mix(shipped, template, 0.5)
    assert torch.allclose(half["w"], torch.tensor([2.0, 5.0]))
    assert torch.equal(half["ids"], shipped["ids"])


def _scores(values: list[float]) -> np.ndarray:
    out = np.zeros((len(values), len(LABELS)), np.float32)
    out[:, TOX] = values
    return out


def test_measure_tunes_on_dev_and_judges_the_synthetic_split_under_that_policy() -> None:
    # Dev: 1000 benign lines, 1% of them at 0.96 and the rest at 0, so a nudge threshold at or
    # below 0.96 would flag 1% (> the 0.8% limit): the tuner must go above 0.96.
    dev_benign = _scores([0.96] * 10 + [0.0] * 990)
    dev_toxic = _scores([0.99] * 8 + [0.3] * 2)
    # Synthetic: 4 toxic lines (two at 0.999, two at 0.9) and 4 benign (one at 0.999).
    synthetic = _scores([0.999, 0.999, 0.9, 0.9, 0.999, 0.0, 0.0, 0.0])
    gold = _scores([1.0] * 4 + [0.0] * 4)  # 0/1 labels: the first four are toxic
    row = tradeoff.measure(
        {
            "synthetic": synthetic,
            "dev_benign": dev_benign,
            "dev_toxic": dev_toxic,
            "test_benign": _scores([0.0] * 99 + [0.99]),
            "test_toxic": _scores([0.99, 0.5]),
            "test_rtp": _scores([0.99, 0.99, 0.1, 0.1]),
        },
        gold,
    )
    assert row["limits_met"]
    assert row["nudge"] > 0.96
    syn = row["synthetic"]
    assert (syn["precision"], syn["recall"]) == (2 / 3, 0.5)  # tp 2, fp 1, fn 2
    assert syn["benign_flagged"] == 0.25
    # At 0.5 every toxic line is caught: precision 4/5, recall 1 (4 digits, as training prints).
    assert row["synthetic_f1_at_half"] == round(2 * 0.8 / 1.8, 4)
    assert row["test_benign_flagged"] == 0.01
    assert (row["test_toxic_flagged"], row["test_rtp_flagged"]) == (0.5, 0.5)


def test_render_names_the_targets_each_row_misses() -> None:
    def row(a: float, f1: float, chat: float, rtp: float) -> dict[str, object]:
        syn = {"f1": f1, "precision": f1, "recall": f1, "benign_flagged": 0.05}
        return {
            "alpha": a,
            "nudge": 0.75,
            "block": 0.97,
            "limits_met": True,
            "synthetic": syn,
            "synthetic_f1_at_half": f1,
            "test_benign_flagged": chat,
            "test_benign_blocked": 0.001,
            "test_toxic_flagged": rtp,
            "test_rtp_flagged": rtp,
        }

    sizes = dict.fromkeys(("dev_benign", "dev_toxic", "test_benign", "test_rtp"), 10)
    rows = [row(1.0, 0.85, 0.008, 0.83), row(0.5, 0.9, 0.02, 0.5), row(0.2, 0.9, 0.005, 0.9)]
    text = tradeoff.render(rows, sizes, Path("w.pt"), 12.0)
    lines = [ln for ln in text.splitlines() if ln.startswith("| 1.00") or ln.startswith("| 0.")]
    assert lines[0].endswith("| misses synthetic F1 |")
    assert lines[1].endswith("| misses chat-like, toxic |")
    assert lines[2].endswith("| all |")
    assert "1 of 3 mixes meet every target" in text
