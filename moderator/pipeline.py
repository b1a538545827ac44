"""One fetched batch of records → one outcome per record (a decision or a dead letter).

Parse and validate, find the channel's policy, let the users' rules decide the messages of
muted, flooding or spamming users and refused links (moderator/users/escalation.py), then
moderators' overrides of the same text (moderator/review/overrides.py), screen each text (its deny
terms or empty text decide without the model, a long text is cut into windows, the language gate
names a language the model does not read; moderator/decide/screen.py, shared with
`moderator score`), look the scores of the rest up in the cache, send the misses to the model (each
window a row of the micro-batcher, gathered; identical texts are scored once), apply the policy,
count strikes and move an action up past the policy's limit (the users' rules again), encode the
decision, hold each `review` decision with its channel's context (moderator/review/hold.py), and
offer what the model read to the shadow model, if any (moderator/shadow/). No Kafka here: the
service feeds records in and publishes the outcomes in the same order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from moderator.decide.batcher import MicroBatcher, ModelResult, gathered
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier, Scores
from moderator.decide.degrade import Fallback
from moderator.decide.screen import Judged, Reader, Screened, judge, screen
from moderator.decide.text import Text
from moderator.errors import InvalidRecord
from moderator.metric_wings import DecideMetrics
from moderator.policy.channels import PolicyBook
from moderator.policy.rules import Policy, Ruling
from moderator.records import (
    ChatMessage,
    InboundRecord,
    Outcome,
    Timing,
    carried_headers,
    dead_letter,
    decision_record,
    parse_message,
)
from moderator.review.hold import Review
from moderator.review.overrides import REASON as OVERRIDE_REASON
from moderator.review.overrides import Overrides
from moderator.shadow.agreement import Primary
from moderator.shadow.scorer import Shadow
from moderator.turns import Turn
from moderator.users.escalation import Escalated, Escalation, UserTurns


class _Decision(NamedTuple):
    """A message's ruling and the rest of its record, encoded once the batch is decided (the
    users' rules may still move the action up and count the strike)."""

    ruling: Ruling
    fields: dict[str, Any]  # decision_record's other arguments


@dataclass(eq=False, slots=True)
class _Message:
    """One valid message on its way through screen → look up → score → decide."""

    record: InboundRecord
    chat: ChatMessage
    text: Text  # its text, made once: every step reads its forms from it
    policy: Policy  # the channel's
    screened: Screened | None = None  # its windows, when the model must score it
    key: bytes = b""  # its score cache key
    scores: Scores | None = None  # from the cache (one row, or a row per window)
    model_call: asyncio.Future[ModelResult] | None = None  # the model call it waits for
    owner: bool = False  # it started that call (else it joined one already under way)
    decision: _Decision | None = None  # once decided


