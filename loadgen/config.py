"""What one load run does: a frozen configuration, validated when it is made."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.schedule import Arrivals

DEFAULT_IN_TOPIC = "chat.messages"
DEFAULT_OUT_TOPIC = "chat.decisions"
DEFAULT_DLQ_TOPIC = "chat.messages.dlq"


@dataclass(frozen=True)
class LoadConfig:
    """One open-loop run: `rate` messages per second for `duration_s`, then a drain.

    `partitions` is only used for topics that do not exist yet. `hop` measures the broker's
    produce-to-consume hop alone before the run.
    """

    bootstrap: str = "127.0.0.1:9092"
    rate: float = 100.0
    duration_s: float = 10.0
    arrivals: Arrivals = Arrivals.CONSTANT
    dup_ratio: float = 0.3
    toxic_ratio: float = 0.05
    malformed_ratio: float = 0.0
    held_ratio: float = 0.0  # lines the shipped model holds for review (loadgen/held.py)
    channels: int = 16
    in_topic: str = DEFAULT_IN_TOPIC
    out_topic: str = DEFAULT_OUT_TOPIC
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    budget_ms: float = 50.0
    drain_timeout_s: float = 10.0
    partitions: int = 4
    hop: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = (
            ("rate", self.rate > 0, "must be positive"),
            ("duration_s", self.duration_s > 0, "must be positive"),
            ("dup_ratio", 0 <= self.dup_ratio <= 1, "must be between 0 and 1"),
            ("toxic_ratio", 0 <= self.toxic_ratio <= 1, "must be between 0 and 1"),
            ("malformed_ratio", 0 <= self.malformed_ratio <= 1, "must be between 0 and 1"),
            ("held_ratio", 0 <= self.held_ratio <= 1, "must be between 0 and 1"),
            ("channels", self.channels >= 1, "must be at least 1"),
            ("budget_ms", self.budget_ms > 0, "must be positive"),
            ("drain_timeout_s", self.drain_timeout_s >= 0, "must not be negative"),
            ("partitions", self.partitions >= 1, "must be at least 1"),
            ("bootstrap", bool(self.bootstrap), "must not be empty"),
        )
        for name, ok, why in checks:
            if not ok:
                raise ValueError(f"{name} {why}, got {getattr(self, name)!r}")
        topics = (self.in_topic, self.out_topic, self.dlq_topic)
        if len(set(topics)) != 3 or not all(topics):
            raise ValueError(f"in, out and dlq topics must be three different names, got {topics}")
