"""A line's name in the committed lists of lines (test_lines.tsv, the suite overlap lists).

Here, below the lines layer, because the sources' readers drop listed lines themselves
(`models.sources.multilingual`) and `models.lines.overlap` writes the lists.
"""

from __future__ import annotations

import hashlib

from moderator.normalize import normalize_text

SUITE_OVERLAP_COLUMNS = ("source", "id", "suite")


def line_id(source: str, text: str) -> str:
    """A line's name in the committed lists (test_lines.tsv, suite_overlap.tsv): its source
    and the first 16 hex digits of the sha256 of its normalised lower-case text."""
    key = f"{source}\0{normalize_text(text).lower()}".encode()
    return hashlib.sha256(key).hexdigest()[:16]
