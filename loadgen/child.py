"""`python -m moderator run` as a child process: its environment, its stdout, its readiness.

The benchmarks and the chaos scenarios both run the command users run, with settings in the
environment and `MODERATOR_METRICS_PORT=0`; the port each moderator picked is read from the
`metrics http://host:port/metrics` line it prints (one per worker with `--workers`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from loadgen.kafka import TopicSet

METRICS_LINE = re.compile(r"metrics\s+http://\S+:(\d+)/metrics")


def moderator_env(
    bootstrap: str, names: TopicSet, *, model_dir: Path, threads: int, redis_url: str,
    **settings: str,
) -> dict[str, str]:  # fmt: skip
    """This process's environment, without any `MODERATOR_*` of the shell (a run sets what it
    means), plus the moderator's settings; `settings` are further `MODERATOR_<NAME>` values
    (`degraded_mode="off"` → `MODERATOR_DEGRADED_MODE=off`)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MODERATOR_")}
    env = dict(
        inherited,
        MODERATOR_KAFKA_BOOTSTRAP=bootstrap,
        MODERATOR_REDIS_URL=redis_url,
        MODERATOR_IN_TOPIC=names.in_topic,
        MODERATOR_OUT_TOPIC=names.out_topic,
        MODERATOR_DLQ_TOPIC=names.dlq_topic,
        MODERATOR_GROUP_ID=names.group_id,
        MODERATOR_MODEL_DIR=str(model_dir),
        MODERATOR_THREADS=str(threads),
        MODERATOR_METRICS_PORT="0",
    )
    env.update({f"MODERATOR_{name.upper()}": value for name, value in settings.items()})
    return env


class StdoutReader:
    """Reads a child's stdout on a thread: keeps the lines and the metrics ports printed."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.metrics_ports: list[int] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            self.lines.append(line)
            if match := METRICS_LINE.search(line):
                self.metrics_ports.append(int(match.group(1)))


def is_ready(port: int) -> bool:
    """True when the moderator on `port` answers /readyz with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def read_status_kb(pid: int, fields: Sequence[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Memory fields of /proc/PID/status, in kB (empty once the process is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in fields:
                out[name] = int(rest.split()[0])
    return out
