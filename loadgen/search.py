"""Saturation search: the highest open-loop rate at which p99 stays within the budget.

Each step is a short run at one rate. The rate doubles from `start_rate` until a step fails (p99
over the budget, or any message missing), then the search bisects between the highest rate that
held and the lowest that failed until they are within `precision` of each other. After a failed
step the processor may still be working off a backlog, so the next step waits until the
decisions topic has been quiet for a moment: each step then starts from an idle system.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from loadgen.config import LoadConfig
from loadgen.hop import HopResult, measure_hop
from loadgen.kafka import assign_at_end, make_consumer
from loadgen.runner import ProgressCallback, run_load
from loadgen.summary import LoadSummary

log = logging.getLogger(__name__)

StepRunner = Callable[..., Awaitable[LoadSummary]]

QUIET_S = 1.0
QUIET_MAX_WAIT_S = 60.0


@dataclass(frozen=True)
class Step:
    """One rate tried: whether it held, and why not."""

    rate: float
    held: bool
    reason: str
    sent: int
    decided: int
    missing: int
    throughput_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_budget_ratio: float | None

    @classmethod
    def judge(cls, summary: LoadSummary, budget_ms: float) -> Step:
        p99 = summary.p(99.0)
        if summary.missing:
            held, reason = False, f"{summary.missing} missing"
        elif p99 is None:
            held, reason = False, "no decisions"
        elif p99 > budget_ms:
            held, reason = False, f"p99 {p99:.1f} ms > {budget_ms:g} ms"
        else:
            held, reason = True, "held"
        return cls(
            rate=summary.rate,
            held=held,
            reason=reason,
            sent=summary.sent,
            decided=summary.decided,
            missing=summary.missing,
            throughput_per_s=summary.throughput_per_s,
            p50_ms=summary.p(50.0),
            p99_ms=p99,
            max_ms=summary.p(100.0),
            over_budget_ratio=summary.over_budget_ratio,
        )


@dataclass
class MaxResult:
    """The highest rate that held (None if even the lowest tried failed) and every step."""

    max_rate: float | None
    budget_ms: float
    step_duration_s: float
    steps: list[Step] = field(default_factory=list)
    broker_hop: HopResult | None = None
    best: LoadSummary | None = None  # the run at `max_rate`

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_rate": self.max_rate,
            "budget_ms": self.budget_ms,
            "step_duration_s": self.step_duration_s,
            "steps": [dataclasses.asdict(step) for step in self.steps],
            "broker_hop": self.broker_hop.as_dict() if self.broker_hop else None,
            "best": self.best.as_dict() if self.best else None,
        }


def next_rate(
    rate: float, held: bool, low: float | None, high: float | None
) -> tuple[float, float | None, float | None]:
    """The next rate to try and the updated bounds (highest held, lowest failed)."""
    if held:
        low = rate if low is None else max(low, rate)
    else:
        high = rate if high is None else min(high, rate)
    if high is None:
        return rate * 2.0, low, high
    if low is None:
        return rate / 2.0, low, high
    return (low + high) / 2.0, low, high


async def find_max(
    cfg: LoadConfig,
    *,
    start_rate: float = 50.0,
    step_duration_s: float = 10.0,
    max_rate: float = 100_000.0,
    min_rate: float = 1.0,
    precision: float = 0.1,
    max_steps: int = 14,
    progress: ProgressCallback | None = None,
    on_step: Callable[[Step], None] | None = None,
    run_step: StepRunner = run_load,
    settle: Callable[[LoadConfig], Awaitable[object]] | None = None,
) -> MaxResult:
    """Search for the saturation rate under `cfg.budget_ms`; the rest of `cfg` shapes each step.

    `run_step` runs one step (`run_load` by default; called as `run_step(cfg, progress=, hop=)`)
    and `settle` waits for the system to go idle after a failed step (by default until the
    decisions topic is quiet).
    """
    hop = await measure_hop(cfg.bootstrap) if cfg.hop else None
    result = MaxResult(None, cfg.budget_ms, step_duration_s, broker_hop=hop)
    low: float | None = None
    high: float | None = None
    rate = min(start_rate, max_rate)
    for _ in range(max_steps):
        step_cfg = dataclasses.replace(cfg, rate=round(rate, 1), duration_s=step_duration_s)
        summary = await run_step(step_cfg, progress=progress, hop=hop)
        step = Step.judge(summary, cfg.budget_ms)
        result.steps.append(step)
        log.info("step %.1f/s: %s", step.rate, step.reason)
        if on_step is not None:
            on_step(step)
        if step.held and (result.max_rate is None or step.rate > result.max_rate):
            result.max_rate, result.best = step.rate, summary
        if not step.held:
            await (settle or _wait_for_quiet)(cfg)
        rate, low, high = next_rate(step.rate, step.held, low, high)
        if low is not None and low >= max_rate:
            break
        if high is not None and high <= min_rate:
            break
        if low is not None and high is not None and (high - low) <= precision * low:
            break
        rate = min(max(rate, min_rate), max_rate)
    return result


async def _wait_for_quiet(cfg: LoadConfig) -> float:
    return await wait_for_quiet(cfg.bootstrap, cfg.out_topic)


async def wait_for_quiet(
    bootstrap: str, topic: str, quiet_s: float = QUIET_S, max_wait_s: float = QUIET_MAX_WAIT_S
) -> float:
    """Wait until `topic` gets no record for `quiet_s` (capped at `max_wait_s`); return the wait."""
    start = time.monotonic()
    async with AsyncExitStack() as stack:
        consumer = make_consumer(bootstrap)
        await consumer.start()
        stack.push_async_callback(consumer.stop)
        await assign_at_end(consumer, [topic])
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            if time.monotonic() - start > max_wait_s:
                log.warning("%s still busy after %.0f s; going on anyway", topic, max_wait_s)
                break
            batches = await consumer.getmany(timeout_ms=100)
            if any(batches.values()):
                last = time.monotonic()
            await asyncio.sleep(0)
    return time.monotonic() - start
