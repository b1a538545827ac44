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
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from loadgen.child import StdoutReader, is_ready, moderator_env, read_status_kb
from loadgen.kafka import TopicSet
from moderator.embedded import EmbeddedKafka, terminate

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


@dataclass
class ModeratorProc:
    """One `moderator run` child process."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_s: float
    stdout: StdoutReader
    exit_code: int | None = None

    @property
    def metrics_port(self) -> int | None:
        ports = self.stdout.metrics_ports
        return ports[0] if ports else None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def count_log(self, needle: str) -> int:
        return sum(1 for line in self.log_text().splitlines() if needle in line)

    def metrics_text(self) -> str | None:
        """The /metrics body, or None when the process does not answer."""
        if self.metrics_port is None:
            return None
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body: bytes = response.read()
                return body.decode()
        except OSError:
            return None

    def metric(self, prefix: str) -> float | None:
        """Sum of the samples whose line starts with `prefix` (None if unreachable)."""
        text = self.metrics_text()
        return None if text is None else metric_sum(text, prefix)

    def ready(self) -> bool:
        return self.metrics_port is not None and is_ready(self.metrics_port)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Block until /readyz answers 200; return the seconds since the process started."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            if self.ready():
                return time.monotonic() - self.started_s
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def rss_kb(self) -> int | None:
        """VmRSS of the process, in kB (None once it is gone)."""
        return read_status_kb(self.pid, ["VmRSS"]).get("VmRSS")

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        if self.alive():
            self.proc.kill()
        self.exit_code = self.proc.wait()

    def terminate_group(self, timeout_s: float = 60.0) -> tuple[int, float]:
        """SIGTERM to every process of its group at once (systemd's KillMode=control-group),
        then wait; return (exit code, seconds to exit). Kills the group after `timeout_s`."""
        start = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        self.exit_code = code
        return code, time.monotonic() - start

    def terminate(self, timeout_s: float = 60.0) -> tuple[int, float]:
        """SIGTERM and wait; return (exit code, seconds to exit). Kills after `timeout_s`."""
        start = time.monotonic()
        code = self.exit_code = terminate(self.proc, timeout_s)
        return code, time.monotonic() - start


def metric_sum(text: str, prefix: str) -> float:
    """Sum of the Prometheus samples in `text` whose line starts with `prefix`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(prefix) and not line.startswith("#"):
            rest = line[len(prefix) :]
            if rest[:1] not in ("", " ", "{") and not prefix.endswith("}"):
                continue  # `moderator_in_flight` must not match `moderator_in_flight_x`
            total += float(line.rsplit(" ", 1)[1])
    return total


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
            self.bootstrap, self.names, model_dir=self.model_dir, threads=self.threads,
            redis_url=redis_url, **extra,
        )  # fmt: skip


def start_moderator(
    cfg: ModeratorEnv, name: str, log_dir: Path, args: tuple[str, ...] = ()
) -> ModeratorProc:
    """Start `python -m moderator run *args` (not waiting for it to be ready), in a process
    group of its own, so that a scenario can signal the group the way systemd signals a unit."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{cfg.names.group_id}.{name}.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moderator", "run", *args],
            env=cfg.env(),
            stdout=subprocess.PIPE,
            stderr=log_file,
            start_new_session=True,
        )
    assert proc.stdout is not None
    return ModeratorProc(name, proc, log_path, time.monotonic(), StdoutReader(proc.stdout))


def default_log_dir() -> Path:
    return Path(tempfile.gettempdir()) / "moderator-chaos"
