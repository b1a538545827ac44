"""The moderation loop in `moderator demo`: a share of the demo's chat is held for review, a
scripted moderator (devstack/reviewer.py, in the demo's process) answers two held messages in
three with a verdict and leaves the third to its timeout, a verdict's text is sent again in its
channel and in another to show the override it became (its channel's only: a verdict names no
scope, and the default is the channel), and the summary says what the loop did, as the
moderator's own /metrics count it.

Escalation by user: the demo's policy counts strikes (`[users]`, a short mute) and denies a
made-up word with `nudge`, so one user's lines decide the same on every run without the model.
After the chat, that user posts the word in several channels, one line at a time (each decided
before the next is sent, so the strikes count in order): the line past the limit goes one step up
(`nudge` → `review`) and mutes the user, a line of theirs during the mute is `muted`, and one
after it ends is decided normally. The chat's own users count strikes under the same policy, so
the moderator's totals may hold some of theirs too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from devstack.child import ModeratorChild, Samples
from devstack.reviewer import Answer, Reviewer
from loadgen.kafka import assign_at_end, make_consumer, make_producer
from moderator.config import Settings
from moderator.policy.rules import read_spec

HELD_RATIO = 0.01  # of the demo's chat: about one message in a hundred is held
REVIEW_TIMEOUT_S = 5.0  # the demo's, so timeouts happen while it runs (the default is 600)
MODERATOR_ID = "demo-mod"
OVERRIDE_CHANNEL = "demo-elsewhere"
OVERRIDE_WAIT_S = 10.0
SWEEP_MARGIN_S = 3.0  # a held message times out within about a second of its timeout
STRIKES = 2  # flagged lines within the window before the next is escalated
MUTE_S = 5  # the escalated user's mute: short, so the demo shows it end
ESCALATED_USER = "demo-escalated"
DEMO_TERM = "zorblax"  # a made-up word the demo's policy nudges (no chat line has it)
ESCALATION_CHANNELS = ("demo-esc-1", "demo-esc-2", "demo-esc-3")
FLAGGED = (f"you are a {DEMO_TERM}", f"{DEMO_TERM} everywhere", f"such a {DEMO_TERM}")
WHILE_MUTED = "ok sorry, calming down"
AFTER_MUTE = "good game everyone"


def demo_policy(directory: Path, user_policy: str | None) -> Path:
    """The policy the demo's moderator runs: the user's (MODERATOR_POLICY) or the default, with
    the demo's short review timeout, strikes with a short mute, and its made-up word nudged."""
    spec = read_spec(Path(user_policy) if user_policy else None)
    users = {**spec.get("users", {}), "strikes": STRIKES, "mute_s": MUTE_S, "mute_scope": "all"}
    term = {"term": DEMO_TERM, "category": "demo", "action": "nudge", "severity": "low"}
    demo = {"review_timeout_s": REVIEW_TIMEOUT_S, "users": users,
            "deny": [*spec.get("deny", []), term]}  # fmt: skip
    path = directory / "demo-policy.json"
    path.write_bytes(orjson.dumps({**spec, **demo}))
    return path


def rule(n: int, review: dict[str, Any]) -> list[Answer]:
    """Block the first held message of each three, allow the second, leave the third to time
    out."""
    if n % 3 == 2:
        return []
    return [Answer("block" if n % 3 == 0 else "allow", MODERATOR_ID)]


@dataclass(frozen=True)
class Repeat:
    """A verdict's text sent again in its own channel and in another, and the decisions they got
    (None: none in time)."""

    text: str
    verdict: str
    decision: dict[str, Any] | None  # in the held message's channel: the override decides
    elsewhere: dict[str, Any] | None = None  # in OVERRIDE_CHANNEL: the override does not apply
    channel: str = "?"


def reviewer(bootstrap: str) -> Reviewer:
    """The scripted moderator on the topics `moderator dev` makes."""
    s = Settings()
    return Reviewer(bootstrap, s.review_topic, s.verdict_topic, rule)


class Chat:
    """`async with Chat(bootstrap) as chat:` then `await chat.say(...)`: one message sent, and
    its decision read back from the decision topic (None when none came in time)."""

    def __init__(self, bootstrap: str) -> None:
        self.settings = Settings()
        self.consumer = make_consumer(bootstrap)
        self.producer = make_producer(bootstrap)
        self._sent = 0

    async def __aenter__(self) -> Chat:
        await self.consumer.start()
        await self.producer.start()
        await assign_at_end(self.consumer, [self.settings.out_topic])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()
        await self.consumer.stop()

    async def say(
        self, channel_id: str, user_id: str, text: str, timeout_s: float = OVERRIDE_WAIT_S
    ) -> dict[str, Any] | None:
        self._sent += 1
        now_ms = int(time.time() * 1000)
        message_id = f"demo-{user_id}-{now_ms}-{self._sent}"
        value = {"message_id": message_id, "channel_id": channel_id, "user_id": user_id,
                 "text": text, "sent_at_ms": now_ms}  # fmt: skip
        topic = self.settings.in_topic
        await self.producer.send_and_wait(topic, orjson.dumps(value), key=channel_id.encode())
        return await _decision_of(self.consumer, message_id, timeout_s)


