"""The moderator as a real process: SIGTERM, SIGKILL and restarts, several workers."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.request import urlopen

import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from devstack.child import ModeratorChild, moderator_env
from devstack.embedded import EmbeddedKafka
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.service import Moderator
from tests.integration.kafka_io import (
    chat,
    consume,
    decisions_by_id,
    distinct_ids,
    produce,
    read_to_end,
)

pytestmark = pytest.mark.integration


def start(settings: Settings, *extra: str, threads: int = 1) -> ModeratorChild:
    """`moderator run *extra` on `settings`, started; its output is kept (`output()`)."""
    env = moderator_env(
        kafka_bootstrap=settings.kafka_bootstrap, redis_url=settings.redis_url,
        model_dir=settings.model_dir, in_topic=settings.in_topic, out_topic=settings.out_topic,
        dlq_topic=settings.dlq_topic, group_id=settings.group_id, threads=threads,
        commit_interval_s=0.2,
    )  # fmt: skip
    return ModeratorChild(["run", *extra], env).start()


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
        proc.signal(signum)
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.alive():
            proc.kill()
    await producing
    assert code == 0

    # Every offset below a committed one has its decision: nothing committed before its ack.
    offsets = await committed(settings)
    records = await consume(settings.kafka_bootstrap, settings.in_topic,
                            until=lambda r: len(r) >= n)  # fmt: skip
    out = await read_to_end(settings.kafka_bootstrap, settings.out_topic)  # it has stopped: all
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
        proc.signal(signal.SIGTERM)
        proc.signal(signal.SIGINT)
        code = await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.alive():
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
    out = await read_to_end(settings.kafka_bootstrap, settings.out_topic)  # it has stopped: all
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
    await producing
    killed_at = time.monotonic()
    second = start(settings)
    try:
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n), timeout_s=90
        )
        recovered_s = time.monotonic() - killed_at
    finally:
        second.signal(signal.SIGTERM)
        await asyncio.to_thread(second.wait, 30)
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
        proc.signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 40)
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(n)}
    assert code == 0


# -- several workers, and start-up failures ----------------------------------------------------

SERVING = "metrics  http://"  # printed by each process once its signal handlers are in place


async def wait_for_lines(proc: ModeratorChild, text: str, count: int) -> str:
    """Its output so far, once `text` was printed `count` times; fails if it ends first."""
    await asyncio.to_thread(proc.wait_for, re.escape(text), count)
    return proc.output()


def healthz(port: int) -> int:
    with urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
        return int(reply.status)


def free_port_pair() -> int:
    """A port P with P and P + 1 both free (for two workers' metrics endpoints)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two adjacent free ports")


@pytest.mark.parametrize(
    "supervisor_first", [False, True], ids=["workers-first", "supervisor-first"]
)
async def test_sigterm_to_every_process_drains_each_worker_once_and_exits_0(
    settings: Settings, supervisor_first: bool
) -> None:
    """systemd's KillMode=control-group signals every process of the unit, in no fixed order,
    and the supervisor forwards its own SIGTERM: no worker may take that as "exit now"."""
    n = 600
    proc = start(settings, "--workers", "2", threads=2)
    try:
        await wait_for_lines(proc, SERVING, 2)
        workers = proc.worker_pids()
        assert len(workers) == 2
        producing = asyncio.create_task(
            produce(settings.kafka_bootstrap, settings.in_topic,
                    [chat(i, f"group stop line {i}") for i in range(n)])
        )  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))
        for pid in [proc.pid, *workers] if supervisor_first else [*workers, proc.pid]:
            os.kill(pid, signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.alive():
            proc.kill()
    await producing
    output = proc.output()
    assert code == 0, output[-3000:]
    assert "exiting now" not in output
    assert output.count(": finishing in-flight work") == 2, "each worker drained once"

    again = start(settings)  # every input decided: what the workers left is redone
    try:
        await wait_for_lines(again, SERVING, 1)
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n), timeout_s=90
        )
    finally:
        again.signal(signal.SIGTERM)
        assert await asyncio.to_thread(again.wait, 30) == 0
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(n)}


