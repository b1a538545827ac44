"""Issue 40's language validation: what a model decides on held-out lines of each language.

What it guarantees: every line `models.evaluation.mhc` keeps of Multilingual HateCheck, read
from a snapshot of the suite's repository at the pinned commit (`--mhc GIT_DIR`; the suite stays
outside the repository), is decided as the service decides it (`decide_texts`: the policy with
its deny terms and allowed phrases, the windows), but past the language gate: the figures are
the model's, not the gate's. A gate told the line's language is supported (the manifest's
languages and that one) still names some lines as yet another language (romanized Hindi as
Indonesian or Finnish: 293 of 1,340 MHC lines), which would put the gate's review into the
model's figure; so the decision reads no gate, and two columns count the gate apart: the lines
that told gate would still send to review, and those the model's own gate (the manifest's
`languages`) would. `flagged` is any action but `allow` (review counts as flagged).

A language passes (issue 40) on at least `MIN_HOSTILE` hostile and `MIN_BENIGN` benign lines
when its hostile caught is at least `CAUGHT_GOAL` and its benign flagged at most
`FLAGGED_GOAL`, judged on the point figures; the bootstrap 95% interval is printed beside each.
Counter-speech, abuse of non-protected targets and non-hateful profanity are reported with no goal.
A missing snapshot, or one without the pinned commit, stops it with exit status 2.

    python -m models.evaluation.languages --mhc GIT_DIR --model DIR [--policy FILE] [--markdown]
        [--languages CODE ...] [--functionalities]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import numpy as np

from models.evaluation import mhc
from models.evaluation.mhc import BENIGN, COUNTER, HOSTILE, NOT_PROTECTED, PROFANITY, Case
from models.evaluation.stance import Bools, interval

CAUGHT_GOAL = Fraction(80, 100)
FLAGGED_GOAL = Fraction(3, 100)
MIN_HOSTILE = 100
MIN_BENIGN = 200
CHUNK = 256  # lines decided per call: one padded batch of short lines


class Decision(NamedTuple):
    """One line as the model decides it, and what each gate would do with it."""

    flagged: bool  # any action but allow
    other_language: bool  # a gate told the line's language still names another one
    own_gate: bool  # the manifest's gate names the line's text as a language the model lacks


class Figures(NamedTuple):
    """One language's flags by kind, and the gate counts over all its lines."""

    language: str
    flags: dict[str, Bools]
    other_language: int
    own_gate: int

    @property
    def lines(self) -> int:
        return sum(len(f) for f in self.flags.values())

    def share(self, kind: str) -> Fraction | None:
        """The flagged share of a kind, exact (None when the language has no such line)."""
        flags = self.flags.get(kind)
        return Fraction(int(flags.sum()), len(flags)) if flags is not None and len(flags) else None

    def passes(self) -> bool:
        caught, flagged = self.share(HOSTILE), self.share(BENIGN)
        return (
            caught is not None
            and flagged is not None
            and len(self.flags[HOSTILE]) >= MIN_HOSTILE
            and len(self.flags[BENIGN]) >= MIN_BENIGN
            and caught >= CAUGHT_GOAL
            and flagged <= FLAGGED_GOAL
        )


def figures(cases: Sequence[Case], decisions: Sequence[Decision]) -> list[Figures]:
    """Each language's figures (sorted by code) from its cases and their decisions."""
    if len(cases) != len(decisions):
        raise ValueError(f"{len(cases)} cases but {len(decisions)} decisions")
    out = []
    for code in sorted({c.language for c in cases}):
        mine = [(c, d) for c, d in zip(cases, decisions, strict=True) if c.language == code]
        flags = {
            kind: np.asarray([d.flagged for c, d in mine if c.kind == kind], dtype=bool)
            for kind in mhc.KINDS
            if any(c.kind == kind for c, _ in mine)
        }
        other = sum(d.other_language for _, d in mine)
        out.append(Figures(code, flags, other, sum(d.own_gate for _, d in mine)))
    return out


def _cell(row: Figures, kind: str, with_interval: bool = True) -> str:
    flags = row.flags.get(kind)
    if flags is None or not len(flags):
        return "-"
    shown = interval(flags) if with_interval else ""
    return f"{float(flags.mean()):.1%}{shown} of {len(flags):,}"


HEADER = (
    "language",
    "hostile caught [95%]",
    "benign flagged [95%]",
    "counter-speech flagged [95%]",
    "not protected flagged",
    "profanity flagged",
    "told gate: other language",
    "own gate: review",
    f"passes (>= {float(CAUGHT_GOAL):.0%} / <= {float(FLAGGED_GOAL):.0%})",
)


