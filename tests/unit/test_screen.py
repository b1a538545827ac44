"""screen: windows and the language gate on the one path of the pipeline and `moderator score`."""

from __future__ import annotations

import numpy as np
import pytest

from moderator.decide.cache import cache_key
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Reader, Screened, decide_texts, judge, screen
from moderator.decide.text import Text
from moderator.errors import PolicyError
from moderator.policy.channels import layered
from moderator.policy.rules import EMPTY_TEXT, Policy, Ruling

FRIENDLY = (
    "hey everyone, hope you are all having a great day, the stream was fun yesterday "
    "and I loved the new song you played at the end. "
)
SPANISH = "eres un pedazo de mierda, te voy a encontrar"
POLICY = Policy.load()


def long_text(reader: Reader, windows: int) -> str:
    """Friendly chat long enough for at least `windows` windows."""
    text = FRIENDLY
    while len(reader.windows.windows(text).ids) < windows:
        text += FRIENDLY
    return text


def test_a_one_window_text_keeps_todays_ids_key_and_whole_text_span(
    reader: Reader, classifier: Classifier
) -> None:
    (s,) = screen(reader, [(POLICY, Text("gg wp, that clutch was insane"))])
    (ids,) = classifier.encode(["gg wp, that clutch was insane"])
    assert s.ids is not None
    assert np.array_equal(s.ids, ids)
    assert s.key("abc", reader) == cache_key("abc", ids)
    (judged,) = decide_texts(reader, POLICY, ["gg wp, that clutch was insane"])
    assert judged.span == (0, len("gg wp, that clutch was insane"))
    assert (judged.truncated, judged.language) == (False, None)
    assert judged.scores == classifier.as_dict(classifier.score_ids([ids])[0])


def test_a_long_text_is_scored_on_every_window_and_names_the_one_that_acted(
    reader: Reader,
) -> None:
    text = long_text(reader, 3) + "you are a worthless piece of shit, go die. " + FRIENDLY * 3
    (s,) = screen(reader, [(POLICY, Text(text))])
    windows = reader.windows.windows(text)
    assert len(s.rows) == len(windows.ids) > 3
    assert s.spans == windows.spans
    (judged,) = decide_texts(reader, POLICY, [text])
    rows = reader.classifier.score_ids(windows.ids)  # the same rows in one call: the same scores
    labels = reader.classifier.labels
    assert judged.scores == pytest.approx(dict(zip(labels, rows.max(axis=0).tolist(), strict=True)))
    label = (
        judged.ruling.reason
        if judged.ruling.reason in labels
        else max(judged.scores, key=judged.scores.__getitem__)
    )
    best = int(np.argmax(rows[:, labels.index(label)]))
    assert judged.span == windows.spans[best] != (0, len(text))


def test_the_cache_key_of_a_long_text_covers_every_window_and_the_plan(
    reader: Reader, classifier: Classifier
) -> None:
    text = long_text(reader, 4)
    (s,) = screen(reader, [(POLICY, Text(text))])
    key = s.key("abc", reader)
    assert key == screen(reader, [(POLICY, Text(text))])[0].key("abc", reader)  # stable
    assert key not in {cache_key("abc", row) for row in s.rows}
    assert key != s.key("abd", reader)  # the model's digest
    other = Reader(classifier, max_windows=len(s.rows) + 1)  # same windows, another cap
    (same,) = screen(other, [(POLICY, Text(text))])
    assert [r.tolist() for r in same.rows] == [r.tolist() for r in s.rows]
    assert same.key("abc", other) != key
    changed = text[: s.spans[1][0]] + "now " + text[s.spans[1][0] :]  # one window's tokens
    assert screen(reader, [(POLICY, Text(changed))])[0].key("abc", reader) != key


def test_past_the_cap_the_first_and_last_windows_are_read_and_marked_truncated(
    classifier: Classifier,
) -> None:
    capped = Reader(classifier, max_windows=2)
    text = FRIENDLY * 20
    (s,) = screen(capped, [(POLICY, Text(text))])
    assert s.truncated
    assert len(s.rows) == 2
    assert s.spans[0][0] == 0
    assert s.spans[-1][1] == len(text.rstrip())


def test_texts_decided_together_are_decided_as_each_alone(reader: Reader) -> None:
    friendly, insult = "gg wp, that clutch was insane", "you are a worthless idiot"
    texts = [friendly, insult, "", insult, friendly]  # "" decided without the model
    together = [j.ruling for j in decide_texts(reader, POLICY, texts)]
    assert together == [decide_texts(reader, POLICY, [t])[0].ruling for t in texts]
    assert together[0].action == "allow" != together[1].action


def test_the_cache_key_of_a_long_text_is_stored_in_one_format(reader: Reader) -> None:
    # Cached entries outlive a deploy: another format would orphan every one in Redis.
    rows = (np.asarray([7, 8, 9], dtype=np.int64), np.asarray([10, 11], dtype=np.int64))
    s = Screened(None, rows, ((0, 5), (4, 9)), 9)
    w = reader.windows
    hashed = [-1, w.size, w.stride, w.max_windows, 3, 2, 7, 8, 9, 10, 11]  # plan, lengths, ids
    assert s.key("abc", reader) == cache_key("abc", np.asarray(hashed, dtype=np.int64))


