"""What the group-neutral limit costs a model: the tuner's choice under three limits (issue 39).

The build tunes the default policy with at most `tuning.MAX_GROUP_FLAG` of the neutral statements
about groups flagged. Since the stance sources joined, those are ToxiGen's neutral statements and
HatemojiBuild's not-hateful posts whose pair names a group (`realdata.GROUP_NEUTRAL`), 593 dev
lines where ToxiGen alone gave 64. A model that cannot tell the two stances apart then gets the
thresholds of the labels that flag such talk lifted (`realtext.tune`; until 2026-12-02 every
label's), and catches less hate. This prints, for one
model's int8 dev scores, the thresholds and dev figures under the limit over every group-neutral
line (as the build), over ToxiGen's only (as before the stance sources) and with none, so two
models are compared under the same limit rather than each under its own: give `--model` once per
model and each gets its three rows in one table. With `--test`, each model's three tables are
also judged on the real test splits (pools as REPORT.md's, each line's action from its scores
under the table, as the tuner reads dev; a long message's windows are not split here), one column
per model and limit, so the choice of limit is made on figures the tuner never saw.

    python -m models.evaluation.group_limit --model DIR [--model DIR ...] [--test]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realeval, realtext, tuning
from models.export import onnx_export
from models.lines import realdata


def limits(
    groups: npt.NDArray[np.float32], sources: Sequence[str]
) -> list[tuple[str, npt.NDArray[np.float32] | None]]:
    """The three group pools the tuner is held to: every line, ToxiGen's only, none."""
    toxigen = np.asarray([source == "toxigen" for source in sources], dtype=bool)
    return [
        ("every group-neutral line", groups),
        ("ToxiGen's only", groups[toxigen]),
        ("none", None),
    ]


def row(
    name: str,
    result: dict[str, Any],
    groups: npt.NDArray[np.float32],
    labels: Sequence[str],
    model: str = "",
) -> str:
    """One limit's line: the model (when named), the pair chosen, dev benign flagged, dev toxic
    caught, and the share of every group-neutral line flagged at that table (whatever the limit
    held)."""
    flagged = realtext.flag_block(groups, labels, result["table"])[0]
    return (
        ("| " + model + " " if model else "")
        + f"| {name} | {result['nudge']} / {result['block']} | {result['dev_benign_flag_rate']:.2%}"
        f" | {result['dev_toxic_recall']:.1%} | {realtext.rate(flagged):.1%} |"
    )


def held_out_figures(
    matrix: npt.NDArray[np.float32],
    lines: Sequence[realdata.Line],
    labels: Sequence[str],
    table: realtext.Table,
) -> dict[str, float]:
    """One table's figures on the test lines `lines` (scored `matrix`): REPORT.md's pools as
    `realeval.judge` draws them (benign flagged, the toxic pools, group-neutral flagged, the
    chat-vs-toxic AUC), and the labelled hate and threats of every source caught, with the AUC
    of the highest acting score between them and the group-neutral lines."""
    flagged, blocked = realtext.flag_block(matrix, labels, table)
    score = matrix[:, [j for j, label in enumerate(labels) if label != "obscene"]].max(axis=1)
    judged = realeval.judge(
        lines, realeval.Verdicts(flagged, blocked, score, matrix[:, list(labels).index("insult")])
    )
    src = np.asarray([ln.source for ln in lines])
    family = np.asarray([ln.family for ln in lines])
    toxic = np.asarray([ln.toxic for ln in lines])
    groups = np.asarray([(ln.source, ln.family) in realdata.GROUP_NEUTRAL for ln in lines], bool)
    hate = (
        toxic & np.isin(src, realdata.LABELLED) & np.isin(family, (realdata.HATE, realdata.THREAT))
    )
    out = {
        "benign chat-like flagged": judged["benign"]["chat-like"]["flagged"],
        "benign movie_dialog flagged": judged["benign"]["movie_dialog"]["flagged"],
        "all real toxic flagged": judged["toxic"]["all"]["flagged"],
    }
    for name in realdata.TOXIC:
        out[f"{name} flagged"] = judged["toxic"][name]["flagged"]
    out["labelled hate and threats caught"] = realtext.rate(flagged[hate])
    for name in realdata.LABELLED:
        if (hate & (src == name)).any():
            out[f"  {name}"] = realtext.rate(flagged[hate & (src == name)])
    out["group-neutral flagged"] = judged["labelled"]["pooled"]["group_neutral"]["flagged"]
    out["AUC chat-like vs real toxic"] = judged["auc_chat_like_vs_toxic"]
    out["AUC hate vs group-neutral"] = realtext.auc(score[hate], score[groups])
    return out


def figure_table(columns: Sequence[tuple[str, dict[str, float]]]) -> list[str]:
    """Markdown: a row per figure, a column per (model, limit)."""
    out = ["| test split | " + " | ".join(name for name, _ in columns) + " |"]
    out.append("|---" + "|---:" * len(columns) + "|")
    for key in columns[0][1]:
        cells = [f"{f[key]:.3f}" if key.startswith("AUC") else f"{f[key]:.1%}" for _, f in columns]
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m models.evaluation.group_limit", description=__doc__)
    p.add_argument(
        "--model", type=Path, action="append", required=True, help="a model directory (repeat)"
    )
    p.add_argument("--test", action="store_true", help="judge every table on the test splits too")
    args = p.parse_args(argv)
    lines = realdata.load()
    sources = [ln.source for ln in realdata.group_neutral(lines, "dev")]
    test = [ln for ln in lines if ln.split == "test"]
    rows, columns = [], []
    for model in args.model:
        benign, toxic, labels, families, groups = tuning.dev_scores(model)
        print(f"{model}: {len(benign)} benign, {len(toxic)} toxic, {len(groups)} group-neutral dev")
        manifest = json.loads((model / "manifest.json").read_text(encoding="utf-8"))
        tag = f"`{manifest['name']}@{manifest['version']}`" if len(args.model) > 1 else ""
        scored = (
            realtext.batch_scores(onnx_export.classifier(model), [ln.text for ln in test])
            if args.test
            else None
        )
        for limit, pool in limits(groups, sources):
            result = tuning.tune_within_limits(benign, toxic, labels, pool, families)
            rows.append(row(limit, result, groups, labels, tag))
            if scored is not None:
                name = f"{tag or model.name}: {limit}"
                columns.append((name, held_out_figures(scored, test, labels, result["table"])))
    head = "| model " if len(args.model) > 1 else ""
    print(
        head
        + "| limit on | nudge / block | benign flagged | toxic caught | group-neutral flagged |"
    )
    print(("|---" if head else "") + "|---|---|---:|---:|---:|")
    print("\n".join(rows))
    if columns:
        print(f"\ntest splits ({len(test)} lines):\n" + "\n".join(figure_table(columns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
