"""Preparing `models.sources.multilingual`'s TSVs from repository snapshots, once, and finding
the lines that overlap Multilingual HateCheck (the public suite the per-language validation is
judged on), which the reader then never returns.

Each `prepare_*` undoes what its source does to text (mentions, URLs, line-break markers) with
`labelled`'s own cleaning, then `labelled.without_conflicts` keeps a text once and drops one
given two labels. The overlap rule is `models.lines.overlap`'s (equal after normalising,
containment from 4 words, a shared run of 8) for text with spaces; Chinese has none, so there
one text is one "word" and only exact equality would count: a zh line is compared on its
characters instead (`_CharOverlap`).

    python -m models.lines.multilingual_prepare prepare cold=GIT_DIR gahd=GIT_DIR ... [--out DIR]
    python -m models.lines.multilingual_prepare overlap MHC_GIT_DIR
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import io
import re
import sys
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from models.lines.overlap import SUITE_OVERLAP_COLUMNS, Overlap, line_id
from models.sources import labelled
from models.sources.labelled import Show, clean_tweet
from models.sources.multilingual import (
    COLD,
    COLUMNS,
    GAHD,
    GERMEVAL,
    MLMA,
    OVERLAP_FILE,
    SOURCES,
    TRAC,
    rows,
)
from moderator.normalize import normalize_text


def _csv(show: Show, path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(show(path).decode("utf-8-sig"))))


# Chat lines are short: COLD's median comment is 40 characters, and the longer ones (to 192)
# would double the TSV (5.8 MB whole, 2.8 MB kept) for text unlike a chat message.
COLD_MAX_CHARS = 60
_COLD_FINE = {"1": "attack_individual", "2": "attack_group", "3": "anti_bias", "0": "other"}


def prepare_cold(show: Show) -> list[list[str]]:
    out = []
    for path in COLD.paths:
        for row in _csv(show, path):
            text = labelled.collapse(html.unescape(row["TEXT"]))
            if len(text) > COLD_MAX_CHARS:
                continue
            label = "offensive" if row["label"] == "1" else "safe"
            fine = _COLD_FINE.get(row.get("fine-grained-label") or "", "")
            out.append([text, "zh", label, fine, ""])
    return out


def prepare_germeval(show: Show) -> list[list[str]]:
    out = []
    for path in GERMEVAL.paths:
        for line in show(path).decode("utf-8").splitlines():
            text, coarse, fine = line.rsplit("\t", 2)
            out.append([clean_tweet(text.replace("|LBR|", " ")), "de", fine, coarse, ""])
    return out


def prepare_trac(show: Show) -> list[list[str]]:
    out = []
    for path in TRAC.paths:
        for row in csv.reader(io.StringIO(show(path).decode("utf-8"))):
            if len(row) == 3 and row[2] in ("OAG", "NAG"):
                out.append([clean_tweet(row[1]), "hi", row[2], "", ""])
    return out


# MLMA writes retweets lower-case ("rt @user ..."), which `clean_tweet`'s prefix rule misses.
_LOWER_RETWEET = re.compile(r"^\s*rt\s+(?=@)", re.IGNORECASE)


def prepare_mlma(show: Show) -> list[list[str]]:
    out = []
    with zipfile.ZipFile(io.BytesIO(show(MLMA.paths[0]))) as archive:
        for language in ("ar", "fr"):
            data = archive.read(f"hate_speech_mlma/{language}_dataset.csv").decode("utf-8")
            for row in csv.DictReader(io.StringIO(data)):
                detail = f"{row['target']};{row['group']}"
                text = clean_tweet(_LOWER_RETWEET.sub(" ", row["tweet"]))
                out.append([text, language, row["sentiment"], detail, ""])
    return out


def prepare_gahd(show: Show) -> list[list[str]]:
    """GAHD without its translated rows; a sentence and its contrastive rewrites share a pair
    (the smallest id of their chain of rewrites, a union-find over `contrastive_gahd_id`)."""
    kept = [r for r in _csv(show, GAHD.paths[0]) if r["source"] != "translation"]
    parent = {r["gahd_id"]: r["gahd_id"] for r in kept}

    def root(node: str) -> str:
        while parent[node] != node:
            node = parent[node]
        return node

    for r in kept:
        other = r["contrastive_gahd_id"]
        if other in parent:
            a, b = sorted((root(r["gahd_id"]), root(other)))
            parent[b] = a
    paired = {root(r["contrastive_gahd_id"]) for r in kept if r["contrastive_gahd_id"] in parent}
    out = []
    for r in kept:
        pair = root(r["gahd_id"])
        label = "hate" if r["label"] == "1" else "not_hate"
        out.append([labelled.collapse(r["text"]), "de", label, r["source"],
                    pair if pair in paired else ""])  # fmt: skip
    return out


PREPARE: dict[str, Callable[[Show], list[list[str]]]] = {
    "cold": prepare_cold,
    "germeval": prepare_germeval,
    "trac": prepare_trac,
    "mlma": prepare_mlma,
    "gahd": prepare_gahd,
}


def prepare(name: str, git_dir: Path, out: Path) -> Path:
    """Write `<out>/<name>/<name>.tsv` and the repository's licence as LICENSE."""
    source = SOURCES[name]
    show = labelled.git_show(git_dir, source.commit)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    cleaned = labelled.without_conflicts(PREPARE[name](show), label_at=2)
    (folder / source.tsv).write_text(labelled.write_tsv(cleaned, COLUMNS), encoding="utf-8")
    (folder / labelled.LICENCE_FILE).write_bytes(show(source.licence_path))
    return folder


