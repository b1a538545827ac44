"""The moderators' verdicts as a train split of their own (`make model MODELS_VERDICTS=FILE`,
`moderator model build --verdicts FILE`).

The file is what `moderator verdicts export` writes: `text<TAB>labels` lines, the format of
`data/train.tsv` (`corpus.read_tsv`; an unknown label stops the build). They train and nothing
else: no dev, no test. A verdict is a label on our own traffic, given on exactly the messages
the model was unsure of; tuning thresholds or reporting figures on them would grade the model
on what it was just taught. DATA.md names the file, its sha256 and its counts
(`datasheet.py`), from the manifest's `training.verdicts` (`describe`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from models.lines import corpus

ENV = "MODELS_VERDICTS"  # the file, when `--verdicts` is not given


def default_file() -> Path | None:
    """`$MODELS_VERDICTS`, if set and not empty."""
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def load(path: Path) -> list[tuple[str, tuple[float, ...]]]:
    """The file's lines as (text, targets in `corpus.LABELS` order), in file order."""
    rows = corpus.read_tsv(path)
    return [
        (text, tuple(target))
        for (text, _), target in zip(rows, corpus.label_matrix(rows), strict=True)
    ]


def describe(path: Path, lines: list[tuple[str, tuple[float, ...]]]) -> dict[str, Any]:
    """What the manifest keeps of the split, for DATA.md: file name, sha256, lines, flagged."""
    acting = corpus.ACTING
    return {
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "lines": len(lines),
        "flagged": sum(1 for _, y in lines if any(y[j] for j in acting)),
    }


def datasheet_section(info: dict[str, Any] | None) -> list[str]:
    """DATA.md's section on the split; none when the build had no verdicts file."""
    if not info:
        return []
    return [
        "## Moderators' verdicts (a train split of their own)",
        "",
        f"`{info['file']}` (sha256 `{info['sha256'][:12]}…`): {info['lines']:,} lines,"
        f" {info['flagged']:,} flagged by a moderator (`nudge` or `block`: `toxicity` and the"
        " label that held the message when it is the model's), the rest allowed (benign), from"
        " `moderator verdicts export` (the review topic joined with the verdict topic; the first"
        " verdict on a message decides it, the latest on a text wins). Train only: never dev or"
        " test, since the verdicts were given on the messages the model was unsure of and"
        " judging it on them would grade it on what it was just taught. Their terms are the"
        " operator's: the texts are its users' chat.",
        "",
    ]
