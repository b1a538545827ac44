"""What the group-neutral limit costs a model: the tuner's choice under three limits (issue 39).

The build tunes the default policy with at most `tuning.MAX_GROUP_FLAG` of the neutral statements
about groups flagged. Since the stance sources joined, those are ToxiGen's neutral statements and
HatemojiBuild's not-hateful posts whose pair names a group (`realdata.GROUP_NEUTRAL`), 593 dev
lines where ToxiGen alone gave 64. A model that cannot tell the two stances apart then gets its
thresholds pushed up for every label, and catches less of everything. This prints, for one
model's int8 dev scores, the thresholds and dev figures under the limit over every group-neutral
line (as the build), over ToxiGen's only (as before the stance sources) and with none, so two
models are compared under the same limit rather than each under its own: give `--model` once per
model and each gets its three rows in one table.

    python -m models.evaluation.group_limit --model DIR [--model DIR ...]
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

from models.evaluation import realtext, tuning
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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m models.evaluation.group_limit", description=__doc__)
    p.add_argument(
        "--model", type=Path, action="append", required=True, help="a model directory (repeat)"
    )
    args = p.parse_args(argv)
    sources = [ln.source for ln in realdata.group_neutral(realdata.load(), "dev")]
    rows = []
    for model in args.model:
        benign, toxic, labels, families, groups = tuning.dev_scores(model)
        print(f"{model}: {len(benign)} benign, {len(toxic)} toxic, {len(groups)} group-neutral dev")
        manifest = json.loads((model / "manifest.json").read_text(encoding="utf-8"))
        tag = f"`{manifest['name']}@{manifest['version']}`" if len(args.model) > 1 else ""
        for limit, pool in limits(groups, sources):
            result = tuning.tune_within_limits(benign, toxic, labels, pool, families)
            rows.append(row(limit, result, groups, labels, tag))
    head = "| model " if len(args.model) > 1 else ""
    print(
        head
        + "| limit on | nudge / block | benign flagged | toxic caught | group-neutral flagged |"
    )
    print(("|---" if head else "") + "|---|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
