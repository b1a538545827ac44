"""Matching decisions and dead letters back to the messages sent.

Pure bookkeeping, no Kafka: the runner feeds it what it sends and what it receives, with times from
one monotonic clock, and it counts decided, missing, duplicate and foreign decisions, dead letters,
and the latency of each decision from its message's scheduled send time.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

import orjson
from hdrh.histogram import HdrHistogram

from loadgen.decisions import read_decision
from loadgen.stats import new_histogram, record_s
from loadgen.traffic import Kind

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    due_s: float  # scheduled send time on the monotonic clock
    offset_s: float  # scheduled send time from the start of the run
    kind: Kind


@dataclass
class DecisionTracker:
    """Counts and latencies of one run. All times are `time.monotonic()` seconds."""

    run_id: str
    latency: HdrHistogram = field(default_factory=new_histogram)
    interval: HdrHistogram = field(default_factory=new_histogram)  # reset by the progress line
    server_total: HdrHistogram = field(default_factory=new_histogram)  # decision's latency_ms.total
    per_second: dict[int, HdrHistogram] = field(default_factory=dict)  # by scheduled second
    sent: int = 0
    malformed_sent: int = 0
    send_errors: int = 0
    decided: int = 0
    duplicates: int = 0
    finals: int = 0  # final decisions of held messages (after a verdict or a timeout)
    foreign: int = 0
    bad_decisions: int = 0
    cached: int = 0
    degraded: int = 0
    dead_letters: int = 0
    dead_letters_unmatched: int = 0
    valid_dead_lettered: int = 0
    malformed_decided: int = 0
    first_decision_s: float | None = None
    last_decision_s: float | None = None
    actions: Counter[str] = field(default_factory=Counter)
    actions_by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _done: set[str] = field(default_factory=set)
    _malformed_pending: set[str] = field(default_factory=set)
    _malformed_done: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        run = re.escape(self.run_id.encode())
        self._bad_id = re.compile(run + rb"-bad-\d+")
        self._good_id = re.compile(run + rb"-\d+")

    # -- what was sent ---------------------------------------------------------------------------

    def on_scheduled(self, message_id: str, kind: Kind, due_s: float, offset_s: float) -> None:
        """Register a message before it is handed to the producer (its decision may come fast)."""
        if kind is Kind.MALFORMED:
            self.malformed_sent += 1
            self._malformed_pending.add(message_id)
        else:
            self.sent += 1
            self._pending[message_id] = _Pending(due_s, offset_s, kind)

    def on_send_error(self, message_id: str, error: BaseException) -> None:
        """The broker did not take the message: it can never be decided, so it is not `missing`."""
        self.send_errors += 1
        if self._pending.pop(message_id, None) is None:
            self._malformed_pending.discard(message_id)
        if self.send_errors <= 5:
            log.warning("send of %s failed: %r", message_id, error)

    # -- what came back --------------------------------------------------------------------------

    def on_decision(self, value: bytes | None, now_s: float) -> None:
        """One record from the decisions topic, received at `now_s`."""
        decision = read_decision(value)
        if decision is None:
            self.bad_decisions += 1
            return
        if decision.final:  # at most one more per held message: counted apart
            self.finals += 1
            return
        message_id = decision.message_id
        pending = self._pending.pop(message_id, None)
        if pending is None:
            if message_id in self._done or message_id in self._malformed_done:
                self.duplicates += 1
            elif message_id in self._malformed_pending:
                self._malformed_pending.discard(message_id)
                self._malformed_done.add(message_id)
                self.malformed_decided += 1
            else:
                self.foreign += 1
            return
        self._done.add(message_id)
        latency_s = now_s - pending.due_s
        record_s(self.latency, latency_s)
        record_s(self.interval, latency_s)
        second = int(pending.offset_s)
        histogram = self.per_second.get(second)
        if histogram is None:
            histogram = self.per_second[second] = new_histogram()
        record_s(histogram, latency_s)
        self.decided += 1
        if self.first_decision_s is None:
            self.first_decision_s = now_s
        self.last_decision_s = now_s
        action = decision.action
        self.actions[action] += 1
        self.actions_by_kind.setdefault(pending.kind.value, Counter())[action] += 1
        self.cached += decision.cached
        self.degraded += decision.degraded
        if decision.total_ms is not None:
            record_s(self.server_total, decision.total_ms / 1000.0)

    def on_dead_letter(self, key: bytes | None, value: bytes | None) -> None:
        """One record from the dead-letter topic: matched to a malformed record by its id.

        The id is looked for in the key (kept untouched), then in the value as sent, then inside
        base64 strings of a JSON envelope. A dead letter that names none of this run's ids is
        counted as `dead_letters_unmatched` (another run's, or an envelope that hides the id).
        """
        for candidate in _id_sources(key, value):
            bad = self._bad_id.search(candidate)
            if bad is not None:
                bad_id = bad.group(0).decode()
                if bad_id in self._malformed_done:
                    self.duplicates += 1
                elif bad_id in self._malformed_pending:
                    self._malformed_pending.discard(bad_id)
                    self._malformed_done.add(bad_id)
                    self.dead_letters += 1
                else:
                    self.dead_letters_unmatched += 1
                return
            good = self._good_id.search(candidate)
            if good is not None and self._pending.pop(good.group(0).decode(), None) is not None:
                # A valid message dead-lettered never gets a decision: it counts as missing too.
                self.valid_dead_lettered += 1
                return
        self.dead_letters_unmatched += 1

    # -- where things stand ----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Valid messages sent but not decided yet."""
        return len(self._pending)

    @property
    def malformed_outstanding(self) -> int:
        """Malformed records neither dead-lettered nor decided yet."""
        return len(self._malformed_pending)

    @property
    def missing(self) -> int:
        """Valid messages without a decision: still in flight, or dead-lettered."""
        return self.in_flight + self.valid_dead_lettered

    @property
    def outstanding(self) -> int:
        return self.in_flight + self.malformed_outstanding

    def missing_offsets_s(self) -> list[float]:
        """Scheduled offsets of the messages still without a decision (for the report)."""
        return sorted(p.offset_s for p in self._pending.values())


def _id_sources(key: bytes | None, value: bytes | None) -> list[bytes]:
    sources = [key or b"", value or b""]
    try:
        envelope = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return sources
    if isinstance(envelope, dict):
        for field_value in envelope.values():
            if isinstance(field_value, str) and len(field_value) >= 8:
                try:
                    sources.append(base64.b64decode(field_value, validate=True))
                except (binascii.Error, ValueError):
                    continue
    return sources
