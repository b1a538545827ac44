"""Keep secrets out of every log line and error message, whichever library writes it.

Our own code never formats a secret, but aiokafka, redis-py and tracebacks print what they were
given (aiokafka's debug log shows the SASL PLAIN bytes); a filter on the root handlers is the one
place that sees every line before it is written. Each secret is scrubbed in the forms a log line
may carry it: as is, URL-encoded, and inside the repr of a str or of its UTF-8 bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

_secrets: set[str] = set()


def url_secrets(url: str) -> list[str]:
    """The password in `url` (user info, or a `password=` query value) in every spelling a line
    may show: as written, and decoded the ways redis-py (unquote) and forms (unquote_plus) do."""
    parts = urlsplit(url)
    raw = []
    if parts.password:
        raw.append(parts.password)
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if unquote_plus(key) == "password" and value:
            raw.append(value)
    return [form for value in raw for form in (value, unquote(value), unquote_plus(value))]


def redis_url_problem(url: str) -> str | None:
    """What makes `url` no Redis URL, never echoing it (it may hold a password); None if fine."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        return "must be a redis://, rediss:// or unix:// URL, or empty"
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        parts = parts._replace(fragment="x")
    if parts.fragment:
        return (
            "is not a valid URL: percent-encode '#', '/', '?' and '%' in the user name and password"
        )
    return None


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by `***` (longest first, so none is left half-shown)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def redact_url(url: str) -> str:
    """`url` with any password replaced by `***` (for logs and reprs)."""
    return redact(url, url_secrets(url))


def forms(secret: str) -> set[str]:
    """The ways `secret` can appear in text: plain, URL-encoded, escaped by repr()."""
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret),
        repr(secret)[1:-1],
        repr(secret.encode())[2:-1],
    } - {""}


class RedactSecrets(logging.Filter):
    """Replaces each protected secret in a record (message, arguments, traceback) by `***`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a wrong log call: logging reports it
            return True
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
    """Scrub `secrets` from everything the root logger's handlers write from now on.

    Call it after logging is configured: a handler added later is not filtered.
    """
    for secret in secrets:
        if secret:
            _secrets.update(forms(secret))
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def scrub(text: str) -> str:
    """`text` without any protected secret (for messages printed outside logging)."""
    return redact(text, _secrets)
