"""A chat service's side of the moderator, with the stock confluent-kafka client.

It reads the decisions topic (moderator/schemas/decision.schema.json) and does to each message
what its decision says: `allow` shows it, `nudge` shows it and nudges its sender, `block` hides
it, and `review` holds it until the message's final decision (`final: true`, same message_id)
arrives, or until its `review.due_at_ms` has passed, when it applies `review.fallback` itself
(the moderator publishes that fallback as a final decision about a second after the due time; a
chat service applies it alone only when the moderator is late, GRACE_MS later).

Decisions come at least once, so everything is keyed by message_id: a repeated decision changes
nothing, and a final decision changes what the chat shows only when it differs from what it
already shows (a fallback applied here, then a verdict the moderator had made: the verdict wins).

One line on stdout per thing done to the chat: `<show|nudge|hide|hold> <message_id> <why>`.
Held messages live in this process: a chat service keeps them with its messages, so that a
restart keeps its fallback timers too (the final decision still comes either way).

    python examples/python/consume_decisions.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException

SHOWN = {"allow": "show", "nudge": "nudge", "block": "hide"}  # a policy's own action: hidden
GRACE_MS = 5_000  # past due_at_ms before applying the fallback here: the moderator's is coming
POLL_S = 0.2  # how often held messages are checked against the clock when nothing arrives


@dataclass
class Message:
    """What the chat did with one message: `shown` is None while it is held."""

    shown: str | None = None
    due_at_ms: int = 0
    fallback: str = "allow"
    final: bool = False


class Chat:
    """What the chat shows, by message_id; fed decisions and the clock, it prints what it does."""

    def __init__(self) -> None:
        self.messages: dict[str, Message] = {}
        self.held: dict[str, Message] = {}

    def on_decision(self, decision: dict[str, Any]) -> None:
        message_id = decision["message_id"]
        message = self.messages.get(message_id)
        if decision["final"]:
            if message is not None and message.final:
                return  # a repeated final decision
            message = self.messages.setdefault(message_id, Message())
            message.final = True
            self._apply(message_id, message, decision["action"], f"final:{decision['reason']}")
        elif message is None:  # the first decision; a repeat (or one after its final) is ignored
            message = self.messages[message_id] = Message()
            if decision["action"] == "review":
                message.due_at_ms = decision["review"]["due_at_ms"]
                message.fallback = decision["review"]["fallback"]
                self.held[message_id] = message
                due = f"due_at_ms={message.due_at_ms} fallback={message.fallback}"
                print(f"hold {message_id} {due}", flush=True)
            else:
                self._apply(message_id, message, decision["action"], "decision")

    def on_clock(self, now_ms: int) -> None:
        """Apply the fallback of each held message whose final decision is overdue."""
        for message_id, message in list(self.held.items()):
            if now_ms >= message.due_at_ms + GRACE_MS:
                self._apply(message_id, message, message.fallback, "fallback")

    def _apply(self, message_id: str, message: Message, action: str, why: str) -> None:
        self.held.pop(message_id, None)
        shown = SHOWN.get(action, "hide")
        if shown != message.shown:
            message.shown = shown
            print(f"{shown} {message_id} {why}", flush=True)


def read_decision(value: bytes | None) -> dict[str, Any] | None:
    """The decision in a record's value, or None for anything else on the topic."""
    try:
        decision = json.loads(value or b"")
    except ValueError:
        return None
    is_decision = isinstance(decision, dict) and isinstance(decision.get("message_id"), str)
    return decision if is_decision else None


def run(args: argparse.Namespace) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,  # an offset is committed once its decision is done
            "session.timeout.ms": 10_000,  # a dead instance's partitions move on after this
        }
    )
    consumer.subscribe([args.topic])
    chat = Chat()
    read = 0
    deadline = time.monotonic() + args.timeout if args.timeout else None
    try:
        while not (args.max_messages and read >= args.max_messages and not chat.held):
            if deadline is not None and time.monotonic() >= deadline:
                print(f"stopped after {args.timeout} s: {read} records read", file=sys.stderr)
                return 1 if args.max_messages else 0
            record = consumer.poll(POLL_S)
            error = record.error() if record is not None else None
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                print(f"kafka: {error}", file=sys.stderr)  # the client retries by itself
            elif record is not None:
                decision = read_decision(record.value())
                if decision is not None:
                    chat.on_decision(decision)
                else:
                    print(f"not a decision at offset {record.offset()}: skipped", file=sys.stderr)
                consumer.store_offsets(message=record)
                read += 1
            chat.on_clock(int(time.time() * 1000))
        return 0
    finally:
        consumer.close()  # commits the stored offsets


def main() -> int:
    parser = argparse.ArgumentParser(description="A chat service reading moderation decisions.")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="chat.decisions")
    parser.add_argument("--group", default="chat-service-python")
    parser.add_argument(
        "--max-messages", type=int, default=0, help="stop after this many, once none is held"
    )
    parser.add_argument("--timeout", type=float, default=0, help="stop after this many seconds")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
