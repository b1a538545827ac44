"""`python -m moderator …` as a child process: the one way the demo, the benchmarks, the chaos
scenarios and the tests start a moderator, and the one way they read its `/metrics`.

A child runs the command users run, with its settings in the environment and
`MODERATOR_METRICS_PORT=0`: each process picks a free port and prints it on a
`metrics  http://host:port/metrics` line (one per worker with `--workers`), which is how its port
is found. Its stdout (and its stderr, unless that goes to a log file) is read on a thread and kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from prometheus_client.parser import text_string_to_metric_families

from devstack.embedded import TANSU_FETCH_MAX_WAIT_MS, terminate
from moderator.workers import SUPERVISED_FLAG

METRICS_LINE = re.compile(r"metrics\s+http://\S+:(\d+)/metrics")
READY_TIMEOUT_S = 120.0


def moderator_env(**settings: object) -> dict[str, str]:
    """This process's environment without the shell's `MODERATOR_*` (a run sets what it means),
    plus each setting as `MODERATOR_<NAME>` (`degraded_mode="off"` → `MODERATOR_DEGRADED_MODE=off`);
    the metrics port defaults to 0 (a free one, printed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODERATOR_")}
    env.update(MODERATOR_METRICS_PORT="0", PYTHONUNBUFFERED="1")
    env.update(MODERATOR_FETCH_MAX_WAIT_MS=str(TANSU_FETCH_MAX_WAIT_MS))  # children run on Tansu
    for name, value in settings.items():
        env[f"MODERATOR_{name.upper()}"] = "" if value is None else str(value)
    return env


class Samples:
    """One scrape of `/metrics`, parsed by prometheus-client's own parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self._samples[sample.name].append((dict(sample.labels), sample.value))

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples called `name` (`…_total`, `…_count`) that carry `labels`."""
        return sum(
            value
            for have, value in self._samples.get(name, ())
            if all(have.get(k) == v for k, v in labels.items())
        )

    def by(self, name: str, label: str) -> dict[str, float]:
        """The samples called `name`, summed per value of `label`."""
        out: dict[str, float] = defaultdict(float)
        for have, value in self._samples.get(name, ()):
            out[have.get(label, "")] += value
        return dict(out)


def scrape(port: int, host: str = "127.0.0.1", timeout_s: float = 2.0) -> Samples | None:
    """`/metrics` of the moderator on `port`, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as reply:
            body: bytes = reply.read()
    except OSError:
        return None
    return Samples(body.decode())


def answers(port: int, path: str, host: str = "127.0.0.1") -> bool:
    """True when the moderator on `port` answers `path` with 200 (503, refused, timeout: False)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=1) as reply:
            return int(reply.status) == 200
    except OSError:
        return False


