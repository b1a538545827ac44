"""The one decoder of decision records the harnesses share."""

from __future__ import annotations

import orjson
import pytest

from loadgen.decisions import Decision, read_decision


def test_a_decision_is_read_with_what_the_harnesses_count() -> None:
    value = orjson.dumps({"message_id": "m-1", "action": "block", "cached": True, "degraded": False,
                          "latency_ms": {"total": 3}, "decided_at_ms": 17})  # fmt: skip
    assert read_decision(value) == Decision("m-1", "block", True, False, 3.0, 17)
    final = orjson.dumps({"message_id": "m-1", "action": "allow", "final": True})
    assert read_decision(final) == Decision("m-1", "allow", False, False, None, None, final=True)


def test_the_reason_is_read_when_it_is_a_string() -> None:
    verdict = orjson.dumps({"message_id": "m", "reason": "verdict:alice", "final": True})
    assert read_decision(verdict) == Decision("m", "None", False, False, None, None, True,
                                              "verdict:alice")  # fmt: skip
    odd = orjson.dumps({"message_id": "m", "reason": 3})
    assert read_decision(odd) == Decision("m", "None", False, False, None, None)


@pytest.mark.parametrize(
    "value",
    [None, b"", b"not json", b"[]", b'{"action": "allow"}', b'{"message_id": 7}'],
)
def test_what_is_not_a_decision_is_none_not_a_crash(value: bytes | None) -> None:
    assert read_decision(value) is None


def test_odd_fields_do_not_pass_for_figures() -> None:
    value = orjson.dumps({"message_id": "m", "cached": "yes", "latency_ms": {"total": True},
                          "decided_at_ms": True})  # fmt: skip
    assert read_decision(value) == Decision("m", "None", False, False, None, None)


def test_the_model_is_read_when_it_is_a_string() -> None:
    value = orjson.dumps({"message_id": "m", "model": "chat-minilm@1"})
    read = read_decision(value)
    assert read == Decision("m", "None", False, False, None, None, model="chat-minilm@1")
    odd = orjson.dumps({"message_id": "m", "model": 1})
    assert read_decision(odd) == Decision("m", "None", False, False, None, None)
