"""`moderator run --workers K`: K processes in one consumer group, pinned to disjoint cores.

One process per core set scales past the GIL and keeps each ONNX Runtime instance's threads on
its own cores. The supervisor asks each worker to drain once, waits for them, and exits with the
worst exit code; a worker that dies takes the others down (no silent half-capacity).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

log = logging.getLogger(__name__)


def core_sets(workers: int, cores: Sequence[int] | None = None) -> list[list[int]]:
    """Split our cores into `workers` disjoint, contiguous sets (shared if there are too few)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if workers <= len(cores):
        size, extra = divmod(len(cores), workers)
        sets, start = [], 0
        for i in range(workers):
            end = start + size + (1 if i < extra else 0)
            sets.append(cores[start:end])
            start = end
        return sets
    return [[cores[i % len(cores)]] for i in range(workers)]


# Flags the supervisor turns into each worker's own environment: a worker given the supervisor's
# `--metrics-port` or `--threads` would ignore its MODERATOR_METRICS_PORT / MODERATOR_THREADS.
PER_WORKER_FLAGS = ("--workers", "--metrics-port", "--threads")
# Marks a worker's command line: its signal handling differs (cli.py, `serve`).
SUPERVISED_FLAG = "--supervised"


def worker_argv(argv: Sequence[str]) -> list[str]:
    """`argv` without the flags set per worker (`--flag V` or `--flag=V`), marked supervised."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in PER_WORKER_FLAGS:
            skip = True
        elif arg.split("=", 1)[0] not in PER_WORKER_FLAGS:
            out.append(arg)
    return [*out, SUPERVISED_FLAG]


def run_workers(workers: int, argv: Sequence[str], *, threads: int, metrics_port: int) -> int:
    """Run `moderator run argv...` `workers` times; return the worst exit code.

    Signals may reach the workers twice: systemd's default KillMode=control-group and a terminal's
    Ctrl+C signal every process, and the supervisor forwards its own. So each worker is sent
    SIGTERM once (it drains, and a supervised worker ignores a repeated SIGTERM); only a later
    SIGINT, a second Ctrl+C, is passed on to force an exit.
    """
    sets = core_sets(workers)
    per_worker = max(1, threads // workers)
    procs: list[subprocess.Popen[bytes]] = []
    for i, cores in enumerate(sets):
        env = dict(os.environ, MODERATOR_THREADS=str(min(per_worker, len(cores))))
        if metrics_port:
            env["MODERATOR_METRICS_PORT"] = str(metrics_port + i)
        command = [sys.executable, "-m", "moderator", "run", *worker_argv(argv)]
        pin = functools.partial(os.sched_setaffinity, 0, cores)
        proc = subprocess.Popen(command, env=env, preexec_fn=pin)
        log.info("worker %d (pid %d) on cores %s", i, proc.pid, cores, extra={"worker": i})
        procs.append(proc)
    stopped: set[int] = set()

    def forward(signum: int, _frame: FrameType | None) -> None:
        for proc in procs:
            if proc.poll() is not None:
                continue
            if proc.pid not in stopped:
                stopped.add(proc.pid)
                proc.send_signal(signal.SIGTERM)
            elif signum == signal.SIGINT:
                proc.send_signal(signal.SIGINT)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    codes: dict[int, int] = {}
    while len(codes) < len(procs):
        for i, proc in enumerate(procs):
            code = proc.poll()
            if code is None or i in codes:
                continue
            codes[i] = code
            if code != 0 and len(codes) < len(procs):
                log.error(
                    "worker %d exited with %d; stopping the others", i, code, extra={"worker": i}
                )
                forward(signal.SIGTERM, None)
        time.sleep(0.1)
    return max(codes.values(), key=abs)
