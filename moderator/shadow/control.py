"""Which model decides and which shadows it: the rollout record on its compacted control topic.

One key, `rollout`, holds the pair in effect: the primary and the shadow, each named by its
`name@version` and the sha256 of its model.onnx (the manifest's), who changed it, when, how
(`set`, `promote`, `rollback`) and the pair it replaced (`previous`, what a rollback restores).
Compaction keeps only the latest record of a key, so each change is also written, first, under a
key of its own (`audit:<at_ms>:<by>`): compaction never removes those, and the topic itself is the
audit trail of every change, in order (one partition). The moderators read the `rollout` key and
pass over the audit keys. Pure: no Kafka, no models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from moderator.errors import ModeratorError

KEY = "rollout"
AUDIT_PREFIX = "audit:"
CHANGES = ("set", "promote", "rollback")
_SHA256_HEX = frozenset("0123456789abcdef")


class InvalidRollout(ModeratorError):
    """A rollout record that does not validate (ignored; the models in effect stay)."""


class ModelRef(NamedTuple):
    """A model as the record names it: `name@version` and its model.onnx's sha256."""

    model: str
    sha256: str

    def as_json(self) -> dict[str, str]:
        return {"model": self.model, "sha256": self.sha256}

    def __str__(self) -> str:
        return f"{self.model} (sha256 {self.sha256[:12]}…)"


class Pair(NamedTuple):
    """The primary, which decides, and the shadow, which reads beside it."""

    primary: ModelRef
    shadow: ModelRef

    def swapped(self) -> Pair:
        return Pair(self.shadow, self.primary)

    def as_json(self) -> dict[str, Any]:
        return {"primary": self.primary.as_json(), "shadow": self.shadow.as_json()}


class Rollout(NamedTuple):
    """One rollout record: the pair in effect, who set it, when and how, and the pair before."""

    pair: Pair
    by: str
    at_ms: int
    change: str = "set"
    previous: Pair | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            **self.pair.as_json(),
            "by": self.by,
            "at_ms": self.at_ms,
            "change": self.change,
            "previous": None if self.previous is None else self.previous.as_json(),
        }

    def encode(self) -> bytes:
        return orjson.dumps(self.as_json())


def audit_key(rollout: Rollout) -> str:
    """The key a change is kept under for good (the audit trail)."""
    return f"{AUDIT_PREFIX}{rollout.at_ms}:{rollout.by}"


def promoted(current: Rollout, by: str, at_ms: int) -> Rollout:
    """The shadow decides, the primary shadows it."""
    return Rollout(current.pair.swapped(), by, at_ms, "promote", current.pair)


def rolled_back(current: Rollout, by: str, at_ms: int) -> Rollout:
    """The pair before `current` again; InvalidRollout when it names none."""
    if current.previous is None:
        raise InvalidRollout(f"the rollout record set by {current.by} names no previous pair")
    return Rollout(current.previous, by, at_ms, "rollback", current.pair)


def decode(value: bytes) -> Rollout:
    """A rollout record from its JSON; InvalidRollout saying what is wrong."""
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidRollout(f"rollout record: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidRollout("rollout record: not a JSON object")
    by, at_ms, change = raw.get("by"), raw.get("at_ms"), raw.get("change", "set")
    if not isinstance(by, str) or not by.strip():
        raise InvalidRollout("rollout record: 'by' must name who changed it")
    if not isinstance(at_ms, int) or isinstance(at_ms, bool) or at_ms <= 0:
        raise InvalidRollout("rollout record: 'at_ms' must be a positive integer (Unix ms)")
    if change not in CHANGES:
        raise InvalidRollout(f"rollout record: 'change' must be one of {', '.join(CHANGES)}")
    previous = raw.get("previous")
    return Rollout(
        _pair(raw, "rollout record"),
        by,
        at_ms,
        change,
        None if previous is None else _pair(previous, "rollout record's 'previous'"),
    )


def _pair(raw: Any, where: str) -> Pair:
    if not isinstance(raw, Mapping):
        raise InvalidRollout(f"{where}: not a JSON object")
    pair = Pair(
        _ref(raw.get("primary"), f"{where}: 'primary'"),
        _ref(raw.get("shadow"), f"{where}: 'shadow'"),
    )
    if pair.primary == pair.shadow:  # one graph under two manifests is two models, though
        raise InvalidRollout(f"{where}: the primary and the shadow are the same model")
    return pair


def _ref(raw: Any, where: str) -> ModelRef:
    if not isinstance(raw, Mapping):
        raise InvalidRollout(f"{where} must be an object with 'model' and 'sha256'")
    model, sha256 = raw.get("model"), raw.get("sha256")
    if not isinstance(model, str) or "@" not in model.strip("@"):
        raise InvalidRollout(f"{where}: 'model' must be name@version, got {model!r}")
    if not isinstance(sha256, str) or len(sha256) != 64 or not set(sha256) <= _SHA256_HEX:
        raise InvalidRollout(f"{where}: 'sha256' must be 64 lowercase hex digits")
    return ModelRef(model, sha256)


class RolloutBook:
    """The rollout in effect, as the control topic's records set it (a compacted.Table's book)."""

    def __init__(self) -> None:
        self.current: Rollout | None = None

    def apply(self, key: str, value: bytes | None) -> str:
        """Apply one record: `applied`, `removed` (a tombstone: the instances' own settings
        decide again), or `audit` (a change kept for the trail). Raises InvalidRollout, leaving
        the rollout as it was."""
        if key.startswith(AUDIT_PREFIX):
            return "audit"
        if key != KEY:
            raise InvalidRollout(f"rollout record with key {key!r} (the key is {KEY!r})")
        if value is None:
            self.current = None
            return "removed"
        self.current = decode(value)
        return "applied"
