"""`moderator dev` and `moderator demo`, added to the CLI through the `moderator.commands` entry
point. Heavy imports wait until a command runs, so `moderator run` pays nothing for them."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from moderator import loop
from moderator.cli import log_flags, say, serve, topic_partitions
from moderator.config import add_setting_flags, settings_from_args
from moderator.redaction import protect


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `dev` and `demo` to the `moderator` command line."""
    dev = sub.add_parser(
        "dev", help="embedded broker + Redis + the processor, in the foreground (the dev extra)"
    )
    dev.add_argument("--kafka-port", type=int, default=9092)
    dev.add_argument("--redis-port", type=int, default=6379)
    dev.add_argument("--partitions", type=int, default=4, help="partitions of the topics")
    add_setting_flags(dev)
    log_flags(dev, argparse.SUPPRESS)
    dev.set_defaults(command=run_dev)

    demo = sub.add_parser("demo", help="moderator dev + a burst of realistic chat + a report")
    demo.add_argument("--rate", type=float, default=100.0, help="messages per second")
    demo.add_argument("--duration", type=float, default=15.0, help="seconds of traffic")
    demo.add_argument("--dup-ratio", type=float, default=0.4, help="share of repeated lines")
    demo.add_argument("--malformed-ratio", type=float, default=0.02, help="share of bad records")
    demo.set_defaults(command=run_demo)


def run_dev(args: argparse.Namespace) -> int:
    """The embedded stack and one moderator in the foreground, until Ctrl+C / SIGTERM."""
    from devstack.embedded import EmbeddedKafka, EmbeddedRedis, broker_binary

    # The embedded stack ignores MODERATOR_KAFKA_BOOTSTRAP / MODERATOR_REDIS_URL: it is its own.
    base = settings_from_args(args)
    protect(base.secrets())
    broker_binary()  # without the dev extra, say so before starting anything
    base.check_model_dir()
    with contextlib.ExitStack() as stack:
        say(f"starting kafka (tansu, in-memory) on 127.0.0.1:{args.kafka_port} …")
        kafka = stack.enter_context(EmbeddedKafka(args.kafka_port))
        say(f"kafka    {kafka.bootstrap}  (tansu, in-memory)")
        say(f"starting redis on 127.0.0.1:{args.redis_port} …")
        redis = stack.enter_context(EmbeddedRedis(args.redis_port))
        say(f"redis    {redis.url}")
        settings = base.replace(kafka_bootstrap=kafka.bootstrap, redis_url=redis.url)
        return loop.run(serve(settings, topic_partitions(settings, args.partitions)))


def run_demo(args: argparse.Namespace) -> int:
    from devstack.demo import run_demo

    return run_demo(
        rate=args.rate,
        duration_s=args.duration,
        dup_ratio=args.dup_ratio,
        malformed_ratio=args.malformed_ratio,
    )
