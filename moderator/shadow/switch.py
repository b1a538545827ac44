"""Promotion and rollback live: the rollout record applied to this instance, without a restart.

Every instance follows the rollout control topic (moderator/shadow/control.py) as a
compacted.Table, like the channel policies. A record names the primary and the shadow by
`name@version` and sha256; the instance may switch only between the model directories it was
given (MODERATOR_MODEL_DIR and MODERATOR_SHADOW_MODEL). Both named models are loaded again from
disk, checked (the manifest's sha256 is the record's, model.onnx is the manifest's, the manifest's
check lines score as recorded: decide/selfcheck.py) and warmed on a thread, then swapped in between
batches: the batches that start from then on are decided by the new primary (the decision's
`model`; the score cache keys on its sha256), those under way finish with the one they hold, and
its batcher is stopped once none does. A record naming a model the instance does not have, or
one that fails any check, is refused with one error line and a metric; the models in effect stay.
A tombstone brings back the instance's own settings. Records arriving while one is applied are
coalesced: the latest wins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from moderator.config import Settings
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.calls import ModelCalls
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Reader, reader_for
from moderator.decide.selfcheck import failures
from moderator.errors import ModeratorError
from moderator.kafka.compacted import Table
from moderator.metrics import Metrics
from moderator.shadow.control import InvalidRollout, ModelRef, Pair, Rollout, RolloutBook
from moderator.shadow.scorer import Shadow
from moderator.tasks import cancel

log = logging.getLogger(__name__)


class RolloutRefused(ModeratorError):
    """A rollout this instance cannot apply; `reason` is the metric's label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Deciding:
    """The model that decides: how it reads a text (`reader`) and its model calls. The batches
    using it `hold` it until they are decided, so a model switched out has its batcher stopped
    only once nothing can submit to it any more (`idle`)."""

    def __init__(self, reader: Reader, calls: ModelCalls) -> None:
        self.reader = reader
        self.calls = calls
        self.ident = reader.classifier.info.ident  # the decision's `model`
        self.sha256 = reader.classifier.info.sha256  # what the score cache keys on
        self._held = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def classifier(self) -> Classifier:
        return self.reader.classifier

    @property
    def ref(self) -> ModelRef:
        return ModelRef(self.ident, self.sha256)

    def hold(self) -> None:
        self._held += 1
        self._idle.clear()

    def release(self) -> None:
        self._held -= 1
        if self._held == 0:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no batch holds this model."""
        await self._idle.wait()


class Watch(Protocol):
    """The supervisor's `watch`: a task that may not die silently (`may_end`: nor end early)."""

    def __call__(self, task: asyncio.Task[Any], /, *, may_end: bool = False) -> object: ...


class Decides(Protocol):
    """The pipeline, as a switch sees it: the model in use, and how to change it."""

    model: Deciding

    def use(self, model: Deciding, /) -> None: ...


def ref_of(classifier: Classifier) -> ModelRef:
    return ModelRef(classifier.info.ident, classifier.info.sha256)


def resolve(pair: Pair, available: Mapping[ModelRef, Path]) -> tuple[Path, Path]:
    """The directories of the pair's models among those this instance has; RolloutRefused if one is
    not there (`not_found`), or is there with another sha256 (`sha256`)."""
    found = []
    for role, ref in (("primary", pair.primary), ("shadow", pair.shadow)):
        if ref in available:
            found.append(available[ref])
            continue
        same_name = [have for have in available if have.model == ref.model]
        if same_name:
            raise RolloutRefused("sha256", f"{role} {ref}: this instance's {same_name[0]} differs")
        have = ", ".join(str(r) for r in available)
        raise RolloutRefused("not_found", f"{role} {ref}: not a model this instance has ({have})")
    return found[0], found[1]


def load(
    directory: Path,
    ref: ModelRef,
    threads: int,
    s: Settings,
    *,
    like: Reader | None = None,
    warm: bool = True,
) -> Reader:
    """The model in `directory`, loaded, checked against `ref` and self-checked, then warmed up
    (not for the shadow's role: its first batches may pay for their shapes, off the path);
    RolloutRefused (`load`, `sha256`, `self_check`) otherwise. Runs on a thread.

    The language gate of `like` (the reader that had this model in its other role) is reused
    when it reads the same languages: building one takes ~0.8 s, most of a switch's time."""
    try:
        classifier = Classifier(directory, threads=threads)
        if like is not None and like.gate is not None and _same_gate(like, classifier):
            reader = Reader(classifier, max_windows=s.max_windows, gate=like.gate)
        else:
            reader = reader_for(classifier, max_windows=s.max_windows)
    except Exception as exc:
        raise RolloutRefused("load", f"{ref}: {directory} fails to load: {exc}") from exc
    if ref_of(classifier) != ref:  # its manifest changed on disk since the instance started
        raise RolloutRefused("sha256", f"{ref}: {directory} now holds {ref_of(classifier)}")
    try:
        wrong = failures(classifier)
    except Exception as exc:
        raise RolloutRefused("self_check", f"{ref}: {directory}: self-check: {exc}") from exc
    if wrong:
        shown = "; ".join(wrong[:3])
        raise RolloutRefused("self_check", f"{ref}: {directory}: self-check failed ({shown})")
    if warm:
        classifier.warm_up(s.max_batch)
    return reader


def _same_gate(reader: Reader, classifier: Classifier) -> bool:
    assert reader.gate is not None
    return reader.gate.supported == set(classifier.info.languages)


