"""`moderator verdicts export`: the moderators' verdicts as training lines for the model build.

It reads the review topic (the held messages, with their text and the label that held them)
and the verdict topic, each from the beginning to its end now, outside any group, and joins
them by `message_id`: the first verdict on a message decides it, as it did in the moderators
(`late` ones are counted, never exported). A text held several times gives one line, the one
its latest verdict made (as with overrides, the latest verdict on a text wins). The lines are
`text<TAB>labels` (labels comma-separated), the format of `models/data/train.tsv`, so
`make model MODELS_VERDICTS=FILE` trains on them as a split of their own (models/DATA.md).

Targets: `allow` → no label (benign: the model flagged something ordinary); `nudge` and
`block` → `toxicity`, and the label that held the message when it is one of the model's
labels (a message held for `threat` that a human blocked is a threat). A message held for a
reason that is not a label (`truncated`, `unsupported_language:…`, a deny term) teaches
`toxicity` only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

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
from moderator.decide.classifier import ModelInfo
from moderator.errors import InvalidRecord
from moderator.kafka.compacted import read_to_end
from moderator.kafka.connect import start_client, stop_within
from moderator.records import Verdict, parse_verdict
from moderator.redaction import protect
from moderator.review.overrides import text_digest

FLAGGED_LABEL = "toxicity"  # what every nudge or block teaches
# The loop's topics, until the settings say otherwise (`review_topic`, `verdict_topic`).
REVIEW_TOPIC, VERDICT_TOPIC = "chat.review", "chat.verdicts"
SETTINGS = (*KAFKA_CONNECTION, "model_dir")


def target(verdict: str, held_by: str | None, labels: Sequence[str]) -> tuple[str, ...]:
    """The labels a verdict teaches for a message held by `held_by` (a label, or a reason)."""
    if verdict == "allow":
        return ()
    if held_by is None or held_by not in labels or held_by == FLAGGED_LABEL:
        return (FLAGGED_LABEL,)
    return (FLAGGED_LABEL, held_by)


def training_line(text: str, labels: Iterable[str]) -> str:
    """One `text<TAB>labels` line; tabs and line breaks in the text become spaces (the model
    reads normalised text, where they are spaces anyway)."""
    return " ".join(text.split()) + "\t" + ",".join(labels) + "\n"


@dataclass
class Export:
    """What the join found, and the lines it makes."""

    lines: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (text, labels)
    decided: int = 0  # held messages with a verdict
    late: int = 0  # verdicts after a message's first
    no_review: int = 0  # verdicts on a message the review topic does not hold (any longer)
    pending: int = 0  # held messages with no verdict (yet, or timed out)
    invalid: int = 0  # verdicts and review records that do not parse
    same_text: int = 0  # decided messages whose text a later verdict decided again

    def summary(self) -> str:
        flagged = sum(1 for _, labels in self.lines if labels)
        return (
            f"{len(self.lines)} lines ({len(self.lines) - flagged} allowed, {flagged} flagged) "
            f"from {self.decided} decided held messages; {self.same_text} repeated a text "
            f"decided later, {self.late} later verdicts on a decided message (not exported), "
            f"{self.no_review} verdicts on a message not on the review topic, {self.pending} "
            f"held messages without a verdict, {self.invalid} records unreadable"
        )


def join(
    reviews: Iterable[bytes | None],
    verdicts: Iterable[bytes | None],
    labels: Sequence[str],
    *,
    max_bytes: int,
) -> Export:
    """The training lines of the verdicts (in topic order) on the held messages (review
    records, in topic order; a repeated one counts once). A verdict the moderators refuse
    (`parse_verdict`, with their `max_record_bytes`) decided nothing: it counts as invalid."""
    out = Export()
    held: dict[str, dict[str, Any]] = {}
    for value in reviews:
        try:
            record = orjson.loads(value or b"")
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            out.invalid += 1
            continue
        held.setdefault(str(record.get("message_id")), record)
    first: dict[str, Verdict] = {}
    for value in verdicts:
        try:
            verdict = parse_verdict(value, max_bytes=max_bytes)
        except InvalidRecord:
            out.invalid += 1
            continue
        if verdict.message_id not in held:
            out.no_review += 1
        elif verdict.message_id in first:
            out.late += 1
        else:
            first[verdict.message_id] = verdict
    out.decided, out.pending = len(first), len(held) - len(first)
    by_text: dict[str, tuple[int, tuple[str, tuple[str, ...]]]] = {}
    for message_id, verdict in first.items():
        record = held[message_id]
        line = (record["text"], target(verdict.verdict, record.get("reason"), labels))
        digest = text_digest(record["text"])
        if digest in by_text:
            out.same_text += 1
            if by_text[digest][0] > verdict.at_ms:
                continue
        by_text[digest] = (verdict.at_ms, line)
    out.lines = [line for _, line in by_text.values()]
    return out


async def read_values(kafka_options: Mapping[str, Any], topic: str) -> list[bytes | None]:
    """Every record value of `topic`, from the beginning to its end now, in partition order."""
    consumer = AIOKafkaConsumer(
        **kafka_options, group_id=None, enable_auto_commit=False, client_id="moderator-export"
    )
    values: list[bytes | None] = []

    def keep(record: ConsumerRecord[bytes, bytes]) -> None:
        values.append(record.value)

    try:
        await start_client(consumer, kafka_options, f"reading {topic}")
        if not await read_to_end(consumer, topic, keep):
            say(f"no topic {topic}: nothing read from it")
        return values
    finally:
        await stop_within(consumer)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `verdicts export` to the `moderator` command line."""
    verdicts = command(
        sub,
        "verdicts",
        "the moderators' verdicts, kept for training",
        """
        moderator verdicts export --out verdicts.tsv
        make model MODELS_VERDICTS=verdicts.tsv      # train on them (a split of their own)
    """,
    )
    verdicts_sub = verdicts.add_subparsers(required=True, metavar="ACTION")
    export = command(
        verdicts_sub,
        "export",
        "join the review and verdict topics into training lines (text<TAB>labels)",
        """
        moderator verdicts export --out verdicts.tsv
        moderator verdicts export --out - --kafka-bootstrap kafka:9092 | head
        make model MODELS_VERDICTS=verdicts.tsv
    """,
        description=__doc__,
    )
    export.add_argument("--out", required=True, help="the file to write (- for stdout)")
    export.add_argument(
        "--review-topic", help=f"held messages' topic (the review_topic setting; {REVIEW_TOPIC})"
    )
    export.add_argument(
        "--verdict-topic", help=f"verdicts' topic (the verdict_topic setting; {VERDICT_TOPIC})"
    )
    add_setting_flags(export, SETTINGS)
    log_flags(export, argparse.SUPPRESS)
    export.set_defaults(command=_cmd_export)


def topics(settings: Settings, args: argparse.Namespace) -> tuple[str, str]:
    """The review and verdict topics: the flags, else the settings (once Settings has them)."""
    review = args.review_topic or getattr(settings, "review_topic", REVIEW_TOPIC)
    verdict = args.verdict_topic or getattr(settings, "verdict_topic", VERDICT_TOPIC)
    return str(review), str(verdict)


def _cmd_export(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    labels = ModelInfo.load(settings.model_dir).labels
    review_topic, verdict_topic = topics(settings, args)
    kafka = settings.kafka_options()
    reviews = loop.run(read_values(kafka, review_topic))
    verdicts = loop.run(read_values(kafka, verdict_topic))
    found = join(reviews, verdicts, labels, max_bytes=settings.max_record_bytes)
    text = "".join(training_line(t, labels_) for t, labels_ in found.lines)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
    print(f"{args.out}: {found.summary()}", file=sys.stderr)
    return 0