# A Chinese line overlaps a case held whole inside it (or holding it whole) from this many
# characters: about `overlap.MIN_CONTAINED` words (a Chinese word is one to two characters), so
# "我讨厌黑人" (5) inside a longer comment is not counted, as "I hate blacks" would not be.
MIN_CONTAINED_CHARS = 7


def _chars(text: str) -> str:
    """A text's letters, normalised and lower-cased, without punctuation, symbols or spaces."""
    return "".join(c for c in normalize_text(text).lower() if unicodedata.category(c)[0] in "LN")


class _CharOverlap:
    """`overlap.Overlap` for text without spaces: equal letters, or one held whole in the other
    (the shorter at least `MIN_CONTAINED_CHARS` long)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._equal: set[str] = set()
        self._inner: set[str] = set()  # every substring of a case from MIN_CONTAINED_CHARS
        self._lengths: set[int] = set()  # lengths of the cases a line may hold
        for text in texts:
            key = _chars(text)
            self._equal.add(key)
            if len(key) >= MIN_CONTAINED_CHARS:
                self._lengths.add(len(key))
                self._inner.update(
                    key[i:j]
                    for i in range(len(key))
                    for j in range(i + MIN_CONTAINED_CHARS, len(key) + 1)
                )

    def hits(self, text: str) -> bool:
        key = _chars(text)
        if key in self._equal or (len(key) >= MIN_CONTAINED_CHARS and key in self._inner):
            return True
        return any(
            key[i : i + n] in self._equal for n in self._lengths for i in range(len(key) - n + 1)
        )


def overlap(mhc_git_dir: Path, directory: Path | None = None) -> list[tuple[str, str, str]]:
    """(dataset, line id, suite) of every line overlapping a Multilingual HateCheck case: by
    `models.lines.overlap`'s words, and for Chinese by characters (`_CharOverlap`)."""
    from models.lines.suites import suite_texts

    suite = "multilingual_hatecheck"
    cases = suite_texts(suite, mhc_git_dir)
    words, chars = Overlap(cases), _CharOverlap(cases)
    hits = {
        (row.dataset, line_id(row.dataset, row.text))
        for row in rows(directory, drop=False)
        if words.hits(row.text) or (row.language == "zh" and chars.hits(row.text))
    }
    return [(name, ident, suite) for name, ident in sorted(hits)]


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.lines.multilingual_prepare", description=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="clean the datasets out of repository snapshots")
    prep.add_argument("snapshots", nargs="+", help="NAME=GIT_DIR, NAME among " + ", ".join(SOURCES))
    prep.add_argument("--out", type=Path, default=None, help="default: labelled.data_dir()")
    over = sub.add_parser("overlap", help=f"write {OVERLAP_FILE} from the suite's snapshot")
    over.add_argument("mhc", type=Path, help="git directory of the suite's repository")
    args = parser.parse_args(argv)
    out = args.out if args.command == "prepare" and args.out else labelled.data_dir()
    if args.command == "overlap":
        found = overlap(args.mhc)
        (out / OVERLAP_FILE).write_text(
            labelled.write_tsv(found, SUITE_OVERLAP_COLUMNS), encoding="utf-8"
        )
        print(f"{len(found)} lines overlap the suite: {out / OVERLAP_FILE}")
        return 0
    for item in args.snapshots:
        name, _, git_dir = item.partition("=")
        folder = prepare(name, Path(git_dir), out)
        for path in sorted(folder.iterdir()):
            print(f"{path}  {hashlib.sha256(path.read_bytes()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
