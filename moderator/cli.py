"""`moderator run | score | policy`, and the commands other packages register (`dev`, `demo`,
`model`): the command line. The only place logging is configured."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import IO, Any, cast

import orjson

from moderator import __version__, logs, loop, policy_admin
from moderator.channel_policies import DEFAULT_KEY, layered
from moderator.classifier import Classifier, ModelInfo
from moderator.config import (
    DEFAULT_MODEL_DIR,
    Settings,
    add_setting_flags,
    settings_from_args,
)
from moderator.errors import ConfigError, InvalidRecord, ModeratorError
from moderator.logs import LOG_FORMATS, LOG_LEVELS, log_settings
from moderator.policy import Policy, read_spec
from moderator.progress import Progress
from moderator.records import json_type, required_string
from moderator.redaction import protect, scrub
from moderator.service import Moderator, reader_for
from moderator.topics import ensure_topics
from moderator.verdicts import Reader, decide_texts

log = logging.getLogger("moderator")

# Commands that live outside the runtime package register here (pyproject.toml's entry points):
# `dev` and `demo` (devstack, the embedded broker) and `model` (models, torch). The runtime never
# imports them; each entry point is a function that adds its subcommands to the parser.
COMMANDS = "moderator.commands"
# What `moderator score` reads, said in its help and in every input error.
SCORE_INPUT = 'one JSON object per line with a string field "text", e.g. {"text": "gg wp"}'


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


# How to reach Kafka. Each `moderator policy` command reads these and the policies topic; `put`
# and `list` judge policies over the policy file; `put` and `delete` create the topic when it
# is missing, so topic-creation settings apply to them (a name that is no setting is skipped).
KAFKA_CONNECTION = ("kafka_bootstrap", "kafka_security_protocol", "kafka_sasl_mechanism",
                    "kafka_sasl_username", "kafka_sasl_password", "kafka_ssl_cafile",
                    "kafka_ssl_certfile", "kafka_ssl_keyfile")  # fmt: skip
POLICY_SETTINGS = {
    "put": (*KAFKA_CONNECTION, "policy_topic", "policy", "topic_replication"),
    "get": (*KAFKA_CONNECTION, "policy_topic"),
    "delete": (*KAFKA_CONNECTION, "policy_topic", "topic_replication"),
    "list": (*KAFKA_CONNECTION, "policy_topic", "policy"),
}
CHANNEL_HELP = "a channel id, or * for the default of every channel (quote it: '*')"


def command(
    sub: argparse._SubParsersAction[Any],
    name: str,
    help_text: str,
    examples: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with `examples` (lines kept as written)."""
    return cast(
        argparse.ArgumentParser,
        sub.add_parser(
            name,
            help=help_text,
            description=description or help_text,
            epilog="examples:\n" + textwrap.indent(textwrap.dedent(examples).strip(), "  "),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        ),
    )


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

    run = command(sub, "run", "the processor, against any Kafka and Redis", """
        moderator run --kafka-bootstrap kafka-1:9092,kafka-2:9092 --redis-url redis://cache:6379/0
        MODERATOR_KAFKA_BOOTSTRAP=kafka:9092 moderator run --create-topics
        moderator run --workers 4 --threads 1    # 4 processes in one group, one core each
    """)  # fmt: skip
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

    score = command(sub, "score", "JSON lines with `text` on stdin, decisions on stdout", """
        echo '{"text": "gg wp, that clutch was insane"}' | moderator score
        moderator score < chat.jsonl > decisions.jsonl
        moderator score --policy my-policy.toml --max-windows 4 < chat.jsonl
    """, description=f"""\
Decide chat lines without Kafka or Redis, with the model and policy `run` would use.

input (stdin): {SCORE_INPUT}.
  message_id, channel_id and user_id are copied to the output; blank lines are skipped.
output (stdout): one decision per input line, in order (action, reason, severity, scores,
  model, policy, span, truncated, language). A line that is not such an object gets
  {{"line": N, "error": {{"code": ..., "message": ...}}}} instead, and the exit code is 1.
On a terminal, stderr shows a progress bar; piped or redirected, nothing.""")  # fmt: skip
    score.add_argument("--model", type=Path, default=None, help="model directory")
    score.add_argument("--policy", type=Path, default=None, help="policy file (TOML or JSON)")
    score.add_argument("--threads", type=int, default=None, help="intra-op threads")
    score.add_argument("--batch", type=int, default=32, help="lines scored together")
    score.add_argument(
        "--max-windows",
        type=int,
        default=None,
        help="windows read per message [MODERATOR_MAX_WINDOWS]",
    )
    log_flags(score, argparse.SUPPRESS)
    score.set_defaults(command=_cmd_score)

    pol = command(sub, "policy", "per-channel policies on the policies topic", """
        moderator policy put speedrun speedrun.json
        moderator policy put '*' house-default.toml
        moderator policy list
        moderator policy get speedrun
        moderator policy delete speedrun
    """)  # fmt: skip
    pol_sub = pol.add_subparsers(required=True, metavar="ACTION")
    for name, help_text, args_, examples in (
        (
            "put",
            "validate a policy file (TOML or JSON) over the default in effect, then publish it "
            "for CHANNEL",
            ("channel", "file"),
            "moderator policy put speedrun speedrun.json\nmoderator policy put '*' default.toml",
        ),
        ("get", "print CHANNEL's policy, as written, as JSON", ("channel",),
         "moderator policy get speedrun"),
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
    ):  # fmt: skip
        cmd = command(pol_sub, name, help_text, examples)
        for arg in args_:
            if arg == "file":
                cmd.add_argument(arg, type=Path, help="the policy, a TOML or JSON file")
            else:
                cmd.add_argument(arg, help=CHANNEL_HELP)
        add_setting_flags(cmd, POLICY_SETTINGS[name])
        log_flags(cmd, argparse.SUPPRESS)
        cmd.set_defaults(command=_cmd_policy, action=name)

    for plugin in sorted(entry_points(group=COMMANDS), key=lambda ep: ep.name):
        plugin.load()(sub)
    return parser


