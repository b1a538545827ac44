"""What one scenario found: the common figures, named checks, extra figures and notes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from chaos.hostile import CaseOutcome
from chaos.ledger import Ledger


def now_ms() -> float:
    """Wall-clock milliseconds: the clock messages' `sent_at_ms` is stamped with."""
    return time.time() * 1000


@dataclass(frozen=True)
class Check:
    """One pass/fail condition of a scenario, with what was seen."""

    what: str
    ok: bool
    seen: str = ""


@dataclass
class ScenarioResult:
    """The outcome of one scenario. `passed` only when it ran and every check held."""

    key: str
    title: str
    fault: str
    sent: int = 0
    decided: int = 0
    lost: int = 0
    duplicated: int = 0
    first_s: float | None = None  # fault → first decision of a message sent after the fault
    settled_s: float | None = None  # fault → per-second p99 back within budget for good
    p99_ms: float | None = None  # whole run, first decisions, from the scheduled send time
    checks: list[Check] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    hostile: list[CaseOutcome] = field(default_factory=list)
    error: str | None = None
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, what: str, ok: bool, seen: object = "") -> bool:
        self.checks.append(Check(what, bool(ok), str(seen)))
        return bool(ok)

    def figure(self, name: str, value: object) -> None:
        self.figures.append((name, str(value)))

    def fill(
        self, ledger: Ledger, fault_ms: float | None, budget_ms: float, *, diverts: bool = False
    ) -> None:
        """The common figures, from everything the observer saw. Only a scenario whose broker
        refuses decisions (`diverts`) may see one dead-lettered as `publish_failed`."""
        self.sent = len(ledger.inputs)
        self.decided = ledger.decided
        self.lost = len(ledger.lost())
        self.duplicated = ledger.duplicates
        if ledger.finals:  # held messages' final decisions: their own count, never duplicates
            self.figure("final decisions", sum(ledger.finals.values()))
        self.p99_ms = ledger.p_ms(0.99)
        if fault_ms is not None:
            self.first_s = ledger.first_decision_after(fault_ms)
            self.settled_s = ledger.back_under_budget(fault_ms, budget_ms)
        diverted = len(ledger.diverted_inputs())
        self.check("no message lost", self.lost == 0 and self.sent > 0,
                   f"{self.lost} of {self.sent} without a decision"
                   + (f" or a publish_failed dead letter ({diverted} diverted)" if diverted
                      else ""))  # fmt: skip
        if not diverts:
            self.check("no decision diverted to the dead-letter topic", diverted == 0, diverted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key, "title": self.title, "fault": self.fault, "sent": self.sent,
            "decided": self.decided, "lost": self.lost, "duplicated": self.duplicated,
            "first_s": self.first_s, "settled_s": self.settled_s, "p99_ms": self.p99_ms,
            "passed": self.passed, "error": self.error, "wall_s": round(self.wall_s, 1),
            "checks": [{"what": c.what, "ok": c.ok, "seen": c.seen} for c in self.checks],
            "figures": dict(self.figures), "notes": self.notes,
            "hostile": [{"case": h.case.name, "sent": h.sent, "outcomes": h.outcomes,
                         "ok": h.ok} for h in self.hostile],
        }  # fmt: skip
