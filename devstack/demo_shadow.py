"""The shadow run in `moderator demo`: the demo's moderator scores all its chat with a second model
beside the one that decides, and the summary says how often the two agreed (the moderator's own
`moderator_shadow_*` counters) and shows one disagreement from the shadow topic, with the line it
was about read back from the chat topic (the record holds ids and figures only, no text).

The second model is the candidate of devstack/candidate.py, unless MODERATOR_SHADOW_MODEL names
one: the shipped graph under a manifest that names two of its outputs (`toxicity`, `obscene`) the
other way round and reads Spanish. It is a real model directory that decides otherwise on real
lines, and the only second model a fresh checkout has without building one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from devstack.candidate import SWAPPED, candidate_model
from devstack.child import ModeratorChild, Samples
from moderator.config import ENV_PREFIX, Settings
from moderator.errors import InvalidRecord
from moderator.records import parse_message

SHADOW_ENV = f"{ENV_PREFIX}SHADOW_MODEL"
CANDIDATE = (
    f"devstack/candidate.py: the shipped graph, its manifest naming {SWAPPED[0]} and "
    f"{SWAPPED[1]} the other way round and reading Spanish"
)
CATCH_UP_S = 15.0  # the shadow's queue emptying after the chat (it sheds past 1000, counted)
READ_S = 10.0
DECISIONS = "moderator_shadow_decisions_total"
MAX_RECORD_BYTES = Settings().max_record_bytes  # the demo's moderator runs the default
DISAGREEMENTS = "moderator_shadow_disagreements_total"


def shadow_args(directory: Path, environ: Mapping[str, str]) -> tuple[list[str], str]:
    """`moderator dev`'s `--shadow-model`, the candidate made in `directory` (none when the
    user's MODERATOR_SHADOW_MODEL names one: theirs applies), and what to call it."""
    if environ.get(SHADOW_ENV):
        return [], f"{SHADOW_ENV}={environ[SHADOW_ENV]}"
    return ["--shadow-model", str(candidate_model(directory / "candidate"))], CANDIDATE


@dataclass(frozen=True)
class Disagreement:
    """One record of the shadow topic, and the text of the message it is about (None: not
    found on the chat topic)."""

    record: dict[str, Any]
    text: str | None


def chosen(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first disagreement where both models read the text (each side has a top score): two
    readings of one line, rather than a line one gate kept from its model."""
    read = [r for r in records if r["primary"]["top"] and r["shadow"]["top"]]
    return next(iter(read or records), None)


async def wait_caught_up(dev: ModeratorChild) -> Samples | None:
    """Scrape until the shadow's queue is empty (at most CATCH_UP_S); the last scrape."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        samples = await asyncio.to_thread(dev.scrape)
        done = samples is not None and samples.total("moderator_shadow_queued") == 0
        if done or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.5)


async def one_disagreement(bootstrap: str, shadow_topic: str, in_topic: str) -> Disagreement | None:
    """A disagreement from the shadow topic, with its text from the chat topic."""
    record = chosen([v for v in await read_all(bootstrap, shadow_topic) if isinstance(v, dict)])
    if record is None:
        return None
    for value in await read_all(bootstrap, in_topic, raw=True):
        try:
            chat = parse_message(value, timestamp_ms=0, max_bytes=MAX_RECORD_BYTES)
        except InvalidRecord:
            continue  # the demo's malformed records
        if chat.message_id == record["message_id"]:
            return Disagreement(record, chat.text)
    return Disagreement(record, None)


async def read_all(bootstrap: str, topic: str, *, raw: bool = False) -> list[Any]:
    """Every record `topic` holds now (its values, decoded unless `raw`), at most READ_S."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50)  # fmt: skip
    await consumer.start()
    values: list[Any] = []
    try:
        ends = await consumer.end_offsets(list(consumer.assignment()))
        deadline = time.monotonic() + READ_S
        while time.monotonic() < deadline:
            if all([await consumer.position(tp) >= end for tp, end in ends.items()]):
                break
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values.extend(r.value if raw else orjson.loads(r.value or b"null") for r in records)
    finally:
        await consumer.stop()
    return values


def report(
    samples: Samples | None, shadow: str, disagreement: Disagreement | None, shadow_topic: str
) -> str:
    """The shadow's part of the summary: agreement, disagreements by action, label and language,
    the records sent, and one disagreement shown."""
    if samples is None:
        return "shadow model: moderator /metrics did not answer"
    compared = int(samples.total(DECISIONS))
    disagreed = int(samples.total(DISAGREEMENTS))
    agreed = compared - disagreed
    share = f"{agreed / compared:.1%}" if compared else "-"
    lines = [
        f"shadow model ({shadow})",
        f"  compared        {compared} messages both models decided (skipped "
        f"{int(samples.total('moderator_shadow_skipped_total'))}): agreed {agreed} ({share}), "
        f"disagreed {disagreed}",
        f"  primary→shadow  {_pairs(samples)}",
        f"  by label        {_by(samples, 'label')}",
        f"  by language     {_by(samples, 'language')}",
        f"  records         {int(samples.total('moderator_shadow_records_total', result='sent'))} "
        f"sent to {shadow_topic} (failed "
        f"{int(samples.total('moderator_shadow_records_total', result='failed'))})",
        *_shown(disagreement),
    ]
    return "\n".join(lines)


def _pairs(samples: Samples) -> str:
    """The disagreeing (primary action, shadow action) pairs, most first."""
    actions = sorted(samples.by(DECISIONS, "primary_action"))
    pairs = {
        (p, s): int(samples.total(DECISIONS, primary_action=p, shadow_action=s))
        for p in actions
        for s in actions
        if p != s
    }
    ranked = sorted(((n, p, s) for (p, s), n in pairs.items() if n), reverse=True)
    return ", ".join(f"{p}→{s} {n}" for n, p, s in ranked) or "none"


def _by(samples: Samples, label: str) -> str:
    counts = sorted(((int(n), k) for k, n in samples.by(DISAGREEMENTS, label).items() if n),
                    reverse=True)  # fmt: skip
    return ", ".join(f"{k} {n}" for n, k in counts) or "none"


def _shown(d: Disagreement | None) -> list[str]:
    if d is None:
        return ["  one of them     none on the shadow topic"]
    r = d.record
    text = repr(d.text) if d.text is not None else "(its text not found on the chat topic)"
    return [
        f"  one of them     {r['message_id']} in {r['channel_id']} (language "
        f"{r['language'] or 'not named'}): {text}",
        f"    primary {_side(r['primary'])}",
        f"    shadow  {_side(r['shadow'])}",
    ]


def _side(side: dict[str, Any]) -> str:
    top = side["top"]
    score = f"; top score {top['label']} {top['score']:.2f}" if top else "; the model not asked"
    reason = f", reason {side['reason']}" if side["reason"] else ""
    return f"{side['model']:<30} {side['action']}{reason}{score}"
