"""Overrides without Kafka: the digest, the keys, the lookup order, what a record must hold, and
the pipeline deciding an overridden message without the model."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import AsyncIterator

import orjson
import pytest

from moderator.admin.override_admin import audit_row, row
from moderator.cli import main
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier
from moderator.errors import InvalidRecord
from moderator.metrics import Metrics
from moderator.normalize import normalize_text
from moderator.pipeline import Pipeline
from moderator.policy.rules import Policy
from moderator.records import DEFAULT_SCOPE, ChatMessage, Verdict, parse_verdict
from moderator.review.audit import entry
from moderator.review.override_edits import duration_s
from moderator.review.overrides import (
    InvalidOverride,
    Override,
    OverrideBook,
    Overrides,
    from_verdict,
    override_key,
    text_digest,
)
from tests.contract import validator
from tests.unit.test_pipeline import Record

TEXT = "you are a worthless idiot"


def verdict(action: str = "block", scope: str = "global", message_id: str = "m-1") -> Verdict:
    return Verdict(message_id, action, "mod-ann", "rule 3", scope, 1_764_000_000_000)


def made(text: str, channel: str, v: Verdict) -> Override:
    override = from_verdict(text, channel, v)
    assert override is not None
    return override


def book_of(*overrides: Override, now_ms: int | None = None) -> OverrideBook:
    book = OverrideBook()
    for override in overrides:
        assert book.apply(override.key, override.encode(), now_ms) == "applied"
    return book


def test_the_digest_is_sha256_of_the_normalised_text() -> None:
    assert text_digest(TEXT) == hashlib.sha256(TEXT.encode()).hexdigest()
    # What normalisation folds (look-alikes, zero-width characters, runs, spaces) hashes alike.
    disguised = "  you are a wоrthless\u200b idiooooot "
    assert normalize_text(disguised) != disguised
    assert text_digest(disguised) == text_digest("you are a worthless idioot")
    assert text_digest("you are a worthless idiot!") != text_digest(TEXT)


def test_keys_name_the_digest_and_the_channel_of_a_channel_override() -> None:
    digest = text_digest(TEXT)
    assert made(TEXT, "c-1", verdict()).key == override_key(digest) == digest
    channel = made(TEXT, "c-1", verdict(scope="channel"))
    assert (channel.scope, channel.channel_id) == ("channel", "c-1")
    assert channel.key == f"{digest}:c-1"


def test_a_channel_override_wins_in_its_channel_and_the_global_one_elsewhere() -> None:
    book = book_of(
        made(TEXT, "c-any", verdict("block")), made(TEXT, "c-friends", verdict("allow", "channel"))
    )
    assert book.lookup(TEXT, "c-friends") == "allow"
    assert book.lookup(TEXT, "c-other") == "block"
    assert book.lookup("  YOU are a worthless idiot", "c-other") is None, "case is the tokenizer's"
    assert book.lookup("gg wp", "c-friends") is None
    # The channel's own removed: the global one applies there again.
    assert book.apply(f"{text_digest(TEXT)}:c-friends", None) == "removed"
    assert book.lookup(TEXT, "c-friends") == "block"


def test_a_channel_override_alone_applies_only_in_its_channel() -> None:
    book = book_of(made(TEXT, "c-1", verdict("block", "channel")))
    assert (book.lookup(TEXT, "c-1"), book.lookup(TEXT, "c-2")) == ("block", None)


def test_the_latest_record_of_a_key_wins_and_a_tombstone_deletes() -> None:
    book = book_of(made(TEXT, "c-1", verdict("block")), made(TEXT, "c-2", verdict("nudge")))
    assert (len(book), book.lookup(TEXT, "c-9")) == (1, "nudge")
    assert book.apply(text_digest(TEXT), None) == "removed"
    assert (len(book), book.lookup(TEXT, "c-9")) == (0, None)


def test_a_text_that_normalises_to_nothing_makes_no_override() -> None:
    assert from_verdict("\u200b \u200b", "c-1", verdict()) is None


def test_an_override_record_matches_its_schema_both_scopes() -> None:
    for scope in ("global", "channel"):
        validator("override").validate(
            orjson.loads(made(TEXT, "c-1", verdict(scope=scope)).encode())
        )
    wrong = {**made(TEXT, "c-1", verdict())._asdict(), "channel_id": "c-1"}  # global, a channel
    assert not validator("override").is_valid(wrong)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"action": "review"}, "action 'review' is not one of allow, nudge, block"),
        ({"scope": "channel"}, "channel_id is a channel exactly when the scope is channel"),
        ({"digest": "abc"}, "digest is not a sha256 hex digest"),
        ({"moderator_id": ""}, "moderator_id and message_id are non-empty strings"),
        ({"at_ms": "yesterday"}, "at_ms is an integer"),
        ({"channel_id": "c-1", "scope": "channel"}, "its fields make the key"),
    ],
)
def test_a_record_that_does_not_validate_is_refused_and_the_earlier_one_stays(
    change: dict[str, object], why: str
) -> None:
    good = made(TEXT, "c-1", verdict("block"))
    book = book_of(good)
    value = orjson.dumps({**good._asdict(), **change})
    with pytest.raises(InvalidOverride, match=why):
        book.apply(good.key, value)
    assert not validator("override").is_valid(orjson.loads(value)) or "key" in why
    assert book.lookup(TEXT, "c-1") == "block"


@pytest.mark.parametrize("value", [b"{not json", b"[1]", b'{"digest": "x"}'])
def test_garbage_is_refused(value: bytes) -> None:
    with pytest.raises(InvalidOverride):
        OverrideBook().apply(text_digest(TEXT), value)


def test_an_override_costs_well_under_a_kilobyte_of_memory() -> None:
    """The module docstring's figure: what holding every override in every instance costs."""
    n = 20_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    book = book_of(*(made(f"line {i}", f"c-{i}", verdict(scope="channel")) for i in range(n)))
    per_override = (tracemalloc.get_traced_memory()[0] - before) / len(book)
    tracemalloc.stop()
    print(f"{per_override:.0f} bytes per override")
    assert len(book) == n
    assert per_override < 1024


