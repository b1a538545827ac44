"""Promotion and rollback without Kafka: the rollout record and its validation, the book the
moderators read it into, the checks a named model must pass before it decides (the instance has
it, with that sha256; it loads; its manifest's check lines score as recorded), and the switch
itself on a real pipeline and shadow: the decisions' `model` follows the record, a refused record
leaves the models in effect, a tombstone brings back the instance's own settings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from devstack.candidate import candidate_model
from models.export.onnx_export import PARITY_TEXTS
from moderator.admin.rollout_admin import checked, local_ref
from moderator.config import Settings
from moderator.decide.batcher import MicroBatcher
from moderator.decide.cache import ScoreCache
from moderator.decide.classifier import Classifier
from moderator.decide.screen import reader_for
from moderator.decide.selfcheck import FIELD, check_lines, failures, recorded
from moderator.errors import ConfigError, ModelError
from moderator.metrics import Metrics
from moderator.pipeline import Pipeline
from moderator.policy.rules import Policy
from moderator.shadow.control import (
    KEY,
    InvalidRollout,
    ModelRef,
    Pair,
    Rollout,
    RolloutBook,
    audit_key,
    decode,
    promoted,
    rolled_back,
)
from moderator.shadow.scorer import Shadow
from moderator.shadow.switch import ModelSwitch, RolloutRefused, load, ref_of, resolve
from tests.unit.test_pipeline import message
from tests.waiting import eventually

CHECK_TEXTS = ["gg wp everyone", "you are a fucking idiot", "holy shit that was a great play"]
A = ModelRef("chat-minilm@707ee4", "a" * 64)
B = ModelRef("chat-minilm-candidate@707ee4", "b" * 64)


def sample(**changes: Any) -> dict[str, Any]:
    record = Rollout(Pair(A, B), "alice", 1_764_000_000_000).as_json()
    record.update(changes)
    return record


def test_a_record_reads_back_as_written_and_promote_then_rollback_restore_the_pair() -> None:
    first = Rollout(Pair(A, B), "alice", 1_000)
    assert decode(first.encode()) == first
    up = promoted(first, "bob", 2_000)
    assert (up.pair, up.by, up.at_ms, up.change, up.previous) == (
        Pair(B, A),
        "bob",
        2_000,
        "promote",
        first.pair,
    )
    back = rolled_back(decode(up.encode()), "carol", 3_000)
    assert (back.pair, back.change, back.previous) == (first.pair, "rollback", Pair(B, A))
    assert audit_key(back) == "audit:3000:carol"
    with pytest.raises(InvalidRollout, match="names no previous pair"):
        rolled_back(first, "dave", 4_000)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (orjson.dumps(sample(by="")), "'by' must name who"),
        (orjson.dumps(sample(at_ms="yesterday")), "'at_ms' must be a positive integer"),
        (orjson.dumps(sample(at_ms=True)), "'at_ms' must be a positive integer"),
        (orjson.dumps(sample(change="yolo")), "'change' must be one of"),
        (orjson.dumps(sample(primary=None)), "'primary' must be an object"),
        (orjson.dumps(sample(shadow={"model": "x@1", "sha256": "A" * 64})), "64 lowercase hex"),
        (orjson.dumps(sample(shadow={"model": "nameless", "sha256": "b" * 64})), "name@version"),
        (orjson.dumps(sample(shadow=A.as_json())), "the same model"),
        (orjson.dumps(sample(previous={"primary": A.as_json()})), "'previous': 'shadow'"),
    ],
)
def test_a_record_that_does_not_validate_says_what_is_wrong(value: bytes, why: str) -> None:
    with pytest.raises(InvalidRollout, match=why):
        decode(value)


def test_the_book_takes_the_rollout_key_passes_over_audit_keys_and_refuses_any_other() -> None:
    book, record = RolloutBook(), orjson.dumps(sample())
    assert book.apply("audit:1:alice", record) == "audit"
    assert book.current is None
    assert book.apply(KEY, record) == "applied"
    assert book.current == decode(record)
    with pytest.raises(InvalidRollout, match="key 'policy'"):
        book.apply("policy", record)
    with pytest.raises(InvalidRollout):
        book.apply(KEY, b"{}")
    assert book.current == decode(record), "a refused record leaves the rollout as it was"
    assert book.apply(KEY, None) == "removed"
    assert book.current is None


def test_a_model_the_instance_lacks_or_has_with_another_sha256_is_refused() -> None:
    here = {A: Path("/models/a"), B: Path("/models/b")}
    assert resolve(Pair(B, A), here) == (Path("/models/b"), Path("/models/a"))
    with pytest.raises(RolloutRefused, match="not a model this instance has") as missing:
        resolve(Pair(A, ModelRef("other@1", "c" * 64)), here)
    assert missing.value.reason == "not_found"
    with pytest.raises(RolloutRefused, match="this instance's chat-minilm@707ee4") as differs:
        resolve(Pair(ModelRef(A.model, "d" * 64), B), here)
    assert differs.value.reason == "sha256"


def with_checks(folder: Path, lines: list[dict[str, Any]]) -> Path:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest[FIELD] = lines
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_the_self_check_passes_on_the_lines_a_model_recorded_and_fails_on_another_models(
    classifier: Classifier, tmp_path: Path
) -> None:
    candidate = Classifier(candidate_model(tmp_path / "own"), threads=1)
    own = with_checks(candidate.model_dir, recorded(candidate, CHECK_TEXTS))
    assert failures(Classifier(own, threads=1)) == []
    # The primary's lines under the candidate's manifest: its two swapped labels score otherwise.
    theirs = with_checks(candidate_model(tmp_path / "theirs"), recorded(classifier, CHECK_TEXTS))
    found = failures(Classifier(theirs, threads=1))
    assert found, "the swapped labels' recorded scores do not hold"
    assert all("toxicity" in f or "obscene" in f for f in found), found
    settings = Settings(max_batch=2)
    ref = ref_of(Classifier(theirs, threads=1))
    with pytest.raises(RolloutRefused, match="self-check failed") as refused:
        load(theirs, ref, 1, settings)
    assert refused.value.reason == "self_check"
    assert load(own, ref_of(candidate), 1, settings).classifier.info.ident == ref.model


def test_the_shipped_model_and_a_built_one_carry_check_lines_that_hold(
    classifier: Classifier, tmp_path: Path
) -> None:
    """The build records them (models/export/onnx_export.write_manifest); the shipped model has
    its own, so a promotion back to it is self-checked too."""
    shipped = check_lines(classifier)
    assert [line["text"] for line in shipped] == list(PARITY_TEXTS)
    assert failures(classifier) == []
    candidate = Classifier(candidate_model(tmp_path / "candidate"), threads=1)
    assert [line["text"] for line in check_lines(candidate)] == list(PARITY_TEXTS)
    assert failures(candidate) == []
    toxic = "you are the worst player i have ever seen, uninstall the game and never come back"
    [primary_row] = [line["scores"] for line in shipped if line["text"] == toxic]
    [candidate_row] = [line["scores"] for line in check_lines(candidate) if line["text"] == toxic]
    assert primary_row["toxicity"] > 0.95
    assert primary_row["obscene"] < 0.05
    assert candidate_row["obscene"] > 0.95, "its own labels recorded: the two swapped"
    assert candidate_row["toxicity"] < 0.05


def test_a_directory_that_fails_to_load_or_changed_since_the_start_is_refused(
    tmp_path: Path,
) -> None:
    folder = candidate_model(tmp_path / "broken")
    ref, settings = ref_of(Classifier(folder, threads=1)), Settings(max_batch=2)
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(RolloutRefused, match="fails to load") as broken:
        load(folder, ref, 1, settings)
    assert broken.value.reason == "load"
    renamed = candidate_model(tmp_path / "renamed")
    manifest = json.loads((renamed / "manifest.json").read_text())
    (renamed / "manifest.json").write_text(json.dumps(manifest | {"version": "retrained"}))
    with pytest.raises(
        RolloutRefused, match="now holds chat-minilm-candidate@retrained"
    ) as changed:
        load(renamed, ref, 1, settings)
    assert changed.value.reason == "sha256"


def test_the_command_names_a_model_by_its_directory_and_writes_nothing_for_one_not_here(
    classifier: Classifier, tmp_path: Path
) -> None:
    here = local_ref(classifier.model_dir)
    assert here == ref_of(classifier)
    other = here._replace(model="other@1")
    pair = Pair(here, other)
    assert checked(pair, {here: classifier.model_dir, other: tmp_path}) == pair
    with pytest.raises(ConfigError, match=r"the shadow would be other@1 .* nothing written"):
        checked(pair, {here: classifier.model_dir})
    stale = candidate_model(tmp_path / "stale")
    (stale / "model.onnx").write_bytes(b"not the graph its manifest names")
    with pytest.raises(ModelError, match="not its manifest's"):
        local_ref(stale)


@pytest.fixture
async def parts(
    classifier: Classifier, tmp_path: Path
) -> AsyncIterator[tuple[Pipeline, Shadow, ModelSwitch, Metrics]]:
    """A pipeline deciding with the shipped model, the candidate as its shadow, and a switch
    between them that follows no topic (records are handed to `apply`)."""
    folder = candidate_model(tmp_path / "candidate")
    settings = Settings(rollout_topic="", shadow_model=folder, max_batch=2, threads=1)
    metrics = Metrics()
    batcher = MicroBatcher(classifier, max_batch=2, metrics=metrics.decide)
    await batcher.start()
    cache = ScoreCache("", metrics=metrics.decide, ttl_s=60, l1_size=100, timeout_ms=25)
    shadow_reader = reader_for(Classifier(folder, threads=1))
    shadow = Shadow(shadow_reader, metrics.shadow, producer=None, topic="", queue_size=100)
    await shadow.start()
    pipeline = Pipeline(
        classifier, Policy.load(), batcher, cache, metrics.decide, max_record_bytes=65536,
        budget_ms=50, shadow=shadow,
    )  # fmt: skip
    watched: list[asyncio.Task[Any]] = []

    def watch(task: asyncio.Task[Any], /, *, may_end: bool = False) -> None:
        watched.append(task)

    switch = ModelSwitch(settings, metrics, pipeline, shadow, cache, watch)
    await switch.start()
    try:
        yield pipeline, shadow, switch, metrics
    finally:
        await switch.stop()
        await shadow.stop()
        await batcher.stop()
    failed = [t for t in watched if t.done() and not t.cancelled() and t.exception()]
    assert failed == [], "no task the switch started failed"


def counted(metrics: Metrics, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


async def decided_by(pipeline: Pipeline, i: int) -> str:
    (outcome,) = await pipeline.process([message(i, "you are a fucking idiot")])
    return str(orjson.loads(outcome.value or b"")["model"])


async def test_a_promotion_switches_the_deciding_model_and_a_refused_one_changes_nothing(
    parts: tuple[Pipeline, Shadow, ModelSwitch, Metrics], tmp_path: Path
) -> None:
    pipeline, shadow, switch, metrics = parts
    primary, candidate = pipeline.model.ident, shadow.model
    assert switch.configured is not None
    first = Rollout(switch.configured, "alice", 1_000)
    old_batcher = pipeline.model.calls.batcher
    assert await decided_by(pipeline, 0) == primary

    await switch.apply(promoted(first, "alice", 2_000))
    assert (pipeline.model.ident, shadow.model) == (candidate, primary)
    assert await decided_by(pipeline, 1) == candidate
    assert pipeline.model.sha256 == switch.configured.shadow.sha256  # the cache keys follow it
    assert counted(metrics, "moderator_rollout_records_total", result="switched") == 1
    await eventually(lambda: old_batcher.task is None, "the old primary's batcher stopped")

    await switch.apply(promoted(first, "alice", 2_000))  # the same pair again: nothing to do
    assert counted(metrics, "moderator_rollout_records_total", result="unchanged") == 1

    await switch.apply(None)  # a tombstone: the instance's own settings again
    assert (pipeline.model.ident, shadow.model) == (primary, candidate)
    assert await decided_by(pipeline, 2) == primary

    # The candidate's files are damaged on this instance: promoting it is refused, nothing moves.
    (tmp_path / "candidate" / "tokenizer.json").write_text("{}")
    await switch.apply(promoted(first, "bob", 3_000))
    assert counted(metrics, "moderator_rollout_refused_total", reason="load") == 1
    assert counted(metrics, "moderator_rollout_records_total", result="refused") == 1
    assert await decided_by(pipeline, 3) == primary

    # A model this instance does not have.
    stranger = Pair(ModelRef("other@1", "c" * 64), switch.configured.primary)
    await switch.apply(Rollout(stranger, "carol", 4_000))
    assert await decided_by(pipeline, 4) == primary
    assert counted(metrics, "moderator_rollout_refused_total", reason="not_found") == 1
    assert (pipeline.model.ident, shadow.model) == (primary, candidate)
