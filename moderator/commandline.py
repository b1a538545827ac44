"""What every command's parser is built from: subcommands whose --help ends with examples, and
the logging flags every command takes."""

from __future__ import annotations

import argparse
import logging
import textwrap
from typing import Any, cast

from moderator import logs
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
