"""Hostile input, fuzzed: the parser and the normaliser never fail in any other way."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moderator.decide.classifier import Classifier
from moderator.errors import InvalidRecord
from moderator.normalize import normalize_text
from moderator.records import ChatMessage, parse_message

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=20,
)
records = st.fixed_dictionaries(
    {},
    optional={
        "message_id": json_values | st.text(min_size=1),
        "channel_id": json_values | st.text(min_size=1),
        "user_id": json_values | st.text(min_size=1),
        "text": json_values | st.text(),
        "sent_at_ms": json_values,
    },
)


def parse(value: bytes) -> ChatMessage | str:
    """The message, or the reason code; any other exception fails the test."""
    try:
        return parse_message(value, timestamp_ms=0, max_bytes=65536)
    except InvalidRecord as err:
        error = err
    assert error.message
    return error.code


@given(st.binary(max_size=2048))
def test_arbitrary_bytes_parse_or_get_a_reason(value: bytes) -> None:
    parse(value)


@given(records)
def test_arbitrary_objects_parse_only_when_well_typed(data: dict[str, object]) -> None:
    result = parse(orjson.dumps(data))
    ok = all(isinstance(data.get(k), str) and data[k] for k in ("message_id", "channel_id",
                                                               "user_id"))  # fmt: skip
    ok = ok and isinstance(data.get("text"), str)
    ok = ok and (data.get("sent_at_ms") is None or type(data.get("sent_at_ms")) is int)
    assert isinstance(result, ChatMessage) == ok


def test_deeply_nested_json_is_a_dead_letter_not_a_crash() -> None:
    assert parse(b"[" * 100_000 + b"]" * 100_000) == "too_large"
    assert parse(b"[" * 20_000 + b"]" * 20_000) in ("invalid_json", "not_object")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(st.text(max_size=3000))
def test_any_text_normalises_idempotently_and_tokenizes(classifier: Classifier, text: str) -> None:
    once = normalize_text(text)
    assert normalize_text(once) == once
    (ids,) = classifier.encode([text])
    assert 2 <= len(ids) <= classifier.info.max_length


def test_hostile_texts_tokenize(classifier: Classifier) -> None:
    hostile = [
        "x" * (1 << 20),  # 1 MiB
        "Z̸̢̛̫̠͖a̵̡͚͓̓l̶̢̛͔g̷̨̛o̴̢͎" * 500,  # zalgo
        "\u202eevil\u202c right-to-left \u05e9\u05dc\u05d5\u05dd",
        "nul\x00\x00bytes",
        "\ud800 lone surrogate \udfff",
    ]
    for ids in classifier.encode(hostile):
        assert 2 <= len(ids) <= classifier.info.max_length
