"""The processes a chaos scenario runs and hurts: the broker, Redis, `moderator run`.

Everything binds to 127.0.0.1. A moderator is the command users run (`python -m moderator run`)
with its settings in the environment; its stderr goes to a log file kept for the report, and its
metrics port is read from the line it prints on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from devstack.child import ModeratorChild, moderator_env
from devstack.embedded import EmbeddedKafka
from loadgen.kafka import TopicSet

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0


class Broker(EmbeddedKafka):
    """The embedded Tansu broker, optionally validating topics against a schema directory.

    Tansu rejects a record that does not match `<schema_dir>/<topic>.json` with INVALID_RECORD:
    a real, broker-side refusal, used to make publishing decisions fail. The schemas are read
    when the broker starts.
    """

    def __init__(self, port: int | None = None, *, schema_dir: Path | None = None) -> None:
        super().__init__(port)
        self.schema_dir = schema_dir

    def _command(self) -> list[str]:
        command = super()._command()
        if self.schema_dir is not None:
            # Tansu resolves a file:// registry against its working directory (and a URL
            # cannot climb out of it), so the broker runs in the schemas' parent directory;
            # `env` execs it, keeping the pid the broker's.
            schema_dir = self.schema_dir.resolve()
            command = ["env", f"--chdir={schema_dir.parent}", *command,
                       "--schema-registry", f"file://./{schema_dir.name}"]  # fmt: skip
        return command

    def freeze(self) -> None:
        """SIGSTOP: the port stays open, every request hangs."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def thaw_quietly(self) -> None:
        """SIGCONT if running (a frozen broker would not stop on SIGTERM)."""
        if self.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        pid = self.pid
        assert pid is not None, "broker not started"
        os.kill(pid, signum)


@dataclass(frozen=True)
class ModeratorEnv:
    """Where one scenario's moderators connect and how they are set."""

    bootstrap: str
    redis_url: str
    names: TopicSet
    model_dir: Path
    threads: int = 1
    extra: tuple[tuple[str, str], ...] = ()  # (setting, value): ("max_batch", "8")

    def env(self) -> dict[str, str]:
        extra = dict(self.extra)  # may override the stage's Redis (redis_url="": none)
        redis_url = extra.pop("redis_url", self.redis_url)
        return moderator_env(
            kafka_bootstrap=self.bootstrap, **asdict(self.names), model_dir=self.model_dir,
            threads=self.threads, redis_url=redis_url, **extra,
        )  # fmt: skip


def start_moderator(
    cfg: ModeratorEnv, name: str, log_dir: Path, args: tuple[str, ...] = ()
) -> ModeratorChild:
    """Start `python -m moderator run *args` (not waiting for it to be ready), in a process
    group of its own, so that a scenario can signal the group the way systemd signals a unit."""
    log_path = log_dir / f"{cfg.names.group_id}.{name}.log"
    child = ModeratorChild(["run", *args], cfg.env(), name=name, log_path=log_path,
                           new_session=True)  # fmt: skip
    return child.start()


def default_log_dir() -> Path:
    return Path(tempfile.gettempdir()) / "moderator-chaos"
