"""The moderation loop in `moderator demo`: a share of the demo's chat is held for review, a
scripted moderator (devstack/reviewer.py, in the demo's process) answers two held messages in
three with a verdict and leaves the third to its timeout, a verdict's text is sent again in
another channel to show the override it became, and the summary says what the loop did, as the
moderator's own /metrics count it.

User escalation (issue 29, item 3) is not in this build: `escalation` is where the demo will
drive one user into escalation and a mute, and report it, once that part is merged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from devstack.child import ModeratorChild, Samples
from devstack.reviewer import Answer, Reviewer
from loadgen.kafka import assign_at_end, make_consumer, make_producer
from moderator.config import Settings
from moderator.policy import read_spec

HELD_RATIO = 0.01  # of the demo's chat: about one message in a hundred is held
REVIEW_TIMEOUT_S = 5.0  # the demo's, so timeouts happen while it runs (the default is 600)
MODERATOR_ID = "demo-mod"
OVERRIDE_CHANNEL = "demo-elsewhere"
OVERRIDE_WAIT_S = 10.0
SWEEP_MARGIN_S = 3.0  # a held message times out within about a second of its timeout


def demo_policy(directory: Path, user_policy: str | None) -> Path:
    """The policy the demo's moderator runs: the user's (MODERATOR_POLICY) or the default, with
    the demo's short review timeout."""
    spec = read_spec(Path(user_policy) if user_policy else None)
    path = directory / "demo-policy.json"
    path.write_bytes(orjson.dumps({**spec, "review_timeout_s": REVIEW_TIMEOUT_S}))
    return path


def rule(n: int, review: dict[str, Any]) -> list[Answer]:
    """Block the first held message of each three, allow the second, leave the third to time
    out."""
    if n % 3 == 2:
        return []
    return [Answer("block" if n % 3 == 0 else "allow", MODERATOR_ID)]


@dataclass(frozen=True)
class Repeat:
    """A verdict's text sent again in another channel, and the decision it got (None: none)."""

    text: str
    verdict: str
    decision: dict[str, Any] | None


def reviewer(bootstrap: str) -> Reviewer:
    """The scripted moderator on the topics `moderator dev` makes."""
    s = Settings()
    return Reviewer(bootstrap, s.review_topic, s.verdict_topic, rule)


async def repeat_a_verdict(bootstrap: str, desk: Reviewer) -> Repeat | None:
    """Send the text of the first held message a verdict decided again, in another channel, and
    read its decision: the verdict's override decides it (reason `override`), not the model."""
    sent = next((s for s in desk.sent if s.first), None)
    if sent is None:
        return None
    text = desk.held[sent.message_id]["text"]
    s = Settings()
    consumer = make_consumer(bootstrap)
    producer = make_producer(bootstrap)
    await consumer.start()
    await producer.start()
    try:
        await assign_at_end(consumer, [s.out_topic])
        message_id = f"demo-repeat-{int(time.time() * 1000)}"
        value = {"message_id": message_id, "channel_id": OVERRIDE_CHANNEL, "user_id": "demo-user",
                 "text": text, "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
        await producer.send_and_wait(s.in_topic, orjson.dumps(value), key=OVERRIDE_CHANNEL.encode())
        decision = await _decision_of(consumer, message_id, OVERRIDE_WAIT_S)
    finally:
        await producer.stop()
        await consumer.stop()
    return Repeat(text, sent.verdict, decision)


async def _decision_of(
    consumer: AIOKafkaConsumer, message_id: str, timeout_s: float
) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            for record in records:
                decision: dict[str, Any] = orjson.loads(record.value or b"{}")
                if decision.get("message_id") == message_id:
                    return decision
    return None


async def wait_for_ends(dev: ModeratorChild) -> Samples | None:
    """Scrape the moderator until every held message has ended (a verdict or its timeout), at
    most the review timeout and a sweep from now; the last scrape."""
    deadline = time.monotonic() + REVIEW_TIMEOUT_S + SWEEP_MARGIN_S
    while True:
        samples = await asyncio.to_thread(dev.scrape)
        if samples is not None and _ended(samples) >= _held(samples):
            return samples
        if time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.5)


def _held(samples: Samples) -> int:
    return int(samples.total("moderator_review_records_total"))


def _ended(samples: Samples) -> int:
    applied = samples.total("moderator_verdict_outcomes_total", outcome="applied")
    return int(applied + samples.total("moderator_review_timeouts_total"))


def report(samples: Samples | None, desk: Reviewer, repeat: Repeat | None) -> str:
    """The loop's part of the summary: held, verdicts, final decisions, timeouts, the override
    (from the moderator's /metrics and the demo's own reads), then escalation's place."""
    if samples is None:
        return "moderation loop: moderator /metrics did not answer"

    def outcome(name: str) -> int:
        return int(samples.total("moderator_verdict_outcomes_total", outcome=name))

    timeouts = int(samples.total("moderator_review_timeouts_total"))
    lines = [
        f"moderation loop (a scripted moderator, {MODERATOR_ID}, answering the review topic)",
        f"  held for review {_held(samples)} (read by the scripted moderator: {len(desk.held)})",
        f"  verdicts        {len(desk.sent)} sent, {outcome('applied')} applied (late "
        f"{outcome('late')}, not held {outcome('not_held')}, invalid {outcome('invalid')})",
        f"  final decisions {_ended(samples)}: {outcome('applied')} by a verdict, {timeouts} "
        f"timed out to the policy's fallback after {REVIEW_TIMEOUT_S:g} s",
        f"  override        {_repeat_line(repeat)}",
        *escalation(samples),
    ]
    return "\n".join(lines)


def _repeat_line(repeat: Repeat | None) -> str:
    if repeat is None:
        return "no verdict was applied, so no override to show"
    said = f'"{repeat.text}" (verdict {repeat.verdict}) sent again in channel {OVERRIDE_CHANNEL}'
    d = repeat.decision
    if d is None:
        return f"{said}: no decision within {OVERRIDE_WAIT_S:g} s"
    return f"{said}: {d.get('action')}, reason {d.get('reason')}"


def escalation(samples: Samples) -> list[str]:
    """User escalation's place in the summary (issue 29, item 3), not in this build yet.

    TODO(escalation): once the escalation branch is merged, drive one user past the strike
    limit and into a mute during the demo (its policy settings in `demo_policy`), and report
    here the user escalated and muted, from the moderator's metrics and decisions.
    """
    return ["  escalation      not in this build yet (one user escalated and muted goes here)"]
