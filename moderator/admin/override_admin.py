"""`moderator override list | delete | expire | audit`: the overrides topic as an operator reads
and writes it, outside any moderator (the moderators follow it with overrides.Overrides). New
overrides come only from verdicts (`Overrides.record_verdict`): an operator lists them, removes
them, sets when they expire (moderator/review/override_edits.py: the audit entry first, shared with
the review console), and reads the audit trail (moderator/review/audit.py)."""

from __future__ import annotations

import argparse
import datetime
import getpass
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from moderator import loop
from moderator.commandline import (
    KAFKA_CONNECTION,
    add_setting_flags,
    command,
    log_flags,
    say,
    settings_from_args,
)
from moderator.config import Settings
from moderator.errors import ConfigError
from moderator.kafka import compacted
from moderator.kafka.compacted import TopicState
from moderator.kafka.connect import start_client, stop_within
from moderator.kafka.topics import COMPACTED, ensure_topics
from moderator.redaction import protect
from moderator.review import audit
from moderator.review.override_edits import duration_s, revoke, set_expiry
from moderator.review.overrides import (
    InvalidOverride,
    Override,
    OverrideBook,
    override_key,
    text_digest,
    wall_ms,
)

WRITES = (*KAFKA_CONNECTION, "override_topic", "audit_topic", "topic_replication")
SETTINGS = {
    "list": (*KAFKA_CONNECTION, "override_topic"),
    "delete": WRITES,  # creates the topics when missing
    "expire": WRITES,
    "audit": (*KAFKA_CONNECTION, "audit_topic"),
}
COLUMNS = ("digest", "scope", "channel", "action", "moderator", "when", "expires")
AUDIT_COLUMNS = ("when", "actor", "via", "event", "key", "what")
CLIENT_ID, ROLE = "moderator-override-cli", "reading the overrides"
OverrideState = TopicState[OverrideBook]  # the topic as a moderator would have it


async def read_audit(kafka_options: Mapping[str, Any], topic: str) -> list[dict[str, Any]]:
    """The audit trail's entries, oldest first."""
    entries: list[dict[str, Any]] = []
    await compacted.read_whole(
        kafka_options,
        topic,
        lambda r: entries.append(e) if (e := audit.parse(r)) else None,
        client_id=CLIENT_ID,
        role=ROLE,
    )
    return entries


def utc(at_ms: int | None) -> str:
    """`at_ms` as an ISO time in UTC (`-` for None)."""
    if at_ms is None:
        return "-"
    when = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def row(o: Override) -> str:
    """One `list` line: COLUMNS, tab-separated; `-` for a global override's channel and for an
    override that does not expire."""
    cells = (
        o.digest,
        o.scope,
        o.channel_id or "-",
        o.action,
        o.moderator_id,
        utc(o.at_ms),
        utc(o.expires_at_ms),
    )
    return "\t".join(cells)


def audit_row(e: Mapping[str, Any]) -> str:
    """One `audit` line: AUDIT_COLUMNS, tab-separated; `what` says the subject in a few words."""
    s = e.get("verdict") or e.get("override") or {}
    if e["event"] == "verdict":
        what = f"{s.get('verdict')} {s.get('message_id')} scope {s.get('scope')}"
        expires = s.get("override_expires_at_ms")
    else:
        what = f"{s.get('action')} scope {s.get('scope')} channel {s.get('channel_id') or '-'}"
        expires = s.get("expires_at_ms")
    what += f" expires {utc(expires)}"
    subject = s
    key = e.get("key") or subject.get("message_id") or "-"
    cells = (utc(e.get("at_ms")), str(e.get("actor")), str(e.get("via")), e["event"], key, what)
    return "\t".join(cells)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `override list | delete | expire | audit` to the `moderator` command line."""
    ovr = command(
        sub,
        "override",
        "the moderators' overrides on the overrides topic, and their audit trail",
        """
        moderator override list
        moderator override list --text "some message"
        moderator override delete 5e2b…c1 --channel speedrun
        moderator override expire --text "some message" --channel speedrun --expires-in 7d
        moderator override audit
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
    rm, exp = _writers(ovr_sub)
    trail = command(
        ovr_sub,
        "audit",
        "the audit trail: " + ", ".join(AUDIT_COLUMNS),
        """
        moderator override audit
        moderator override audit | grep override_revoked
    """,
    )
    for cmd, name in ((lst, "list"), (rm, "delete"), (exp, "expire"), (trail, "audit")):
        add_setting_flags(cmd, SETTINGS[name])
        log_flags(cmd, argparse.SUPPRESS)
        cmd.set_defaults(command=_cmd_override, action=name)