def log_flags(parser: argparse.ArgumentParser, default: object = None) -> None:
    """`--log-format` and `--log-level`, before or after the command (`moderator run --log-…`);
    a command's copy defaults to SUPPRESS so it does not erase the value given before it."""
    parser.add_argument(
        "--log-format",
        default=default,
        choices=LOG_FORMATS,
        help="text | json lines [MODERATOR_LOG_FORMAT, default: text]",
    )
    parser.add_argument(
        "--log-level",
        default=default,
        type=str.upper,
        choices=LOG_LEVELS,
        help="DEBUG | INFO | WARNING | ERROR [MODERATOR_LOG_LEVEL, default: INFO]",
    )


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


def say(line: str) -> None:
    """A progress line on stdout, flushed at once (start-up must never look silent); with JSON
    logs, a log line instead, so a log shipper reads nothing but JSON."""
    if logs.writes_json():
        log.info("%s", line)
    else:
        print(line, flush=True)


async def create_topics(settings: Settings, topics: dict[str, int]) -> None:
    await ensure_topics(settings.kafka_options(), topics, replication=settings.topic_replication)


def topic_partitions(settings: Settings, partitions: int) -> dict[str, int]:
    return {settings.in_topic: partitions, settings.out_topic: partitions, settings.dlq_topic: 1}


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
            print(f"no policies on {topic}: every channel gets {state.book.default.ident}",
                  file=sys.stderr)  # fmt: skip
    return 0


# -- score -------------------------------------------------------------------------------------


def _cmd_score(args: argparse.Namespace) -> int:
    settings = Settings.from_env(
        model_dir=args.model,
        threads=args.threads,
        policy=args.policy,
        max_windows=args.max_windows,
    )
    settings.check_model_dir()
    classifier = Classifier(settings.model_dir, threads=settings.effective_threads)
    reader = reader_for(settings, classifier)  # once: the language gate takes ~0.5 s to load
    policy = Policy.load(settings.policy)
    policy.check_labels(classifier.labels)
    failures = 0
    progress = Progress(sys.stderr, sys.stdin)
    for first_line, chunk in _chunks(sys.stdin, max(args.batch, 1)):
        failures += decide_lines(chunk, reader, policy, sys.stdout, first_line=first_line)
        progress.update(len(chunk), sum(len(line.encode()) for line in chunk))
    progress.close()
    if failures:
        print(
            f"moderator: {failures} line(s) not decided (their 'error' on stdout names the "
            f"line); the input is {SCORE_INPUT}",
            file=sys.stderr,
        )
    return 1 if failures else 0


def _chunks(stream: IO[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """Runs of consecutive lines holding `size` non-blank ones (the last may hold fewer), each
    with the number of its first line, so that errors can name their line."""
    chunk: list[str] = []
    first = kept = 0
    for number, line in enumerate(stream, 1):
        first = first or number
        chunk.append(line)
        kept += bool(line.strip())
        if kept == size:
            yield first, chunk
            chunk, first, kept = [], 0, 0
    if kept:
        yield first, chunk


def score_input(line: str) -> dict[str, Any]:
    """One input line of `moderator score` as a JSON object with a string `text`, or
    InvalidRecord with the code a dead letter would get (records.py) and what was expected."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        why = f"not JSON ({exc.msg} at column {exc.colno})"
        raise InvalidRecord("invalid_json", f"{why}; expected {SCORE_INPUT}") from None
    if not isinstance(data, dict):
        why = f"JSON {json_type(data)}, not an object"
        raise InvalidRecord("not_object", f"{why}; expected {SCORE_INPUT}")
    try:
        required_string(data, "text")
    except InvalidRecord as exc:
        raise InvalidRecord(exc.code, f"{exc.message}; expected {SCORE_INPUT}") from None
    return data


def decide_lines(
    lines: list[str], reader: Reader, policy: Policy, out: IO[str], *, first_line: int = 1
) -> int:
    """Write one decision (or one error naming its line number) per non-blank line, in order;
    return the error count. `lines` are consecutive input lines from number `first_line`."""
    rows: list[dict[str, object]] = []
    texts: list[str] = []
    for number, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            data = score_input(line)
        except InvalidRecord as exc:
            message = f"line {number}: {exc.message}"
            rows.append({"line": number, "error": {"code": exc.code, "message": message}})
            continue
        row: dict[str, object] = {
            k: data[k] for k in ("message_id", "channel_id", "user_id") if k in data
        }
        row["text"] = data["text"]
        rows.append(row)
        texts.append(data["text"])
    decided = iter(decide_texts(reader, policy, texts))
    for row in rows:
        if "error" not in row:
            judged = next(decided)
            verdict = judged.verdict
            row.update(
                action=verdict.action,
                reason=verdict.reason,
                severity=verdict.severity,
                scores={k: round(v, 4) for k, v in judged.scores.items()},
                model=reader.classifier.info.ident,
                policy=policy.ident,
                span=judged.span,
                truncated=judged.truncated,
            )
            if judged.language is not None:
                row["language"] = judged.language
        out.write(orjson.dumps(row).decode() + "\n")
    out.flush()
    return sum(1 for row in rows if "error" in row)
