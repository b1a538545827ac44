"""One fetched batch of records → one outcome per record (a decision or a dead letter).

Parse and validate, find the channel's policy and its deny terms (a match decides without the
model), normalise and tokenize, look verdicts up in the cache, score the misses (identical texts
in one batch are scored once), apply the policy, encode the decision. No Kafka
here: the service feeds records in and publishes the outcomes in the same order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from moderator.batcher import BatchScorer, Scored
from moderator.cache import VerdictCache, cache_key
from moderator.classifier import Classifier, Scores, TokenIds
from moderator.degrade import Fallback
from moderator.errors import InvalidRecord
from moderator.metrics import Metrics
from moderator.policies import PolicyBook
from moderator.policy import EMPTY_TEXT, Policy, Verdict
from moderator.records import (
    OWN_HEADER_PREFIX,
    ChatMessage,
    Timing,
    dlq_headers,
    encode_decision,
    parse_message,
)


class InboundRecord(Protocol):
    """The fields of an aiokafka `ConsumerRecord` the pipeline reads."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class Outcome(NamedTuple):
    """What to publish for one inbound record."""

    dead_letter: bool
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    label: str  # the action, or the dead-letter reason code, for metrics


@dataclass(eq=False, slots=True)
class _Message:
    """One valid message on its way through look up → score → decide."""

    record: InboundRecord
    chat: ChatMessage
    policy: Policy  # the channel's
    ids: TokenIds | None = None  # its token ids, when there is something to score
    key: bytes = b""  # its verdict cache key
    scores: Scores | None = None  # from the cache
    scoring: asyncio.Future[Scored] | None = None  # the model call it waits for
    owner: bool = False  # it started that call (else it joined one already under way)
    outcome: Outcome | None = None  # its decision, once decided

    @property
    def decided(self) -> Outcome:
        assert self.outcome is not None, "every message is decided before process() returns"
        return self.outcome