async def repeat_a_verdict(bootstrap: str, desk: Reviewer) -> Repeat | None:
    """Send the text of the first held message a verdict decided again, in its channel and in
    another, and read their decisions: in its channel the verdict's override decides it (reason
    `override`), not the model; elsewhere it does not (the verdict's scope is its channel)."""
    sent = next((s for s in desk.sent if s.first), None)
    if sent is None:
        return None
    held = desk.held[sent.message_id]
    text, channel = held["text"], str(held.get("channel_id", "?"))
    async with Chat(bootstrap) as chat:
        decision = await chat.say(channel, "demo-user", text)
        elsewhere = await chat.say(OVERRIDE_CHANNEL, "demo-user", text)
    return Repeat(text, sent.verdict, decision, elsewhere, channel)


@dataclass(frozen=True)
class Line:
    """One line of the escalated user's, and the decision it got (None: none in time)."""

    channel_id: str
    text: str
    decision: dict[str, Any] | None


async def escalate_a_user(bootstrap: str) -> list[Line]:
    """One user's lines, each decided before the next is sent: `STRIKES` flagged lines (strikes),
    one more (escalated, and the mute begins), a friendly line while muted, and one after the
    mute has ended."""
    script = [*zip(ESCALATION_CHANNELS, FLAGGED, strict=True)][: STRIKES + 1]
    lines = []
    async with Chat(bootstrap) as chat:
        for channel_id, text in script:
            lines.append(Line(channel_id, text, await chat.say(channel_id, ESCALATED_USER, text)))
        muted = (ESCALATION_CHANNELS[0], WHILE_MUTED)
        lines.append(Line(*muted, await chat.say(*_who(muted))))
        await asyncio.sleep(MUTE_S + 0.5)  # the mute ends in message time: sent_at_ms past it
        after = (ESCALATION_CHANNELS[1], AFTER_MUTE)
        lines.append(Line(*after, await chat.say(*_who(after))))
    return lines


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


def _who(line: tuple[str, str]) -> tuple[str, str, str]:
    return line[0], ESCALATED_USER, line[1]


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


def report(
    samples: Samples | None, desk: Reviewer, repeat: Repeat | None, user: Sequence[Line] = ()
) -> str:
    """The loop's part of the summary: held, verdicts, final decisions, timeouts, the override
    (from the moderator's /metrics and the demo's own reads), then the escalated user's lines."""
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
        *escalation(samples, user),
    ]
    return "\n".join(lines)


def _repeat_line(repeat: Repeat | None) -> str:
    if repeat is None:
        return "no verdict was applied, so no override to show"

    def got(d: dict[str, Any] | None) -> str:
        if d is None:
            return f"no decision within {OVERRIDE_WAIT_S:g} s"
        return f"{d.get('action')}, reason {d.get('reason')}"

    said = f'"{repeat.text}" (verdict {repeat.verdict}) sent again'
    return (f"{said} in its channel {repeat.channel}: {got(repeat.decision)}; in "
            f"{OVERRIDE_CHANNEL}: {got(repeat.elsewhere)}")  # fmt: skip


def escalation(samples: Samples, lines: Sequence[Line]) -> list[str]:
    """The escalated user's lines as decided (from the decision topic), then what the users'
    rules did in all (the moderator's `moderator_user_rules_total`)."""

    def rule(name: str) -> int:
        return int(samples.total("moderator_user_rules_total", rule=name))

    out = [
        f"  escalation      user {ESCALATED_USER} ({STRIKES} strikes, then one step up and "
        f"muted for {MUTE_S} s):"
    ]
    for line in lines:
        out.append(f"    {line.channel_id:<11} {line.text!r:<26} {_line_outcome(line.decision)}")
    out.append(
        f"  user rules      {rule('escalated')} decisions escalated, {rule('muted')} muted in all "
        "(the chat's busiest users strike out too; their muted lines are blocks above)"
    )
    return out


def _line_outcome(d: dict[str, Any] | None) -> str:
    if d is None:
        return f"no decision within {OVERRIDE_WAIT_S:g} s"
    reason = f", reason {d['reason']}" if d.get("reason") else ""
    up = ", escalated" if d.get("escalated") else ""
    return f"{d.get('action')}{reason}, strikes {d.get('strikes')}{up}"
