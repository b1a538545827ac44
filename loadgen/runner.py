"""One open-loop load run against the processor, through Kafka.

The order matters: the decisions and dead-letter consumers are positioned at the end of their
topics before the first message is produced, so no decision can be missed; the sender never waits
for a delivery in its schedule loop, so a slow system cannot slow it down; and every latency is
taken from the message's scheduled send time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import secrets
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from hdrh.histogram import HdrHistogram

from loadgen.config import LoadConfig
from loadgen.hop import HopResult, measure_hop
from loadgen.kafka import assign_at_end, make_consumer, make_producer
from loadgen.machine import machine_info
from loadgen.schedule import arrival_offsets
from loadgen.stats import new_histogram, percentile_ms, record_s
from loadgen.summary import LoadSummary
from loadgen.tracker import DecisionTracker
from loadgen.traffic import TrafficGenerator
from moderator.kafka.topics import ensure_topics

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 1.0
DRAIN_POLL_S = 0.01
SCHEDULE_SEED_SALT = 0x5EED  # the schedule's random stream differs from the traffic's


@dataclass(frozen=True)
class Progress:
    """Where a run stands, reported once a second while it runs."""

    elapsed_s: float
    sent: int  # valid messages, as in the summary
    malformed_sent: int
    decided: int
    in_flight: int
    dead_letters: int
    interval_p99_ms: float | None  # p99 of the decisions received since the last report
    sending: bool


ProgressCallback = Callable[[Progress], None]


def new_run_id() -> str:
    """A fresh id per run, never from the seed: the same seed twice must not reuse message ids."""
    return f"lg{secrets.token_hex(4)}"


async def run_load(
    cfg: LoadConfig,
    *,
    progress: ProgressCallback | None = None,
    hop: HopResult | None = None,
) -> LoadSummary:
    """Drive one open-loop run and return what it measured.

    `hop` passes a broker-hop measurement made earlier (the saturation search measures it once);
    otherwise it is measured here when `cfg.hop` is set.
    """
    run_id = new_run_id()
    tracker = DecisionTracker(run_id)
    traffic = TrafficGenerator(
        run_id=run_id,
        seed=cfg.seed,
        dup_ratio=cfg.dup_ratio,
        toxic_ratio=cfg.toxic_ratio,
        malformed_ratio=cfg.malformed_ratio,
        held_ratio=cfg.held_ratio,
        channels=cfg.channels,
    )
    await ensure_topics(
        cfg.bootstrap, dict.fromkeys((cfg.in_topic, cfg.out_topic, cfg.dlq_topic), cfg.partitions)
    )
    async with AsyncExitStack() as stack:
        consumer = make_consumer(cfg.bootstrap)
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        await assign_at_end(consumer, [cfg.out_topic, cfg.dlq_topic])
        if hop is None and cfg.hop:
            hop = await measure_hop(cfg.bootstrap)
            log.info("broker hop alone: p50 %s ms, p99 %s ms", hop.p50_ms, hop.p99_ms)
        producer = make_producer(cfg.bootstrap)
        await producer.start()
        stack.push_async_callback(producer.stop)

        tasks: list[asyncio.Task[None]] = []
        stack.push_async_callback(_cancel_all, tasks)
        consume_task = asyncio.create_task(
            _consume(consumer, tracker, cfg.out_topic, cfg.dlq_topic), name="loadgen-consumer"
        )
        tasks.append(consume_task)
        start_s = time.monotonic()
        sending = [True]
        if progress is not None:
            tasks.append(
                asyncio.create_task(
                    _report(tracker, start_s, sending, progress), name="loadgen-progress"
                )
            )
        send_lag = await _send(cfg, producer, traffic, tracker, start_s, consume_task)
        await producer.flush()
        sending[0] = False
        deadline = time.monotonic() + cfg.drain_timeout_s
        while tracker.outstanding and time.monotonic() < deadline:
            _raise_if_dead(*tasks)
            await asyncio.sleep(DRAIN_POLL_S)
        _raise_if_dead(*tasks)
        if progress is not None:
            progress(_progress(tracker, start_s, sending=False))

    end_s = tracker.last_decision_s or time.monotonic()
    elapsed = max(end_s - start_s, 1e-9)
    return LoadSummary.from_tracker(
        tracker,
        rate=cfg.rate,
        duration_s=cfg.duration_s,
        arrivals=cfg.arrivals.value,
        budget_ms=cfg.budget_ms,
        throughput_per_s=round(tracker.decided / elapsed, 2) if tracker.decided else 0.0,
        offered_rate_per_s=round((tracker.sent + tracker.malformed_sent) / cfg.duration_s, 2),
        broker_hop=hop,
        send_lag_p99_ms=percentile_ms(send_lag, 99.0),
        send_lag_max_ms=percentile_ms(send_lag, 100.0),
        machine=machine_info(),
    )


async def _send(
    cfg: LoadConfig,
    producer: AIOKafkaProducer,
    traffic: TrafficGenerator,
    tracker: DecisionTracker,
    start_s: float,
    consume_task: asyncio.Task[None],
) -> HdrHistogram:
    """The schedule loop: hand each message to the producer at its time, never await delivery.

    `producer.send()` only appends to a batch (it waits only when a partition's batch is full);
    delivery is reported to the tracker by a callback. Returns the send-lag histogram: how late
    the generator itself handed messages over, which says whether the run was really open-loop.
    """
    send_lag = new_histogram()
    wall_start_ms = time.time() * 1000.0
    rng = random.Random(None if cfg.seed is None else cfg.seed ^ SCHEDULE_SEED_SALT)
    for offset_s in arrival_offsets(cfg.rate, cfg.duration_s, cfg.arrivals, rng):
        due_s = start_s + offset_s
        delay = due_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
            _raise_if_dead(consume_task)
        record = traffic.next_record(sent_at_ms=int(wall_start_ms + offset_s * 1000.0))
        tracker.on_scheduled(record.message_id, record.kind, due_s, offset_s)
        delivery = await producer.send(cfg.in_topic, record.value, key=record.key)
        delivery.add_done_callback(functools.partial(_delivered, tracker, record.message_id))
        record_s(send_lag, time.monotonic() - due_s)
    return send_lag


def _delivered(tracker: DecisionTracker, message_id: str, delivery: asyncio.Future[object]) -> None:
    if delivery.cancelled():
        tracker.on_send_error(message_id, asyncio.CancelledError())
    elif (error := delivery.exception()) is not None:
        tracker.on_send_error(message_id, error)


async def _consume(
    consumer: AIOKafkaConsumer, tracker: DecisionTracker, out_topic: str, dlq_topic: str
) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=100)
        now_s = time.monotonic()
        for tp, records in batches.items():
            if tp.topic == out_topic:
                for record in records:
                    tracker.on_decision(record.value, now_s)
            elif tp.topic == dlq_topic:
                for record in records:
                    tracker.on_dead_letter(record.key, record.value)


async def _report(
    tracker: DecisionTracker, start_s: float, sending: list[bool], progress: ProgressCallback
) -> None:
    next_s = start_s + PROGRESS_INTERVAL_S
    while True:
        await asyncio.sleep(max(next_s - time.monotonic(), 0.0))
        next_s += PROGRESS_INTERVAL_S
        progress(_progress(tracker, start_s, sending=sending[0]))


def _progress(tracker: DecisionTracker, start_s: float, *, sending: bool) -> Progress:
    """Where the run stands; starts a new interval for the rolling p99."""
    p99 = percentile_ms(tracker.interval, 99.0)
    tracker.interval.reset()
    return Progress(
        elapsed_s=time.monotonic() - start_s,
        sent=tracker.sent,
        malformed_sent=tracker.malformed_sent,
        decided=tracker.decided,
        in_flight=tracker.in_flight,
        dead_letters=tracker.dead_letters,
        interval_p99_ms=p99,
        sending=sending,
    )


def _raise_if_dead(*tasks: asyncio.Task[None]) -> None:
    """A background task that stopped takes the run down with its error."""
    for task in tasks:
        if task.done():
            task.result()
            raise RuntimeError(f"{task.get_name()} stopped unexpectedly")


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for task, result in zip(tasks, results, strict=True):
        if isinstance(result, Exception):
            log.error("%s had failed: %r", task.get_name(), result)
