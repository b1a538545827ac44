"""The processes a chaos scenario runs and hurts: the broker, Redis, `moderator run`.

Everything binds to 127.0.0.1. A moderator is the command users run (`python -m moderator run`)
with its settings in the environment; its stderr goes to a log file kept for the report, and its
metrics port is read from the line it prints on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from loadgen.kafka import TopicSet
from moderator.embedded import EmbeddedKafka, terminate

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
_METRICS_LINE = re.compile(r"metrics\s+http://[\d.]+:(\d+)/metrics")


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
    metrics_port: int | None = None
    exit_code: int | None = None
    _stdout: list[str] = field(default_factory=list)

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
        if self.metrics_port is None:
            return False
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return int(response.status) == 200
        except OSError:
            return False

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
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        if self.alive():
            self.proc.kill()
        self.exit_code = self.proc.wait()

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
    extra: tuple[tuple[str, str], ...] = ()

    def env(self) -> dict[str, str]:
        env = dict(
            os.environ,
            MODERATOR_KAFKA_BOOTSTRAP=self.bootstrap,
            MODERATOR_REDIS_URL=self.redis_url,
            MODERATOR_IN_TOPIC=self.names.in_topic,
            MODERATOR_OUT_TOPIC=self.names.out_topic,
            MODERATOR_DLQ_TOPIC=self.names.dlq_topic,
            MODERATOR_GROUP_ID=self.names.group_id,
            MODERATOR_MODEL_DIR=str(self.model_dir),
            MODERATOR_THREADS=str(self.threads),
            MODERATOR_METRICS_PORT="0",
        )
        env.update(dict(self.extra))
        return env


def start_moderator(cfg: ModeratorEnv, name: str, log_dir: Path) -> ModeratorProc:
    """Start `python -m moderator run` (not waiting for it to be ready)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{cfg.names.group_id}.{name}.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moderator", "run"],
            env=cfg.env(),
            stdout=subprocess.PIPE,
            stderr=log_file,
        )
    mp = ModeratorProc(name, proc, log_path, time.monotonic())
    assert proc.stdout is not None
    threading.Thread(target=_pump, args=(proc.stdout, mp), daemon=True).start()
    return mp


def _pump(stream: IO[bytes], mp: ModeratorProc) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        mp._stdout.append(line)
        match = _METRICS_LINE.search(line)
        if match:
            mp.metrics_port = int(match.group(1))


def default_log_dir() -> Path:
    return Path(tempfile.gettempdir()) / "moderator-chaos"
