"""`moderator run | score | policy`, and the commands other packages register (`dev`, `demo`,
`model`): the command line. The only place logging is configured."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import orjson

from moderator import __version__, logs, loop
from moderator.admin import override_admin, policy_admin, score, verdict_export
from moderator.commandline import (
    KAFKA_CONNECTION,
    add_setting_flags,
    command,
    log_flags,
    say,
    settings_from_args,
)
from moderator.config import DEFAULT_MODEL_DIR, Settings
from moderator.decide.classifier import ModelInfo
from moderator.errors import ConfigError, ModeratorError
from moderator.kafka.topics import ensure_topics
from moderator.logs import log_settings
from moderator.policy.channels import DEFAULT_KEY, layered
from moderator.policy.rules import Policy, read_spec
from moderator.redaction import protect, scrub
from moderator.service import Moderator

log = logging.getLogger("moderator")

# Commands that live outside the runtime package register here (pyproject.toml's entry points):
# `dev` and `demo` (devstack, the embedded broker) and `model` (models, torch). The runtime never
# imports them; each entry point is a function that adds its subcommands to the parser.
COMMANDS = "moderator.commands"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: this process's arguments); the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = argv  # `run --workers` gives its workers the same command line
    try:
        log_format, level = log_settings(log_format=args.log_format, log_level=args.log_level)
    except ModeratorError as exc:
        print(f"moderator: error: {exc}", file=sys.stderr)
        return exc.exit_code
    logs.configure(log_format, level, verbose=args.verbose)
    try:
        code: int = args.command(args)
    except ModeratorError as exc:  # the exit code says whether a restart can help (errors.py)
        if logs.writes_json():
            log.error("moderator: error: %s", scrub(str(exc)))
        else:
            print(f"moderator: error: {scrub(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception:  # a bug: crash loudly, but through the logging that scrubs secrets
        log.exception("moderator: unexpected error")
        return 1
    return code


# Each `moderator policy` command reads the Kafka connection and the policies topic; `put` and
# `list` judge policies over the policy file; `put` and `delete` create the topic when it is
# missing, so the topic-creation setting applies to them.
POLICY_SETTINGS = {
    "put": (*KAFKA_CONNECTION, "policy_topic", "policy", "topic_replication"),
    "get": (*KAFKA_CONNECTION, "policy_topic"),
    "delete": (*KAFKA_CONNECTION, "policy_topic", "topic_replication"),
    "list": (*KAFKA_CONNECTION, "policy_topic", "policy"),
}
CHANNEL_HELP = "a channel id, or * for the default of every channel (quote it: '*')"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moderator",
        description="Real-time chat moderation: Kafka in, decisions out.",
        epilog="""examples:
  moderator dev                                  # a broker, Redis and the moderator, here
  moderator run --kafka-bootstrap kafka:9092     # against your Kafka and Redis
  echo '{"text": "gg wp"}' | moderator score     # decide lines without Kafka
  moderator policy list                          # per-channel policies in effect
  moderator COMMAND --help                       # a command's options and examples""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    log_flags(parser)
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="the version and the default model, then exit"
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    _register_run(sub)
    score.register(sub)
    override_admin.register(sub)
    verdict_export.register(sub)
    _register_policy(sub)
    for plugin in sorted(entry_points(group=COMMANDS), key=lambda ep: ep.name):
        plugin.load()(sub)
    return parser


def _register_run(sub: argparse._SubParsersAction[Any]) -> None:
    """`moderator run`: the processor."""
    run = command(
        sub,
        "run",
        "the processor, against any Kafka and Redis",
        """
        moderator run --kafka-bootstrap kafka-1:9092,kafka-2:9092 --redis-url redis://cache:6379/0
        MODERATOR_KAFKA_BOOTSTRAP=kafka:9092 moderator run --create-topics
        moderator run --workers 4 --threads 1    # 4 processes in one group, one core each
    """,
    )
    add_setting_flags(run)
    run.add_argument("--create-topics", action="store_true", help="create missing topics first")
    # The old spelling of --topic-partitions (MODERATOR_TOPIC_PARTITIONS), still accepted.
    run.add_argument("--partitions", type=int, dest="topic_partitions", help=argparse.SUPPRESS)
    run.add_argument(
        "--workers", type=int, default=1, help="processes in the group, pinned to disjoint cores"
    )
    run.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)  # workers.py
    log_flags(run, argparse.SUPPRESS)
    run.set_defaults(command=_cmd_run)


def _register_policy(sub: argparse._SubParsersAction[Any]) -> None:
    """`moderator policy put | get | delete | list`: per-channel policies on their topic."""
    pol = command(
        sub,
        "policy",
        "per-channel policies on the policies topic",
        """
        moderator policy put speedrun speedrun.json
        moderator policy put '*' house-default.toml
        moderator policy list
        moderator policy get speedrun
        moderator policy delete speedrun
    """,
    )
    pol_sub = pol.add_subparsers(required=True, metavar="ACTION")
    for name, help_text, args_, examples in (
        (
            "put",
            "validate a policy file (TOML or JSON) over the default in effect, then publish it "
            "for CHANNEL",
            ("channel", "file"),
            "moderator policy put speedrun speedrun.json\nmoderator policy put '*' default.toml",
        ),
        (
            "get",
            "print CHANNEL's policy, as written, as JSON",
            ("channel",),
            "moderator policy get speedrun",
        ),
        (
            "delete",
            "remove CHANNEL's policy (a tombstone): the default applies again",
            ("channel",),
            "moderator policy delete speedrun",
        ),
        (
            "list",
            "every channel with a policy, and the name@version that decides it",
            (),
            "moderator policy list\nmoderator policy list --kafka-bootstrap kafka:9092",
        ),
    ):
        cmd = command(pol_sub, name, help_text, examples)
        for arg in args_:
            if arg == "file":
                cmd.add_argument(arg, type=Path, help="the policy, a TOML or JSON file")
            else:
                cmd.add_argument(arg, help=CHANNEL_HELP)
        add_setting_flags(cmd, POLICY_SETTINGS[name])
        log_flags(cmd, argparse.SUPPRESS)
        cmd.set_defaults(command=_cmd_policy, action=name)


