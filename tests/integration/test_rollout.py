"""Promotion and rollback on the real broker and Redis, with two real models: two moderators in
one group, each owning a partition, decide with the primary beside the candidate shadow; an
operator's `moderator rollout promote`, written mid-stream, switches both (the decisions' `model`
changes) with every input decided and none lost; a `rollback` to a directory broken since is
refused by both, and the candidate keeps deciding; `status` shows the record and the trail."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from devstack.candidate import candidate_model
from moderator.cli import main
from moderator.config import DEFAULT_MODEL_DIR, Settings
from moderator.decide.classifier import Classifier
from moderator.service import Moderator
from tests.integration.kafka_io import chat, consume, distinct_ids, produce, read_to_end
from tests.waiting import eventually

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)
TEXTS = ["gg wp everyone", "you are a fucking idiot", "holy shit that was a great play"]
CHANNELS = 6  # keys on both partitions of the input topic


def lines(start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [chat(i, TEXTS[i % len(TEXTS)], channels=CHANNELS) for i in range(start, start + n)]


def sample(m: Moderator, name: str, **labels: str) -> float:
    return m.metrics.registry.get_sample_value(name, labels) or 0.0


def decided(m: Moderator) -> float:
    return sum(
        sample(m, "moderator_decisions_total", action=a)
        for a in ("allow", "nudge", "review", "block")
    )


async def counted_on_both(one: Moderator, two: Moderator, name: str, **labels: str) -> None:
    """Wait until the sample `name{labels}` is 1 on both instances."""
    for m in (one, two):

        def once(m: Moderator = m) -> bool:
            return sample(m, name, **labels) == 1

        await eventually(
            once,
            lambda: (
                f"{name}{labels} on both: {sample(one, name, **labels)}, "
                f"{sample(two, name, **labels)}"
            ),
            timeout_s=60,
        )


async def rollout(s: Settings, *args: str) -> int:
    """`moderator rollout ...` as an operator runs it, with the instances' model settings."""
    argv = [
        "rollout",
        *args,
        "--kafka-bootstrap",
        s.kafka_bootstrap,
        "--rollout-topic",
        s.rollout_topic,
        "--model-dir",
        str(s.model_dir),
        "--shadow-model",
        str(s.shadow_model),
    ]
    return await asyncio.to_thread(main, argv)


async def first_decisions(s: Settings) -> dict[str, tuple[int, int, str]]:
    """Each message id's first decision: (partition, offset, model)."""
    out: dict[str, tuple[int, int, str]] = {}
    for r in sorted(await read_to_end(s.kafka_bootstrap, s.out_topic), key=lambda r: r.offset):
        d = orjson.loads(r.value)
        out.setdefault(d["message_id"], (r.partition, r.offset, d["model"]))
    return out


async def test_a_promotion_mid_stream_switches_both_instances_and_a_broken_rollback_is_refused(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    primary_dir = tmp_path / "primary"  # a copy of the shipped model, so the test may break it
    shutil.copytree(DEFAULT_MODEL_DIR, primary_dir)
    s = settings.replace(
        model_dir=primary_dir, shadow_model=candidate_model(tmp_path / "candidate"), shadow_topic=""
    )
    classifier = Classifier(primary_dir, threads=s.effective_threads)
    assert s.shadow_model is not None
    primary, candidate = classifier.info.ident, Classifier(s.shadow_model).info.ident
    async with (
        Moderator(s, classifier=classifier) as one,
        Moderator(s, classifier=classifier) as two,
    ):
        await asyncio.gather(one.wait_ready(60), two.wait_ready(60))
        await produce(s.kafka_bootstrap, s.in_topic, lines(0, 30))
        await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(30))
        assert decided(one) > 0, "each instance owns a partition"
        assert decided(two) > 0, "each instance owns a partition"
        assert {m for _, _, m in (await first_decisions(s)).values()} == {primary}

        # A steady stream; the promotion is written once part of it is decided.
        sent = 30
        switched = asyncio.Event()

        async def stream() -> None:
            nonlocal sent
            while not switched.is_set():
                await produce(s.kafka_bootstrap, s.in_topic, lines(sent, 5))
                sent += 5
                await asyncio.sleep(0.1)

        producing = asyncio.create_task(stream())
        await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(60))
        written = time.time()
        assert await rollout(s, "promote", "--operator", "alice") == 0
        await counted_on_both(one, two, "moderator_rollout_records_total", result="switched")
        seen_s = time.time() - written
        switched.set()
        await producing
        delays = [sample(m, "moderator_rollout_switch_delay_seconds") for m in (one, two)]
        log.warning(
            "switch after the record: %.2f s and %.2f s (both seen %.2f s after the write)",
            *delays,
            seen_s,
        )
        before = [decided(one), decided(two)]
        await produce(s.kafka_bootstrap, s.in_topic, lines(sent, 30))
        sent += 30
        await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(sent))
        firsts = await first_decisions(s)
        assert set(firsts) == {f"m-{i}" for i in range(sent)}, "every input decided, none lost"
        by_partition: dict[int, list[str]] = defaultdict(list)
        for partition, _, model in sorted(firsts.values()):
            by_partition[partition].append(model)
        for models in by_partition.values():  # once the candidate decides, only it does
            switch_at = models.index(candidate)
            assert set(models[:switch_at]) == {primary}
            assert set(models[switch_at:]) == {candidate}
        last = [firsts[f"m-{i}"][2] for i in range(sent - 30, sent)]
        assert set(last) == {candidate}
        assert decided(one) > before[0], "both decide with it"
        assert decided(two) > before[1], "both decide with it"
        assert one.metrics.registry.get_sample_value("moderator_model_info", _info(candidate))

        # The old primary's directory breaks on disk; rolling back to it is refused everywhere.
        (primary_dir / "tokenizer.json").write_text("{}")
        assert await rollout(s, "rollback", "--operator", "bob") == 0
        await counted_on_both(one, two, "moderator_rollout_refused_total", reason="load")
        await produce(s.kafka_bootstrap, s.in_topic, lines(sent, 20))
        await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(sent + 20))
        firsts = await first_decisions(s)
        assert {firsts[f"m-{i}"][2] for i in range(sent, sent + 20)} == {candidate}

    capsys.readouterr()
    assert await rollout(s, "status") == 0
    status = capsys.readouterr().out.splitlines()
    trail = [line for line in status if line.startswith("# ")]
    assert [line.split("\t")[1:3] for line in trail] == [
        ["promote", "by alice"],
        ["rollback", "by bob"],
    ]
    assert f"primary\t{primary}\t{classifier.info.sha256}" in status
    assert any(line.startswith("set\trollback by bob") for line in status)


def _info(ident: str) -> dict[str, Any]:
    name, version = ident.split("@")
    return {"name": name, "version": version, "threads": str(Settings().scoring_layout[0])}
