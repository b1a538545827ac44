"""text.Text: a message's forms made once, each what its step read before, and only when asked."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from moderator.decide import classifier as classifier_module
from moderator.decide import language, text, windows
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Reader
from moderator.decide.text import Text
from moderator.metrics import Metrics
from moderator.normalize import normalize_text
from moderator.pipeline import Pipeline
from moderator.policy import terms
from moderator.policy.rules import Policy, read_spec
from moderator.records import ChatMessage, Verdict
from moderator.review.overrides import Overrides, from_verdict
from moderator.users.escalation import Escalation
from tests.unit.test_pipeline import message

HELDOUT = Path(__file__).parents[2] / "models" / "data" / "heldout.tsv"
FRIENDLY = "hey everyone, hope you are all having a great day, the stream was fun yesterday. "


def test_the_model_reads_the_normalised_form_and_overrides_key_on_its_sha256() -> None:
    line = Text("you are  TRASH!!!!!\u200b")
    assert line.normalized == normalize_text(line.raw) == "you are TRASH!!"
    assert line.digest == hashlib.sha256(b"you are TRASH!!").hexdigest()
    assert line.words == tuple(terms.words(line.raw))


def test_case_spacing_punctuation_and_lookalikes_do_not_make_a_repeat_new() -> None:
    same = ["Buy gold at my site!!!", "buy  gold at my site", "BUY GOLD AT MY SITE!"]
    same.append("buy g\u043eld at my site")  # a Cyrillic o
    assert len({Text(t).repeat_key for t in same}) == 1
    assert Text("buy gold at your site").repeat_key != Text(same[0]).repeat_key
    assert Text("!!! ...").repeat_key == "", "no letter or digit: it repeats nothing"


def test_a_form_no_step_asks_for_is_not_made() -> None:
    line = Text("gg wp")
    empty = Overrides("chat.overrides", {}, Metrics().review)
    assert empty.decide([ChatMessage("m-1", "c-1", "u-1", line.raw, 0)], [line]) == [None]
    assert "digest" not in vars(line), "an empty override book hashes nothing"
    assert line.words is line.words, "made once"


def counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: list[str]) -> None:
    real: Callable[..., Any] = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


async def test_every_step_reads_one_text_normalised_once_per_message(
    classifier: Classifier, reader: Reader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overrides, the users' repeat rule, deny terms and allowed phrases, the model, the windows
    and the language gate, all on, each read the message's one normalisation and skeleton."""
    users = {"repeat_channels": 3, "repeat_window_s": 60}
    deny = [{"term": "potato", "action": "nudge"}]
    policy = Policy.from_mapping(
        {**read_spec(), "deny": deny, "allow": ["kill la kill"], "users": users}
    )
    lines = [ln.split("\t")[0] for ln in HELDOUT.read_text(encoding="utf-8").splitlines()[:40]]
    long = FRIENDLY * 12
    n_windows = len(reader.windows.windows(long).ids)
    assert n_windows > 1
    texts = [*lines, "i like potato", "watching kill la kill tonight", long, "sorry"]
    metrics = Metrics()
    overrides = Overrides("chat.overrides", {}, metrics.review)
    made = from_verdict("sorry", "c-1", Verdict("m-0", "allow", "mod-1", None, "global", 1))
    assert made is not None
    overrides.book.put(made)
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    pipeline = Pipeline(classifier, policy, batcher, cache, metrics.decide, max_record_bytes=65536,
                        budget_ms=50, reader=reader, overrides=overrides,
                        users=Escalation(metrics.users))  # fmt: skip
    records = [message(i, t) for i, t in enumerate(texts)]
    normalised: list[str] = []
    for module in (text, classifier_module, language, windows):
        counting(monkeypatch, module, "normalize_text", normalised)
    skeletons: list[str] = []
    counting(monkeypatch, terms, "words", skeletons)
    await batcher.start()
    try:
        outcomes = await pipeline.process(records)
    finally:
        await batcher.stop()
    decisions = [orjson.loads(o.value or b"") for o in outcomes]
    assert decisions[-1]["reason"] == "override"
    assert decisions[-4]["reason"] == "deny:policy:custom"
    assert decisions[-2]["span"] != [0, len(long)], "read window by window"
    # Once per message; and once more for what is not the message's text: the one text with an
    # allowed phrase blanked out, and each window of the long text, which the gate reads apart.
    assert len(normalised) == len(texts) + 1 + n_windows
    assert len(skeletons) == len(texts)
