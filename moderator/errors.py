"""One root for the project's exceptions.

Bad input is data, not an exception that escapes: it becomes a dead letter with an `InvalidRecord`
reason. A broken dependency is an outage (`retriable`); anything else is a bug and crashes loudly.
"""

from __future__ import annotations


class ModeratorError(Exception):
    """Root of every error this project raises on purpose."""

    retriable = False


class ConfigError(ModeratorError):
    """A setting is missing or invalid; the message names the setting."""


class ModelError(ModeratorError):
    """A model directory does not meet the contract (README.md, "The default model")."""


class PolicyError(ModeratorError):
    """A policy file is invalid or names a label the model does not have."""


class InvalidRecord(ModeratorError):
    """An inbound record that cannot be moderated; it goes to the dead-letter topic."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KafkaConnectError(ModeratorError):
    """A Kafka client could not connect or authenticate at start-up; the message says why."""

    retriable = True
