"""Degraded decisions: what a message gets when its latency budget is already spent.

Under overload the backlog must drain, so a message that is already older than its budget when
it is fetched (and not in the cache) skips the model: it gets the configured fail-open (`allow`)
or fail-closed (`block`) action, or a cheap lexical check against a deny list (`lexical`), and
is marked `degraded: true`. `off` (the default) always waits for the model.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from moderator.errors import ConfigError
from moderator.normalize import normalize_text
from moderator.policy import Verdict

MODES = ("off", "allow", "block", "lexical")
DENYLIST_REASON = "denylist"
OVERLOAD_REASON = "overload"


class Fallback:
    """The fast decision for late messages under one of `MODES` (never built for `off`)."""

    def __init__(self, mode: str, phrases: list[str]) -> None:
        if mode not in MODES or mode == "off":
            raise ConfigError(f"MODERATOR_DEGRADED_MODE: {mode!r} is not one of {MODES[1:]}")
        self.mode = mode
        words = sorted({normalize_text(p).lower() for p in phrases if p.strip()}, key=len)
        alternatives = "|".join(re.escape(w) for w in reversed(words))
        self._pattern = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)") if words else None

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

    def decide(self, text: str) -> Verdict:
        if self.mode == "allow":
            return Verdict("allow", OVERLOAD_REASON)
        if self.mode == "block":
            return Verdict("block", OVERLOAD_REASON)
        if self._pattern is not None and self._pattern.search(normalize_text(text).lower()):
            return Verdict("block", DENYLIST_REASON)
        return Verdict("allow", None)
