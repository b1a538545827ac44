"""Multilingual HateCheck's cases as held-out lines per language, read from the suite's snapshot.

What it guarantees: the cases are read at evaluation time from a snapshot of the suite's public
repository (`rewire-online/multilingual-hatecheck`) at the commit `models.lines.suites` pins,
never from the repository: like HateCheck and HatemojiCheck, the suite is evaluation material the
team does not hold, so none of it is committed and nothing trains, tunes a threshold or picks a
checkpoint on it. The same snapshot and seed give the same lines, in the same order; each is one
case with the suite's own id, functionality and gold label turned into a kind (`KINDS`). A
missing snapshot, or one without the pinned commit, is a `SnapshotError` (exit status 2).

Why kinds, not the suite's two labels: a chat service acts on insults and leaves talk about
groups alone, so MHC's "non-hateful" mixes what must be allowed (neutral and positive
statements about groups: `benign`) with what a moderation product may rightly act on (abuse of
individuals, of non-protected groups, of objects: `not_protected`; swearing at nobody:
`profanity`) and with stance the model must read (quoting or denouncing hate, negated hate:
`counter`). Each is reported apart; only `hostile` and `benign` carry the issue's goals.

    python -m models.evaluation.mhc GIT_DIR   # the lines kept per language and kind
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from models.lines.suites import SUITES, case_rows
from moderator.errors import ModeratorError

SUITE = "multilingual_hatecheck"
REPOSITORY, PINNED, (CASES,), _TEXT = SUITES[SUITE]
SEED = 20261128
# The suite's file names (`hatecheck_cases_final_<name>.csv`) and ISO 639-1 codes.
LANGUAGES = {
    "arabic": "ar", "dutch": "nl", "french": "fr", "german": "de", "hindi": "hi",
    "italian": "it", "mandarin": "zh", "polish": "pl", "portuguese": "pt", "spanish": "es",
}  # fmt: skip
CODES = tuple(sorted(LANGUAGES.values()))
HOSTILE, BENIGN, COUNTER, NOT_PROTECTED, PROFANITY = (
    "hostile", "benign", "counter", "not_protected", "profanity",
)  # fmt: skip
KINDS = (HOSTILE, BENIGN, COUNTER, NOT_PROTECTED, PROFANITY)
# Every non-hateful functionality of the suite and the kind it counts as; a hateful case (label
# `hateful`, functionality `*_h`) is `hostile`. An unknown functionality stops the reading.
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
# Cases kept per functionality (all when fewer): the suite holds ~2,500 hateful cases a language;
# 22 from each of its 18-20 hateful functionalities keeps ~400 hostile lines a language, every
# functionality present, and a run of the model on all ten languages short (~13,000 lines).
# `benign`, `not_protected` and `profanity` are kept whole.
PER_FUNCTIONALITY = {HOSTILE: 22, COUNTER: 100}


class SnapshotError(ModeratorError):
    """The suite's snapshot is missing, lacks the pinned commit or one of its case files."""


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


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)


def check_snapshot(git_dir: Path, commit: str = PINNED) -> None:
    """Refuse, naming what to fetch, a `git_dir` that is no git repository or lacks `commit`."""
    if not git_dir.is_dir() or _git(git_dir, "rev-parse", "--git-dir").returncode:
        raise SnapshotError(f"{git_dir}: not a git repository (a snapshot of {REPOSITORY})")
    if _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode:
        raise SnapshotError(f"{git_dir}: no commit {commit} (the one {REPOSITORY} is pinned at)")


def read(git_dir: Path, languages: Iterable[str] | None = None, commit: str = PINNED) -> list[Case]:
    """The cases kept (`select`) of `languages` (default all, by code), read from the suite's
    case files in the snapshot at `commit` (default: the pinned one)."""
    check_snapshot(git_dir, commit)
    names = {code: name for name, code in LANGUAGES.items()}
    cases: list[Case] = []
    for code in CODES if languages is None else languages:
        if code not in names:
            raise ValueError(f"unknown language {code!r}: one of {' '.join(CODES)}")
        path = CASES.replace("*", f"hatecheck_cases_final_{names[code]}")
        try:
            cases += select(code, case_rows(git_dir, commit, path))
        except FileNotFoundError as exc:
            raise SnapshotError(str(exc)) from None
    return cases


