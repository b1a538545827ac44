"""One root for the project's exceptions.

Bad input is data, not an exception that escapes: it becomes a dead letter with an `InvalidRecord`
reason. Anything else that is not one of these errors is a bug and crashes loudly. Each error
carries the exit code a supervisor acts on (sysexits.h): a configuration error is 78 (EX_CONFIG,
not worth a restart), a dependency unreachable at start-up 69 (EX_UNAVAILABLE, restarted).
"""

from __future__ import annotations

EX_UNAVAILABLE = 69
EX_CONFIG = 78


class ModeratorError(Exception):
    """Root of every error this project raises on purpose."""

    exit_code = 2


class ConfigError(ModeratorError):
    """A setting is missing or invalid; the message names the setting."""

    exit_code = EX_CONFIG


class ModelError(ModeratorError):
    """A model directory does not meet the contract (README.md, "The default model")."""

    exit_code = EX_CONFIG


class PolicyError(ModeratorError):
    """A policy file is invalid or names a label the model does not have."""

    exit_code = EX_CONFIG


class InvalidRecord(ModeratorError):
    """An inbound record that cannot be moderated; it goes to the dead-letter topic."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class KafkaConnectError(ModeratorError):
    """A Kafka client could not connect or authenticate at start-up; the message says why."""

    exit_code = EX_UNAVAILABLE


class ListenError(ModeratorError):
    """The metrics endpoint cannot listen on its address (most often: the port is taken)."""

    exit_code = EX_UNAVAILABLE  # usually the previous instance, still exiting
