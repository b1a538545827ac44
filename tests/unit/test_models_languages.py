"""Issue 40's language validation: the held-out files, their separation from the build, the
figures and pass/fail per language, and that the real model is judged as the service decides."""

from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import models
from models.evaluation import languages, mhc
from models.evaluation.languages import Decision, Figures
from models.evaluation.mhc import BENIGN, COUNTER, HOSTILE, NON_HATEFUL, Case
from moderator.decide.screen import Reader, decide_texts
from moderator.policy.rules import ALLOW, Policy
from tests.imports import import_graph, module_files

PACKAGE = Path(models.__file__).parent
EVALUATION_ONLY = {"models.evaluation.mhc", "models.evaluation.languages"}


def test_each_language_has_enough_held_out_lines_of_the_suite_only() -> None:
    cases = mhc.read()
    assert {c.language for c in cases} == set(mhc.LANGUAGES.values())
    for code in mhc.LANGUAGES.values():
        kinds = Counter(c.kind for c in cases if c.language == code)
        assert kinds[HOSTILE] >= max(languages.MIN_HOSTILE, 300), code
        assert kinds[BENIGN] >= languages.MIN_BENIGN, code
        mine = [c for c in cases if c.language == code]
        assert len({c.text for c in mine}) == len(mine), code
    assert len({c.id for c in cases}) == len(cases)
    expected = [
        HOSTILE if c.functionality.endswith("_h") else NON_HATEFUL[c.functionality] for c in cases
    ]
    assert [c.kind for c in cases] == expected
    licence = (mhc.FOLDER / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("Attribution 4.0 International")


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


def test_a_malformed_file_is_refused_naming_its_line(tmp_path: Path) -> None:
    (tmp_path / "de.tsv").write_text("text\nhallo\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        mhc.read(tmp_path, ["de"])
    header = "\t".join(mhc.COLUMNS)
    (tmp_path / "de.tsv").write_text(f"{header}\nd-1\tx_h\tmaybe\t\tyes\thallo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"de\.tsv:2"):
        mhc.read(tmp_path, ["de"])


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


def naming_the_folder(files: dict[str, Path]) -> list[str]:
    """The modules that name the held-out folder in a string ("heldout" or ".../heldout/...")."""
    found = []
    for name, path in sorted(files.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and (value == "heldout" or "heldout/" in value):
                found.append(name)
                break
    return found


def test_no_build_module_reads_the_held_out_folder_or_its_evaluation() -> None:
    """Only the evaluation's own two modules name the folder or import them: the build (sources,
    lines, training, export, tuning, reports) cannot train, tune or pick on these lines."""
    files = module_files(PACKAGE)
    naming = naming_the_folder(files)
    assert "models.evaluation.mhc" in naming  # where FOLDER is
    assert set(naming) <= EVALUATION_ONLY
    importers = {
        name for name, imported in import_graph(PACKAGE).items() if imported & EVALUATION_ONLY
    }
    assert importers <= EVALUATION_ONLY
    for build_folder in ("data", "sources"):
        assert not mhc.FOLDER.is_relative_to(PACKAGE / build_folder)


def test_the_folder_check_sees_a_module_naming_it(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text('PATH = "data/heldout.tsv"\n')
    (tmp_path / "sneaky.py").write_text('FOLDER = ROOT / "heldout" / "languages"\n')
    (tmp_path / "joined.py").write_text('FOLDER = "models/heldout/languages"\n')
    files = {p.stem: p for p in tmp_path.glob("*.py")}
    assert naming_the_folder(files) == ["joined", "sneaky"]


def test_the_real_model_is_judged_as_the_service_decides_past_its_own_gate(
    model_dir: Path, reader: Reader
) -> None:
    """Where the model's own gate names no other language, the evaluation's decision is the
    service's; where it does, the service sends the line to review and the evaluation still
    lets the model decide."""
    cases = [c for c in mhc.read(languages=["de", "hi"]) if c.kind in (HOSTILE, BENIGN)][::40]
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
