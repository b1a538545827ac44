"""The load generator against the embedded Kafka broker (Tansu).

The processor's place is taken by `Responder`, a few lines that read the inbound topic and write
one decision per valid message (and a dead letter per invalid one). It stands in for the
moderator, not for Kafka: every record here really goes through the broker. It can drop or repeat
chosen decisions and hold every reply back, so the accounting and the open-loop sender can be
checked. `test_loadgen_moderator.py` runs the same against the real `Moderator`. The broker is the
session's (`kafka` in conftest.py); each test has its own topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from devstack.embedded import EmbeddedKafka
from loadgen import LoadConfig, find_max, measure_hop, run_load
from loadgen.kafka import assign_at_end, make_consumer, make_producer
from moderator.errors import InvalidRecord
from moderator.kafka.topics import ensure_topics
from moderator.records import parse_message

pytestmark = pytest.mark.integration


@pytest.fixture
async def cfg(kafka: EmbeddedKafka) -> LoadConfig:
    """A configuration on fresh topics, which exist before any client starts."""
    suffix = uuid.uuid4().hex[:8]
    cfg = LoadConfig(
        bootstrap=kafka.bootstrap,
        in_topic=f"in.{suffix}",
        out_topic=f"out.{suffix}",
        dlq_topic=f"dlq.{suffix}",
        partitions=2,
        rate=50.0,
        duration_s=2.0,
        drain_timeout_s=3.0,
        hop=False,
        seed=1,
    )
    await ensure_topics(
        cfg.bootstrap, dict.fromkeys((cfg.in_topic, cfg.out_topic, cfg.dlq_topic), 2)
    )
    return cfg


class Responder:
    """Stands in for the moderator: one decision per valid message, a dead letter per bad one.

    `drop` and `repeat` name message-id sequence numbers whose decision is left out or sent twice;
    with `hold_until`, no decision goes out before that many valid messages have arrived.
    """

    def __init__(
        self,
        cfg: LoadConfig,
        drop: frozenset[str] = frozenset(),
        repeat: frozenset[str] = frozenset(),
        hold_until: int = 0,
    ) -> None:
        self.cfg, self.drop, self.repeat, self.hold_until = cfg, drop, repeat, hold_until
        self.received: list[tuple[bytes, dict[str, object]]] = []
        self.ready = asyncio.Event()  # set once it reads from the end of every partition

    async def run(self) -> None:
        consumer, producer = make_consumer(self.cfg.bootstrap), make_producer(self.cfg.bootstrap)
        await consumer.start()
        await producer.start()
        held: list[tuple[bytes, bytes]] = []
        try:
            await assign_at_end(consumer, [self.cfg.in_topic])
            self.ready.set()
            while True:
                for records in (await consumer.getmany(timeout_ms=50)).values():
                    for r in records:
                        try:
                            msg = parse_message(r.value, timestamp_ms=0, max_bytes=65536)
                        except InvalidRecord:
                            await producer.send(self.cfg.dlq_topic, r.value, key=r.key)
                            continue
                        self.received.append((r.key, orjson.loads(r.value)))
                        seq = msg.message_id.rsplit("-", 1)[1]
                        decision = orjson.dumps(
                            {"message_id": msg.message_id, "action": "allow", "cached": seq == "1"}
                        )
                        copies = 0 if seq in self.drop else 2 if seq in self.repeat else 1
                        held.extend([(r.key, decision)] * copies)
                if len(self.received) >= self.hold_until:
                    for key, value in held:
                        await producer.send(self.cfg.out_topic, value, key=key)
                    held.clear()
        finally:
            await producer.stop()
            await consumer.stop()


@contextlib.asynccontextmanager
async def responding(responder: Responder) -> AsyncIterator[Responder]:
    task = asyncio.create_task(responder.run())
    try:
        # It must have its partitions' end offsets before we produce; if it dies first, say so.
        ready = asyncio.create_task(responder.ready.wait())
        await asyncio.wait({ready, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not responder.ready.is_set():
            raise AssertionError(f"the responder did not get ready: {task}")
        yield responder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_hop_probe_reads_back_everything_it_sent(kafka: EmbeddedKafka) -> None:
    hop = await measure_hop(kafka.bootstrap, rate_per_s=100.0, duration_s=1.0, topic="hop.probe")
    assert hop.sent == 100
    assert hop.received == hop.sent
    assert hop.p50_ms is not None
    assert hop.p99_ms is not None
    assert hop.p50_ms <= hop.p99_ms
    consumer = make_consumer(kafka.bootstrap)
    await consumer.start()
    try:
        assert "hop.probe" not in await consumer.topics()  # the scratch topic was removed
    finally:
        await consumer.stop()


async def test_every_message_is_accounted_for(cfg: LoadConfig) -> None:
    cfg = LoadConfig(**{**cfg.__dict__, "malformed_ratio": 0.1})
    async with responding(
        Responder(cfg, drop=frozenset({"5"}), repeat=frozenset({"7"}))
    ) as responder:
        summary = await run_load(cfg)
    assert summary.sent + summary.malformed_sent == 100
    assert summary.malformed_sent > 0
    assert summary.missing == 1
    assert summary.missing_offsets_s  # where the lost one was due, for the report
    assert summary.duplicates == 1
    assert summary.decided == summary.sent - 1
    assert summary.dead_letters == summary.malformed_sent
    assert summary.dead_letters_unmatched == 0
    assert summary.foreign == 0
    assert summary.actions == {"allow": summary.decided}
    assert summary.cache_hit_ratio == pytest.approx(1 / summary.decided, abs=1e-4)
    assert summary.p(50.0) is not None
    assert summary.p(99.9) is not None
    # The schedule, as the processor sees it: keyed by channel, stamped 20 ms apart.
    stamps = sorted(int(v["sent_at_ms"]) for _, v in responder.received)  # type: ignore[call-overload]
    assert len(stamps) == summary.sent
    assert all(key == str(v["channel_id"]).encode() for key, v in responder.received)
    gaps = {b - a for a, b in itertools.pairwise(stamps)}
    # 20 ms apart (to the millisecond), or a multiple where malformed records took the slot.
    assert all(g >= 19 and abs(g - 20 * round(g / 20)) <= 1 for g in gaps), gaps


async def test_a_stalled_system_cannot_slow_the_sender(cfg: LoadConfig) -> None:
    """Nothing is answered until every message has arrived: a closed-loop sender would stall."""
    async with responding(Responder(cfg, hold_until=100)):
        summary = await run_load(cfg)
    assert summary.sent == 100
    assert summary.decided == 100
    assert summary.missing == 0


async def test_cli_writes_json_and_plot(cfg: LoadConfig, tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "latency.png"
    async with responding(Responder(cfg)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadgen.cli", "--bootstrap", cfg.bootstrap, "--rate", "20",
            "--duration", "2", "--in-topic", cfg.in_topic, "--out-topic", cfg.out_topic,
            "--dlq-topic", cfg.dlq_topic, "--json", str(out), "--plot", str(png),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await proc.communicate()
    assert proc.returncode == 0, stderr.decode()
    assert "decided 40" in stdout.decode()
    assert "sent" in stderr.decode()  # progress lines
    data = orjson.loads(out.read_bytes())
    assert (data["sent"], data["decided"], data["missing"]) == (40, 40, 0)
    assert data["broker_hop"]["received"] == data["broker_hop"]["sent"] > 0
    assert data["p99_ms"] is not None
    assert png.read_bytes()[:4] == b"\x89PNG"


async def test_find_max_steps_up_while_every_step_holds(cfg: LoadConfig) -> None:
    cfg = LoadConfig(**{**cfg.__dict__, "budget_ms": 60_000.0, "drain_timeout_s": 3.0})
    async with responding(Responder(cfg)):
        result = await find_max(cfg, start_rate=20, max_rate=40, step_duration_s=1.0)
    assert [s.rate for s in result.steps] == [20.0, 40.0]
    assert all(s.held and s.missing == 0 for s in result.steps)
    assert result.max_rate == 40.0
