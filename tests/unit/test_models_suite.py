"""Our functional suite: the file, the figures per kind of case, the padding probes, and that
our model is judged exactly as `moderator score` decides."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from models.evaluation import suite
from models.evaluation.suite import Case, Decision, Scorer
from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide.classifier import Classifier
from moderator.decide.language import LanguageGate
from moderator.policy.rules import Policy, Ruling

WANTED_HATEFUL = {
    "threat_direct", "threat_normative", "dehumanisation", "derogation_implicit",
    "hate_question", "hate_opinion", "hate_negated", "hate_i_hate", "slur", "slur_obfuscated",
    "self_harm_urging", "harassment",
}  # fmt: skip
WANTED_BENIGN = {
    "counter_speech", "reclaimed", "group_neutral", "group_positive", "profanity_benign",
    "gaming_violence",
}  # fmt: skip
LANGUAGES = {"es", "de", "fr", "pt", "it", "ru", "nl"}


def test_the_suite_file_has_every_category_with_enough_distinct_cases() -> None:
    cases = suite.read_suite()
    by_category = Counter(c.category for c in cases)
    expected = {c.category: c.hateful for c in cases}
    assert {k for k, v in expected.items() if v and not k.startswith("lang_")} == WANTED_HATEFUL
    assert {
        k for k, v in expected.items() if not v and not k.startswith("lang_") and k != "short"
    } == WANTED_BENIGN
    for category in WANTED_HATEFUL | WANTED_BENIGN | {"short"}:
        assert by_category[category] >= 25, category
    for code in LANGUAGES:
        hostile = [c for c in cases if c.language == code and c.hateful]
        benign = [c for c in cases if c.language == code and not c.hateful]
        assert len(hostile) >= 10, code
        assert len(benign) >= 8, code
    assert all(not c.hateful for c in cases if c.category == "short")
    texts = Counter(c.text.casefold() for c in cases)
    assert [t for t, n in texts.items() if n > 1] == []


def test_a_malformed_suite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "suite.tsv"
    path.write_text("slur\thateful\tsomething\n", encoding="utf-8")
    with pytest.raises(ValueError, match="header"):
        suite.read_suite(path)
    path.write_text("category\texpected\ttext\nslur\tmaybe\tsomething\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"suite\.tsv:2"):
        suite.read_suite(path)


def _judge(actions: dict[str, str]) -> suite.Judge:
    def judge(texts: Sequence[str]) -> list[Decision]:
        return [Decision(actions.get(t, "allow"), None) for t in texts]

    return judge


CASES = [
    Case("threat_direct", True, "t1"),
    Case("threat_direct", True, "t2"),
    Case("counter_speech", False, "c1"),
    Case("counter_speech", False, "c2"),
    Case("lang_de", True, "dh1"),
    Case("lang_de", True, "dh2"),
    Case("lang_de", False, "db1"),
    Case("lang_de", False, "db2"),
    Case("lang_es", True, "eh1"),
    Case("lang_es", False, "eb1"),
    Case("short", False, "gg"),
    Case("short", False, "xD"),
]


def test_each_kind_of_case_is_counted_by_its_own_rule() -> None:
    ours = Scorer(
        "ours",
        _judge({"t1": "review", "c1": "nudge", "dh1": "review", "db1": "review", "db2": "block",
                "eh1": "block", "gg": "review", "xD": "nudge"}),
    )  # fmt: skip
    teacher = Scorer("teacher", _judge({"t1": "flag", "t2": "flag", "xD": "flag"}), reviews=False)
    got = suite.judge_suite(CASES, [ours, teacher])
    assert got["scorers"] == ["ours", "teacher"]
    assert list(got["categories"]) == ["threat_direct", "counter_speech"]
    threat, counter = got["categories"]["threat_direct"], got["categories"]["counter_speech"]
    assert (threat["expected"], threat["lines"]) == ("hateful", 2)
    assert threat["rate"] == {"ours": 0.5, "teacher": 1.0}  # caught: any action but allow
    assert counter["expected"] == "benign"
    assert counter["rate"] == {"ours": 0.5, "teacher": 0.0}  # flagged
    assert got["totals"]["hateful"]["lines"] == 2  # languages and short lines stay apart
    de = got["languages"]["de"]
    assert (de["hostile"], de["benign"]) == (2, 2)
    assert de["hostile_not_allowed"]["ours"] == 0.5
    assert de["benign_nudged_or_blocked"]["ours"] == 0.5  # review is not nudge or block
    every = got["languages"]["all"]
    assert (every["hostile"], every["benign"]) == (3, 3)
    assert every["hostile_not_allowed"]["ours"] == pytest.approx(2 / 3)
    short = got["short"]
    assert short["lines"] == 2
    assert short["review"] == {"ours": 0.5, "teacher": None}  # a teacher cannot review
    assert short["flagged"] == {"ours": 1.0, "teacher": 0.5}
    lines = suite.render(got)
    assert any(row.startswith("| threat_direct (2) | caught | 50.0% | 100.0% |") for row in lines)
    assert any(row.startswith("| counter_speech (2) | flagged | 50.0% | 0.0% |") for row in lines)
    assert any("de (2 / 2) | benign nudged or blocked | 50.0% | 0.0% |" in row for row in lines)
    assert suite.render(None) == []


def test_suite_lines_found_in_training_text_are_counted_per_category() -> None:
    trained = ["GG", "kys  ", "something else entirely"]
    assert suite.in_training(CASES, trained) == {"short": 1}
    cases = [*CASES, Case("self_harm_urging", True, "KYS")]
    assert suite.in_training(cases, trained) == {"short": 1, "self_harm_urging": 1}


def test_a_category_mixing_hateful_and_benign_is_refused() -> None:
    mixed = [Case("slur", True, "a"), Case("slur", False, "b")]
    with pytest.raises(ValueError, match="mixes"):
        suite.judge_suite(mixed, [Scorer("ours", _judge({}))])


POOL = [f"ordinary chat line number {i} about the game tonight" for i in range(400)]


def test_a_hostile_line_is_padded_at_start_middle_and_end_of_one_padding() -> None:
    placed = suite.padded(["HOSTILE LINE"], POOL, seed=3, min_chars=500)
    by = {p["position"]: p["text"] for p in placed}
    assert set(by) == {"start", "middle", "end", "alone"}
    padding = by["alone"]
    assert len(padding) >= 500
    assert by["start"] == f"HOSTILE LINE {padding}"
    assert by["end"] == f"{padding} HOSTILE LINE"
    before, after = by["middle"].split(" HOSTILE LINE ")
    assert f"{before} {after}" == padding
    assert abs(len(before) - len(after)) <= max(len(p) for p in POOL) + 1
    assert suite.padded(["HOSTILE LINE"], POOL, seed=3, min_chars=500) == placed
    assert suite.padded(["HOSTILE LINE"], POOL, seed=4, min_chars=500) != placed


def test_long_benign_messages_are_long_and_use_each_line_once() -> None:
    messages = suite.long_messages(POOL, seed=1, min_chars=600, n=5)
    assert len(messages) == 5
    assert all(len(m) >= 600 for m in messages)
    used = [line for m in messages for line in POOL if f"{line} " in f"{m} "]
    assert len(used) == len(set(used))
    everything = suite.long_messages(POOL, seed=1, min_chars=600, n=10_000)
    assert len(everything) < 10_000  # stops when the pool runs out


def test_padding_probes_measure_a_judge_that_reads_only_the_start() -> None:
    def first_window(texts: Sequence[str]) -> list[Decision]:
        return [Decision("block" if "HOSTILE" in t[:100] else "allow", None) for t in texts]

    got = suite.padding_probes(
        first_window, ["HOSTILE one", "HOSTILE two", "mild"], POOL, seed=5, min_chars=500,
        n_long=4,
    )  # fmt: skip
    hostile = got["hostile"]
    assert (hostile["lines"], hostile["flagged_alone"]) == (3, 2)  # "mild" is not flagged alone
    assert hostile["still_flagged"] == {"start": 1.0, "middle": 0.0, "end": 0.0}
    assert hostile["still_flagged_all"] == pytest.approx(1 / 3)
    assert hostile["padding_alone_flagged"] == 0.0
    assert got["long_benign"]["messages"] == 4
    assert got["long_benign"]["flagged"] == 0.0


@pytest.fixture(scope="module")
def shipped() -> tuple[Classifier, Policy]:
    return Classifier(DEFAULT_MODEL_DIR, threads=1), Policy.load()


def test_our_model_is_judged_as_moderator_score_decides(shipped: tuple[Classifier, Policy]) -> None:
    classifier, policy = shipped
    cases = suite.read_suite()
    texts = list({c.category: c.text for c in reversed(cases)}.values())  # one per category
    got = suite.runtime_judge(classifier, policy, batch=len(texts))(texts)
    scores = classifier.score_ids(classifier.encode(texts))  # the same single padded batch
    gate = LanguageGate()
    expected = []
    for text, row in zip(texts, scores, strict=True):
        verdict = policy.decide(classifier.as_dict(row))
        code = gate.detect(text)  # a language the model does not read goes to review
        if code is not None and policy.rank("review") > policy.rank(verdict.action):
            verdict = Ruling("review", f"unsupported_language:{code}")
        expected.append(Decision(verdict.action, verdict.reason))
    assert got == expected
    assert any((d.reason or "").startswith("unsupported_language:") for d in got)
    assert suite.runtime_judge(classifier, policy)(["   "]) == [Decision("allow", "empty_text")]
    assert len(suite.runtime_judge(classifier, policy, batch=2)(texts)) == len(texts)


def test_a_teacher_is_judged_by_its_own_rule() -> None:
    from models.lines import teachers

    teacher = teachers.ProfanityCheck()
    texts = ["you are a fucking idiot", "see you at the match tonight"]
    flagged = teachers.flagged(teacher, teacher.score(texts))
    assert suite.teacher_judge(teacher)(texts) == [
        Decision("flag" if f else "allow", None) for f in flagged
    ]
    assert suite.teacher_judge(teacher)([]) == []