def datasheet_section() -> list[str]:
    """DATA.md's section on these lines (`models.reports.datasheet`): the rule in this module's
    constants; the counts are what `_main` prints at the pinned commit."""
    hostile, counter = PER_FUNCTIONALITY[HOSTILE], PER_FUNCTIONALITY[COUNTER]
    return [
        "## Held-out lines per language (issue 40): evaluation only",
        "",
        "Multilingual HateCheck (`mhc`: functional test cases for hate speech detection written"
        " per language by native-speaking experts from HateCheck's templates, Hindi in Latin"
        " script, each with its functionality, target group, gold label and three annotators'"
        f" labels; Röttger, Seelawi, Nozza, Talat and Vidgen, WOAH 2022;"
        f" `{REPOSITORY}` @ `{PINNED[:7]}`, the commit `models/lines/suites.py` pins,"
        f" `{CASES}`, CC BY 4.0) is the validation per language of issue 40:"
        " `python -m models.evaluation.languages --mhc GIT_DIR --model DIR` reads the cases"
        " from a snapshot of that repository at evaluation time and judges the model on them"
        " in each of its ten languages (`" + " ".join(CODES) + "`): hostile caught >= 80% and"
        " benign flagged <= 3%. Like HateCheck it stays outside the repository and out of"
        " every build: none of it is committed, and it is never trained on, never used to"
        " tune a threshold or pick a checkpoint.",
        "",
        "What is kept, and why (`models/evaluation/mhc.py`, seeded: the same snapshot gives the"
        " same lines): the suite's two labels become kinds a chat service can be held to."
        f" **hostile**: every hateful functionality, {hostile} cases drawn from each."
        " **benign**: every neutral and positive statement about a protected group"
        " (`ident_neutral_nh`, `ident_pos_nh`): what the service must leave alone."
        f" **counter**: counter-speech and negation ({counter} of each of `counter_quote_nh`,"
        " `counter_ref_nh`, `negate_neg_nh`), a harder stance figure with no goal."
        " **not_protected** (`target_obj_nh`, `target_indiv_nh`, `target_group_nh`) and"
        " **profanity** (`profanity_nh`): abuse of a person or a non-protected group, and"
        " swearing, which a chat moderation product may act on, so neither benign nor hostile"
        " here: reported apart, no goal. Whitespace is collapsed, a text kept once, and a text"
        " the suite gives two kinds is dropped. Lines per language (hostile / benign / counter"
        " / not protected / profanity, as `python -m models.evaluation.mhc GIT_DIR` counts"
        " them): ar 396 / 350 / 300 / 193 / 100; de, es, it, nl, pl 396 / 350 / 300 / 195 /"
        " 100; fr 396 / 349 / 300 / 195 / 100; hi 396 / 350 / 300 / 194 / 100; pt 396 / 353 /"
        " 300 / 195 / 100; zh 352 / 350 / 300 / 195 / 100 (13,365 lines). The suite's"
        " annotators' majority doubts the gold label of 1,341 of them, 577 French (153 of"
        " French's 349 benign lines); figures use the gold label. Real non-English chat with a"
        " licence was looked for: cardiffnlp/xlm-t's UMSAB tweets carry no licence in the"
        " repository, so they are not used.",
    ]


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.evaluation.mhc", description=__doc__)
    parser.add_argument("git_dir", type=Path, help=f"a snapshot of {REPOSITORY}")
    args = parser.parse_args(argv)
    try:
        cases = read(args.git_dir)
    except SnapshotError as error:
        parser.error(str(error))
    for code in CODES:
        mine = [c for c in cases if c.language == code]
        counts = " ".join(f"{kind} {sum(c.kind == kind for c in mine)}" for kind in KINDS)
        doubted = sum(not c.agreed for c in mine)
        print(f"{code} {counts} (gold label doubted: {doubted})")
    print(f"{len(cases):,} lines; gold label doubted: {sum(not c.agreed for c in cases):,}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