class _Version(argparse.Action):
    """`--version`: the package version and the shipped model's ident, read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        try:
            model = ModelInfo.load(DEFAULT_MODEL_DIR).ident
        except ModeratorError as exc:
            model = f"unreadable ({exc})"
        print(f"moderator {__version__} (default model {model})")
        parser.exit()


# -- run / dev ---------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    settings.check_model_dir()
    topics = topic_partitions(settings, settings.topic_partitions) if args.create_topics else None
    if args.workers > 1:
        from moderator.workers import run_workers

        if topics:
            loop.run(create_topics(settings, topics))
        argv = args.argv[args.argv.index("run") + 1 :]
        return run_workers(
            args.workers, argv, threads=settings.threads, metrics_port=settings.metrics_port
        )
    return loop.run(serve(settings, topics, supervised=args.supervised))


async def create_topics(settings: Settings, topics: dict[str, int]) -> None:
    await ensure_topics(settings.kafka_options(), topics, replication=settings.topic_replication)


def topic_partitions(settings: Settings, partitions: int) -> dict[str, int]:
    """The topics `--create-topics` and `moderator dev` make (the policies topic makes itself)."""
    topics = (settings.in_topic, settings.out_topic, settings.review_topic, settings.verdict_topic)
    return {**dict.fromkeys(topics, partitions), settings.dlq_topic: 1}


async def serve(
    settings: Settings, topics: dict[str, int] | None, *, supervised: bool = False
) -> int:
    """Run one moderator until SIGINT/SIGTERM; a second signal exits at once.

    A `supervised` worker (`run --workers`) may get each SIGTERM twice, from systemd or a
    terminal and from its supervisor, so there only a second SIGINT forces an exit.
    """
    if topics:
        say(f"creating topics {', '.join(topics)} (if missing) …")
        await create_topics(settings, topics)
    info = ModelInfo.load(settings.model_dir)
    say(f"loading model {info.ident} (sha256 {info.sha256[:12]}…) from {settings.model_dir} …")
    moderator = Moderator(settings)
    stopping: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        if stopping and supervised and signum == signal.SIGTERM:
            log.info("SIGTERM again: already finishing in-flight work (SIGINT to force)")
            return
        if stopping:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(130)
        force = "SIGINT" if supervised else "again"
        log.info("%s: finishing in-flight work (%s to force)", signal.Signals(signum).name, force)
        stopping.append(asyncio.create_task(moderator.stop()))

    await moderator.start()  # a signal before this point ends start-up the default way
    running = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(signum, on_signal, signum)
    host = settings.metrics_host.strip("[]")
    host = f"[{host}]" if ":" in host else host
    say(f"metrics  http://{host}:{moderator.metrics_port}/metrics (/healthz, /readyz)")
    say(
        f"topics   {settings.in_topic} → {settings.out_topic}, dead letters → "
        f"{settings.dlq_topic}; Ctrl+C to stop"
    )
    await moderator.run()
    for task in stopping:
        await task
    return 0


# -- policy -------------------------------------------------------------------------------------


def _cmd_policy(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    protect(settings.secrets())
    if not settings.policy_topic:
        raise ConfigError("MODERATOR_POLICY_TOPIC is empty: there is no policies topic")
    topic, kafka = settings.policy_topic, settings.kafka_options()
    state = loop.run(policy_admin.read_state(kafka, topic, Policy.load(settings.policy)))
    if args.action == "delete":
        if args.channel not in state.live.keys() | state.refused.keys():
            say(f"{topic}: {args.channel} has no policy, nothing removed (the default applies)")
            return 0
        loop.run(policy_admin.write(kafka, topic, args.channel, None, settings.topic_replication))
        say(f"{topic}: {args.channel} removed (the default applies)")
    elif args.action == "put":
        spec = read_spec(args.file)
        below = state.book.base if args.channel == DEFAULT_KEY else state.book.default
        checked = layered(below.spec, spec, str(args.file))
        loop.run(policy_admin.write(kafka, topic, args.channel, spec, settings.topic_replication))
        say(f"{topic}: {args.channel} → {checked.ident}")
    elif args.action == "get":
        if args.channel not in state.live:
            print(f"moderator: no policy for {args.channel!r} on {topic}", file=sys.stderr)
            return 1
        print(orjson.dumps(state.live[args.channel], option=orjson.OPT_INDENT_2).decode())
    else:  # list: what the moderators make of each key's last record
        keys = sorted(state.live.keys() | state.refused.keys())
        for key in keys:
            print(f"{key}\t{state.listed(key)}")
        if not keys:  # on stderr: stdout stays one line per policy for scripts
            print(
                f"no policies on {topic}: every channel gets {state.book.default.ident}",
                file=sys.stderr,
            )
    return 0
