"""`moderator demo`: `moderator dev` in a child process (a second model as its shadow), a burst of
realistic chat, a report.

The moderator runs in its own process (as it would in production) so the load generator's
own work does not share its event loop or its GIL.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from devstack import demo_shadow
from devstack.child import ModeratorChild, Samples, answers
from devstack.embedded import broker_binary, free_port
from loadgen.cli import print_progress
from loadgen.config import LoadConfig
from loadgen.runner import run_load
from loadgen.summary import LoadSummary, format_summary
from moderator import loop
from moderator.config import Settings

READY_TIMEOUT_S = 120


def run_demo(*, rate: float, duration_s: float, dup_ratio: float, malformed_ratio: float) -> int:
    kafka_port, redis_port, metrics_port = free_port(), free_port(), free_port()
    args = ["dev", "--kafka-port", str(kafka_port), "--redis-port", str(redis_port),
            "--metrics-port", str(metrics_port)]  # fmt: skip
    broker_binary()  # without the dev extra, say so before starting anything
    from devstack import demo_loop  # the stock Kafka client it uses comes with the dev extra

    # The user's own MODERATOR_* settings (threads, budget, policy, …) apply to the demo too;
    # the review timeout is the demo's, so held messages time out while it runs.
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="moderator-demo-") as tmp:
        policy = demo_loop.demo_policy(Path(tmp), env.get("MODERATOR_POLICY"))
        shadow_args, shadow = demo_shadow.shadow_args(Path(tmp), env)
        args += ["--policy", str(policy), *shadow_args]
        print("starting the embedded stack and the moderator in a child process:", flush=True)
        print("$", " ".join(["moderator", *args]), flush=True)
        dev = ModeratorChild(args, env, name="moderator dev", echo=True)
        with dev.start():
            _wait_ready(dev, metrics_port)
            print(f"\nproducing {round(rate * duration_s)} messages: {rate:g} msg/s for "
                  f"{duration_s:g}s of chat ({dup_ratio:.0%} repeats, {malformed_ratio:.0%} "
                  f"malformed records, {demo_loop.HELD_RATIO:.0%} held for review: a scripted "
                  f"moderator answers them, or they time out after "
                  f"{demo_loop.REVIEW_TIMEOUT_S:g} s; a second model scores each beside the "
                  f"one that decides), then waiting for every decision …\n",
                  flush=True)  # fmt: skip
            config = LoadConfig(
                bootstrap=f"127.0.0.1:{kafka_port}",
                rate=rate,
                duration_s=duration_s,
                dup_ratio=dup_ratio,
                toxic_ratio=0.1,
                malformed_ratio=malformed_ratio,
                held_ratio=demo_loop.HELD_RATIO,
                drain_timeout_s=30,
                seed=7,
            )
            summary, loop_report, shadow_report = loop.run(_drive(config, dev, shadow))
            print("\n" + format_summary(summary))
            print(_moderator_report(dev.scrape()))
            print(loop_report)
            print(shadow_report)
    print(f"moderator dev stopped on SIGTERM with exit code {dev.exit_code}")
    return 0 if summary.missing == 0 and dev.exit_code == 0 else 1


async def _drive(
    config: LoadConfig, dev: ModeratorChild, shadow: str
) -> tuple[LoadSummary, str, str]:
    """The chat, with the scripted moderator answering held messages meanwhile; then a verdict's
    override shown, one user escalated and muted, the loop's report once every held message
    has ended, and the shadow's once its queue is empty."""
    from devstack import demo_loop

    async with demo_loop.reviewer(config.bootstrap) as desk:
        summary = await run_load(config, progress=print_progress)
        repeat = await demo_loop.repeat_a_verdict(config.bootstrap, desk)
        lines = await demo_loop.escalate_a_user(config.bootstrap)
        samples = await demo_loop.wait_for_ends(dev)
        desk.check()
    s = Settings()  # `moderator dev`'s topics
    shadow_samples = await demo_shadow.wait_caught_up(dev)
    disagreement = await demo_shadow.one_disagreement(config.bootstrap, s.shadow_topic, s.in_topic)
    shadow_report = demo_shadow.report(shadow_samples, shadow, disagreement, s.shadow_topic)
    return summary, demo_loop.report(samples, desk, repeat, lines), shadow_report


def _wait_ready(dev: ModeratorChild, metrics_port: int) -> None:
    """/readyz on the port `moderator dev` was given; a word while only /healthz answers."""
    try:
        dev.wait_for(r"^metrics ", timeout_s=READY_TIMEOUT_S)  # the endpoint is up
    except RuntimeError:
        raise SystemExit(f"moderator dev exited with code {dev.proc.poll()}") from None
    if not answers(metrics_port, "/readyz"):
        print("waiting until the moderator is ready (model loaded, partitions assigned) …",
              flush=True)  # fmt: skip
    try:
        dev.wait_ready(READY_TIMEOUT_S)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def _moderator_report(samples: Samples | None) -> str:
    """What the moderator itself counted, read from its /metrics."""
    if samples is None:
        return "moderator /metrics did not answer"

    def by(name: str, label: str) -> str:
        parts = [f"{key} {int(v)}" for key, v in sorted(samples.by(name, label).items())]
        return ", ".join(parts) or "none"

    def total(name: str, **labels: str) -> int:
        return int(samples.total(name, **labels))

    l1_hits = total("moderator_cache_requests_total", level="l1", result="hit")
    redis_hits = total("moderator_cache_requests_total", level="redis", result="hit")
    lookups = total("moderator_cache_requests_total", level="l1")
    batches = samples.total("moderator_batch_size_count")
    batch_mean = samples.total("moderator_batch_size_sum") / batches if batches else 0
    lines = [
        "moderator /metrics",
        f"  consumed        {total('moderator_messages_consumed_total')}",
        f"  decisions       {by('moderator_decisions_total', 'action')}",
        f"  dead letters    {by('moderator_dead_letters_total', 'reason')}",
        f"  cache hits      in-process {l1_hits}, redis {redis_hits} of {lookups} lookups",
        f"  model batches   {int(batches)} (mean size {batch_mean:.2f})",
        f"  over budget     {total('moderator_over_budget_total')}",
    ]
    return "\n".join(lines)