class Pipeline:
    """Turns inbound records into outcomes; shares the classifier, cache and batcher."""

    def __init__(
        self,
        classifier: Classifier,
        policies: Policy | PolicyBook,
        batcher: MicroBatcher,
        cache: ScoreCache,
        metrics: DecideMetrics,
        *,
        max_record_bytes: int,
        budget_ms: float,
        fallback: Fallback | None = None,
        reader: Reader | None = None,
        review: Review | None = None,
        overrides: Overrides | None = None,
        users: Escalation | None = None,
        shadow: Shadow | None = None,
    ) -> None:
        self.classifier = classifier
        self.reader = reader if reader is not None else Reader(classifier)
        if (gate := self.reader.gate) is not None:  # every language it can name, at 0
            for code in gate.candidates:
                if code not in gate.supported:
                    metrics.unsupported_language[code]  # bound, its series at 0
        self.policies = policies if isinstance(policies, PolicyBook) else PolicyBook(policies)
        self.batcher = batcher
        self.cache = cache
        self.metrics = metrics
        self.max_record_bytes = max_record_bytes
        self.budget_ms = budget_ms
        self.fallback = fallback
        self.review = review  # after deciding: context rings, held messages, review records
        self.overrides = overrides
        self.users = users  # moderator/users/escalation.py: strikes, mute, flood, repeats, links
        self.shadow = shadow  # moderator/shadow/: a second model, handed what the primary decided
        self.model_ident = classifier.info.ident
        self.model_sha256 = classifier.info.sha256  # what the cache keys on
        self._model_calls: dict[bytes, asyncio.Future[ModelResult]] = {}  # by cache key

    def _model_call_done(self, key: bytes, future: asyncio.Future[ModelResult]) -> None:
        """A model result landed: cache it (once per model call) and end its single flight."""
        self._model_calls.pop(key, None)
        if not future.cancelled() and future.exception() is None:
            self.cache.put_many([(key, future.result().scores)])

    async def process(self, records: Sequence[InboundRecord]) -> list[Outcome]:
        """Outcomes for `records`, in the same order. Batches run concurrently; their users'
        and review steps in the order they started (moderator/turns.py)."""
        turn = self.review.turn() if self.review is not None else None
        user_turns = self.users.turn() if self.users is not None else None
        try:
            return await self._process(records, turn, user_turns)
        finally:  # a batch that failed before a step lets the next go
            if turn is not None:
                turn.finish()
            if user_turns is not None:
                user_turns.finish()

    async def _process(
        self, records: Sequence[InboundRecord], turn: Turn | None, user_turns: UserTurns | None
    ) -> list[Outcome]:
        fetched = time.perf_counter()
        slots = [self._parse(record) for record in records]
        messages = [m for m in slots if isinstance(m, _Message)]
        undecided = await self._without_model(messages, fetched, user_turns)
        await self._score(self._screen(undecided, fetched), fetched)
        ordered = iter(await self._outcomes(messages, turn, user_turns))
        if self.shadow is not None:  # decided: queued for the shadow, never awaited
            read = [m for m in undecided if not _decided(m).fields["degraded"]]
            self.shadow.offer([_primary(m) for m in read])
        return [slot if isinstance(slot, Outcome) else next(ordered) for slot in slots]

    def _parse(self, record: InboundRecord) -> Outcome | _Message:
        """The message, its text made once and its channel's policy; or, invalid, a dead letter."""
        try:
            chat = parse_message(
                record.value, timestamp_ms=record.timestamp, max_bytes=self.max_record_bytes
            )
        except InvalidRecord as err:
            return dead_letter(record, err)
        return _Message(record, chat, Text(chat.text), self.policies.for_channel(chat.channel_id))

    async def _without_model(
        self, messages: list[_Message], fetched: float, user_turns: UserTurns | None
    ) -> list[_Message]:
        """Decide what the users' rules and the overrides decide; the rest, still undecided."""
        if self.users is not None:  # muted, flooding, spamming or linking
            items, texts = [(m.chat, m.policy) for m in messages], [m.text for m in messages]
            early = await self.users.before(items, user_turns.before if user_turns else None, texts)
            for m, ruling in zip(messages, early, strict=True):
                if ruling is not None:
                    m.decision = self._decide(m, fetched, _unscored(m, ruling))
        left = [m for m in messages if m.decision is None]
        if self.overrides is not None:  # a moderator's verdict on the same text
            actions = self.overrides.decide([m.chat for m in left], [m.text for m in left])
            for m, action in zip(left, actions, strict=True):
                if action is not None:
                    judged = _unscored(m, Ruling(action, OVERRIDE_REASON))
                    m.decision = self._decide(m, fetched, judged)
            left = [m for m in left if m.decision is None]
        return left

    def _screen(self, undecided: list[_Message], fetched: float) -> list[_Message]:
        """Decide what a deny term or an empty text decides; the rest to look up, with its keys."""
        screened = screen(self.reader, [(m.policy, m.text) for m in undecided])
        for m, text in zip(undecided, screened, strict=True):
            if text.ruling is not None:
                m.decision = self._decide(m, fetched, judge(self.reader, m.policy, text, None))
            else:
                m.screened, m.key = text, text.key(self.model_sha256, self.reader)
                self.metrics.message_windows.observe(len(text.rows))
        return [m for m in undecided if m.decision is None]

    async def _score(self, lookups: list[_Message], fetched: float) -> None:
        """Scores from the cache, else the model (a late miss: the fallback's ruling); decided."""
        hits = await self.cache.get_many([m.key for m in lookups])
        late_before_ms = int(time.time() * 1000) - self.budget_ms
        for m, scores in zip(lookups, hits, strict=True):
            if scores is not None:
                m.scores = scores
            elif self.fallback is not None and m.chat.sent_at_ms < late_before_ms:
                judged = _unscored(m, self.fallback.decide(m.text))
                m.decision = self._decide(m, fetched, judged, degraded=True)
            else:
                self._submit(m)
        calls = {id(m.model_call): m.model_call for m in lookups if m.model_call is not None}
        if calls:
            await asyncio.gather(*calls.values())
        for m in lookups:
            if m.decision is not None:  # degraded
                continue
            if m.model_call is None or not m.owner:  # from the cache, or another's model call
                scores = m.scores if m.model_call is None else m.model_call.result().scores
                assert scores is not None
                m.decision = self._decide_on_scores(m, fetched, scores, cached=True)
                continue
            s = m.model_call.result()
            self.metrics.stage_queue.observe(s.queued_s)
            self.metrics.stage_score.observe(s.score_s)
            m.decision = self._decide_on_scores(
                m, fetched, s.scores, cached=False, score_s=s.score_s, queued_s=s.queued_s
            )

    async def _outcomes(
        self, messages: list[_Message], turn: Turn | None, user_turns: UserTurns | None
    ) -> list[Outcome]:
        """The decisions, strikes counted (an action up past the limit), review decisions held."""
        decided = [(m.chat, m.policy, _decided(m).ruling) for m in messages]
        if self.users is not None:
            users = await self.users.after(decided, user_turns.after if user_turns else None)
        else:
            users = [Escalated(ruling.action, 0, False) for _, _, ruling in decided]
        outcomes = [_outcome(m, u) for m, u in zip(messages, users, strict=True)]
        if self.review is not None and messages:
            held = [(m.chat, m.policy, o) for m, o in zip(messages, outcomes, strict=True)]
            outcomes = await self.review.after_decisions(held, turn)
        return outcomes

    def _submit(self, m: _Message) -> None:
        """Send `m` to the model, or, single flight, join the call already scoring its text (from
        this batch or an earlier one): that message then counts as cached."""
        future = self._model_calls.get(m.key)
        m.owner = future is None
        if future is None:
            assert m.screened is not None
            rows = m.screened.rows
            if len(rows) == 1:
                future = self.batcher.submit(rows[0])
            else:  # each window a row of the batcher, gathered into one result
                future = asyncio.ensure_future(gathered([self.batcher.submit(r) for r in rows]))
            self._model_calls[m.key] = future
            future.add_done_callback(functools.partial(self._model_call_done, m.key))
        else:
            self.metrics.inflight_hit.inc()
        m.model_call = future

    def _decide_on_scores(
        self,
        m: _Message,
        fetched: float,
        scores: Scores,
        *,
        cached: bool,
        score_s: float = 0.0,
        queued_s: float | None = None,
    ) -> _Decision:
        """The policy's decision on `scores` (one row, or a row per window)."""
        assert m.screened is not None
        judged = judge(self.reader, m.policy, m.screened, scores)
        if judged.truncated:
            self.metrics.truncated.inc()
        if judged.language is not None:
            self.metrics.unsupported_language[judged.language].inc()
        return self._decide(m, fetched, judged, cached=cached, score_s=score_s, queued_s=queued_s)

    def _decide(
        self,
        m: _Message,
        fetched: float,
        judged: Judged,
        *,
        cached: bool = False,
        degraded: bool = False,
        score_s: float = 0.0,
        queued_s: float | None = None,
    ) -> _Decision:
        """The decision for `m`, timed now."""
        msg = m.chat
        total_s = time.perf_counter() - fetched
        if queued_s is None:
            queued_s = total_s - score_s
        decided_at_ms = int(time.time() * 1000)
        over_budget = decided_at_ms - msg.sent_at_ms > self.budget_ms
        ruling = judged.ruling
        fields: dict[str, Any] = dict(
            scores=judged.scores,
            model=self.model_ident,
            policy=m.policy.ident,
            cached=cached,
            degraded=degraded,
            timing=Timing(queued_s * 1000, score_s * 1000, total_s * 1000),
            decided_at_ms=decided_at_ms,
            over_budget=over_budget,
            span=judged.span,
            truncated=judged.truncated,
            language=judged.language,
        )
        self.metrics.end_to_end.observe(max(decided_at_ms - msg.sent_at_ms, 0) / 1000)
        if over_budget:
            self.metrics.over_budget.inc()
        if degraded:
            self.metrics.degraded[ruling.action].inc()
        self.metrics.stage_total.observe(total_s)
        return _Decision(ruling, fields)


def _unscored(m: _Message, ruling: Ruling) -> Judged:
    """A ruling made without the model: no scores, the whole text its span."""
    return Judged(ruling, {}, (0, len(m.chat.text)))


def _decided(m: _Message) -> _Decision:
    assert m.decision is not None, "every message is decided before process() returns"
    return m.decision


def _primary(m: _Message) -> Primary:
    """What the shadow compares with: the primary's reading and its policy's ruling on it."""
    ruling, fields = _decided(m)
    return Primary(m.chat, m.policy, fields["model"], ruling, fields["scores"], fields["language"])


def _outcome(m: _Message, users: Escalated) -> Outcome:
    """`m`'s decision record, with its action as the users' rules left it."""
    ruling, fields = _decided(m)
    record = decision_record(
        m.chat,
        action=users.action,
        reason=ruling.reason,
        severity=ruling.severity,
        strikes=users.strikes,
        escalated=users.escalated,
        **fields,
    )
    key = m.record.key
    if key is None:  # keep one channel's decisions together even for unkeyed input
        key = m.chat.channel_id.encode()
    value = orjson.dumps(record)
    return Outcome(key, value, carried_headers(m.record), action=users.action, decision=record)
