"""Policy: label scores → `allow` / `nudge` / `block`, with the label that triggered it."""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from moderator.errors import PolicyError

log = logging.getLogger(__name__)

ACTIONS = ("allow", "nudge", "block")  # in increasing severity


class Rule(NamedTuple):
    label: str
    nudge: float | None
    block: float | None


class Policy:
    """Per-label thresholds for `nudge` and `block`, loaded from TOML or JSON."""

    def __init__(self, name: str, version: int | str, rules: Iterable[Rule]) -> None:
        self.name = name
        self.version = str(version)
        self.rules = tuple(rules)

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
        rules = []
        for label, spec in labels.items():
            if not isinstance(spec, Mapping) or set(spec) - {"nudge", "block"}:
                raise PolicyError(f"{source}: labels.{label} may only set 'nudge' and 'block'")
            thresholds = {k: spec.get(k) for k in ("nudge", "block")}
            for key, value in thresholds.items():
                ok = value is None or (type(value) in (int, float) and 0 <= value <= 1)
                if not ok:
                    raise PolicyError(f"{source}: labels.{label}.{key} must be a number in 0..1")
            if thresholds["nudge"] is None and thresholds["block"] is None:
                raise PolicyError(f"{source}: labels.{label} sets no threshold")
            rules.append(Rule(label, thresholds["nudge"], thresholds["block"]))
        return cls(name, version, rules)

    def check_labels(self, model_labels: Iterable[str]) -> None:
        """Warn about rules naming labels the model lacks: they can never trigger."""
        missing = [r.label for r in self.rules if r.label not in set(model_labels)]
        if missing:
            log.warning(
                "policy %s names labels the model does not produce, they never trigger: %s",
                self.ident,
                ", ".join(missing),
            )

    def decide(self, scores: Mapping[str, float]) -> tuple[str, str | None]:
        """(action, reason): the most severe action any label reaches, and that label."""
        # Margins within 0.01 tie; a tie goes to the rule listed first (the more specific one:
        # "kys" saturates self_harm and severe_toxicity alike, and self_harm says more).
        best: tuple[int, float, int] | None = None
        for index, rule in enumerate(self.rules):
            score = scores.get(rule.label)
            if score is None:
                continue
            for severity, threshold in ((2, rule.block), (1, rule.nudge)):
                if threshold is not None and score >= threshold:
                    candidate = (severity, round(score - threshold, 2), -index)
                    if best is None or candidate > best:
                        best = candidate
                    break
        if best is None:
            return "allow", None
        return ACTIONS[best[0]], self.rules[-best[2]].label
