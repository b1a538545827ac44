"""What replaces an outcome the broker refuses for good (no Kafka: the records are built here)."""

from __future__ import annotations

import orjson
import pytest
from aiokafka.errors import (
    CorruptRecordException,
    InvalidTimestampError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownError,
)
from aiokafka.structs import ConsumerRecord

from moderator.kafka.refusal import PUBLISH_FAILED, describe, divert, is_refusal
from moderator.records import (
    DLQ_DECISION,
    DLQ_ERROR_CODE,
    DLQ_ERROR_MESSAGE,
    DLQ_SOURCE_OFFSET,
    DLQ_VALUE_OMITTED,
    Outcome,
)

INPUT = b'{"message_id":"m-1","channel_id":"c-1","user_id":"u-1","text":"gg"}'
DECISION = b'{"message_id":"m-1","action":"allow"}'


def record(value: bytes | None = INPUT) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic="chat.messages", partition=2, offset=41, timestamp=1732240000000,
                          timestamp_type=0, key=b"c-1", value=value, checksum=None,
                          serialized_key_size=3, serialized_value_size=len(value or b""),
                          headers=())  # fmt: skip


@pytest.mark.parametrize(
    "exc",
    [
        UnknownError(),  # INVALID_RECORD (87) from a schema, as aiokafka reports it
        MessageSizeTooLargeError("too big"),
        RecordListTooLargeError(),
        CorruptRecordException(),
    ],
)
def test_a_refusal_of_the_record_is_told_apart(exc: Exception) -> None:
    assert is_refusal(exc)


@pytest.mark.parametrize(
    "exc",
    [
        None,
        KafkaTimeoutError(),  # the broker frozen past the request timeout: an outage
        RequestTimedOutError(),
        KafkaConnectionError(),
        NotLeaderForPartitionError(),
        TopicAuthorizationFailedError(),  # the whole topic: an operator's job, not the record's
        InvalidTimestampError(),  # we never set timestamps: the host's clock is off, for all
    ],
)
def test_outages_and_topic_wide_refusals_are_not_record_refusals(exc: Exception | None) -> None:
    assert not is_refusal(exc)


def test_a_refused_decision_becomes_a_dead_letter_with_the_input_and_the_decision() -> None:
    decision = Outcome(b"c-1", DECISION, [], action="allow")
    letter = divert(decision, record(), UnknownError(), 5)
    assert letter is not None
    assert (letter.dead_letter, letter.key, letter.value, letter.error_code) == (
        True, b"c-1", INPUT, PUBLISH_FAILED,
    )  # fmt: skip
    headers = dict(letter.headers)
    assert headers[DLQ_ERROR_CODE] == b"publish_failed"
    assert headers[DLQ_ERROR_MESSAGE] == (
        b"the decision was not published: the broker refused it 5 times ([Error -1] UnknownError"
        b" (a code aiokafka does not know, e.g. INVALID_RECORD from a schema))"
    )
    assert headers[DLQ_SOURCE_OFFSET] == b"41"
    assert headers[DLQ_DECISION] == DECISION


def test_a_refused_dead_letter_keeps_its_reason_and_source_but_not_its_value() -> None:
    decision = Outcome(b"c-1", DECISION, [], action="allow")
    first = divert(decision, record(), UnknownError(), 5)
    assert first is not None
    receipt = divert(first, record(), MessageSizeTooLargeError("over the limit"), 3)
    assert receipt is not None
    assert receipt.error_code == PUBLISH_FAILED
    assert receipt.key == b"chat.messages/2/41", "keyed by its source: the key may be the problem"
    assert orjson.loads(receipt.value or b"") == {"value_omitted_bytes": len(INPUT)}
    headers = dict(receipt.headers)
    assert headers[DLQ_ERROR_CODE] == b"publish_failed"
    assert headers[DLQ_SOURCE_OFFSET] == b"41", "the original can be read again from its source"
    assert headers[DLQ_VALUE_OMITTED] == str(len(INPUT)).encode()
    assert DLQ_DECISION not in headers
    message = headers[DLQ_ERROR_MESSAGE].decode()
    assert message.startswith("the decision was not published")
    assert f"value ({len(INPUT)} bytes) was omitted" in message
    assert "[Error 10] MessageSizeTooLargeError: over the limit" in message
    assert divert(receipt, record(), UnknownError(), 5) is None, "a receipt is the last resort"


def test_a_refused_bad_record_dead_letter_keeps_its_own_reason() -> None:
    bad = b"\xff" * 10
    headers = [(DLQ_ERROR_CODE, b"not_utf8"), (DLQ_ERROR_MESSAGE, b"not UTF-8")]
    letter = Outcome(b"k", bad, headers, error_code="not_utf8")
    receipt = divert(letter, record(bad), UnknownError(), 5)
    assert receipt is not None
    assert receipt.error_code == "not_utf8"
    assert dict(receipt.headers)[DLQ_ERROR_CODE] == b"not_utf8"


def test_an_error_without_a_message_is_described_by_its_name() -> None:
    assert describe(TimeoutError()) == "TimeoutError"
    assert describe(UnknownError()).endswith("UnknownError (a code aiokafka does not know, e.g. "
                                             "INVALID_RECORD from a schema)")  # fmt: skip
