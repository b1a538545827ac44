"""Multilingual HateCheck's cases as held-out lines per language: chosen once, read as committed.

What it guarantees: `models/heldout/languages/<code>.tsv` is made by `prepare` alone, from the
suite's snapshot at the commit pinned in `models.lines.suites`, seeded, so a re-run writes the
same bytes; each line is one case with the suite's own id, functionality and gold label turned
into a kind (`KINDS`); the suite's licence (CC BY 4.0) lies beside the files. The folder is
evaluation material: no build module names it (tests/unit/test_models_languages.py reads them
all), so nothing trains, tunes a threshold or picks a checkpoint on it.

Why kinds, not the suite's two labels: a chat service acts on insults and leaves talk about
groups alone, so MHC's "non-hateful" mixes what must be allowed (neutral and positive
statements about groups: `benign`) with what a moderation product may rightly act on (abuse of
individuals, of non-protected groups, of objects: `not_protected`; swearing at nobody:
`profanity`) and with stance the model must read (quoting or denouncing hate, negated hate:
`counter`). Each is reported apart; only `hostile` and `benign` carry the issue's goals.

    python -m models.evaluation.mhc GIT_DIR   # a snapshot of rewire-online/multilingual-hatecheck
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from models.lines.suites import SUITES
from models.sources import labelled

FOLDER = Path(__file__).resolve().parents[1] / "heldout" / "languages"
SEED = 20261128
# The suite's file names (`hatecheck_cases_final_<name>.csv`) and ISO 639-1 codes.
LANGUAGES = {
    "arabic": "ar", "dutch": "nl", "french": "fr", "german": "de", "hindi": "hi",
    "italian": "it", "mandarin": "zh", "polish": "pl", "portuguese": "pt", "spanish": "es",
}  # fmt: skip
HOSTILE, BENIGN, COUNTER, NOT_PROTECTED, PROFANITY = (
    "hostile", "benign", "counter", "not_protected", "profanity",
)  # fmt: skip
KINDS = (HOSTILE, BENIGN, COUNTER, NOT_PROTECTED, PROFANITY)
# Every non-hateful functionality of the suite and the kind it counts as; a hateful case (label
# `hateful`, functionality `*_h`) is `hostile`. An unknown functionality stops `prepare`.
NON_HATEFUL = {
    "ident_neutral_nh": BENIGN,
    "ident_pos_nh": BENIGN,
    "counter_quote_nh": COUNTER,
    "counter_ref_nh": COUNTER,
    "negate_neg_nh": COUNTER,
    "target_obj_nh": NOT_PROTECTED,
    "target_indiv_nh": NOT_PROTECTED,
    "target_group_nh": NOT_PROTECTED,
    "profanity_nh": PROFANITY,
}
# Cases kept per functionality (all when fewer): the suite holds ~2,500 hateful cases a language
# (3.7 MB for all ten); 22 from each of its 18-20 hateful functionalities keeps ~420 hostile lines
# a language, every functionality present. `benign`, `not_protected` and `profanity` are kept whole.
PER_FUNCTIONALITY = {HOSTILE: 22, COUNTER: 100}
COLUMNS = ("id", "functionality", "kind", "target", "agreed", "text")


class Case(NamedTuple):
    """One held-out line; `agreed`: the suite's annotators' majority gave its gold label."""

    language: str  # ISO 639-1
    id: str  # the suite's mhc_case_id
    functionality: str
    kind: str
    target: str  # the suite's target_ident (empty for no protected group)
    agreed: bool
    text: str


def kind_of(functionality: str, label: str) -> str:
    """The kind a case counts as (module doc); a functionality the suite never had is an error."""
    if label == "hateful" and functionality.endswith("_h"):
        return HOSTILE
    if label == "non-hateful" and functionality in NON_HATEFUL:
        return NON_HATEFUL[functionality]
    raise ValueError(f"unknown functionality or label: {functionality!r} {label!r}")


def select(language: str, rows: Iterable[dict[str, str]]) -> list[Case]:
    """The cases kept of one language's suite rows: each text once (a text under two kinds is
    dropped: its label is the suite's doubt), then the seeded per-functionality sample."""
    cases = [
        Case(
            language,
            row["mhc_case_id"],
            row["functionality"],
            kind_of(row["functionality"], row["label_gold"]),
            row["target_ident"].strip(),
            row["label_annotated_maj"] == row["label_gold"],
            " ".join(row["test_case"].split()),
        )
        for row in rows
    ]
    kinds: dict[str, set[str]] = defaultdict(set)
    for case in cases:
        kinds[case.text].add(case.kind)
    seen: set[str] = set()
    by_functionality: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        if case.text and len(kinds[case.text]) == 1 and case.text not in seen:
            seen.add(case.text)
            by_functionality[case.functionality].append(case)
    kept: list[Case] = []
    for functionality, group in sorted(by_functionality.items()):
        limit = PER_FUNCTIONALITY.get(group[0].kind)
        if limit is not None and len(group) > limit:
            chosen = random.Random(f"{SEED}:{language}:{functionality}").sample(group, limit)
            group = sorted(chosen, key=group.index)
        kept += group
    return kept