def test_decide_counts_what_it_decides_and_skips_the_hash_with_no_overrides() -> None:
    metrics = Metrics()
    overrides = Overrides("chat.overrides", {}, metrics.review)
    chats = [ChatMessage(f"m-{i}", "c-1", "u-1", text, 0) for i, text in enumerate((TEXT, "gg"))]
    assert overrides.decide(chats) == [None, None]
    overrides.book.put(made(TEXT, "c-1", verdict("nudge")))
    assert overrides.decide(chats) == ["nudge", None]
    sample = metrics.registry.get_sample_value
    assert sample("moderator_override_decisions_total", {"action": "nudge"}) == 1
    assert sample("moderator_override_decisions_total", {"action": "block"}) == 0


@pytest.fixture
async def pipeline(classifier: Classifier) -> AsyncIterator[Pipeline]:
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=8, metrics=metrics.decide)
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    overrides = Overrides("chat.overrides", {}, metrics.review)
    await batcher.start()
    try:
        yield Pipeline(classifier, Policy.load(), batcher, cache, metrics.decide,
                       max_record_bytes=65536, budget_ms=50, overrides=overrides)  # fmt: skip
    finally:
        await batcher.stop()


def chat(i: int, channel: str, text: str) -> Record:
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": "u", "text": text}
    return Record(orjson.dumps(value), key=channel.encode(), offset=i)


async def test_the_pipeline_decides_an_overridden_text_without_the_model(
    pipeline: Pipeline,
) -> None:
    assert pipeline.overrides is not None
    pipeline.overrides.book.put(made(TEXT, "c-1", verdict("allow", "channel")))
    outcomes = await pipeline.process(
        [chat(0, "c-1", TEXT), chat(1, "c-1", "gg wp"), chat(2, "c-2", TEXT)]
    )
    d = [orjson.loads(o.value or b"") for o in outcomes]
    assert [x["message_id"] for x in d] == ["m-0", "m-1", "m-2"], "in record order"
    assert (d[0]["action"], d[0]["reason"], d[0]["severity"], d[0]["scores"]) == (
        "allow", "override", None, {}
    )  # fmt: skip
    assert d[0]["latency_ms"]["score"] == 0
    assert (d[2]["action"], d[2]["reason"]) == ("block", "insult"), "another channel: the model"
    assert d[1]["reason"] is None
    assert d[1]["scores"]
    rows = pipeline.metrics.registry.get_sample_value("moderator_batch_size_sum")
    assert rows == 2, "the model scored the two texts no override covered, not the third"


def test_a_list_line_says_digest_scope_channel_action_moderator_and_when_in_utc() -> None:
    channel, everywhere = made(TEXT, "c-1", verdict(scope="channel")), made(TEXT, "c-1", verdict())
    assert row(channel).split("\t") == [
        text_digest(TEXT), "channel", "c-1", "block", "mod-ann", "2025-11-24T16:00:00Z", "-"
    ]  # fmt: skip
    assert row(everywhere).split("\t")[1:3] == ["global", "-"]
    lapsing = channel._replace(expires_at_ms=channel.at_ms + 7 * 86_400_000)
    assert row(lapsing).split("\t")[6] == "2025-12-01T16:00:00Z"


