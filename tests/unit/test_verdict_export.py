"""`moderator verdicts export` without Kafka: the verdict → target mapping, the join of held
messages and verdicts, and lines the model build reads as a split of their own."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from models.lines import corpus, verdicts
from models.reports import datasheet
from moderator.admin.verdict_export import FLAGGED_LABEL, join, target, training_line
from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide.classifier import ModelInfo

LABELS = ModelInfo.load(DEFAULT_MODEL_DIR).labels
MAX_BYTES = 4096  # a verdict's size limit (the moderators' max_record_bytes)


def held(message_id: str, text: str, reason: str | None = "threat") -> bytes:
    return orjson.dumps({"message_id": message_id, "channel_id": "c-1", "user_id": "u-1",
                         "text": text, "action": "review", "reason": reason})  # fmt: skip


def given(message_id: str, verdict: str, at_ms: int = 1, moderator: str = "mod-ann") -> bytes:
    return orjson.dumps({"message_id": message_id, "verdict": verdict, "moderator_id": moderator,
                         "scope": "global", "at_ms": at_ms})  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "held_by", "labels"),
    [
        ("allow", "threat", ()),  # the model flagged something ordinary: benign
        ("block", "threat", (FLAGGED_LABEL, "threat")),  # a human confirmed the label
        ("nudge", "insult", (FLAGGED_LABEL, "insult")),
        ("block", FLAGGED_LABEL, (FLAGGED_LABEL,)),
        ("block", "truncated", (FLAGGED_LABEL,)),  # held for a reason that is not a label
        ("nudge", "unsupported_language:fr", (FLAGGED_LABEL,)),
        ("block", "deny:policy:custom", (FLAGGED_LABEL,)),
        ("block", None, (FLAGGED_LABEL,)),
    ],
)
def test_a_verdict_teaches_benign_or_toxicity_and_the_label_that_held_it(
    verdict: str, held_by: str | None, labels: tuple[str, ...]
) -> None:
    assert target(verdict, held_by, LABELS) == labels


def test_every_label_a_verdict_teaches_is_one_the_model_build_knows() -> None:
    assert FLAGGED_LABEL in LABELS
    assert set(LABELS) <= set(corpus.LABELS)


def test_the_first_verdict_decides_and_the_rest_is_counted() -> None:
    reviews = [held("m-1", "i will find you"), held("m-2", "gg ez", "insult"),
               held("m-1", "i will find you"),  # published twice (at least once): one message
               held("m-3", "nobody answered this one"), b"{not json"]  # fmt: skip
    found = join(
        reviews,
        [given("m-1", "block"), given("m-2", "allow"), given("m-1", "allow"),  # late
         given("m-9", "block"), b'{"message_id": "m-2", "verdict": "obliterate", "at_ms": 1}'],
        LABELS,
        max_bytes=MAX_BYTES,
    )  # fmt: skip
    assert sorted(found.lines) == [("gg ez", ()), ("i will find you", (FLAGGED_LABEL, "threat"))]
    counts = (found.decided, found.late, found.no_review, found.pending, found.invalid)
    assert counts == (2, 1, 1, 1, 2)
    assert "2 lines (1 allowed, 1 flagged) from 2 decided held messages" in found.summary()


def test_a_verdict_the_moderators_refuse_decides_nothing() -> None:
    unsigned = orjson.dumps({"message_id": "m-1", "verdict": "block", "at_ms": 1})  # no moderator
    found = join(
        [held("m-1", "i will find you")],
        [unsigned, given("m-1", "allow", at_ms=2)],
        LABELS,
        max_bytes=MAX_BYTES,
    )
    assert (found.invalid, found.late, found.lines) == (1, 0, [("i will find you", ())])


def test_a_text_held_twice_gives_one_line_its_latest_verdict() -> None:
    found = join(
        [held("m-1", "you absolute walnut", "insult"), held("m-2", "you  absolute walnut")],
        [given("m-2", "allow", at_ms=20), given("m-1", "block", at_ms=10)],
        LABELS,
        max_bytes=MAX_BYTES,
    )
    assert found.lines == [("you  absolute walnut", ())]
    assert found.same_text == 1


def test_the_lines_are_a_split_the_model_build_reads(tmp_path: Path) -> None:
    found = join(
        [held("m-1", "line one\twith a tab\nand a break"), held("m-2", "fine", "toxicity")],
        [given("m-1", "block"), given("m-2", "allow")],
        LABELS,
        max_bytes=MAX_BYTES,
    )
    path = tmp_path / "verdicts.tsv"
    path.write_text("".join(training_line(t, labels) for t, labels in found.lines))
    assert corpus.read_tsv(path) == [
        ("line one with a tab and a break", (FLAGGED_LABEL, "threat")),
        ("fine", ()),
    ]
    lines = verdicts.load(path)
    threat, toxicity = corpus.LABELS.index("threat"), corpus.LABELS.index(FLAGGED_LABEL)
    assert [(y[toxicity], y[threat]) for _, y in lines] == [(1.0, 1.0), (0.0, 0.0)]
    info = verdicts.describe(path, lines)
    assert (info["file"], info["lines"], info["flagged"]) == ("verdicts.tsv", 2, 1)
    section = "\n".join(verdicts.datasheet_section(info))
    assert "`verdicts.tsv`" in section
    assert "2 lines, 1 flagged" in section
    assert verdicts.datasheet_section(None) == []


def test_data_md_names_the_verdicts_file_only_when_the_build_had_one() -> None:
    info = {"file": "v.tsv", "sha256": "ab" * 32, "lines": 3, "flagged": 1}
    with_them = datasheet.render([], {}, {}, info)
    assert "## Moderators' verdicts" in with_them
    assert "`v.tsv`" in with_them
    assert "Moderators' verdicts" not in datasheet.render([], {}, {})


def test_the_build_takes_the_file_from_its_flag_or_models_verdicts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from models import cli as models_cli

    monkeypatch.setenv(verdicts.ENV, str(tmp_path / "v.tsv"))
    assert models_cli._parser().parse_args(["build"]).verdicts == tmp_path / "v.tsv"
    given = models_cli._parser().parse_args(["build", "--verdicts", "x.tsv"])
    assert given.verdicts == Path("x.tsv")
    monkeypatch.setenv(verdicts.ENV, "")
    assert models_cli._parser().parse_args(["build"]).verdicts is None