def to_tsv(cases: Sequence[Case]) -> str:
    """One language's file: a header, then a case a line (texts hold no tab or line break)."""
    rows = [
        (c.id, c.functionality, c.kind, c.target, "yes" if c.agreed else "no", c.text)
        for c in cases
    ]
    return labelled.write_tsv(rows, COLUMNS)


def read(folder: Path = FOLDER, languages: Iterable[str] | None = None) -> list[Case]:
    """Every committed case (of `languages`, default all), in file order; a malformed file is
    an error naming its line."""
    wanted = sorted(LANGUAGES.values()) if languages is None else list(languages)
    cases: list[Case] = []
    for code in wanted:
        path = folder / f"{code}.tsv"
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or tuple(lines[0].split("\t")) != COLUMNS:
            raise ValueError(f"{path}: the header must be {' '.join(COLUMNS)}")
        for number, line in enumerate(lines[1:], start=2):
            cells = line.split("\t")
            if len(cells) != len(COLUMNS) or cells[2] not in KINDS or cells[4] not in ("yes", "no"):
                raise ValueError(f"{path}:{number}: not a case: {line!r}")
            ident, functionality, kind, target, agreed, text = cells
            cases.append(Case(code, ident, functionality, kind, target, agreed == "yes", text))
    return cases


def _git_show(git_dir: Path, commit: str, path: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        capture_output=True,
        check=True,
    ).stdout


def prepare(git_dir: Path, folder: Path = FOLDER) -> dict[str, list[Case]]:
    """Write each language's TSV and the suite's LICENSE into `folder` from the snapshot."""
    _repo, commit, (pattern,), _column = SUITES["multilingual_hatecheck"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "LICENSE").write_bytes(_git_show(git_dir, commit, "LICENSE"))
    written: dict[str, list[Case]] = {}
    for name, code in sorted(LANGUAGES.items(), key=lambda item: item[1]):
        path = pattern.replace("*", f"hatecheck_cases_final_{name}")
        text = _git_show(git_dir, commit, path).decode("utf-8-sig")
        written[code] = select(code, csv.DictReader(io.StringIO(text)))
        (folder / f"{code}.tsv").write_text(to_tsv(written[code]), encoding="utf-8")
    return written


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.evaluation.mhc", description=__doc__)
    parser.add_argument("git_dir", type=Path, help="a snapshot of the suite's repository")
    args = parser.parse_args(argv)
    for code, cases in prepare(args.git_dir).items():
        counts = {kind: sum(c.kind == kind for c in cases) for kind in KINDS}
        print(code, " ".join(f"{kind} {n}" for kind, n in counts.items()))
    print(FOLDER)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
