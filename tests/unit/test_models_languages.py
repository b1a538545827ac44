"""Issue 40's language validation: the suite read from its snapshot at a pinned commit (never
from the repository), its separation from the build, the figures and pass/fail per language, and
that the real model is judged as the service decides. No test needs the suite: a small snapshot
laid out like it is made here."""

from __future__ import annotations

import csv
import io
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import models
from models.evaluation import languages, mhc
from models.evaluation.languages import Decision, Figures
from models.evaluation.mhc import BENIGN, COUNTER, HOSTILE, NON_HATEFUL, Case
from models.reports import datasheet
from moderator.decide.screen import Reader, decide_texts
from moderator.policy.rules import ALLOW, Policy
from tests.imports import import_graph

PACKAGE = Path(models.__file__).parent
EVALUATION_ONLY = {"models.evaluation.mhc", "models.evaluation.languages"}
# The suite's columns, as its case files have them (more than the reader needs).
SUITE_COLUMNS = (
    "mhc_case_id", "functionality", "test_case", "label_gold", "target_ident", "ref_case_id",
    "label_annotated_maj",
)  # fmt: skip


def _row(ident: str, functionality: str, label: str, text: str) -> dict[str, str]:
    return {
        "mhc_case_id": ident,
        "functionality": functionality,
        "label_gold": label,
        "label_annotated_maj": label,
        "target_ident": "women",
        "test_case": text,
    }


def test_selection_is_seeded_bounded_and_drops_repeats_and_doubtful_texts() -> None:
    rows = [_row(f"x-{i}", "threat_dir_h", "hateful", f"threat {i}") for i in range(50)]
    rows += [_row("x-50", "ident_pos_nh", "non-hateful", "threat 0")]  # a text under two kinds
    rows += [
        _row(f"x-{51 + i}", "ident_neutral_nh", "non-hateful", f"hello  {i % 3}") for i in range(6)
    ]
    first, again = mhc.select("de", rows), mhc.select("de", rows)
    hostile = [c for c in first if c.kind == HOSTILE]
    assert len(hostile) == mhc.PER_FUNCTIONALITY[HOSTILE]
    assert "threat 0" not in {c.text for c in first}
    assert sorted(c.text for c in first if c.kind == BENIGN) == ["hello 0", "hello 1", "hello 2"]
    assert first == again  # seeded: a re-run writes the same file
    assert {c.id for c in first} != {c.id for c in mhc.select("es", rows)}  # drawn per language
    with pytest.raises(ValueError, match="unknown functionality"):
        mhc.select("de", [_row("y", "spam_nh", "non-hateful", "buy now")])


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, check=True, text=True
    ).stdout.strip()


