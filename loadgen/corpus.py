"""The chat corpus the load generator draws from (`loadgen/corpus/*.txt`, package data).

The lines were written for the load generator and are independent of the model's training data
(`models/data/`), so a run never measures a model on the text it was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
BENIGN_FILE = "benign.txt"
LONG_FILE = "long.txt"
TOXIC_FILE = "toxic.txt"


def parse_lines(text: str) -> tuple[str, ...]:
    """The non-blank lines of a corpus file that are not `#` comments, stripped."""
    lines = (line.strip() for line in text.splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))


def read_corpus_file(name: str) -> tuple[str, ...]:
    """One corpus file from the package's `corpus/` folder.

    Read by path next to this module rather than through `importlib.resources`, which fails when
    an editable install registered `loadgen` as a namespace package.
    """
    return parse_lines((CORPUS_DIR / name).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Corpus:
    """Chat lines by kind: short and medium benign lines, the long tail, and toxic lines."""

    benign: tuple[str, ...]
    long: tuple[str, ...]
    toxic: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("benign", "long", "toxic"):
            if not getattr(self, name):
                raise ValueError(f"corpus has no {name} lines")


@cache
def default_corpus() -> Corpus:
    """The corpus shipped with the package (read once)."""
    return Corpus(
        benign=read_corpus_file(BENIGN_FILE),
        long=read_corpus_file(LONG_FILE),
        toxic=read_corpus_file(TOXIC_FILE),
    )
