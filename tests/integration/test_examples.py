"""The decision consumers of examples/ against the real broker, each run as a chat service would
run it: it shows, nudges and hides as the decisions say, holds a `review` message until its final
decision, applies the announced fallback itself once that is overdue (and lets a later final
decision correct it), and ignores repeated decisions. The decisions are made by the moderator's
own encoders and checked against the schema, so a change of format breaks this test."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest

from devstack.embedded import EmbeddedKafka
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import Policy, read_spec
from moderator.records import ChatMessage, Outcome, Timing, encode_decision
from moderator.review.finals import encode_final
from moderator.review.hold import held_message, with_review
from tests.contract import check_decision
from tests.integration.kafka_io import produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODE_EXAMPLE = ROOT / "examples" / "node"
TIMEOUT_S = 120  # a bound on the example's run, never reached when it works
OVERDUE_MS = 600_000  # held this long before the test: its fallback is due, GRACE_MS included


def command(language: str, bootstrap: str, topic: str, max_messages: int) -> list[str]:
    """The example's command line, or the test fails saying what is missing."""
    flags = ["--bootstrap", bootstrap, "--topic", topic, "--group", f"chat-{uuid.uuid4().hex[:8]}",
             "--max-messages", str(max_messages), "--timeout", str(TIMEOUT_S)]  # fmt: skip
    if language == "python":
        return [sys.executable, str(ROOT / "examples" / "python" / "consume_decisions.py"), *flags]
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: the Node example needs node 18 or later "
                    "(`make examples` installs Debian's nodejs)")  # fmt: skip
    if not (NODE_EXAMPLE / "node_modules" / "kafkajs").is_dir():
        pytest.fail("examples/node has no node_modules: `make examples` installs them (npm ci)")
    return [node, str(NODE_EXAMPLE / "consume-decisions.mjs"), *flags]


def decision(message_id: str, action: str) -> bytes:
    chat = ChatMessage(message_id, "c-1", "u-1", f"text of {message_id}", 1)
    return encode_decision(chat, action=action, reason=None if action == "allow" else "insult",
                           scores={"insult": 0.5}, model="m@1", policy="p@1", cached=False,
                           degraded=False, timing=Timing(0.0, 1.0, 1.0), decided_at_ms=2,
                           over_budget=False, span=(0, 4))  # fmt: skip


def held(message_id: str, held_at_ms: int, fallback: str) -> tuple[bytes, dict[str, object]]:
    """A `review` decision as the moderator publishes it, and its held message."""
    spec = {**read_spec(), "review_timeout_s": 300, "review_fallback": fallback}
    chat = ChatMessage(message_id, "c-1", "u-1", f"text of {message_id}", 1)
    value = decision(message_id, "review")
    record = orjson.loads(value)
    outcome = Outcome(None, value, [], decision=record)
    kept = held_message(chat, Policy.from_mapping(spec), outcome, held_at_ms)
    return with_review(record, kept), kept


def scenario(now_ms: int) -> tuple[list[bytes], list[str]]:
    """Decisions in the order of one partition, and what the chat must do about them."""
    review_4, held_4 = held("m-4", now_ms, "allow")  # due in five minutes: its verdict comes first
    review_5, held_5 = held("m-5", now_ms - OVERDUE_MS, "nudge")  # no final decision comes
    review_6, held_6 = held("m-6", now_ms - OVERDUE_MS, "allow")  # its verdict comes late
    final_4 = encode_final(held_4, "block", "verdict:mod-1")
    records = [decision("m-1", "allow"), decision("m-2", "block"), decision("m-3", "nudge"),
               review_4, review_4, decision("m-1", "allow"), final_4, final_4,
               review_5, review_6, encode_final(held_6, "block", "verdict:mod-2")]  # fmt: skip
    lines = [
        "show m-1 decision",
        "hide m-2 decision",
        "nudge m-3 decision",
        f"hold m-4 due_at_ms={held_4['expires_at_ms']} fallback=allow",
        "hide m-4 final:verdict:mod-1",
        f"hold m-5 due_at_ms={held_5['expires_at_ms']} fallback=nudge",
        "nudge m-5 fallback",
        f"hold m-6 due_at_ms={held_6['expires_at_ms']} fallback=allow",
        "show m-6 fallback",
        "hide m-6 final:verdict:mod-2",
    ]
    return records, lines


@pytest.mark.parametrize("language", ["python", "node"])
async def test_an_example_consumer_holds_a_review_until_its_final_decision_or_fallback(
    kafka: EmbeddedKafka, language: str
) -> None:
    topic = f"chat.decisions.{uuid.uuid4().hex[:8]}"
    await ensure_topics(kafka.bootstrap, {topic: 1})  # one partition: one order to expect
    records, expected = scenario(int(time.time() * 1000))
    for value in records:
        check_decision(orjson.loads(value))
    records.insert(3, b"not a decision")  # skipped, with a line on stderr
    await produce(kafka.bootstrap, topic, [(b"c-1", value) for value in records])
    proc = await asyncio.create_subprocess_exec(
        *command(language, kafka.bootstrap, topic, len(records)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S + 30)
    assert proc.returncode == 0, f"{language} example exited {proc.returncode}: {err.decode()}"
    assert out.decode().splitlines() == expected, err.decode()