def _commit(repo: Path, files: dict[str, list[dict[str, str]]]) -> str:
    """Commit the suite's case files (language name: rows) into `repo`; return the commit."""
    folder = repo / mhc.CASES.rpartition("/")[0]
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        out = io.StringIO()
        writer = csv.DictWriter(out, SUITE_COLUMNS, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        (folder / f"hatecheck_cases_final_{name}.csv").write_bytes(
            b"\xef\xbb\xbf" + out.getvalue().encode("utf-8")  # the suite's files open with a BOM
        )
    _git(repo, "add", "-A")
    _git(
        repo,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "-m",
        "cases",
    )
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    repo = tmp_path / "multilingual-hatecheck"
    repo.mkdir()
    _git(repo, "init", "-q")
    return repo


def _suite_rows(prefix: str, hostile: int) -> list[dict[str, str]]:
    rows = [
        _row(f"{prefix}-{i}", "threat_dir_h", "hateful", f"{prefix} {i}") for i in range(hostile)
    ]
    rows += [_row(f"{prefix}-b", "ident_pos_nh", "non-hateful", f"{prefix}  lieb")]
    rows[0]["label_annotated_maj"] = "non-hateful"  # the annotators doubt one gold label
    return rows


def test_the_cases_are_read_from_the_snapshot_at_the_commit_given(snapshot: Path) -> None:
    rows = {
        name: _suite_rows(code, 30 if code == "de" else 5) for name, code in mhc.LANGUAGES.items()
    }
    first = _commit(snapshot, rows)
    _commit(snapshot, {"german": _suite_rows("neu", 3)})  # a later commit changes German
    cases = mhc.read(snapshot / ".git", commit=first)
    by_code = {code: rows[name] for name, code in mhc.LANGUAGES.items()}
    assert cases == [case for code in sorted(by_code) for case in mhc.select(code, by_code[code])]
    assert [c.language for c in cases].count("de") == mhc.PER_FUNCTIONALITY[HOSTILE] + 1
    assert ("de-b", "de lieb") in {(c.id, c.text) for c in cases}
    assert not next(c for c in cases if c.id == "es-0").agreed
    assert mhc.read(snapshot / ".git", ["es"], commit=first) == mhc.select("es", by_code["es"])
    later = mhc.read(snapshot / ".git", ["de"], commit="HEAD")
    assert {c.text for c in later} == {"neu 0", "neu 1", "neu 2", "neu lieb"}


def test_a_missing_snapshot_commit_or_file_is_a_clear_error(snapshot: Path) -> None:
    commit = _commit(snapshot, {"german": _suite_rows("de", 3)})
    with pytest.raises(mhc.SnapshotError, match="not a git repository"):
        mhc.read(snapshot / "missing")
    with pytest.raises(mhc.SnapshotError, match=f"no commit {mhc.PINNED}"):
        mhc.read(snapshot / ".git")  # the default is the pinned commit, which this one lacks
    with pytest.raises(mhc.SnapshotError, match=r"hatecheck_cases_final_french\.csv"):
        mhc.read(snapshot / ".git", ["fr"], commit=commit)
    with pytest.raises(ValueError, match="unknown language 'en'"):
        mhc.read(snapshot / ".git", ["en"], commit=commit)


@pytest.mark.parametrize("where", ["missing", ".git"])
def test_the_validation_stops_with_status_2_on_a_bad_snapshot(
    snapshot: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _commit(snapshot, {"german": _suite_rows("de", 3)})
    with pytest.raises(SystemExit) as stopped:
        languages._main(["--mhc", str(snapshot / where), "--model", str(snapshot)])
    assert stopped.value.code == 2
    assert str(snapshot / where) in capsys.readouterr().err


def _figures(caught: int, hostile: int, flagged: int, benign: int) -> Figures:
    flags = {
        HOSTILE: np.arange(hostile) < caught,
        BENIGN: np.arange(benign) < flagged,
        COUNTER: np.ones(3, dtype=bool),
    }
    return Figures("de", flags, 0, hostile)


@pytest.mark.parametrize(
    ("caught", "hostile", "flagged", "benign", "passes"),
    [
        (80, 100, 6, 200, True),  # exactly at both goals
        (79, 100, 6, 200, False),  # hostile caught under 80%
        (80, 100, 7, 200, False),  # benign flagged over 3%
        (99, 99, 0, 200, False),  # too few hostile lines
        (100, 100, 0, 199, False),  # too few benign lines
    ],
)
def test_a_language_passes_only_on_enough_lines_within_both_goals(
    caught: int, hostile: int, flagged: int, benign: int, passes: bool
) -> None:
    assert _figures(caught, hostile, flagged, benign).passes() is passes


def test_figures_count_each_language_and_kind_from_its_decisions() -> None:
    cases = [
        Case("de", "1", "threat_dir_h", HOSTILE, "", True, "a"),
        Case("de", "2", "ident_pos_nh", BENIGN, "", True, "b"),
        Case("es", "3", "threat_dir_h", HOSTILE, "", True, "c"),
        Case("es", "4", "threat_dir_h", HOSTILE, "", True, "d"),
    ]
    decisions = [
        Decision(True, False, True),
        Decision(False, True, True),
        Decision(True, False, False),
        Decision(False, False, True),
    ]
    de, es = languages.figures(cases, decisions)
    assert (de.language, de.share(HOSTILE), de.share(BENIGN)) == ("de", Fraction(1), Fraction(0))
    assert (de.other_language, de.own_gate, de.lines) == (1, 2, 2)
    assert (es.language, es.share(HOSTILE), es.share(BENIGN)) == ("es", Fraction(1, 2), None)
    assert (es.other_language, es.own_gate, es.lines) == (0, 1, 2)
    with pytest.raises(ValueError, match="decisions"):
        languages.figures(cases, decisions[:3])


def test_the_table_lists_each_language_and_the_ones_passing() -> None:
    rows = [_figures(90, 100, 0, 200), _figures(10, 100, 0, 200)._replace(language="es")]
    markdown = languages.table(rows, markdown=True).splitlines()
    assert markdown[0].startswith("| language | hostile caught")
    assert [line.split(" | ")[0] for line in markdown[2:4]] == ["| de", "| es"]
    assert markdown[2].endswith("| pass |")
    assert markdown[3].endswith("| fail |")
    assert markdown[-1] == "passing: 1 of 2: de"
    plain = languages.table(rows).splitlines()
    assert plain[1].startswith("de ")
    assert "90.0% [" in plain[1]
    assert plain[-1] == "passing: 1 of 2: de"


def test_the_functionality_breakdown_puts_each_figure_under_its_language() -> None:
    cases = [
        Case("es", "1", "threat_dir_h", HOSTILE, "", True, "a"),
        Case("es", "2", "threat_dir_h", HOSTILE, "", True, "b"),
        Case("de", "3", "threat_dir_h", HOSTILE, "", True, "c"),
        Case("de", "4", "ident_pos_nh", BENIGN, "", True, "d"),
    ]
    flagged = [True, False, False, True]
    decisions = [Decision(f, False, False) for f in flagged]
    lines = languages.by_functionality(cases, decisions).splitlines()
    assert lines[0] == "| functionality | kind | de | es |"
    assert lines[2:] == [
        "| threat_dir_h | hostile | 0% | 50% |",
        "| ident_pos_nh | benign | 100% | - |",
    ]


def test_nothing_that_builds_a_model_imports_the_suite_reading() -> None:
    """Only the evaluation's own two modules import them, and the datasheet, which takes its
    section's text: sources, lines, training, export and tuning cannot train, tune or pick on
    the suite's cases."""
    importers = {
        name for name, imported in import_graph(PACKAGE).items() if imported & EVALUATION_ONLY
    }
    assert importers <= EVALUATION_ONLY | {"models.reports.datasheet"}
    assert "models.evaluation.languages" not in import_graph(PACKAGE)["models.reports.datasheet"]


def test_the_datasheet_says_what_the_suite_is_used_for_and_that_it_stays_outside() -> None:
    text = datasheet.render([], {}, {})
    section = text[text.index("## Held-out lines per language") :].split("\n## ")[0]
    assert "python -m models.evaluation.languages --mhc GIT_DIR --model DIR" in section
    assert "stays outside the repository" in section
    assert "never trained on, never used to tune a threshold or pick a checkpoint" in section
    assert f"`{mhc.REPOSITORY}` @ `{mhc.PINNED[:7]}`" in section
    for functionality in NON_HATEFUL:
        assert f"`{functionality}`" in section


# Lines written for this test (none of the suite's): German and romanized Hindi, hostile and benign.
OWN_LINES = [
    ("de", HOSTILE, "Ich hasse diese Leute, sie sollten alle aus unserem Land verschwinden."),
    ("de", HOSTILE, "Du bist ein widerlicher Idiot und niemand will dich hier haben."),
    ("de", BENIGN, "Frauen sind genauso klug wie Männer und verdienen denselben Lohn."),
    ("de", BENIGN, "Unsere neuen Nachbarn kommen aus Syrien und sind sehr freundlich."),
    ("hi", HOSTILE, "Main in logon se nafrat karta hoon, inko desh se nikal do."),
    ("hi", HOSTILE, "Tum ek bekaar insaan ho, chale jao yahan se."),
    ("hi", BENIGN, "Mahilayen bhi purushon jitni hi samajhdar hoti hain."),
    ("hi", BENIGN, "Hamare padosi bahut achhe log hain aur hamesha madad karte hain."),
]


def test_the_real_model_is_judged_as_the_service_decides_past_its_own_gate(
    model_dir: Path, reader: Reader
) -> None:
    """Where the model's own gate names no other language, the evaluation's decision is the
    service's; where it does, the service sends the line to review and the evaluation still
    lets the model decide."""
    cases = [
        Case(code, str(i), "", kind, "", True, text)
        for i, (code, kind, text) in enumerate(OWN_LINES)
    ]
    decided = languages.decide(model_dir, None, cases)
    served = decide_texts(reader, Policy.load(), [c.text for c in cases])
    bare = decide_texts(Reader(reader.classifier), Policy.load(), [c.text for c in cases])
    assert any(d.own_gate for c, d in zip(cases, decided, strict=True) if c.language == "de")
    for case, ours, service, model in zip(cases, decided, served, bare, strict=True):
        assert ours.own_gate == (service.language is not None), case.text
        assert ours.flagged == (model.ruling.action != ALLOW), case.text
        if not ours.own_gate:
            assert ours.flagged == (service.ruling.action != ALLOW), case.text
        else:
            assert service.ruling.action != ALLOW, case.text
