"""`moderator rollout status | promote | rollback`: the rollout control topic as an operator reads
and writes it (the moderators follow it with shadow/switch.ModelSwitch).

`promote` swaps the primary and the shadow of the record in effect (with none yet, of the models
this command's MODERATOR_MODEL_DIR and MODERATOR_SHADOW_MODEL name), `rollback` writes the pair
before it again. Both first check each model the new record names against a model directory
here (its manifest's name@version, and the sha256 of its model.onnx as read now), so a record the
instances would refuse for a wrong sha256 is never written; each change is written twice, under
its audit key and then the `rollout` key (moderator/shadow/control.py).
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moderator import loop
from moderator.admin.override_admin import utc
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
from moderator.errors import ConfigError, ModelError
from moderator.kafka import compacted
from moderator.kafka.compacted import TopicState
from moderator.redaction import protect
from moderator.review.overrides import wall_ms
from moderator.shadow.control import (
    AUDIT_PREFIX,
    KEY,
    InvalidRollout,
    ModelRef,
    Pair,
    Rollout,
    RolloutBook,
    audit_key,
    decode,
    promoted,
    rolled_back,
)

CLIENT_ID, ROLE = "moderator-rollout-cli", "reading the rollout topic"
MODELS = ("model_dir", "shadow_model")
SETTINGS = (*KAFKA_CONNECTION, "rollout_topic", "topic_replication", *MODELS)


@dataclass(eq=False)
class RolloutState(TopicState[RolloutBook]):
    """The rollout topic as a moderator reading it would have it, and every change on it."""

    changes: list[Rollout] = field(default_factory=list)  # the audit trail, oldest first

    def take(self, key: str, value: bytes | None) -> None:
        if key.startswith(AUDIT_PREFIX) and value is not None:
            try:
                self.changes.append(decode(value))
            except InvalidRollout:
                self.refused[key] = "not a rollout record"
        super().take(key, value)


async def read_state(kafka_options: Mapping[str, Any], topic: str) -> RolloutState:
    """Every record of the rollout topic, applied in order as the moderators apply them."""
    state = RolloutState(RolloutBook(), InvalidRollout)
    return await compacted.read_state(kafka_options, topic, state, client_id=CLIENT_ID, role=ROLE)


async def write_rollout(
    kafka_options: Mapping[str, Any], topic: str, rollout: Rollout, replication: int = 1
) -> None:
    """The change under its audit key, then as the record in effect, both acknowledged by every
    in-sync replica (one partition: in this order)."""
    value = rollout.encode()
    records = [(audit_key(rollout), value), (KEY, value)]
    role = "writing the rollout record"
    await compacted.publish(
        kafka_options, topic, records, client_id=CLIENT_ID, role=role, replication=replication
    )


def local_ref(directory: Path) -> ModelRef:
    """The model in `directory` as a record would name it, its model.onnx hashed now (a
    manifest that does not match its graph names no model)."""
    info = ModelInfo.load(directory)
    digest = hashlib.sha256((directory / "model.onnx").read_bytes()).hexdigest()
    if digest != info.sha256:
        raise ModelError(f"{directory}: model.onnx's sha256 is not its manifest's")
    return ModelRef(info.ident, digest)


def local_models(settings: Settings) -> dict[ModelRef, Path]:
    """The models this command was given (MODERATOR_MODEL_DIR, MODERATOR_SHADOW_MODEL)."""
    dirs = [settings.model_dir, settings.shadow_model]
    return {local_ref(d): d for d in dirs if d is not None}


def checked(pair: Pair, here: Mapping[ModelRef, Path]) -> Pair:
    """`pair`, once each of its models is a model directory here; ConfigError otherwise."""
    for role, ref in (("primary", pair.primary), ("shadow", pair.shadow)):
        if ref not in here:
            have = ", ".join(f"{r} in {d}" for r, d in here.items()) or "none"
            raise ConfigError(
                f"the {role} would be {ref}, which no model directory here holds ({have}): "
                "give it with --model-dir or --shadow-model; nothing written"
            )
    return pair


def rollout_lines(r: Rollout) -> list[str]:
    lines = [f"primary\t{r.pair.primary.model}\t{r.pair.primary.sha256}"]
    lines.append(f"shadow\t{r.pair.shadow.model}\t{r.pair.shadow.sha256}")
    lines.append(f"set\t{r.change} by {r.by} at {utc(r.at_ms)}")
    if r.previous is not None:
        lines.append(f"previous\t{r.previous.primary.model} decided, {r.previous.shadow.model}")
    return lines


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `rollout status | promote | rollback` to the `moderator` command line."""
    top = command(
        sub,
        "rollout",
        "which model decides and which shadows it, on the rollout control topic",
        """
        moderator rollout status
        moderator rollout promote --operator alice     # the shadow decides, the primary shadows
        moderator rollout rollback --operator alice    # the pair before the last change again
    """,
    )
    actions = top.add_subparsers(required=True, metavar="ACTION")
    helps = {
        "status": (
            "the record in effect and every change before it, oldest first",
            "moderator rollout status\nmoderator rollout status --kafka-bootstrap kafka:9092",
        ),
        "promote": (
            "swap the primary and the shadow (each checked against a model directory here)",
            "moderator rollout promote --operator alice\n"
            "moderator rollout promote --model-dir /models/a --shadow-model /models/b",
        ),
        "rollback": (
            "restore the pair the record in effect replaced",
            "moderator rollout rollback\nmoderator rollout rollback --operator bob",
        ),
    }
    for name, (help_text, examples) in helps.items():
        cmd = command(actions, name, help_text, examples)
        if name != "status":
            cmd.add_argument(
                "--operator",
                default=os.environ.get("USER") or getpass.getuser(),
                help="who changes it, for the audit trail (default: $USER)",
            )
        add_setting_flags(cmd, SETTINGS)
        log_flags(cmd, argparse.SUPPRESS)
        cmd.set_defaults(command=_cmd_rollout, action=name)


def _cmd_rollout(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    topic, kafka = settings.rollout_topic, settings.kafka_options()
    if not topic:
        raise ConfigError("MODERATOR_ROLLOUT_TOPIC is empty: there is no rollout topic")
    state = loop.run(read_state(kafka, topic))
    current = state.book.current
    if args.action == "status":
        for change in state.changes:
            print(
                f"# {utc(change.at_ms)}\t{change.change}\tby {change.by}\t"
                f"{change.pair.primary.model} decides, {change.pair.shadow.model} shadows"
            )
        for key, why in sorted(state.refused.items()):
            print(f"{key}: REFUSED by the moderators: {why}", file=sys.stderr)
        if current is None:
            print(
                f"no rollout record on {topic}: each instance's own settings decide",
                file=sys.stderr,
            )
        else:
            print("\n".join(rollout_lines(current)))
        return 0
    here = local_models(settings)
    by, now = args.operator, wall_ms()
    if args.action == "promote":
        if current is None:  # the first change: the pair the settings here name
            if settings.shadow_model is None:
                raise ConfigError("no rollout record yet and no --shadow-model to promote")
            base = Pair(local_ref(settings.model_dir), local_ref(settings.shadow_model))
            current = Rollout(base, by, now)
        new = promoted(current, by, now)
    else:
        if current is None:
            raise ConfigError(f"no rollout record on {topic}: nothing to roll back")
        new = rolled_back(current, by, now)
    checked(new.pair, here)
    loop.run(write_rollout(kafka, topic, new, settings.topic_replication))
    say(f"{topic}: {new.pair.primary} decides, {new.pair.shadow} shadows ({new.change} by {by})")
    return 0
