"""The primary's decision beside the shadow's: what the pair is counted by, and the compact record
of a disagreement (moderator/schemas/shadow.schema.json). Pure: no Kafka, no threads.

Both decisions are the policy's on each model's reading (its screen, windows, language gate and
scores), before the users' rules count a strike: those rules judge the user, not the text, and
would move both alike. What the pair is counted by: the label or reason that acted (the primary's,
else the shadow's; `none` when both allowed), and the language a gate named (the primary's, else
the shadow's; `unnamed` when neither did: a supported language, or too little text to tell).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from moderator.decide.screen import Judged
from moderator.metric_models import UNNAMED_LANGUAGE
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage

RETENTION_DAYS = 7  # the shadow topic's: a week of disagreements, then they age out
TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(RETENTION_DAYS * 86_400_000)}
NO_LABEL = "none"


class Primary(NamedTuple):
    """What the pipeline hands the shadow for one message once the primary decided it."""

    chat: ChatMessage
    policy: Policy  # the channel's, as the primary applied it
    model: str  # the primary's `name@version`
    ruling: Ruling  # the policy's, before the users' rules
    scores: Mapping[str, float]  # the primary model's (empty: decided without it)
    language: str | None  # the language the primary's gate named


class Compared(NamedTuple):
    """One message's pair of actions and what it is counted by."""

    primary: str
    shadow: str
    label: str
    language: str

    @property
    def agreed(self) -> bool:
        return self.primary == self.shadow


def _head(reason: str | None) -> str | None:
    """A reason without its detail (`unsupported_language:es`, `deny:<source>:<category>`)."""
    return reason.split(":", 1)[0] if reason else None


def compare(primary: Primary, shadow: Judged) -> Compared:
    """The two actions on one message, by label or reason and by language."""
    label = _head(primary.ruling.reason) or _head(shadow.ruling.reason) or NO_LABEL
    language = primary.language or shadow.language or UNNAMED_LANGUAGE
    return Compared(primary.ruling.action, shadow.ruling.action, label, language)


def _side(model: str, ruling: Ruling, scores: Mapping[str, float]) -> dict[str, Any]:
    top = max(scores.items(), key=lambda item: item[1]) if scores else None
    return {
        "model": model,
        "action": ruling.action,
        "reason": ruling.reason,
        "top": {"label": top[0], "score": round(top[1], 4)} if top is not None else None,
    }


def disagreement_record(
    primary: Primary, shadow: Judged, shadow_model: str, at_ms: int
) -> dict[str, Any]:
    """The shadow topic's record of a disagreement: the message's ids, both models' actions,
    reasons and top scores. No text and no user: a week of these holds ids and figures only."""
    compared = compare(primary, shadow)
    return {
        "message_id": primary.chat.message_id,
        "channel_id": primary.chat.channel_id,
        "policy": primary.policy.ident,
        "language": None if compared.language == UNNAMED_LANGUAGE else compared.language,
        "primary": _side(primary.model, primary.ruling, primary.scores),
        "shadow": _side(shadow_model, shadow.ruling, shadow.scores),
        "at_ms": at_ms,
    }
