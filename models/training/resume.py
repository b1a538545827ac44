"""Fine-tuning that survives being stopped: a checkpoint every few minutes, resumed exactly.

An e5 build trains for two hours or more on 2 cores, longer than a working session or a CI job
leaves a background process alive. `train_finetune` saves its whole state here (weights,
optimiser, schedule, the step within the epoch, and every random state that decides what comes
next: the batch order's and torch's, which draws the dropout masks), written to a temporary file
and renamed, so a kill mid-write leaves the last good one. A run started again with the same
recipe on the same data resumes where that one stopped and ends with the same weights as a run
never stopped (tests/unit/test_models_resume.py).

A checkpoint is keyed by a digest of the recipe and the training data (token ids and targets):
a run with another recipe or other data never resumes a stale state; it starts afresh and
replaces it. When training ends its last state is saved too, and stays until the caller is done
with it (`moderator model build` removes it once the model is in place): a build stopped after
training (export, tuning, reports) goes straight past training when run again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

EVERY_S = 600.0  # a stop costs at most this much training; a save of e5's state takes ~2 s
PREFIX = "train-"


def fingerprint(ids: Sequence[Sequence[int]], targets: Any, recipe: object) -> str:
    """A digest of what decides the trained weights: the recipe and the data, row by row."""
    h = hashlib.sha256(repr(recipe).encode())
    for row in ids:
        h.update(np.asarray(row, dtype=np.int64).tobytes())
        h.update(b"|")
    h.update(np.ascontiguousarray(targets.numpy()).tobytes())
    return h.hexdigest()[:16]


class Checkpoint:
    """The training state of one recipe and data in `folder`: `load()` what an earlier run left,
    `save()` when `due()` and at the end (the caller removes the folder once it has served)."""

    def __init__(self, folder: Path, key: str, *, every_s: float = EVERY_S) -> None:
        self.folder = folder
        self.path = folder / f"{PREFIX}{key}.pt"
        self.every_s = every_s
        self._saved_at = time.monotonic()

    def load(self) -> dict[str, Any] | None:
        """The state an earlier run with this key saved, or None (any other key's is removed)."""
        import torch

        for other in self.folder.glob(f"{PREFIX}*.pt"):
            if other != self.path:
                other.unlink()
        if not self.path.exists():
            return None
        state: dict[str, Any] = torch.load(self.path, weights_only=False)  # our own file
        return state

    def due(self) -> bool:
        return time.monotonic() - self._saved_at >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        torch.save(state, partial)
        partial.replace(self.path)
        self._saved_at = time.monotonic()
