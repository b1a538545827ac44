"""`moderator dev` and `moderator demo`, added to the CLI through the `moderator.commands` entry
point. Heavy imports wait until a command runs, so `moderator run` pays nothing for them."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moderator import loop
from moderator.cli import serve, topic_partitions
from moderator.commandline import KAFKA_CONNECTION, add_setting_flags, command, log_flags, say
from moderator.config import ENV_PREFIX, Settings
from moderator.redaction import protect

# Settings the embedded stack sets itself (its own plaintext broker, its own Redis): `dev`
# neither offers them nor reads them from the environment.
EMBEDDED = (*KAFKA_CONNECTION, "redis_url")


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `dev` and `demo` to the `moderator` command line."""
    dev = command(sub, "dev",
        "embedded broker + Redis + the processor, in the foreground (the dev extra)", """
        moderator dev
        moderator dev --kafka-port 19092 --redis-port 16379 --metrics-port 9200
        moderator dev --policy my-policy.toml --budget-ms 30
    """, description="""\
A Tansu Kafka broker (in memory) and a Redis server as child processes, the topics (messages,
decisions, dead letters, policies), and one moderator in the foreground; Ctrl+C stops all.
The stack is its own, plaintext at 127.0.0.1 on the ports below: the Kafka connection settings
(--kafka-bootstrap, --kafka-security-protocol, --kafka-sasl-*, --kafka-ssl-*) and --redis-url
are not offered, and their MODERATOR_* variables are ignored; every other setting of
`moderator run` applies.""")  # fmt: skip
    dev.add_argument("--kafka-port", type=int, default=9092, help="the broker's port (9092)")
    dev.add_argument("--redis-port", type=int, default=6379, help="Redis's port (6379)")
    # The old spelling of --topic-partitions, as `run` has it.
    dev.add_argument("--partitions", type=int, dest="topic_partitions", help=argparse.SUPPRESS)
    add_setting_flags(dev, [f.name for f in dataclasses.fields(Settings) if f.name not in EMBEDDED])
    log_flags(dev, argparse.SUPPRESS)
    dev.set_defaults(command=run_dev)

    demo = command(sub, "demo", "moderator dev + a burst of realistic chat + a report", """
        moderator demo
        moderator demo --rate 300 --duration 30 --malformed-ratio 0.05
    """)  # fmt: skip
    demo.add_argument("--rate", type=float, default=100.0, help="messages per second")
    demo.add_argument("--duration", type=float, default=15.0, help="seconds of traffic")
    demo.add_argument("--dup-ratio", type=float, default=0.4, help="share of repeated lines")
    demo.add_argument("--malformed-ratio", type=float, default=0.02, help="share of bad records")
    demo.set_defaults(command=run_demo)


def run_dev(args: argparse.Namespace) -> int:
    """The embedded stack and one moderator in the foreground, until Ctrl+C / SIGTERM."""
    from devstack.embedded import (
        TANSU_FETCH_MAX_WAIT_MS,
        EmbeddedKafka,
        EmbeddedRedis,
        broker_binary,
    )

    base = dev_settings(args)
    protect(base.secrets())
    broker_binary()  # without the dev extra, say so before starting anything
    base.check_model_dir()
    with contextlib.ExitStack() as stack:
        say(f"starting kafka (tansu, in-memory) on 127.0.0.1:{args.kafka_port} …")
        kafka = stack.enter_context(EmbeddedKafka(args.kafka_port))
        say(f"kafka    {kafka.bootstrap}  (tansu, in-memory)")
        say(f"starting redis on 127.0.0.1:{args.redis_port} …")
        # As shipped (deploy/compose.yaml): an append-only file, fsynced every second, no eviction.
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moderator-redis-")))
        redis = stack.enter_context(EmbeddedRedis(args.redis_port, data_dir=data))
        say(f"redis    {redis.url}")
        settings = base.replace(  # a production wait from the shell would be latency here
            kafka_bootstrap=kafka.bootstrap,
            redis_url=redis.url,
            fetch_max_wait_ms=TANSU_FETCH_MAX_WAIT_MS,
        )
        return loop.run(serve(settings, topic_partitions(settings, settings.topic_partitions)))


def dev_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of `args` and the environment, less the EMBEDDED ones' variables: the
    embedded stack is its own (a production MODERATOR_KAFKA_* must not reach it)."""
    ignored = {ENV_PREFIX + name.upper() for name in EMBEDDED}
    environ = os.environ if environ is None else environ
    given = {name: value for name, value in vars(args).items() if name in Settings.__slots__}
    return Settings.from_env({k: v for k, v in environ.items() if k not in ignored}, **given)


def run_demo(args: argparse.Namespace) -> int:
    from devstack.demo import run_demo

    return run_demo(
        rate=args.rate,
        duration_s=args.duration,
        dup_ratio=args.dup_ratio,
        malformed_ratio=args.malformed_ratio,
    )
