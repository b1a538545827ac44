"""What every command's parser is built from: subcommands whose --help ends with examples, the
logging flags every command takes, and a flag per setting (moderator/config.py) read back into
`Settings`."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import textwrap
from collections.abc import Collection
from typing import Any, cast

from moderator import logs
from moderator.config import ENV_PREFIX, HELP, Settings
from moderator.logs import LOG_FORMATS, LOG_LEVELS

log = logging.getLogger("moderator")

# How to reach Kafka: the settings every command that reads or writes a topic offers.
KAFKA_CONNECTION = (
    "kafka_bootstrap",
    "kafka_security_protocol",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password",
    "kafka_ssl_cafile",
    "kafka_ssl_certfile",
    "kafka_ssl_keyfile",
)


def say(line: str) -> None:
    """A progress line on stdout, flushed at once (start-up must never look silent); with JSON
    logs, a log line instead, so a log shipper reads nothing but JSON."""
    if logs.writes_json():
        log.info("%s", line)
    else:
        print(line, flush=True)


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


def _shown(default: object) -> object:
    """A setting's default as its flag's help shows it (a CPU set in taskset's notation)."""
    if isinstance(default, frozenset):
        return ",".join(str(cpu) for cpu in sorted(default)) or "any"
    return default


def add_setting_flags(parser: argparse.ArgumentParser, only: Collection[str] = ()) -> None:
    """One `--flag` per setting (`only` those named, if any: a command offers the settings it
    reads), each defaulting to 'not given' so the environment applies."""
    group = parser.add_argument_group("settings (each also read from MODERATOR_<NAME>)")
    for f in (f for f in dataclasses.fields(Settings) if not only or f.name in only):
        flag = "--" + f.name.replace("_", "-")
        env_name = ENV_PREFIX + f.name.upper()
        group.add_argument(
            flag,
            dest=f.name,
            default=None,
            metavar=f.name.split("_")[-1].upper(),
            help=f"{HELP[f.name]} [{env_name}, default: {_shown(f.default)}]",
        )


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(Settings) if hasattr(args, f.name)
    }
    overrides.update({k: v for k, v in extra.items() if v is not None})
    return Settings.from_env(**overrides)
