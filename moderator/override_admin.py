"""`moderator override list | delete`: the overrides topic as an operator reads and writes it,
outside any moderator (the moderators follow it with overrides.Overrides). New overrides come
only from verdicts (`Overrides.record_verdict`): an operator lists and removes them."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

from moderator import loop, policy_admin
from moderator.commandline import KAFKA_CONNECTION, command, log_flags, say
from moderator.compacted import read_to_end, record_key
from moderator.config import add_setting_flags, settings_from_args
from moderator.connect import start_client, stop_within
from moderator.errors import ConfigError
from moderator.overrides import InvalidOverride, Override, OverrideBook, override_key, text_digest
from moderator.redaction import protect

SETTINGS = {
    "list": (*KAFKA_CONNECTION, "override_topic"),
    "delete": (*KAFKA_CONNECTION, "override_topic", "topic_replication"),  # creates the topic
}
COLUMNS = ("digest", "scope", "channel", "action", "moderator", "when")


@dataclass(eq=False)
class TopicState:
    """The overrides topic as a moderator reading it from the start would have it."""

    book: OverrideBook = field(default_factory=OverrideBook)
    refused: dict[str, str] = field(default_factory=dict)  # keys whose last record it refuses


async def read_state(kafka_options: Mapping[str, Any], topic: str) -> TopicState:
    """Every record of the topic applied in order, as the moderators apply them."""
    consumer = AIOKafkaConsumer(
        **kafka_options, group_id=None, enable_auto_commit=False, client_id="moderator-override-cli"
    )
    state = TopicState()

    def keep(r: ConsumerRecord[bytes, bytes]) -> None:
        key = record_key(r)
        try:
            state.book.apply(key, r.value)
            state.refused.pop(key, None)
        except InvalidOverride as exc:
            state.refused[key] = str(exc)

    try:  # closed on every path: a failed start too
        await start_client(consumer, kafka_options, "reading the overrides")
        await read_to_end(consumer, topic, keep)
        return state
    finally:
        await stop_within(consumer)


def row(o: Override) -> str:
    """One `list` line: COLUMNS, tab-separated; `-` for a global override's channel."""
    when = datetime.datetime.fromtimestamp(o.at_ms / 1000, datetime.UTC)
    cells = (
        o.digest,
        o.scope,
        o.channel_id or "-",
        o.action,
        o.moderator_id,
        when.isoformat(timespec="seconds").replace("+00:00", "Z"),
    )
    return "\t".join(cells)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `override list | delete` to the `moderator` command line."""
    ovr = command(
        sub,
        "override",
        "the moderators' overrides on the overrides topic",
        """
        moderator override list
        moderator override list --text "some message"
        moderator override delete 5e2b…c1 --channel speedrun
        moderator override delete --text "some message"
    """,
    )
    ovr_sub = ovr.add_subparsers(required=True, metavar="ACTION")
    lst = command(
        ovr_sub,
        "list",
        "every override in effect: " + ", ".join(COLUMNS),
        """
        moderator override list
        moderator override list --text "you absolute walnut"   # the overrides for this text
        moderator override list --kafka-bootstrap kafka:9092 | cut -f1,4
    """,
    )
    lst.add_argument("--text", help="only the overrides for this text (its normalised digest)")
    rm = command(
        ovr_sub,
        "delete",
        "remove an override (a tombstone): the model decides again",
        """
        moderator override delete 5e2b…c1                    # the global override of a digest
        moderator override delete 5e2b…c1 --channel speedrun # a channel's own
        moderator override delete --text "you absolute walnut"
    """,
    )
    rm.add_argument("digest", nargs="?", help="the digest `list` shows (or give --text)")
    rm.add_argument("--text", help="the text instead of its digest")
    rm.add_argument("--channel", help="the channel of a channel override (default: the global)")
    for cmd, name in ((lst, "list"), (rm, "delete")):
        add_setting_flags(cmd, SETTINGS[name])
        log_flags(cmd, argparse.SUPPRESS)
        cmd.set_defaults(command=_cmd_override, action=name)


def _cmd_override(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    if not settings.override_topic:
        raise ConfigError("MODERATOR_OVERRIDE_TOPIC is empty: there is no overrides topic")
    topic, kafka = settings.override_topic, settings.kafka_options()
    digest = text_digest(args.text) if args.text is not None else getattr(args, "digest", None)
    if args.action == "delete" and (not digest or (args.text is not None and args.digest)):
        print("moderator: error: give a DIGEST or --text, one of them", file=sys.stderr)
        return 2
    state = loop.run(read_state(kafka, topic))
    if args.action == "list":
        shown = [o for o in state.book.entries() if args.text is None or o.digest == digest]
        for o in sorted(shown, key=lambda o: (o.digest, o.channel_id or "")):
            print(row(o))
        for key, why in sorted(state.refused.items()):  # on stderr: stdout stays one per line
            print(f"{key}: REFUSED by the moderators: {why}", file=sys.stderr)
        if not shown:
            what = " for that text" if args.text is not None else ""
            print(f"no overrides on {topic}{what}", file=sys.stderr)
        return 0
    assert digest is not None
    key = override_key(digest, args.channel)
    where = f"in {args.channel}" if args.channel else "everywhere"
    if key not in {o.key for o in state.book.entries()} | state.refused.keys():
        say(f"{topic}: no override for {digest} {where}, nothing removed")
        return 0
    loop.run(policy_admin.write(kafka, topic, key, None, settings.topic_replication))
    say(f"{topic}: override for {digest} {where} removed (the model decides it again)")
    return 0
