"""Policy: label scores → an action (`allow`, then the policy's actions in increasing severity),
with the label that triggered it.

The actions are data: a policy file may list its own (`actions = ["nudge", "review", "block"]`,
least severe first) and give each label a threshold per action, so a new action is a policy
change, not a code change. Without `actions` a policy has the classic `nudge` and `block`.
"""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from moderator.errors import PolicyError

log = logging.getLogger(__name__)

ALLOW = "allow"  # what a message gets when no threshold is reached
DEFAULT_ACTIONS = (ALLOW, "nudge", "block")  # in increasing severity
EMPTY_TEXT_REASON = "empty_text"


class Verdict(NamedTuple):
    """An action and its reason: the label that triggered it, a reason code, or None."""

    action: str
    reason: str | None


# Nothing left to score after normalisation (only spaces, emoji the tokenizer drops, ...).
EMPTY_TEXT = Verdict(ALLOW, EMPTY_TEXT_REASON)


class Rule(NamedTuple):
    """One label's thresholds, by action."""

    label: str
    thresholds: Mapping[str, float]

    @property
    def nudge(self) -> float | None:
        return self.thresholds.get("nudge")

    @property
    def block(self) -> float | None:
        return self.thresholds.get("block")


class Policy:
    """Per-label thresholds for each action, loaded from TOML or JSON."""

    def __init__(
        self,
        name: str,
        version: int | str,
        rules: Iterable[Rule],
        actions: Sequence[str] = DEFAULT_ACTIONS[1:],
    ) -> None:
        self.name = name
        self.version = str(version)
        self.rules = tuple(rules)
        self.actions = (ALLOW, *actions)  # increasing severity
        # Per rule, its (severity, threshold) pairs, most severe first: what `decide` walks.
        self._ladders = tuple(
            tuple(
                (severity, rule.thresholds[action])
                for severity, action in reversed(list(enumerate(self.actions)))
                if action in rule.thresholds
            )
            for rule in self.rules
        )

    @property
    def ident(self) -> str:
        """`name@version`, as written into every decision."""
        return f"{self.name}@{self.version}"

    @classmethod
    def load(cls, path: Path | None = None) -> Policy:
        """The policy in `path` (`.toml` or `.json`), or the packaged default policy."""
        if path is None:
            text = resources.files("moderator").joinpath("default_policy.toml").read_text()
            return cls.from_mapping(tomllib.loads(text), source="default_policy.toml")
        try:
            text = path.read_text()
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (OSError, ValueError) as exc:
            raise PolicyError(f"{path}: cannot read the policy: {exc}") from None
        return cls.from_mapping(data, source=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "policy") -> Policy:
        try:
            name = data["name"]
            version = data["version"]
            labels = data["labels"]
        except KeyError as exc:
            raise PolicyError(f"{source}: missing {exc}") from None
        if not isinstance(name, str) or not name or not isinstance(labels, Mapping):
            raise PolicyError(f"{source}: 'name' must be a string and 'labels' a table")
        actions = data.get("actions", DEFAULT_ACTIONS[1:])
        if (
            not isinstance(actions, list | tuple)
            or not actions
            or not all(isinstance(a, str) and a for a in actions)
            or len(set(actions)) != len(actions)
            or ALLOW in actions
        ):
            raise PolicyError(
                f"{source}: 'actions' must list distinct action names other than {ALLOW!r}, "
                "least severe first"
            )
        rules = []
        for label, spec in labels.items():
            if not isinstance(spec, Mapping) or set(spec) - set(actions):
                allowed = ", ".join(repr(a) for a in actions)
                raise PolicyError(f"{source}: labels.{label} may only set {allowed}")
            thresholds = {a: spec[a] for a in actions if spec.get(a) is not None}  # JSON null
            for key, value in thresholds.items():
                if type(value) not in (int, float) or not 0 <= value <= 1:
                    raise PolicyError(f"{source}: labels.{label}.{key} must be a number in 0..1")
            if not thresholds:
                raise PolicyError(f"{source}: labels.{label} sets no threshold")
            rules.append(Rule(label, thresholds))
        return cls(name, version, rules, actions)

    def check_labels(self, model_labels: Iterable[str]) -> None:
        """Warn about rules naming labels the model lacks: they can never trigger."""
        missing = [r.label for r in self.rules if r.label not in set(model_labels)]
        if missing:
            log.warning(
                "policy %s names labels the model does not produce, they never trigger: %s",
                self.ident,
                ", ".join(missing),
            )

    def decide(self, scores: Mapping[str, float]) -> Verdict:
        """The most severe action any label reaches, and that label; `allow` if none does.

        The one decision rule: the service, `moderator score` and the model's evaluation all
        call it, so they cannot disagree on a tie.
        """
        # Margins within 0.01 tie; a tie goes to the rule listed first (the more specific one:
        # "kys" saturates self_harm and severe_toxicity alike, and self_harm says more).
        best: tuple[int, float, int] | None = None
        for index, (rule, ladder) in enumerate(zip(self.rules, self._ladders, strict=True)):
            score = scores.get(rule.label)
            if score is None:
                continue
            for severity, threshold in ladder:
                if score >= threshold:
                    candidate = (severity, round(score - threshold, 2), -index)
                    if best is None or candidate > best:
                        best = candidate
                    break
        if best is None:
            return Verdict(ALLOW, None)
        return Verdict(self.actions[best[0]], self.rules[-best[2]].label)
