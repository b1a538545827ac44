"""Degraded decisions: what a message gets when its latency budget is already spent.

Under overload the backlog must drain, so a message that is already older than its budget when
it is fetched (and not in the cache) skips the model: it gets the configured fail-open (`allow`)
or fail-closed (`block`) action, or a cheap lexical check against a deny list (`lexical`), and
is marked `degraded: true`. `off` (the default) always waits for the model.

The deny list is matched as a policy's deny terms are (moderator/policy/terms.py): obfuscation is
seen through, and only whole words match, so "skys the limit" is not "kys".
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from moderator.config import DEGRADED_MODES, Settings
from moderator.errors import ConfigError
from moderator.policy.rules import Ruling
from moderator.policy.terms import Term, TermMatcher, Worded

DENYLIST_REASON = "denylist"
OVERLOAD_REASON = "overload"


class Fallback:
    """The fast decision for late messages under one of the degraded modes but `off`."""

    def __init__(self, mode: str, phrases: list[str]) -> None:
        if mode not in DEGRADED_MODES or mode == "off":
            modes = DEGRADED_MODES[1:]
            raise ConfigError(f"MODERATOR_DEGRADED_MODE: {mode!r} is not one of {modes}")
        self.mode = mode
        terms = [Term(p, DENYLIST_REASON, action="block", source=DENYLIST_REASON) for p in phrases]
        self._matcher = TermMatcher(terms)

    @classmethod
    def load(cls, mode: str, denylist: Path | None = None) -> Fallback:
        """The fallback for `mode`, with the deny list in `denylist` or the packaged one."""
        if denylist is None:
            text = resources.files("moderator").joinpath("denylist.txt").read_text()
        else:
            try:
                text = denylist.read_text()
            except OSError as exc:
                raise ConfigError(f"MODERATOR_DENYLIST: cannot read {denylist}: {exc}") from None
        phrases = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        return cls(mode, [p for p in phrases if p])

    def decide(self, text: str | Worded) -> Ruling:
        if self.mode == "allow":
            return Ruling("allow", OVERLOAD_REASON)
        if self.mode == "block":
            return Ruling("block", OVERLOAD_REASON)
        if self._matcher.find(text):
            return Ruling("block", DENYLIST_REASON)
        return Ruling("allow", None)


def fallback_for(settings: Settings) -> Fallback | None:
    """The fallback `degraded_mode` names, with `denylist`; None for `off`, which waits for the
    model."""
    if settings.degraded_mode == "off":
        return None
    return Fallback.load(settings.degraded_mode, settings.denylist)
