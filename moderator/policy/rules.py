"""Policy: label scores and deny/allow terms → an action (`allow`, then the policy's actions in
increasing severity), with the label or list entry that triggered it and its severity.

A label's score maps to a severity (`low`, `medium`, `high`) by thresholds, and the policy maps
each label's severities to actions, so "block high threats, nudge medium insults, allow low
profanity" is one policy. The actions are data, least severe first: by default `nudge`, `review`
(a human should look) and `block`, and a policy may list its own (`actions = ["warn", "block"]`).
A label may instead give a threshold per action (`threat = {review = 0.6, block = 0.97}`): its
actions take the top severities (by default `nudge` low, `review` medium, `block` high). Both
forms are current; the shipped default uses this one, as models/tuning.py tunes it.

Text in a language the model does not read gets the policy's `unsupported_language` action
(default `review`; `allow` lets it through), when that is more severe than the model's verdict.

A policy may be partial (a channel's policy over the default, `merge_specs`): what it leaves out
comes from the one below it. Deny terms decide without the model; allow phrases are cut out
before deny matching and scoring (`moderator/policy/terms.py`).
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
from moderator.policy.long_text import windows_raise
from moderator.policy.review_rules import review_rules
from moderator.policy.terms import (
    SEVERITIES,
    Term,
    TermMatcher,
    Worded,
    default_term_entries,
    deny_entries,
)
from moderator.policy.user_rules import rules_of

log = logging.getLogger(__name__)

ALLOW = "allow"  # what a message gets when no threshold is reached
DEFAULT_ACTIONS = (ALLOW, "nudge", "review", "block")  # in increasing severity
EMPTY_TEXT_REASON = "empty_text"
DENY_REASON = "deny"  # reason "deny:<list>:<category>" for a deny-term match
# Where a label's severities start, unless the policy's [severity] or the label's say otherwise.
DEFAULT_SEVERITY_THRESHOLDS = {"low": 0.5, "medium": 0.75, "high": 0.97}
LIST_KEYS = ("deny", "allow")  # merged by appending, the rest by replacing
REVIEW = "review"  # a human should look; a policy without it uses its least severe action


class Ruling(NamedTuple):
    """The policy's ruling: an action, its reason (the label that triggered it, a reason code,
    or None) and the severity that triggered it; a moderator's verdict is `records.Verdict`."""

    action: str
    reason: str | None
    severity: str | None = None


# Nothing left to score after normalisation (only spaces, emoji the tokenizer drops, ...).
EMPTY_TEXT = Ruling(ALLOW, EMPTY_TEXT_REASON)


class Rule(NamedTuple):
    """One label's score thresholds and actions, by severity."""

    label: str
    thresholds: Mapping[str, float]  # severity -> the score where it starts
    actions: Mapping[str, str]  # severity -> action (an unnamed severity takes the one below's)

    @property
    def by_action(self) -> dict[str, float]:
        """The score at which each action starts (the threshold-per-action form of a rule)."""
        out: dict[str, float] = {}
        action = ALLOW
        for level in SEVERITIES:
            action = self.actions.get(level, action)
            if level in self.thresholds and action != ALLOW and action not in out:
                out[action] = self.thresholds[level]
        return out


