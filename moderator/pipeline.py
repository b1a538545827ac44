"""One fetched batch of records → one outcome per record (a decision or a dead letter).

Parse and validate, normalise and tokenize, look verdicts up in the cache, score the misses
(identical texts in one batch are scored once), apply the policy, encode the decision. No Kafka
here: the service feeds records in and publishes the outcomes in the same order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from moderator.batcher import BatchScorer, Scored
from moderator.cache import VerdictCache, cache_key
from moderator.classifier import Classifier, Scores
from moderator.degrade import Fallback
from moderator.errors import InvalidRecord
from moderator.metrics import Metrics
from moderator.policy import EMPTY_TEXT, Policy, Verdict
from moderator.records import ChatMessage, Timing, dlq_headers, encode_decision, parse_message


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


class Outcome(NamedTuple):
    """What to publish for one inbound record."""

    dead_letter: bool
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    label: str  # the action, or the dead-letter reason code, for metrics


class Pipeline:
    """Turns inbound records into outcomes; shares the classifier, cache and scorer."""

    def __init__(
        self,
        classifier: Classifier,
        policy: Policy,
        scorer: BatchScorer,
        cache: VerdictCache,
        metrics: Metrics,
        *,
        max_record_bytes: int,
        budget_ms: float,
        fallback: Fallback | None = None,
    ) -> None:
        self.classifier = classifier
        self.policy = policy
        self.scorer = scorer
        self.cache = cache
        self.metrics = metrics
        self.max_record_bytes = max_record_bytes
        self.budget_ms = budget_ms
        self.fallback = fallback
        self.model_ident = classifier.info.ident
        self._scoring: dict[bytes, asyncio.Future[Scored]] = {}

    def _scored(self, key: bytes, future: asyncio.Future[Scored]) -> None:
        """A model result landed: cache it (once per scoring) and end its single flight."""
        self._scoring.pop(key, None)
        if not future.cancelled() and future.exception() is None:
            self.cache.put_many([(key, future.result().scores)])

    async def process(self, records: Sequence[InboundRecord]) -> list[Outcome]:
        """Outcomes for `records`, in the same order."""
        fetched = time.perf_counter()
        outcomes: list[Outcome | None] = [None] * len(records)
        valid: list[tuple[int, ChatMessage]] = []
        for i, record in enumerate(records):
            try:
                msg = parse_message(
                    record.value, timestamp_ms=record.timestamp, max_bytes=self.max_record_bytes
                )
            except InvalidRecord as err:
                outcomes[i] = dead_letter(record, err)
                continue
            valid.append((i, msg))

        encoded = self.classifier.encode([msg.text for _, msg in valid])
        to_score: list[tuple[int, ChatMessage, bytes]] = []
        keys = []
        for (i, msg), ids in zip(valid, encoded, strict=True):
            if not self.classifier.has_content(ids):  # empty after normalisation: allow
                outcomes[i] = self._decide(
                    records[i].key, msg, None, fetched, cached=False, score_s=0.0
                )
                continue
            key = cache_key(self.model_ident, ids)
            to_score.append((i, msg, key))
            keys.append((key, ids))

        hits = await self.cache.get_many([key for key, _ in keys])
        # Single flight: a text already on its way to the model (from this batch or an earlier
        # one) is scored once; the other messages wait for that result and count as cached.
        waits: list[tuple[asyncio.Future[Scored], bool] | None] = []
        late_before_ms = int(time.time() * 1000) - self.budget_ms
        for (key, ids), (scores, _level), (i, msg, _) in zip(keys, hits, to_score, strict=True):
            if scores is not None:
                waits.append(None)
                continue
            if self.fallback is not None and msg.sent_at_ms < late_before_ms:
                outcomes[i] = self._decide(
                    records[i].key, msg, None, fetched, cached=False, score_s=0.0,
                    verdict=self.fallback.decide(msg.text),
                )  # fmt: skip
                waits.append(None)
                continue
            future = self._scoring.get(key)
            owner = future is None
            if future is None:
                future = self.scorer.score(ids)
                self._scoring[key] = future
                future.add_done_callback(functools.partial(self._scored, key))
            else:
                self.metrics.cache_requests.labels("inflight", "hit").inc()
            waits.append((future, owner))
        pending = {id(w[0]): w[0] for w in waits if w is not None}
        if pending:
            await asyncio.gather(*pending.values())
        for (i, msg, _key), (scores, _level), wait in zip(to_score, hits, waits, strict=True):
            if outcomes[i] is not None:  # degraded
                continue
            if wait is None or not wait[1]:
                row = scores if wait is None else wait[0].result().scores
                outcomes[i] = self._decide(
                    records[i].key, msg, row, fetched, cached=True, score_s=0.0
                )
                continue
            s = wait[0].result()
            self.metrics.stage_seconds.labels("queue").observe(s.queued_s)
            self.metrics.stage_seconds.labels("score").observe(s.score_s)
            outcomes[i] = self._decide(
                records[i].key,
                msg,
                s.scores,
                fetched,
                cached=False,
                score_s=s.score_s,
                queued_s=s.queued_s,
            )
        return [o for o in outcomes if o is not None]

    def _decide(
        self,
        key: bytes | None,
        msg: ChatMessage,
        scores: Scores | None,
        fetched: float,
        *,
        cached: bool,
        score_s: float,
        queued_s: float | None = None,
        verdict: Verdict | None = None,
    ) -> Outcome:
        """The decision for `msg`: from `verdict` when degraded, else the policy on `scores`."""
        named = self.classifier.as_dict(scores) if scores is not None else {}
        if verdict is not None:
            action, reason = verdict
        elif scores is not None:
            action, reason = self.policy.decide(named)
        else:
            action, reason = EMPTY_TEXT
        total_s = time.perf_counter() - fetched
        if queued_s is None:
            queued_s = total_s - score_s
        decided_at_ms = int(time.time() * 1000)
        over_budget = decided_at_ms - msg.sent_at_ms > self.budget_ms
        value = encode_decision(
            msg,
            action=action,
            reason=reason,
            scores=named,
            model=self.model_ident,
            policy=self.policy.ident,
            cached=cached,
            degraded=verdict is not None,
            timing=Timing(queued_s * 1000, score_s * 1000, total_s * 1000),
            decided_at_ms=decided_at_ms,
            over_budget=over_budget,
        )
        if over_budget:
            self.metrics.over_budget.inc()
        if verdict is not None:
            self.metrics.degraded.labels(action).inc()
        self.metrics.stage_seconds.labels("total").observe(total_s)
        if key is None:  # keep one channel's decisions together even for unkeyed input
            key = msg.channel_id.encode()
        return Outcome(False, key, value, [], action)


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
    return Outcome(True, record.key, record.value, headers, err.code)
