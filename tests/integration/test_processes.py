"""The moderator as a real process: SIGTERM, SIGKILL and restarts, several workers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from moderator.classifier import Classifier
from moderator.config import Settings
from moderator.service import Moderator
from tests.integration.kafka_io import chat, consume, decisions_by_id, distinct_ids, produce

pytestmark = pytest.mark.integration


def start(
    settings: Settings, *extra: str, threads: int = 1, **overrides: str
) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        MODERATOR_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        MODERATOR_REDIS_URL=settings.redis_url,
        MODERATOR_MODEL_DIR=str(settings.model_dir),
        MODERATOR_IN_TOPIC=settings.in_topic,
        MODERATOR_OUT_TOPIC=settings.out_topic,
        MODERATOR_DLQ_TOPIC=settings.dlq_topic,
        MODERATOR_GROUP_ID=settings.group_id,
        MODERATOR_METRICS_PORT="0",
        MODERATOR_THREADS=str(threads),
        MODERATOR_COMMIT_INTERVAL_S="0.2",
    )
    env.update(overrides)
    return subprocess.Popen([sys.executable, "-m", "moderator", "run", *extra], env=env)


async def committed(settings: Settings, partitions: int = 2) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=settings.group_id,
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        return {
            p: await consumer.committed(TopicPartition(settings.in_topic, p))
            for p in range(partitions)
        }
    finally:
        await consumer.stop()


def wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_sigterm_finishes_in_flight_work_commits_and_exits_0(
    settings: Settings, signum: signal.Signals
) -> None:
    """SIGTERM (an orchestrator) and SIGINT (Ctrl+C) stop it the same graceful way."""
    n = 800
    proc = start(settings)
    try:
        producing = asyncio.create_task(
            produce(settings.kafka_bootstrap, settings.in_topic,
                    [chat(i, f"a message of the stream, number {i}") for i in range(n)])
        )  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))
        proc.send_signal(signum)
        code = await asyncio.to_thread(wait_exit, proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    await producing
    assert code == 0

    # Every offset below a committed one has its decision: nothing committed before its ack.
    offsets = await committed(settings)
    records = await consume(settings.kafka_bootstrap, settings.in_topic,
                            until=lambda r: len(r) >= n)  # fmt: skip
    out = await consume(settings.kafka_bootstrap, settings.out_topic, until=lambda r: False,
                        timeout_s=2)  # fmt: skip
    decided = set(decisions_by_id(out))
    assert any(offsets.values()), "the drained work was committed"
    for record in records:
        limit = offsets[record.partition]
        if limit is not None and record.offset < limit:
            assert orjson.loads(record.value)["message_id"] in decided


async def test_a_second_signal_exits_at_once_without_draining(settings: Settings) -> None:
    """A second signal while it drains ends the process at once, with 130 (only that path exits
    with 130: a finished drain exits 0). Two different signals, so the kernel cannot merge them."""
    n = 4000  # plenty in flight: the drain the first signal starts takes a while
    proc = start(settings)
    try:
        producing = asyncio.create_task(
            produce(settings.kafka_bootstrap, settings.in_topic,
                    [chat(i, f"a line it will not finish, number {i}") for i in range(n)])
        )  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(wait_exit, proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    await producing
    assert code == 130


async def test_stop_drains_the_work_in_flight_and_commits_all_of_it(
    settings: Settings, classifier: Classifier
) -> None:
    """What SIGTERM calls (`Moderator.stop`), with work in flight and the commit interval an hour
    long, so only the shutdown commits: every record fetched is decided, published and committed.
    A shutdown that only committed what was acknowledged would leave in-flight work uncommitted."""
    n = 4000  # far more than it decides before the stop: work is in flight then
    settings = settings.replace(commit_interval_s=3600.0, max_in_flight=1000,
                                shutdown_timeout_s=40.0)  # fmt: skip
    service = Moderator(settings, classifier=classifier)
    await service.start()
    try:
        await service.wait_ready(30)
        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [chat(i, f"a line to drain, number {i}") for i in range(n)])  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))
        sample = service.metrics.registry.get_sample_value
        assert (sample("moderator_in_flight") or 0) > 0, "the stop must find work in flight"
    finally:
        await service.stop()
    assert service.failure is None
    fetched = int(sample("moderator_messages_consumed_total") or 0)

    offsets = await committed(settings)
    records = await consume(settings.kafka_bootstrap, settings.in_topic,
                            until=lambda r: len(r) >= n)  # fmt: skip
    out = await consume(settings.kafka_bootstrap, settings.out_topic, until=lambda r: False,
                        timeout_s=2)  # fmt: skip
    committed_ids = {
        orjson.loads(r.value)["message_id"]
        for r in records
        if (limit := offsets[r.partition]) is not None and r.offset < limit
    }
    assert len(committed_ids) == fetched, "every record fetched was finished and committed"
    assert set(decisions_by_id(out)) == committed_ids, "published and committed differ"


async def test_sigkill_mid_stream_then_restart_loses_nothing(settings: Settings) -> None:
    n = 1000
    first = start(settings)
    producing = asyncio.create_task(
        produce(settings.kafka_bootstrap, settings.in_topic,
                [chat(i, f"kill test line {i}") for i in range(n)])
    )  # fmt: skip
    try:
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(150))
    finally:
        first.kill()
        first.wait()
    await producing
    killed_at = time.monotonic()
    second = start(settings)
    try:
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n), timeout_s=90
        )
        recovered_s = time.monotonic() - killed_at
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.to_thread(wait_exit, second, 30)
    ids = Counter(orjson.loads(r.value)["message_id"] for r in records)
    assert set(ids) == {f"m-{i}" for i in range(n)}
    duplicated = sum(c - 1 for c in ids.values())
    print(f"sigkill: sent {n}, decided {len(ids)}, lost 0, duplicated {duplicated}, "
          f"recovered in {recovered_s:.1f}s")  # fmt: skip


async def test_two_workers_share_the_stream(settings: Settings) -> None:
    n = 400
    proc = start(settings, "--workers", "2", threads=2)
    try:
        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [chat(i, f"worker line {i}") for i in range(n)])  # fmt: skip
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n), timeout_s=90
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(wait_exit, proc, 40)
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(n)}
    assert code == 0
