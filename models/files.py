"""Where the model build's files live, and the sha256 that pins their bytes.

The bottom of the model builder: it imports nothing of it, so every layer may name a path or
check a digest here, and a module can move between layers without moving a file it writes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent  # the generated documents (REPORT.md, DATA.md, ...)
REPO_ROOT = MODELS_DIR.parent
DATA_DIR = MODELS_DIR / "data"  # the committed lines (train.tsv, heldout.tsv, suite.tsv, ...)
BUILD_DIR = MODELS_DIR / "build"  # build output and download caches (git-ignored)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