def synthetic(reader: Reader, rows: list[dict[str, float]], **fields: object) -> Screened:
    spans = tuple((i * 10, i * 10 + 20) for i in range(len(rows)))
    dummy = tuple(np.zeros(3, dtype=np.int64) for _ in rows)
    return Screened(None, dummy, spans, 100, **fields)  # type: ignore[arg-type]


def as_rows(reader: Reader, rows: list[dict[str, float]]) -> np.ndarray:
    labels = reader.classifier.labels
    return np.asarray([[row.get(label, 0.0) for label in labels] for row in rows], np.float32)


def test_a_truncated_message_that_nothing_flagged_goes_to_review(reader: Reader) -> None:
    quiet = [{"insult": 0.1}, {"insult": 0.2}]
    judged = judge(reader, POLICY, synthetic(reader, quiet, truncated=True), as_rows(reader, quiet))
    assert judged.ruling == Ruling("review", "truncated")
    assert judged.truncated
    assert judged.span == (10, 30)
    loud = [{"insult": 0.1}, {"insult": 0.99}]
    judged = judge(reader, POLICY, synthetic(reader, loud, truncated=True), as_rows(reader, loud))
    assert judged.ruling.action == "block"
    assert judged.ruling.reason == "insult"
    assert judged.span == (10, 30)


def test_the_acting_label_names_the_span_not_the_highest_score(reader: Reader) -> None:
    rows = [{"insult": 0.99, "threat": 0.1}, {"threat": 0.6, "obscene": 0.999}]
    judged = judge(reader, POLICY, synthetic(reader, rows), as_rows(reader, rows))
    assert judged.ruling.reason == "insult"
    assert judged.span == (0, 20)
    assert judged.scores["threat"] == pytest.approx(0.6)


def test_an_unsupported_language_goes_to_review_unless_the_model_says_more(reader: Reader) -> None:
    (s,) = screen(reader, [(POLICY, Text(SPANISH))])
    assert s.language == "es"
    quiet = [{"insult": 0.1}]
    judged = judge(reader, POLICY, s._replace(spans=((0, 20),)), as_rows(reader, quiet))
    assert judged.ruling == Ruling("review", "unsupported_language:es")
    assert judged.language == "es"
    loud = [{"threat": 0.99}]
    judged = judge(reader, POLICY, s, as_rows(reader, loud))
    assert judged.ruling.action == "block"
    assert judged.ruling.reason == "threat"
    assert judged.language == "es"  # still said


def test_the_gate_runs_after_deny_terms_and_the_empty_text_check(reader: Reader) -> None:
    deny = Policy.from_mapping({**POLICY.spec, "deny": [{"term": "pedazo", "action": "nudge"}]})
    texts = [(deny, Text(SPANISH)), (POLICY, Text("   ")), (POLICY, Text("gg wp"))]
    (denied, empty, english) = screen(reader, texts)
    assert denied.ruling is not None
    assert denied.ruling.reason == "deny:policy:custom"
    assert denied.language is None
    assert denied.rows == ()
    assert empty.ruling == EMPTY_TEXT
    assert empty.language is None
    assert english.language is None
    assert english.ruling is None


def test_an_english_start_does_not_carry_a_foreign_body(reader: Reader) -> None:
    foreign = (
        "hola a todos, muchas gracias por venir al directo de hoy, vamos a jugar un rato "
        "y luego charlamos sobre el torneo del fin de semana que viene. "
    )
    text = long_text(reader, 2) + foreign * 4
    (judged,) = decide_texts(reader, POLICY, [text])
    assert judged.language == "es"
    assert judged.ruling.action in ("review", "block")


def test_a_channel_policy_can_choose_what_unsupported_languages_get(reader: Reader) -> None:
    assert POLICY.unsupported_language == "review"
    relaxed = layered(
        POLICY.spec, {"name": "c", "version": 1, "unsupported_language": "allow"}, "c"
    )
    assert relaxed.unsupported_language == "allow"
    assert layered(POLICY.spec, {"name": "c", "version": 1}, "c").unsupported_language == "review"
    (judged,) = decide_texts(reader, relaxed, [SPANISH])
    assert (judged.ruling.reason or "").startswith("unsupported_language") is False
    assert judged.language == "es"
    with pytest.raises(PolicyError, match="unsupported_language"):
        layered(POLICY.spec, {"name": "c", "version": 1, "unsupported_language": "ban"}, "c")
    own = Policy.from_mapping(
        {
            "name": "own",
            "version": 1,
            "actions": ["warn", "block"],
            "labels": {"insult": {"block": 0.9}},
        }
    )
    assert own.unsupported_language == own.review_action == "warn"  # its mildest action
