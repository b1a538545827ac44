"""PolicyBook: which policy decides a channel, as records of the policies topic arrive."""

from __future__ import annotations

import orjson
import pytest

from moderator.errors import PolicyError
from moderator.policy.channels import DEFAULT_KEY, PolicyBook
from moderator.policy.rules import Policy

POTATO = {"name": "potato", "version": 1, "deny": [{"term": "potato"}]}


def spec(**fields: object) -> bytes:
    return orjson.dumps({"name": "p", "version": 1, **fields})


def test_a_channel_gets_its_own_policy_and_a_tombstone_gives_it_the_default_again() -> None:
    book = PolicyBook(Policy.load())
    assert book.apply("c-1", orjson.dumps(POTATO)) == "applied"
    assert book.for_channel("c-1").ident == "potato@1"
    assert book.for_channel("c-2") is book.default
    assert len(book) == 1
    assert book.apply("c-1", None) == "removed"
    assert book.for_channel("c-1") is book.default
    assert len(book) == 0


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (b"{not json", "policy for 'c-1': not JSON"),
        (b"[1, 2]", "a policy is a JSON object"),
        (spec(labels={"insult": {"high": "smite"}}), "labels.insult.high: 'smite'"),
        (orjson.dumps({"version": 2}), "missing 'name'"),
    ],
)
def test_a_bad_policy_raises_and_changes_nothing(value: bytes, error: str) -> None:
    book = PolicyBook(Policy.load())
    book.apply("c-1", orjson.dumps(POTATO))
    with pytest.raises(PolicyError, match="policy for 'c-1'") as info:
        book.apply("c-1", value)
    assert error in str(info.value)
    assert book.for_channel("c-1").ident == "potato@1"


def test_a_new_default_is_merged_under_every_channel() -> None:
    book = PolicyBook(Policy.load())
    book.apply("c-1", orjson.dumps(POTATO))
    book.apply(DEFAULT_KEY, spec(name="house", labels={"insult": {"high": "nudge"}}))
    assert book.default.ident == "house@1"
    channel = book.for_channel("c-1")
    assert channel.ident == "potato@1"
    assert channel.decide({"insult": 0.99})[:2] == ("nudge", "insult")  # from the new default
    assert channel.deny_ruling("potato") is not None  # its own terms kept
    book.apply(DEFAULT_KEY, None)
    assert book.default is book.base
    assert book.for_channel("c-1").decide({"insult": 0.99})[0] == "block"


def test_a_channel_invalid_over_a_new_default_falls_back_to_it() -> None:
    # A base in the severity form: a threshold per action caps a policy at three actions.
    base = {"name": "base", "version": 1, "labels": {"insult": {"high": "block"}}}
    book = PolicyBook(Policy.from_mapping(base))
    book.apply(DEFAULT_KEY, spec(name="house", actions=["nudge", "warn", "block"]))
    book.apply("c-1", spec(labels={"insult": {"high": "warn"}}))
    assert book.for_channel("c-1").decide({"insult": 0.99})[0] == "warn"
    # A default whose actions lack `warn` leaves c-1's policy invalid: c-1 gets the default.
    book.apply(DEFAULT_KEY, spec(name="house", version=2))
    assert book.for_channel("c-1") is book.default


def test_a_channel_sets_a_review_threshold_and_keeps_the_defaults_other_labels() -> None:
    book = PolicyBook(Policy.load())
    book.apply("c-1", spec(labels={"insult": {"review": 0.6, "block": 0.995}}))
    channel = book.for_channel("c-1")
    assert channel.decide({"insult": 0.65})[:2] == ("review", "insult")
    assert book.default.decide({"insult": 0.65})[0] == "allow"
    threat = {r.label: r.by_action for r in book.default.rules}["threat"]
    assert channel.decide({"threat": threat["block"]})[:2] == ("block", "threat")
    assert channel.decide({"threat": threat["review"]})[:2] == ("review", "threat")
