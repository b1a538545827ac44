"""What the models' wing counts: the shadow model beside the primary, and the rollout records
that switch them (moderator/shadow/).

Apart from moderator/metric_wings.py, which counts a message's path, because these count the
models themselves: how two models' actions compare, and which model decides.
"""

from __future__ import annotations

from collections.abc import Iterable

from moderator.metric_families import ByLabel, Families, Wing

# What the shadow's comparison names besides a model label: a reason's head, `none` when both
# allowed, and `unnamed` for a message neither language gate named (moderator/shadow/agreement.py).
SHADOW_REASONS = ("truncated", "unsupported_language", "deny", "empty_text", "none")
UNNAMED_LANGUAGE = "unnamed"
# A rollout record (moderator/shadow/switch.py): what it did, and why one was refused.
ROLLOUT_RESULTS = ("switched", "unchanged", "refused")
ROLLOUT_REFUSALS = ("invalid", "not_found", "sha256", "load", "self_check")


class ShadowMetrics(Wing):
    """The shadow model beside the primary (moderator/shadow/): how their actions compare, what
    it skipped, and its disagreement records."""

    def __init__(self, f: Families) -> None:
        super().__init__(f)
        pair = ("primary_action", "shadow_action")
        self.by_label = ByLabel(  # by (primary action, shadow action, label): see precreate
            f.counter(
                "shadow_decisions",
                "Messages both models decided, by the primary's action, the shadow's, and the "
                "label or reason that acted (the primary's, else the shadow's; none: both allowed)",
                *pair,
                "label",
            )
        )
        self.by_language = ByLabel(  # by (primary action, shadow action, language)
            f.counter(
                "shadow_languages",
                "Messages both models decided, by the primary's action, the shadow's, and the "
                "language a gate named (the primary's, else the shadow's; unnamed: neither did)",
                *pair,
                "language",
            )
        )
        self.disagreed = ByLabel(  # by (label, language), as the two above
            f.counter(
                "shadow_disagreements",
                "Messages the shadow decided otherwise than the primary, by label or reason and "
                "by language (as in shadow_decisions_total and shadow_languages_total)",
                "label",
                "language",
            )
        )
        self.skipped = f.counter(
            "shadow_skipped",
            "Messages the shadow did not compare: its queue was full, or it failed",
        )
        self.queued = f.gauge("shadow_queued", "Messages waiting for the shadow")
        self.batches = f.counter(
            "shadow_batches", "Batches handed to the shadow's process (compared / this: the size)"
        )
        records = f.counter(
            "shadow_records", "Disagreement records sent (fire and forget) or failed", "result"
        )
        self.records_sent, self.records_failed = records.labels("sent"), records.labels("failed")

    def precreate(self, actions: Iterable[str], labels: Iterable[str]) -> None:
        """Every pair of `actions` by each of the model's `labels` and reasons, at 0."""
        actions, labels = tuple(actions), (*labels, *SHADOW_REASONS)
        for label in labels:
            self.disagreed[label, UNNAMED_LANGUAGE]
        for primary in actions:
            for shadow in actions:
                self.by_language[primary, shadow, UNNAMED_LANGUAGE]
                for label in labels:
                    self.by_label[primary, shadow, label]


class RolloutMetrics(Wing):
    """The rollout records this instance applied (moderator/shadow/switch.py)."""

    def __init__(self, f: Families) -> None:
        super().__init__(f)
        self.records = ByLabel(
            f.counter(
                "rollout_records",
                "Rollout records read: switched (the primary and the shadow changed), unchanged "
                "(in effect already) or refused (the models in effect stay)",
                "result",
            ),
            *ROLLOUT_RESULTS,
        )
        self.refused = ByLabel(
            f.counter(
                "rollout_refused",
                "Rollout records refused, by why: not a valid record (invalid), a model this "
                "instance does not have (not_found), has with another sha256 (sha256), cannot "
                "load (load), or whose check lines score otherwise than recorded (self_check)",
                "reason",
            ),
            *ROLLOUT_REFUSALS,
        )
        self.switch_delay = f.gauge(
            "rollout_switch_delay_seconds",
            "From the last applied rollout record's at_ms to the switch on this instance",
        )