def table(rows: Sequence[Figures], markdown: bool = False) -> str:
    """The figures as a table (Markdown, or aligned text), then the languages passing."""
    cells = [
        (
            row.language,
            _cell(row, HOSTILE),
            _cell(row, BENIGN),
            _cell(row, COUNTER),
            _cell(row, NOT_PROTECTED, with_interval=False),
            _cell(row, PROFANITY, with_interval=False),
            f"{row.other_language:,} of {row.lines:,}",
            f"{row.own_gate:,} of {row.lines:,} ({row.own_gate / max(row.lines, 1):.0%})",
            "pass" if row.passes() else "fail",
        )
        for row in rows
    ]
    passing = [row.language for row in rows if row.passes()]
    summary = f"passing: {len(passing)} of {len(rows)}: {', '.join(passing) or 'none'}"
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|---|" + "---:|" * 7 + "---|"]
        lines += ["| " + " | ".join(c) + " |" for c in cells]
        return "\n".join([*lines, "", summary])
    widths = [max(len(r[i]) for r in [HEADER, *cells]) for i in range(len(HEADER))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [HEADER, *cells]]
    return "\n".join([*(t.rstrip() for t in text), "", summary])


def by_functionality(cases: Sequence[Case], decisions: Sequence[Decision]) -> str:
    """Flagged % per functionality (rows, with their kind) and language (columns), as Markdown:
    where a language's figure comes from (a spelling variant missed, one kind of counter-speech)."""
    codes = sorted({c.language for c in cases})
    cells: dict[tuple[str, str], list[bool]] = {}
    kinds: dict[str, str] = {}
    for case, decision in zip(cases, decisions, strict=True):
        cells.setdefault((case.functionality, case.language), []).append(decision.flagged)
        kinds[case.functionality] = case.kind
    lines = [
        "| functionality | kind | " + " | ".join(codes) + " |",
        "|---|---|" + "---:|" * len(codes),
    ]
    for name in sorted(kinds, key=lambda f: (mhc.KINDS.index(kinds[f]), f)):
        shown = [cells.get((name, code)) for code in codes]
        row = [f"{sum(v) / len(v):.0%}" if v else "-" for v in shown]
        lines.append(f"| {name} | {kinds[name]} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def decide(model_dir: Path, policy_file: Path | None, cases: Sequence[Case]) -> list[Decision]:
    """Each case decided by the model in `model_dir` as the service would (module doc)."""
    from moderator.decide.classifier import Classifier
    from moderator.decide.language import LanguageGate
    from moderator.decide.screen import Reader, decide_texts
    from moderator.policy.rules import ALLOW, Policy

    classifier = Classifier(model_dir, threads=2)
    policy = Policy.load(policy_file)
    own = LanguageGate(classifier.info.languages)
    reader = Reader(classifier)  # no gate: the model decides every line
    out: list[Decision | None] = [None] * len(cases)
    for code in sorted({c.language for c in cases}):
        told = LanguageGate((*classifier.info.languages, code))
        mine = [i for i, c in enumerate(cases) if c.language == code]
        for start in range(0, len(mine), CHUNK):
            chunk = mine[start : start + CHUNK]
            texts = [cases[i].text for i in chunk]
            for i, judged in zip(chunk, decide_texts(reader, policy, texts), strict=True):
                text = cases[i].text
                out[i] = Decision(
                    judged.ruling.action != ALLOW,
                    told.detect(text) is not None,
                    own.detect(text) is not None,
                )
    return [d for d in out if d is not None]


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.evaluation.languages", description=__doc__
    )
    parser.add_argument(
        "--mhc", type=Path, required=True, help=f"a snapshot (git dir) of {mhc.REPOSITORY}"
    )
    parser.add_argument("--model", type=Path, required=True, help="a model directory")
    parser.add_argument("--policy", type=Path, default=None, help="default: the packaged one")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    parser.add_argument(
        "--languages", nargs="+", choices=mhc.CODES, default=None, help="codes (default: all)"
    )
    parser.add_argument(
        "--functionalities", action="store_true", help="also flagged %% per functionality"
    )
    args = parser.parse_args(argv)
    try:
        cases = mhc.read(args.mhc, languages=args.languages)
    except mhc.SnapshotError as error:
        parser.error(str(error))  # exit status 2
    decisions = decide(args.model, args.policy, cases)
    print(f"model: {args.model}; policy: {args.policy or 'packaged'}; {len(cases):,} lines")
    print(table(figures(cases, decisions), markdown=args.markdown))
    if args.functionalities:
        print()
        print(by_functionality(cases, decisions))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
