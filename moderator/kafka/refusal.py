"""What to publish instead when the broker refuses an outcome for good.

An outage (timeouts, lost connections, leader changes) and a refusal of a whole topic (missing
ACLs, a schema refusing everything) heal or need an operator; the service re-sends through them
forever. A refusal of one record (a schema rejecting it, INVALID_RECORD; a record too large; a
corrupt batch) returns the same answer to the same bytes, so re-sending alone would hold the
partition's commits forever. After a few such refusals (the service decides which count) the
outcome is diverted instead: a decision becomes a `publish_failed` dead letter carrying the
original input and the refused decision, and a dead letter that is itself refused is re-sent as a
small JSON receipt keyed by its source (`topic/partition/offset`, also in its headers, to re-read
the original there). A receipt refused too is re-sent forever: nothing is committed without a
record of what happened to the input.
"""

from __future__ import annotations

import orjson
from aiokafka.errors import (
    CorruptRecordException,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    UnknownError,
)

from moderator.errors import InvalidRecord
from moderator.records import (
    DLQ_DECISION,
    DLQ_ERROR_MESSAGE,
    DLQ_VALUE_OMITTED,
    InboundRecord,
    Outcome,
    dead_letter,
)

PUBLISH_FAILED = "publish_failed"
# Between re-sends of a failed delivery (the publisher's, and the final decisions'), by attempt.
RETRY_BACKOFF_S = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
RETRY_JITTER = 0.5  # each back-off is drawn from [0.5x, 1.5x]

# Errors about the record itself. aiokafka raises UnknownError for every code it does not know,
# among them INVALID_RECORD (87), which a broker-side schema answers; the code itself is lost, so
# an unknown server error (-1) looks the same. That is why a refusal counts only while the topic
# takes other records (moderator/kafka/publisher.py). INVALID_TIMESTAMP is left out: we never set
# timestamps, so it means the host's clock is off, for every record.
RECORD_REFUSALS = (
    CorruptRecordException,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    UnknownError,
)


def is_refusal(exc: BaseException | None) -> bool:
    """True when the broker refused this record itself, not when it could not be reached."""
    return isinstance(exc, RECORD_REFUSALS)


def describe(exc: BaseException) -> str:
    """The error as an operator can act on it (aiokafka's name `UnknownError` hides the code)."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, UnknownError):
        text += " (a code aiokafka does not know, e.g. INVALID_RECORD from a schema)"
    return text


def divert(
    outcome: Outcome, record: InboundRecord, exc: BaseException, refusals: int
) -> Outcome | None:
    """The dead letter to publish instead of `outcome`, refused `refusals` times with `exc`;
    None when `outcome` is already a receipt (the last resort is to keep re-sending it)."""
    why = f"the broker refused it {refusals} times ({describe(exc)})"
    if not outcome.dead_letter:
        error = InvalidRecord(PUBLISH_FAILED, f"the decision was not published: {why}")
        letter = dead_letter(record, error)
        letter.headers.append((DLQ_DECISION, outcome.value or b""))
        return letter
    if any(name == DLQ_VALUE_OMITTED for name, _ in outcome.headers):
        return None
    size = len(outcome.value or b"")
    headers = []
    for name, value in outcome.headers:
        if name == DLQ_ERROR_MESSAGE:
            value += f"; the dead letter's value ({size} bytes) was omitted: {why}".encode()
        if name != DLQ_DECISION:
            headers.append((name, value))
    headers.append((DLQ_VALUE_OMITTED, str(size).encode()))
    receipt = orjson.dumps({"value_omitted_bytes": size})
    # Keyed by its source, not the original key: the key may be what the broker refuses.
    key = f"{record.topic}/{record.partition}/{record.offset}".encode()
    return Outcome(key, receipt, headers, error_code=outcome.error_code)
