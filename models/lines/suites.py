"""The public test suites: which stance lines overlap them, written down once.

HateCheck, HatemojiCheck and Multilingual HateCheck are never trained, tuned or picked on, and
they stay outside the repository (evaluation material the team does not hold). So what
overlaps them (`models.lines.overlap`, containment included) is found once, from their
repository snapshots, and committed as line ids (`suite_overlap.tsv`), which the build leaves
out (`models.lines.realdata.decontaminate`):

    python -m models.lines.suites hatecheck=GIT_DIR hatemojicheck=GIT_DIR \
        multilingual_hatecheck=GIT_DIR
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from models.lines import realdata
from models.lines.overlap import SUITE_OVERLAP, SUITE_OVERLAP_COLUMNS, Overlap, line_id
from models.sources import labelled

SUITES: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    # name: (repository, commit, files (globs), text column)
    "hatecheck": (
        "paul-rottger/hatecheck-data",
        "d84302298ceeb34f4b0dde2d8a1f4932c2caa612",
        ("all_cases.csv",),
        "test_case",
    ),
    "hatemojicheck": (
        "HannahKirk/Hatemoji",
        "a626f63216158748d072e581efc00267031f4404",
        ("HatemojiCheck/test.csv",),
        "text",
    ),
    "multilingual_hatecheck": (
        "rewire-online/multilingual-hatecheck",
        "a03f2caf2023a402d85064bda243e46d280408f0",
        ("MHC Final Cases/*.csv",),
        "test_case",
    ),
}


def suite_texts(name: str, git_dir: Path) -> list[str]:
    """Every case of a suite, read from its repository snapshot at the pinned commit."""
    _repo, commit, globs, column = SUITES[name]
    listed = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit],
        capture_output=True,
        check=True,
        text=True,
    ).stdout.splitlines()
    texts = []
    for path in (p for p in listed if any(fnmatch.fnmatch(p, g) for g in globs)):
        texts += [row[column] for row in case_rows(git_dir, commit, path) if row[column]]
    return texts


def case_rows(git_dir: Path, commit: str, path: str) -> list[dict[str, str]]:
    """The rows of one CSV case file (a byte-order mark allowed) in a snapshot at `commit`;
    FileNotFoundError where the snapshot has no such file there."""
    shown = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True
    )
    if shown.returncode:
        raise FileNotFoundError(f"{git_dir}: no {path!r} at {commit}")
    return list(csv.DictReader(io.StringIO(shown.stdout.decode("utf-8-sig"))))


def _main(argv: Sequence[str] | None = None) -> int:
    """Write suite_overlap.tsv: the stance sources' lines that overlap a suite."""
    parser = argparse.ArgumentParser(prog="python -m models.lines.suites", description=__doc__)
    parser.add_argument("suites", nargs="+", help="NAME=GIT_DIR, NAME among " + ", ".join(SUITES))
    args = parser.parse_args(argv)
    found: list[tuple[str, str, str]] = []
    lines = [ln for ln in realdata.labelled_lines() if ln.source in realdata.STANCE]
    for item in args.suites:
        name, _, git_dir = item.partition("=")
        texts = suite_texts(name, Path(git_dir))
        index = Overlap(texts)
        hits = {(ln.source, line_id(ln.source, ln.text)) for ln in lines if index.hits(ln.text)}
        found += [(source, ident, name) for source, ident in sorted(hits)]
        print(f"{name}: {len(texts)} cases; {len(hits)} stance lines overlap them")
    out = labelled.data_dir() / SUITE_OVERLAP
    out.write_text(labelled.write_tsv(found, SUITE_OVERLAP_COLUMNS), encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