def _writers(
    ovr_sub: argparse._SubParsersAction[Any],
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`override delete` and `override expire`: an override named by digest or text, and who
    acts, for the audit trail."""
    rm = command(
        ovr_sub,
        "delete",
        "remove an override (an audit entry, then a tombstone): the model decides again",
        """
        moderator override delete 5e2b…c1                    # the global override of a digest
        moderator override delete 5e2b…c1 --channel speedrun # a channel's own
        moderator override delete --text "you absolute walnut" --by alice
    """,
    )
    exp = command(
        ovr_sub,
        "expire",
        "set when an override stops applying (an audit entry, then the override again)",
        """
        moderator override expire 5e2b…c1 --expires-in 7d
        moderator override expire --text "you absolute walnut" --channel speedrun --expires-in 12h
    """,
    )
    exp.add_argument(
        "--expires-in", required=True, metavar="DURATION", help="from now: 30s, 15m, 12h, 7d"
    )
    for cmd in (rm, exp):
        cmd.add_argument("digest", nargs="?", help="the digest `list` shows (or give --text)")
        cmd.add_argument("--text", help="the text instead of its digest")
        cmd.add_argument(
            "--channel", help="the channel of a channel override (default: the global)"
        )
        cmd.add_argument(
            "--by",
            default=getpass.getuser(),
            help="who does it, for the audit trail (default: login name)",
        )
    return rm, exp


def _cmd_override(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    if args.action == "audit":
        if not settings.audit_topic:
            raise ConfigError("MODERATOR_AUDIT_TOPIC is empty: there is no audit trail")
        for e in loop.run(read_audit(settings.kafka_options(), settings.audit_topic)):
            print(audit_row(e))
        return 0
    if not settings.override_topic:
        raise ConfigError("MODERATOR_OVERRIDE_TOPIC is empty: there is no overrides topic")
    topic, kafka = settings.override_topic, settings.kafka_options()
    digest = text_digest(args.text) if args.text is not None else getattr(args, "digest", None)
    if args.action != "list" and (not digest or (args.text is not None and args.digest)):
        print("moderator: error: give a DIGEST or --text, one of them", file=sys.stderr)
        return 2
    blank = OverrideState(OverrideBook(), InvalidOverride)
    state = loop.run(compacted.read_state(kafka, topic, blank, client_id=CLIENT_ID, role=ROLE))
    if args.action == "list":
        return _list(state, topic, None if args.text is None else digest)
    assert digest is not None
    return _write(args, settings, state, override_key(digest, args.channel))


def _list(state: OverrideState, topic: str, digest: str | None) -> int:
    shown = [o for o in state.book.entries() if digest is None or o.digest == digest]
    for o in sorted(shown, key=lambda o: (o.digest, o.channel_id or "")):
        print(row(o))
    for key, why in sorted(state.refused.items()):  # on stderr: stdout stays one per line
        print(f"{key}: REFUSED by the moderators: {why}", file=sys.stderr)
    if expired := state.outcomes["expired"]:
        print(f"{expired} expired override records (ignored)", file=sys.stderr)
    if not shown:
        what = " for that text" if digest is not None else ""
        print(f"no overrides on {topic}{what}", file=sys.stderr)
    return 0


def _write(args: argparse.Namespace, settings: Settings, state: OverrideState, key: str) -> int:
    """`delete` or `expire` the override at `key`."""
    topic, trail, by = settings.override_topic, settings.audit_topic, args.by
    where = key.split(":")[0] + (f" in {args.channel}" if args.channel else " everywhere")
    found = next((o for o in state.book.entries() if o.key == key), None)
    if args.action == "delete":
        if found is None and key not in state.refused:
            say(f"{topic}: no override for {where}, nothing removed")
            return 0
        loop.run(
            _writing(
                settings,
                lambda p: revoke(p, topic, key, found, actor=by, via="cli", audit_topic=trail),
            )
        )
        say(f"{topic}: override for {where} removed (the model decides it again)")
        return 0
    if found is None:
        say(f"{topic}: no override for {where}, nothing changed")
        return 0
    try:
        expires_at_ms = wall_ms() + duration_s(args.expires_in) * 1000
    except ValueError as exc:
        print(f"moderator: error: --expires-in: {exc}", file=sys.stderr)
        return 2
    loop.run(
        _writing(
            settings,
            lambda p: set_expiry(
                p, topic, found, expires_at_ms, actor=by, via="cli", audit_topic=trail
            ),
        )
    )
    say(f"{topic}: override for {where} expires {utc(expires_at_ms)}")
    return 0


async def _writing(
    settings: Settings, act: Callable[[AIOKafkaProducer], Awaitable[object]]
) -> None:
    """Run `act(producer)` with a producer of its own, the topics made sure of first."""
    kafka, replication = settings.kafka_options(), settings.topic_replication
    topics = {settings.override_topic: COMPACTED}
    if settings.audit_topic:
        topics[settings.audit_topic] = audit.TOPIC_CONFIG
    await ensure_topics(kafka, dict.fromkeys(topics, 1), configs=topics, replication=replication)
    producer = AIOKafkaProducer(**kafka, acks="all", client_id=CLIENT_ID)
    try:
        await start_client(producer, kafka, "writing the overrides")
        await act(producer)
    finally:
        await stop_within(producer)