class ModeratorChild:
    """`python -m moderator ARGS` with `env`: started by `start()` (or `with`), stopped by
    `terminate()`.

    `log_path`: stderr is appended there (kept for a report); without it stderr joins stdout in
    `lines`. `echo`: each line is also written to this process's stdout as it comes (the demo).
    `new_session`: the child leads a process group of its own, so `terminate_group()` can signal
    it and its workers at once, the way systemd signals a unit. `cwd`: where it starts (another
    checkout's root, whose `moderator` package `-m` then imports first: an old commit's benchmark).
    """

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        name: str = "moderator",
        log_path: Path | None = None,
        echo: bool = False,
        new_session: bool = False,
        module: str = "moderator",
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.cwd = cwd
        self.command = [sys.executable, "-m", module, *args]
        self.env = dict(env)
        self.log_path = log_path
        self.echo = echo
        self.new_session = new_session
        self.lines: list[str] = []
        self.metrics_ports: list[int] = []
        self.started_s = 0.0
        self.exit_code: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the process (once: a second call, or `with` after it, changes nothing)."""
        if self._proc is not None:
            return self
        stderr: IO[bytes] | int = subprocess.STDOUT
        with contextlib.ExitStack() as stack:
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                stderr = stack.enter_context(self.log_path.open("ab"))
            self._proc = subprocess.Popen(
                self.command, env=self.env, stdout=subprocess.PIPE, stderr=stderr,
                start_new_session=self.new_session, cwd=self.cwd,
            )  # fmt: skip
        self.started_s = time.monotonic()
        assert self._proc.stdout is not None
        self._reader = threading.Thread(target=self._pump, args=(self._proc.stdout,), daemon=True)
        self._reader.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.terminate()

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        assert self._proc is not None, f"{self.name} not started"
        return self._proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def worker_pids(self) -> list[int]:
        """The processes that moderate: the workers of a `--workers` supervisor (children whose
        command line is marked supervised), or itself (a child of its is its shadow model's)."""
        return sorted(pid for pid in child_pids(self.pid) if _supervised(pid)) or [self.pid]

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout_s: float) -> int:
        """The exit code, once its output is read to the end; kills it (and raises
        TimeoutExpired) if it outlives `timeout_s`."""
        try:
            self.exit_code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = self.proc.wait()
            raise
        finally:
            self._read_to_end()
        return self.exit_code

    def _read_to_end(self, timeout_s: float = 5.0) -> None:
        """After an exit, let the reader take the last lines (a worker it left could keep the
        pipe open: not for longer than `timeout_s`)."""
        if self._reader is not None:
            self._reader.join(timeout_s)

    def terminate(self, timeout_s: float = 60.0) -> tuple[int, float]:
        """SIGTERM and wait; return (exit code, seconds to exit). Kills after `timeout_s`."""
        start = time.monotonic()
        code = self.exit_code = terminate(self.proc, timeout_s)
        self._read_to_end()
        return code, time.monotonic() - start

    def terminate_group(self, timeout_s: float = 60.0) -> tuple[int, float]:
        """SIGTERM to every process of its group at once (needs `new_session`), then wait;
        return (exit code, seconds to exit). Kills the group after `timeout_s`."""
        start = time.monotonic()
        os.killpg(self.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            code = self.proc.wait()
        self.exit_code = code
        self._read_to_end()
        return code, time.monotonic() - start

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        if self.alive():
            self.proc.kill()
        self.exit_code = self.proc.wait()
        self._read_to_end()

    # -- what it says ----------------------------------------------------------------------------

    def _pump(self, stream: IO[bytes]) -> None:
        with stream:
            self._read_lines(stream)
        with self._changed:
            self._changed.notify_all()

    def _read_lines(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            if self.echo:
                print(line, end="", flush=True)
            with self._changed:
                self.lines.append(line)
                if match := METRICS_LINE.search(line):
                    self.metrics_ports.append(int(match.group(1)))
                self._changed.notify_all()

    def output(self, tail: int | None = None) -> str:
        """What it printed (its last `tail` lines), and its log file's text when it has one."""
        lines = list(self.lines)
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                lines += self.log_path.read_text(errors="replace").splitlines(keepends=True)
        return "".join(lines[-tail:] if tail else lines)

    def wait_for(self, pattern: str, count: int = 1, timeout_s: float = 90.0) -> re.Match[str]:
        """The `count`-th match of `pattern` in its stdout, waiting for it; raises if it exits
        or `timeout_s` passes first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = [m for line in self.lines if (m := regex.search(line))]
                if len(found) >= count:
                    return found[count - 1]
                if not self.alive() or time.monotonic() > deadline:
                    why = "exited" if not self.alive() else f"not within {timeout_s:.0f} s"
                    raise RuntimeError(f"{self.name}: {count}x {pattern!r} {why}:\n"
                                       f"{self.output(40)}")  # fmt: skip
                self._changed.wait(0.1)

    @property
    def metrics_port(self) -> int | None:
        return self.metrics_ports[0] if self.metrics_ports else None

    def ready(self, workers: int = 1) -> bool:
        """Every worker printed its metrics port and answers /readyz with 200."""
        ports = list(self.metrics_ports)
        return len(ports) >= workers and all(answers(p, "/readyz") for p in ports)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, workers: int = 1) -> float:
        """Block until `ready(workers)`; return the seconds since the process started."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                                   f"{self.output(30)}")  # fmt: skip
            if self.ready(workers):
                return time.monotonic() - self.started_s
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready within {timeout_s:.0f} s:\n{self.output(30)}")

    def scrape(self, worker: int = 0) -> Samples | None:
        """`/metrics` of one worker (None when it does not answer or printed no port yet)."""
        ports = self.metrics_ports
        return scrape(ports[worker]) if len(ports) > worker else None

    def metric(self, name: str, **labels: str) -> float | None:
        """`Samples.total` of a fresh scrape (None when it does not answer)."""
        samples = self.scrape()
        return None if samples is None else samples.total(name, **labels)


def read_status_kb(pid: int, fields: Sequence[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Memory fields of /proc/PID/status, in kB (empty once the process is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in fields:
                out[name] = int(rest.split()[0])
    return out


def _supervised(pid: int) -> bool:
    """Whether process `pid` is a supervisor's worker (moderator/workers.py marks its argv)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SUPERVISED_FLAG.encode() in argv


def child_pids(pid: int) -> list[int]:
    """The processes process `pid` started (each of its threads' /proc children list; [] once it
    is gone)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found.extend(int(p) for p in (task / "children").read_text().split())
    return found