async def test_metrics_port_flag_gives_each_worker_its_own_port(settings: Settings) -> None:
    port = free_port_pair()
    proc = start(settings, "--workers", "2", "--metrics-port", str(port), threads=2)
    try:
        output = await wait_for_lines(proc, SERVING, 2)
        for p in (port, port + 1):
            assert f"127.0.0.1:{p}/metrics" in output
            assert await asyncio.to_thread(healthz, p) == 200
    finally:
        proc.signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 40)
    assert code == 0, proc.output()[-3000:]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_alone(model_dir: Path, *flags: str, **env: str) -> tuple[int, str, float]:
    """`moderator run` with nothing to reach: (exit code, stderr, seconds); 30 s is a hang."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "moderator", "run", *flags],
        env=dict(os.environ, MODERATOR_MODEL_DIR=str(model_dir), MODERATOR_THREADS="1", **env),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - began


async def test_kafka_unreachable_with_redis_down_too_exits_69_promptly(model_dir: Path) -> None:
    """Both refusing at once used to leave the Redis probe alive after stop(): no exit, ever."""
    code, err, took_s = await asyncio.to_thread(
        run_alone,
        model_dir,
        MODERATOR_KAFKA_BOOTSTRAP=f"127.0.0.1:{closed_port()}",
        MODERATOR_REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
        MODERATOR_METRICS_PORT="0",
    )
    assert code == 69, err[-3000:]
    assert "moderator: error: the producer could not connect to Kafka" in err
    print(f"failed start exited {code} in {took_s:.1f}s")


async def test_a_busy_metrics_port_is_one_line_and_exit_69(model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err, _ = await asyncio.to_thread(
            run_alone, model_dir, "--metrics-port", str(port), MODERATOR_REDIS_URL=""
        )
    assert code == 69, err[-3000:]
    assert "Traceback" not in err
    assert f"moderator: error: the metrics endpoint cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
async def test_json_logs_are_json_lines_to_the_last(model_dir: Path, level: str) -> None:
    """With MODERATOR_LOG_FORMAT=json a log shipper reads nothing but JSON lines, the error
    that ends start-up (here a busy metrics port) included; MODERATOR_LOG_LEVEL filters them."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err, _ = await asyncio.to_thread(
            run_alone, model_dir, "--metrics-port", str(port), MODERATOR_REDIS_URL="",
            MODERATOR_LOG_FORMAT="json", MODERATOR_LOG_LEVEL=level,
        )  # fmt: skip
    assert code == 69, err[-3000:]
    lines = [orjson.loads(line) for line in err.splitlines()]
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    loading = any(line["message"].startswith("loading model") for line in lines)
    assert loading == (level == "INFO")
    if level == "WARNING":
        assert {line["level"] for line in lines} <= {"WARNING", "ERROR", "CRITICAL"}
    assert lines[-1]["level"] == "ERROR"
    assert "the metrics endpoint cannot listen" in lines[-1]["message"]


async def test_sigterm_with_the_broker_gone_still_exits(settings: Settings) -> None:
    """The broker dies, then the orchestrator stops the pod: stopping the Kafka clients (or a
    last commit) cannot reach the broker and must not hold the process forever."""
    with EmbeddedKafka() as broker:
        settings = settings.replace(kafka_bootstrap=broker.bootstrap, redis_url="",
                                    shutdown_timeout_s=2.0)  # fmt: skip
        topics = {settings.in_topic: 2, settings.out_topic: 2, settings.dlq_topic: 1}
        await ensure_topics(settings.kafka_bootstrap, topics)
        proc = start(settings)
        try:
            await asyncio.to_thread(proc.wait_ready)
            await produce(settings.kafka_bootstrap, settings.in_topic,
                          [chat(i, f"line {i}") for i in range(50)])  # fmt: skip
            await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(50))
        except BaseException:
            proc.kill()
            raise
    proc.signal(signal.SIGTERM)  # the broker is stopped now
    code = await asyncio.to_thread(proc.wait, 90)  # raises (and kills it) if it hangs
    assert code == 0, proc.output()[-3000:]
