"""Held messages across a Redis SIGKILL and restart: which were lost, by when they were held.

Pure bookkeeping over chaos/verdicts.py's `Outcomes`. A held message is lost when it got no
final decision, or its verdict was dead-lettered as not held (Redis forgot it). With
`appendfsync everysec`, Redis may lose the writes of the second before a crash (its fsync runs
once a second), so a message held in that second may be lost: it is counted apart. One held
earlier, or after the kill (kept in the moderator's process while Redis was away, then moved
there), must not be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chaos.verdicts import Outcomes

LAST_SECOND_MS = 1000.0  # appendfsync everysec: what a crash may take


@dataclass(frozen=True)
class Survival:
    """The held messages by when they were held (the review record's `held_at_ms`) against the
    kill, and the lost ones of each kind."""

    before: int  # held before the kill: in Redis when it died
    last_second: int  # of those, held in the second before it
    after: int  # held after it
    lost_last_second: tuple[str, ...]  # allowed: what everysec may lose
    lost_before: tuple[str, ...]  # held earlier than that: must be none
    lost_after: tuple[str, ...]  # must be none

    @property
    def lost_beyond_last_second(self) -> tuple[str, ...]:
        return self.lost_before + self.lost_after


def survival(
    held: Mapping[str, Mapping[str, Any]],
    out: Outcomes,
    kill_ms: float,
    window_ms: float = LAST_SECOND_MS,
) -> Survival:
    """Sort the held messages (`held`: message id → its review record) and the lost ones of
    `out` by when each was held: before `kill_ms - window_ms`, within the window, or after."""
    lost = set(out.missing) | set(out.not_held)
    before: list[str] = []
    last: list[str] = []
    after: list[str] = []
    for message_id, review in held.items():
        held_at_ms = float(review["held_at_ms"])
        if held_at_ms >= kill_ms:
            after.append(message_id)
        elif held_at_ms >= kill_ms - window_ms:
            last.append(message_id)
        else:
            before.append(message_id)

    def lost_of(ids: list[str]) -> tuple[str, ...]:
        return tuple(sorted(lost.intersection(ids)))

    return Survival(
        before=len(before) + len(last),
        last_second=len(last),
        after=len(after),
        lost_last_second=lost_of(last),
        lost_before=lost_of(before),
        lost_after=lost_of(after),
    )