@pytest.mark.parametrize("argv", [[], ["abc", "--text", TEXT]])
def test_delete_needs_a_digest_or_a_text_not_both(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["override", "delete", *argv]) == 2  # before any Kafka is asked
    assert "give a DIGEST or --text, one of them" in capsys.readouterr().err


def test_a_verdict_that_names_no_scope_overrides_its_channel_only() -> None:
    """Issue 43: one click must not become a platform-wide rule (the default was `global`)."""
    value = orjson.dumps({"message_id": "m-1", "verdict": "block", "moderator_id": "mod-ann",
                          "at_ms": 1_764_000_000_000})  # fmt: skip
    parsed = parse_verdict(value, max_bytes=4096)
    assert parsed.scope == DEFAULT_SCOPE == "channel"
    assert parsed.override_expires_at_ms is None
    book = book_of(made(TEXT, "c-1", parsed))
    assert (book.lookup(TEXT, "c-1"), book.lookup(TEXT, "c-2")) == ("block", None)
    assert validator("verdict").schema["properties"]["scope"]["default"] == DEFAULT_SCOPE


def test_a_verdicts_expiry_becomes_its_overrides_and_must_be_an_integer() -> None:
    fields = {"message_id": "m-1", "verdict": "nudge", "moderator_id": "mod-ann", "at_ms": 5}
    parsed = parse_verdict(orjson.dumps({**fields, "override_expires_at_ms": 99}), max_bytes=4096)
    override = made(TEXT, "c-1", parsed)
    assert override.expires_at_ms == 99
    validator("override").validate(orjson.loads(override.encode()))
    with pytest.raises(InvalidRecord, match="'override_expires_at_ms' must be an integer"):
        parse_verdict(orjson.dumps({**fields, "override_expires_at_ms": "7d"}), max_bytes=4096)


def test_an_override_stops_at_its_expiry_and_the_global_one_applies_again() -> None:
    at = 1_764_000_000_000
    own = made(TEXT, "c-1", verdict("allow", "channel"))._replace(expires_at_ms=at + 1000)
    book = book_of(made(TEXT, "c-1", verdict("block")), own, now_ms=at)
    assert book.lookup(TEXT, "c-1", now_ms=at + 999) == "allow"
    assert book.lookup(TEXT, "c-1", now_ms=at + 1000) == "block", "expired: the global one"
    assert len(book) == 1, "the expired one is dropped at the lookup that finds it expired"
    assert book.lookup(TEXT, "c-1", now_ms=at) == "block", "and never comes back"


def test_an_override_read_already_expired_is_dropped_like_a_tombstone() -> None:
    live = made(TEXT, "c-1", verdict("block"))
    book = book_of(live)
    expired = live._replace(expires_at_ms=live.at_ms)
    assert book.apply(expired.key, expired.encode(), now_ms=live.at_ms) == "expired"
    assert (len(book), book.lookup(TEXT, "c-9", now_ms=live.at_ms - 1)) == (0, None)


def test_a_record_written_before_expiry_existed_is_read_as_never_expiring() -> None:
    old = made(TEXT, "c-1", verdict("nudge"))._asdict()
    del old["expires_at_ms"]
    book = OverrideBook()
    assert book.apply(text_digest(TEXT), orjson.dumps(old)) == "applied"
    assert book.lookup(TEXT, "c-1", now_ms=2**62) == "nudge"
    wrong = {**old, "expires_at_ms": "soon"}
    with pytest.raises(InvalidOverride, match="expires_at_ms is an integer or null"):
        book.apply(text_digest(TEXT), orjson.dumps(wrong))


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("15m", 900), ("12h", 43200),
                                               ("7d", 604800)])  # fmt: skip
def test_durations_read_as_seconds(text: str, seconds: int) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "0d", "1w", "-1d", "7 days"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        duration_s(text)


def test_audit_entries_match_their_schema_and_list_as_who_what_when() -> None:
    over = made(TEXT, "c-1", verdict(scope="channel"))
    revoked = entry("override_revoked", actor="alice", via="console", at_ms=over.at_ms,
                    key=over.key, override=over._asdict())  # fmt: skip
    given = entry("verdict", actor="bob", via="console", at_ms=over.at_ms,
                  verdict=verdict(scope="global")._asdict(), confirmed_global=True)  # fmt: skip
    for e in (revoked, given):
        validator("audit").validate(e)
    assert audit_row(revoked).split("\t") == [
        "2025-11-24T16:00:00Z", "alice", "console", "override_revoked", over.key,
        "block scope channel channel c-1 expires -",
    ]  # fmt: skip
    assert audit_row(given).split("\t")[3:] == [
        "verdict", "m-1", "block m-1 scope global expires -"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="not one of"):
        entry("override_made", actor="x", via="console", at_ms=1)
