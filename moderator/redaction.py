"""Keep secrets out of every log line and error message, whichever library writes it.

Our own code never formats a secret, but aiokafka, redis-py and tracebacks print what they were
given; a filter on the root handlers is the one place that sees every line before it is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from moderator.config import redact

_secrets: set[str] = set()


class RedactSecrets(logging.Filter):
    """Replaces each protected secret in a record (message, arguments, traceback) by `***`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        message = record.getMessage()
        clean = redact(message, _secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, _secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, _secrets)
        return True


def protect(secrets: Iterable[str]) -> None:
    """Scrub `secrets` from everything the root logger's handlers write from now on."""
    _secrets.update(s for s in secrets if s)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def scrub(text: str) -> str:
    """`text` without any protected secret (for messages printed outside logging)."""
    return redact(text, _secrets)
