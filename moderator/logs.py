"""Log lines an operator can ship: text for a terminal, or one JSON object per line.

Only the command line configures logging (cli.py). A JSON line carries `timestamp` (UTC, ISO 8601),
`level`, `logger`, `message` and `pid`, then any ids the log call passed as `extra` (`IDS`), then
`exception` with the traceback. Secrets are scrubbed before either formatter runs (redaction.py).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime

import orjson

from moderator.errors import ConfigError

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Ids a log call may attach with `extra={...}`; a JSON line carries them as their own fields.
IDS = ("worker", "group_id", "topic", "partition", "offset", "message_id", "channel_id")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_settings(
    environ: Mapping[str, str] | None = None,
    *,
    log_format: str | None = None,
    log_level: str | None = None,
) -> tuple[str, int]:
    """(format, level) from `--log-format` / `--log-level` or MODERATOR_LOG_FORMAT / _LOG_LEVEL.

    Apart from `Settings` (config.py): logging is set up before a command builds its settings,
    and for commands (score, model) that have none.
    """
    environ = os.environ if environ is None else environ
    fmt = (log_format or environ.get("MODERATOR_LOG_FORMAT") or "text").lower()
    level = (log_level or environ.get("MODERATOR_LOG_LEVEL") or "INFO").upper()
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"MODERATOR_LOG_FORMAT: {fmt!r} is not {'|'.join(LOG_FORMATS)}")
    if level not in LOG_LEVELS:
        raise ConfigError(f"MODERATOR_LOG_LEVEL: {level!r} is not {'|'.join(LOG_LEVELS)}")
    return fmt, logging.getLevelName(level)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback stays inside its string)."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, object] = {
            "timestamp": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in IDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return orjson.dumps(line, default=str).decode()


def configure(log_format: str, level: int, *, verbose: bool = False) -> None:
    """Log to stderr at `level` (DEBUG with `verbose`), unless the root logger already has a
    handler (an embedding program's, or a test runner's: left alone, as `basicConfig` does).
    aiokafka logs from WARNING unless verbose: its INFO lines narrate every rebalance."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=logging.DEBUG if verbose else level, handlers=[handler])
    aiokafka_level = logging.DEBUG if verbose else max(level, logging.WARNING)
    logging.getLogger("aiokafka").setLevel(aiokafka_level)


def writes_json() -> bool:
    """Whether the log goes out as JSON lines (`configure` set it up so): then anything meant for
    the operator goes through the log too, so a log shipper reads nothing but JSON."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