class ModelSwitch:
    """Keeps this instance's primary and shadow as the rollout topic says. `start()` reads the
    topic to its end and applies its record before it returns (so the first fetched message is
    decided by the model the record names), then follows it, its tasks watched with `watch`;
    `stop()` may be called twice. With MODERATOR_ROLLOUT_TOPIC empty it does nothing."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        pipeline: Decides,
        shadow: Shadow | None,
        cache: ScoreCache,
        watch: Watch,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.pipeline = pipeline
        self.shadow = shadow
        self.cache = cache
        self._watch = watch
        self.book = RolloutBook()
        primary = pipeline.model.ref
        self.available = {primary: pipeline.model.classifier.model_dir}
        self.configured: Pair | None = None
        if shadow is not None:
            self.available[ref_of(shadow.reader.classifier)] = shadow.reader.classifier.model_dir
            self.configured = Pair(primary, ref_of(shadow.reader.classifier))
        self.current = self.configured
        self.table = (
            None
            if not settings.rollout_topic
            else Table(
                self.book,
                settings.rollout_topic,
                settings.kafka_options(),
                what="rollout",
                refusal=InvalidRollout,
                on_change=self._changed,
                on_refused=self._refused,
                replication=settings.topic_replication,
            )
        )
        self.task: asyncio.Task[None] | None = None
        self._wanted = asyncio.Event()
        self._batchers: list[MicroBatcher] = []  # those it started, stopped with it
        self._retiring: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self.table is None or self.task is not None:
            return
        ready = await self.table.start()
        assert self.table.task is not None
        self._watch(self.table.task)
        if not ready.found:
            log.warning("no rollout topic %s: the models set here decide", self.table.topic)
        if self._wanted.is_set():  # a record on the topic: in effect before the first fetch
            self._wanted.clear()
            await self.apply(self.book.current)
        self.task = asyncio.create_task(self._run(), name="moderator-rollout-switch")
        self._watch(self.task)

    async def stop(self) -> None:
        if self.table is not None:
            await self.table.stop()
        task, self.task = self.task, None
        await cancel(task, *self._retiring)
        for batcher in self._batchers:
            await batcher.stop()

    async def _run(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self.apply(self.book.current)

    def _changed(self, key: str, outcome: str) -> None:
        if outcome != "audit":
            self._wanted.set()

    def _refused(self, key: str, exc: Exception) -> None:
        self.metrics.rollout.refused["invalid"].inc()
        self.metrics.rollout.records["refused"].inc()
        log.error("%s; the models in effect stay (%s)", exc, self._in_effect())

    def _in_effect(self) -> str:
        shadow = self.shadow.model if self.shadow is not None else "no shadow"
        return f"{self.pipeline.model.ident} decides, {shadow} shadows"

    async def apply(self, rollout: Rollout | None) -> None:
        """Make `rollout`'s pair (None: the instance's own settings) the primary and the shadow,
        or refuse it and keep the models in effect."""
        rollout_m = self.metrics.rollout
        pair = rollout.pair if rollout is not None else self.configured
        who = f"set by {rollout.by} ({rollout.change})" if rollout is not None else "removed"
        if pair == self.current:
            rollout_m.records["unchanged"].inc()
            log.info("rollout %s: already in effect (%s)", who, self._in_effect())
            return
        try:
            if pair is None or self.shadow is None:
                raise RolloutRefused("not_found", "this instance has no shadow model to switch to")
            readers = [self.pipeline.model.reader, self.shadow.reader]
            held = {ref_of(r.classifier): r for r in readers}  # what each model reads with now
            primary, shadow = await asyncio.to_thread(self._load, pair, held)
        except RolloutRefused as exc:
            rollout_m.refused[exc.reason].inc()
            rollout_m.records["refused"].inc()
            log.error("rollout %s refused: %s; %s", who, exc, self._in_effect())
            return
        await self._use(primary, shadow)
        self.current = pair
        rollout_m.records["switched"].inc()
        after_s = time.time() - rollout.at_ms / 1000 if rollout is not None else 0.0
        rollout_m.switch_delay.set(after_s)
        log.info("rollout %s: %s, %.2f s after the record", who, self._in_effect(), after_s)

    def _load(self, pair: Pair, held: Mapping[ModelRef, Reader]) -> tuple[Reader, Reader]:
        """Both models of `pair`, checked (on a thread)."""
        primary_dir, shadow_dir = resolve(pair, self.available)
        s = self.settings
        threads = s.scoring_layout[0]
        primary = load(primary_dir, pair.primary, threads, s, like=held.get(pair.primary))
        shadow = load(shadow_dir, pair.shadow, 1, s, like=held.get(pair.shadow), warm=False)
        return primary, shadow

    async def _use(self, primary: Reader, shadow: Reader) -> None:
        """The new primary decides the batches that start from now on; the old one's batcher
        stops once the batches holding it are decided."""
        s, m = self.settings, self.metrics
        batcher = MicroBatcher(
            primary.classifier,
            max_batch=s.max_batch,
            metrics=m.decide,
            concurrency=s.scoring_layout[1],
        )
        await batcher.start()
        assert batcher.task is not None
        self._watch(batcher.task)
        self._batchers.append(batcher)
        old = self.pipeline.model
        self.pipeline.use(Deciding(primary, ModelCalls(batcher, self.cache, m.decide)))
        assert self.shadow is not None
        self.shadow.use(shadow)
        info = primary.classifier.info
        threads = str(primary.classifier.threads)
        m.model.info({"name": info.name, "version": info.version, "threads": threads})
        retiring = asyncio.create_task(self._retire(old), name="moderator-rollout-retire")
        self._watch(retiring, may_end=True)
        self._retiring.add(retiring)
        retiring.add_done_callback(self._retiring.discard)

    async def _retire(self, old: Deciding) -> None:
        await old.idle()
        await old.calls.batcher.stop()
        if old.calls.batcher in self._batchers:
            self._batchers.remove(old.calls.batcher)
