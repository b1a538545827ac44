"""A model directory's self-check: its manifest's own check lines, scored again, as recorded.

The loader checks model.onnx against the manifest's sha256, which says nothing of the tokenizer
or of the manifest's labels: a tokenizer from another build, or labels in another order, load
fine and score wrong. A manifest may carry `"checks"`: lines with the scores the model gave them
when it was built (`recorded` makes them); `failures` scores them again with the directory as
loaded. A model promoted live is held to them (moderator/shadow/switch.py). Pure and synchronous.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from moderator.decide.classifier import Classifier
from moderator.errors import ModelError

FIELD = "checks"  # the manifest's: [{"text": ..., "scores": {label: score}}, ...]
# int8 kernels differ a little across CPUs (VNNI or not) and ONNX Runtime builds; a wrong
# tokenizer or a label swap moves scores by tenths, so 0.05 tells them apart.
TOLERANCE = 0.05


# Scores in the sigmoid's steep middle move most with a CPU's int8 kernels; a wrong tokenizer or
# a label swap shows in the sure ones, so only those are recorded.
SURE = (0.05, 0.95)


def recorded(classifier: Classifier, texts: Sequence[str]) -> list[dict[str, Any]]:
    """Check lines for the manifest: each text with the sure scores `classifier` gives it now
    (below or above `SURE`)."""
    rows = classifier.score_ids(classifier.encode(texts))
    low, high = SURE
    return [
        {
            "text": text,
            "scores": {
                k: round(v, 4) for k, v in classifier.as_dict(row).items() if not low < v < high
            },
        }
        for text, row in zip(texts, rows, strict=True)
    ]


def check_lines(classifier: Classifier) -> list[dict[str, Any]]:
    """The manifest's check lines (none: an empty list); ModelError when they are malformed."""
    path = classifier.model_dir / "manifest.json"
    lines: list[dict[str, Any]] = json.loads(path.read_text()).get(FIELD, [])
    ok = isinstance(lines, list) and all(
        isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("scores"), dict)
        for c in lines
    )
    if not ok:
        raise ModelError(f"{path}: {FIELD!r} must be a list of {{'text', 'scores'}} objects")
    return lines


def failures(classifier: Classifier) -> list[str]:
    """What the model now scores otherwise than its manifest's check lines say (empty: passed,
    or no check lines)."""
    lines = check_lines(classifier)
    if not lines:
        return []
    rows = classifier.score_ids(classifier.encode([c["text"] for c in lines]))
    found = []
    for line, row in zip(lines, rows, strict=True):
        now = classifier.as_dict(row)
        for label, score in line["scores"].items():
            if label not in now:
                found.append(f"{line['text']!r}: the model has no label {label!r}")
            elif abs(now[label] - float(score)) > TOLERANCE:
                found.append(f"{line['text']!r}: {label} {now[label]:.3f}, recorded {score}")
    return found