def merge_specs(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: tables (`labels`, `severity`, `default_terms`) merge key by
    key, `deny` and `allow` lists add up, anything else `over` sets replaces `base`'s."""
    merged = dict(base)
    for key, value in over.items():
        if key in LIST_KEYS and isinstance(value, list):
            merged[key] = [*base.get(key, []), *value]
        elif isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            merged[key] = {**base[key], **value}
        else:
            merged[key] = value
    return merged


class Policy:
    """Per-label severity thresholds and actions, deny and allow terms; from TOML or JSON."""

    def __init__(
        self,
        name: str,
        version: int | str,
        rules: Iterable[Rule],
        actions: Sequence[str] = DEFAULT_ACTIONS[1:],
        *,
        deny: Iterable[Term] = (),
        allow: Iterable[str] = (),
        unsupported_language: str = REVIEW,
        spec: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.version = str(version)
        self.rules = tuple(rules)
        self.actions = (ALLOW, *actions)  # increasing severity
        self.spec = dict(spec or {})  # what it was read from: what a partial policy merges onto
        self.users = rules_of(self.spec, self.actions, name)
        rank = {action: i for i, action in enumerate(self.actions)}
        # What a human should look at: `review`, or the least severe action of a policy that
        # lists its own actions without it (never `allow`: unread text is not let through).
        self.review_action = REVIEW if REVIEW in rank else self.actions[1]
        if unsupported_language == REVIEW:
            unsupported_language = self.review_action
        if unsupported_language not in rank:
            raise PolicyError(
                f"unsupported_language: {unsupported_language!r} is not one of "
                f"{', '.join(self.actions)}"
            )
        self.unsupported_language = unsupported_language
        # Per rule, its (severity, threshold, action rank) steps, most severe first, for
        # `decide`; a severity without an action of its own takes the one below's.
        self._ladders = tuple(_ladder(rule, rank) for rule in self.rules)
        deny, allow = tuple(deny), tuple(allow)
        self.terms = TermMatcher(deny, allow) if deny or allow else None
        self._deny_rank = rank

    def rank(self, action: str) -> int:
        """The severity of `action` among this policy's (allow is 0)."""
        return self._deny_rank[action]

    @property
    def ident(self) -> str:
        """`name@version`, as written into every decision."""
        return f"{self.name}@{self.version}"

    @classmethod
    def load(cls, path: Path | None = None) -> Policy:
        """The policy in `path` (`.toml` or `.json`), or the packaged default policy."""
        return cls.from_mapping(read_spec(path), source=str(path or "default_policy.toml"))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "policy") -> Policy:
        """Validate and build; every mistake is one PolicyError naming `source` and the key."""
        try:
            name = data["name"]
            version = data["version"]
            labels = data.get("labels", {})
        except KeyError as exc:
            raise PolicyError(f"{source}: missing {exc}") from None
        if not isinstance(name, str) or not name or not isinstance(labels, Mapping):
            raise PolicyError(f"{source}: 'name' must be a string and 'labels' a table")
        if type(version) not in (int, str) or version == "":
            raise PolicyError(f"{source}: 'version' must be an integer or a string")
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
        known = (ALLOW, *actions)
        severity = _thresholds(data.get("severity", {}), f"{source}: severity")
        rules = [
            _rule(
                str(label),
                spec,
                actions,
                {**DEFAULT_SEVERITY_THRESHOLDS, **severity},
                f"{source}: labels.{label}",
            )
            for label, spec in labels.items()
        ]
        deny = deny_entries(data.get("deny", []), known, f"{source}: deny")
        deny += default_term_entries(
            data.get("default_terms", {}), known, f"{source}: default_terms"
        )
        allow = data.get("allow", [])
        if not isinstance(allow, list) or not all(isinstance(a, str) and a.strip() for a in allow):
            raise PolicyError(f"{source}: 'allow' must be a list of non-empty strings")
        review_rules(data, known, source)  # validated here, read where a message is held
        windows_raise(data, source)  # validated here, read where a message is judged
        language = data.get("unsupported_language", REVIEW)
        if language not in (REVIEW, *known):
            raise PolicyError(f"{source}: 'unsupported_language' must be one of {', '.join(known)}")
        return cls(
            name,
            version,
            rules,
            actions,
            deny=deny,
            allow=allow,
            unsupported_language=language,
            spec=data,
        )

    def check_labels(self, model_labels: Iterable[str]) -> None:
        """Warn about rules naming labels the model lacks: they can never trigger."""
        missing = [r.label for r in self.rules if r.label not in set(model_labels)]
        if missing:
            log.warning(
                "policy %s names labels the model does not produce, they never trigger: %s",
                self.ident,
                ", ".join(missing),
            )

    def without_allowed(self, text: str | Worded) -> str:
        """`text` with its allowed phrases cut out: what deny matching and the model see."""
        if self.terms is None:
            return text if isinstance(text, str) else text.raw
        return self.terms.without_allowed(text)

    def deny_ruling(self, text: str | Worded) -> Ruling | None:
        """The most severe action of the deny terms in `text` (allowed phrases do not count),
        or None when none matches: then the model decides."""
        if self.terms is None:
            return None
        best: tuple[int, Term] | None = None
        for match in self.terms.find(text):
            rank = self._deny_rank.get(match.term.action or "", 0)
            if rank and (best is None or rank > best[0]):
                best = (rank, match.term)
        if best is None:
            return None
        term = best[1]
        reason = f"{DENY_REASON}:{term.source}:{term.category}"
        return Ruling(self.actions[best[0]], reason, term.severity)

    def decide(self, scores: Mapping[str, float]) -> Ruling:
        """The most severe action any label reaches, that label and its severity; `allow` if
        none does.

        The one decision rule: the service, `moderator score` and the model's evaluation all
        call it, so they cannot disagree on a tie.
        """
        # The most severe action, then the highest severity, then the widest margin past its
        # threshold; margins within 0.01 tie, won by the rule listed first (the more specific:
        # "kys" saturates self_harm and severe_toxicity alike, and self_harm says more).
        best: tuple[int, int, float, int] | None = None
        for index, (rule, ladder) in enumerate(zip(self.rules, self._ladders, strict=True)):
            score = scores.get(rule.label)
            if score is None:
                continue
            for level, threshold, rank in ladder:
                if score >= threshold:
                    candidate = (rank, SEVERITIES.index(level), round(score - threshold, 2), -index)
                    if rank and (best is None or candidate > best):
                        best = candidate
                    break
        if best is None:
            return Ruling(ALLOW, None)
        return Ruling(self.actions[best[0]], self.rules[-best[3]].label, SEVERITIES[best[1]])


def read_spec(path: Path | None = None) -> dict[str, Any]:
    """The mapping in a policy file (`.json`, else TOML), or the packaged default policy's."""
    if path is None:
        text = resources.files("moderator").joinpath("default_policy.toml").read_text()
        return tomllib.loads(text)
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise PolicyError(f"{path}: cannot read the policy: {exc}") from None
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: a policy is a table (a JSON object)")
    return data


def _ladder(rule: Rule, rank: Mapping[str, int]) -> tuple[tuple[str, float, int], ...]:
    steps = []
    current = 0
    for level in SEVERITIES:
        if level in rule.actions:
            current = rank[rule.actions[level]]
        if level in rule.thresholds:
            steps.append((level, rule.thresholds[level], current))
    return tuple(reversed(steps))


def _is_number(value: object) -> bool:
    return type(value) in (int, float)


def _thresholds(table: object, where: str) -> dict[str, float]:
    if not isinstance(table, Mapping) or set(table) - set(SEVERITIES):
        raise PolicyError(f"{where} may only set {', '.join(SEVERITIES)} (scores in 0..1)")
    for key, value in table.items():
        if not _is_number(value) or not 0 <= value <= 1:
            raise PolicyError(f"{where}.{key} must be a number in 0..1")
    return dict(table)


def _rule(
    label: str, spec: object, actions: Sequence[str], severity: Mapping[str, float], where: str
) -> Rule:
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where} must be a table")
    if not spec:
        raise PolicyError(f"{where} sets no threshold and maps no severity to an action")
    numbers = [_is_number(v) for v in spec.values() if v is not None]
    if any(numbers) and not all(numbers):
        raise PolicyError(
            f"{where} mixes thresholds per action (numbers) with actions per "
            "severity (names): use one form"
        )
    if any(numbers):  # a threshold per action
        if set(spec) - set(actions) or len(actions) > len(SEVERITIES):
            allowed = ", ".join(repr(a) for a in actions)
            raise PolicyError(f"{where} may only set {allowed}")
        levels = dict(zip(actions, SEVERITIES[-len(actions) :], strict=True))
        given = {a: spec[a] for a in actions if spec.get(a) is not None}  # JSON null
        for key, value in given.items():
            if not _is_number(value) or not 0 <= value <= 1:
                raise PolicyError(f"{where}.{key} must be a number in 0..1")
        if not given:
            raise PolicyError(f"{where} sets no threshold")
        return Rule(label, {levels[a]: v for a, v in given.items()}, {levels[a]: a for a in given})
    if set(spec) - {*SEVERITIES, "thresholds"}:
        raise PolicyError(
            f"{where} may only set {', '.join(SEVERITIES)} (each an action) and 'thresholds'"
        )
    mapped = {k: v for k, v in spec.items() if k in SEVERITIES}
    for key, action in mapped.items():
        if action not in (ALLOW, *actions):
            raise PolicyError(
                f"{where}.{key}: {action!r} is not one of {ALLOW}, {', '.join(actions)}"
            )
    if not mapped:
        raise PolicyError(f"{where} maps no severity to an action")
    thresholds = {**severity, **_thresholds(spec.get("thresholds", {}), f"{where}.thresholds")}
    return Rule(label, thresholds, mapped)