class Pipeline:
    """Turns inbound records into outcomes; shares the classifier, cache and scorer."""

    def __init__(
        self,
        classifier: Classifier,
        policies: Policy | PolicyBook,
        scorer: BatchScorer,
        cache: VerdictCache,
        metrics: Metrics,
        *,
        max_record_bytes: int,
        budget_ms: float,
        fallback: Fallback | None = None,
    ) -> None:
        self.classifier = classifier
        self.policies = policies if isinstance(policies, PolicyBook) else PolicyBook(policies)
        self.scorer = scorer
        self.cache = cache
        self.metrics = metrics
        self.max_record_bytes = max_record_bytes
        self.budget_ms = budget_ms
        self.fallback = fallback
        self.model_ident = classifier.info.ident
        self.model_sha256 = classifier.info.sha256  # what the cache keys on
        self._scoring: dict[bytes, asyncio.Future[Scored]] = {}

    def _scored(self, key: bytes, future: asyncio.Future[Scored]) -> None:
        """A model result landed: cache it (once per scoring) and end its single flight."""
        self._scoring.pop(key, None)
        if not future.cancelled() and future.exception() is None:
            self.cache.put_many([(key, future.result().scores)])

    async def process(self, records: Sequence[InboundRecord]) -> list[Outcome]:
        """Outcomes for `records`, in the same order."""
        fetched = time.perf_counter()
        slots: list[Outcome | _Message] = []
        for record in records:  # validate
            try:
                chat = parse_message(
                    record.value, timestamp_ms=record.timestamp, max_bytes=self.max_record_bytes
                )
            except InvalidRecord as err:
                slots.append(dead_letter(record, err))
                continue
            slots.append(_Message(record, chat, self.policies.for_channel(chat.channel_id)))
        messages = []
        for m in slots:
            if not isinstance(m, _Message):
                continue
            text = m.policy.without_allowed(m.chat.text)
            if (denied := m.policy.deny_verdict(text)) is not None:
                m.outcome = self._decide(m, fetched, denied)
            else:
                messages.append((m, text))

        encoded = self.classifier.encode([text for _, text in messages])
        for (m, _), ids in zip(messages, encoded, strict=True):
            if self.classifier.has_content(ids):
                m.ids, m.key = ids, cache_key(self.model_sha256, ids)
            else:  # empty after normalisation: allow
                m.outcome = self._decide(m, fetched, EMPTY_TEXT)

        scorable = [m for m, _ in messages if m.outcome is None]
        hits = await self.cache.get_many([m.key for m in scorable])  # look up
        late_before_ms = int(time.time() * 1000) - self.budget_ms
        for m, (scores, _level) in zip(scorable, hits, strict=True):
            if scores is not None:
                m.scores = scores
            elif self.fallback is not None and m.chat.sent_at_ms < late_before_ms:
                verdict = self.fallback.decide(m.chat.text)
                m.outcome = self._decide(m, fetched, verdict, degraded=True)
            else:
                self._score(m)

        pending = {id(m.scoring): m.scoring for m in scorable if m.scoring is not None}
        if pending:
            await asyncio.gather(*pending.values())
        for m in scorable:  # decide
            if m.outcome is not None:  # degraded
                continue
            if m.scoring is None or not m.owner:  # from the cache, or another's model call
                scores = m.scores if m.scoring is None else m.scoring.result().scores
                assert scores is not None
                m.outcome = self._decide_scores(m, fetched, scores, cached=True)
                continue
            s = m.scoring.result()
            self.metrics.stage_seconds.labels("queue").observe(s.queued_s)
            self.metrics.stage_seconds.labels("score").observe(s.score_s)
            m.outcome = self._decide_scores(
                m, fetched, s.scores, cached=False, score_s=s.score_s, queued_s=s.queued_s
            )
        return [slot if isinstance(slot, Outcome) else slot.decided for slot in slots]

    def _score(self, m: _Message) -> None:
        """Send `m` to the model, or, single flight, join the call already scoring its text (from
        this batch or an earlier one): that message then counts as cached."""
        future = self._scoring.get(m.key)
        m.owner = future is None
        if future is None:
            assert m.ids is not None
            future = self.scorer.score(m.ids)
            self._scoring[m.key] = future
            future.add_done_callback(functools.partial(self._scored, m.key))
        else:
            self.metrics.cache_requests.labels("inflight", "hit").inc()
        m.scoring = future

    def _decide_scores(
        self,
        m: _Message,
        fetched: float,
        scores: Scores,
        *,
        cached: bool,
        score_s: float = 0.0,
        queued_s: float | None = None,
    ) -> Outcome:
        """The policy's decision on `scores`."""
        named = self.classifier.as_dict(scores)
        verdict = m.policy.decide(named)
        return self._decide(m, fetched, verdict, named, cached=cached, score_s=score_s,
                            queued_s=queued_s)  # fmt: skip

    def _decide(
        self,
        m: _Message,
        fetched: float,
        verdict: Verdict,
        scores: dict[str, float] | None = None,
        *,
        cached: bool = False,
        degraded: bool = False,
        score_s: float = 0.0,
        queued_s: float | None = None,
    ) -> Outcome:
        """The encoded decision for `m`, timed now."""
        msg = m.chat
        total_s = time.perf_counter() - fetched
        if queued_s is None:
            queued_s = total_s - score_s
        decided_at_ms = int(time.time() * 1000)
        over_budget = decided_at_ms - msg.sent_at_ms > self.budget_ms
        value = encode_decision(
            msg,
            action=verdict.action,
            reason=verdict.reason,
            severity=verdict.severity,
            scores=scores or {},
            model=self.model_ident,
            policy=m.policy.ident,
            cached=cached,
            degraded=degraded,
            timing=Timing(queued_s * 1000, score_s * 1000, total_s * 1000),
            decided_at_ms=decided_at_ms,
            over_budget=over_budget,
        )
        self.metrics.end_to_end.observe(max(decided_at_ms - msg.sent_at_ms, 0) / 1000)
        if over_budget:
            self.metrics.over_budget.inc()
        if degraded:
            self.metrics.degraded.labels(verdict.action).inc()
        self.metrics.stage_seconds.labels("total").observe(total_s)
        key = m.record.key
        if key is None:  # keep one channel's decisions together even for unkeyed input
            key = msg.channel_id.encode()
        return Outcome(False, key, value, carried_headers(m.record), verdict.action)


def dead_letter(record: InboundRecord, err: InvalidRecord) -> Outcome:
    """`record` for the dead-letter topic: its key and value untouched, `err` and its source in
    headers (also the shape of a decision the broker refused, moderator/refusal.py)."""
    headers = dlq_headers(
        err,
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp_ms=record.timestamp,
    )
    return Outcome(True, record.key, record.value, headers + carried_headers(record), err.code)


def carried_headers(record: InboundRecord) -> list[tuple[str, bytes]]:
    """The producer's headers (a `traceparent`, a tenant id), to travel on with the decision or
    dead letter; any named `moderator.*` are dropped, so the moderator's own always win."""
    return [
        (name, value)
        for name, value in record.headers or ()
        if not name.startswith(OWN_HEADER_PREFIX)
    ]
