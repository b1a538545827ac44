"""What became of the held messages and of the verdicts a scripted moderator gave them.

Pure bookkeeping, no Kafka: the held messages (from the review records read), the verdicts the
broker acknowledged (devstack/reviewer.py), every final decision by kind (chaos/ledger.py) and
the dead letters. What each held message should end with: its first verdict, as
`(verdict, "verdict:<moderator_id>")`, else its policy's fallback after its timeout,
`(review_fallback, "review_timeout")`. A final decision read again is a repeat (a verdict or a
timeout redone after a crash), allowed; a second kind for one message is not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devstack.reviewer import Sent

NOT_HELD = "verdict_not_held"  # moderator/review/verdicts.py's code
TIMEOUT_REASON = "review_timeout"

Kind = tuple[str, str | None]  # a final decision's (action, reason)


def expected(review: Mapping[str, Any], first: Sent | None) -> Kind:
    """The final decision a held message should get."""
    if first is not None:
        return first.verdict, f"verdict:{first.moderator_id}"
    return str(review.get("review_fallback")), TIMEOUT_REASON


@dataclass
class Outcomes:
    """The held messages sorted by what their final decisions were, and the counts."""

    held: int = 0
    verdicts_first: int = 0
    verdicts_late: int = 0
    applied: int = 0  # held messages ended by their first verdict
    timed_out: int = 0  # held messages without a verdict, ended by their fallback
    finals: int = 0  # final decision records of held messages
    repeats: int = 0  # of those, beyond the first per message
    latencies_ms: list[float] = field(default_factory=list)  # verdict acked → final read
    missing: list[str] = field(default_factory=list)  # held, no final decision
    mixed: list[str] = field(default_factory=list)  # more than one kind of final decision
    wrong_verdict: list[str] = field(default_factory=list)  # not its first verdict's
    wrong_timeout: list[str] = field(default_factory=list)  # not its fallback's
    not_held: list[str] = field(default_factory=list)  # a verdict dead-lettered as not held
    unheld_finals: list[str] = field(default_factory=list)  # a final decision, never held


def account(
    held: Mapping[str, Mapping[str, Any]],
    sent: Sequence[Sent],
    final_kinds: Mapping[str, Counter[Kind]],
    final_first_ms: Mapping[str, float],
    dead: Mapping[bytes, str],
) -> Outcomes:
    """Sort every held message (`held`: message id → its review record) by its final decisions
    (`final_kinds`, first read at `final_first_ms`), given the verdicts `sent` and the dead
    letters (`dead`: key → code; a verdict's key is its message id)."""
    out = Outcomes(held=len(held))
    firsts = {s.message_id: s for s in sent if s.first}
    out.verdicts_first = len(firsts)
    out.verdicts_late = sum(1 for s in sent if not s.first)
    for message_id, review in held.items():
        kinds = final_kinds.get(message_id)
        first = firsts.get(message_id)
        if not kinds:
            out.missing.append(message_id)
            continue
        out.finals += sum(kinds.values())
        out.repeats += sum(kinds.values()) - 1
        if len(kinds) > 1:
            out.mixed.append(message_id)
        if set(kinds) != {expected(review, first)}:
            (out.wrong_verdict if first is not None else out.wrong_timeout).append(message_id)
        elif first is not None:
            out.applied += 1
            out.latencies_ms.append(max(0.0, final_first_ms[message_id] - first.acked_ms))
        else:
            out.timed_out += 1
        if dead.get(message_id.encode()) == NOT_HELD:
            out.not_held.append(message_id)
    out.unheld_finals = sorted(set(final_kinds) - set(held))
    out.latencies_ms.sort()
    return out
