"""Where the CPU goes during a run: CPU-seconds per role, from /proc, per decided message.

Roles: the moderator's event loop (its main thread), its scorer thread (named by the runtime, so
`top -H` shows it too), its other threads (ONNX Runtime's intra-op pool, the metrics server), the
broker, and the load generator (this process: the harness runs in it); and, only in a run with a
shadow model, the shadow's process (a moderator's child, moderator/shadow/process.py), so the
primary's share is told from the shadow's.
Read from each thread's utime + stime, so it costs nothing while the run goes on; beside it, the
time each role's threads spent runnable but waiting for a core (schedstat's run-queue delay),
which tells a thread slowed by other threads taking its core from one whose work grew.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from devstack.child import child_pids
from moderator.decide.batcher import SCORER_THREAD_NAME

ROLES = ("event loop", "scorer", "model pool & other", "broker", "load generator")
SHADOW = "shadow"  # a role only where a shadow runs: the other sections' splits stay as they were
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _thread_times(pid: int) -> dict[int, tuple[str, float, float]]:
    """{tid: (thread name, CPU seconds, seconds waited for a core)} for every thread of `pid`
    ({} once it is gone; the wait 0 where the kernel keeps no schedstat)."""
    out: dict[int, tuple[str, float, float]] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        try:
            waited = int((task / "schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            waited = 0.0
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, waited)
    return out


def children(parents: Iterable[int]) -> list[int]:
    """The processes whose parent is one of `parents` (a moderator's shadow, and the resource
    tracker its process pool starts)."""
    return [child for parent in parents for child in child_pids(parent)]


def role_of(
    pid: int,
    tid: int,
    name: str,
    *,
    moderators: Iterable[int],
    broker: int,
    shadows: Iterable[int] = (),
) -> str:
    """Which role a thread's CPU counts for (`shadows`: the moderators' child processes)."""
    if pid == broker:
        return "broker"
    if pid in set(moderators):
        if tid == pid:
            return "event loop"
        return "scorer" if name == SCORER_THREAD_NAME else "model pool & other"
    return SHADOW if pid in set(shadows) else "load generator"


class CpuSplit:
    """CPU-seconds by role between `start()` and `stop()`."""

    def __init__(self, *, moderators: Iterable[int], broker: int, harness: int) -> None:
        self.moderators = tuple(moderators)
        self.broker = broker
        self.pids = (*self.moderators, broker, harness)
        self.shadows: set[int] = set()  # the moderators' children, as each snapshot found them
        self._before: dict[tuple[int, int], tuple[str, float, float]] = {}
        self.seconds: dict[str, float] = {}
        self.waits: dict[str, float] = {}  # seconds runnable but waiting for a core, by role

    def _snapshot(self) -> dict[tuple[int, int], tuple[str, float, float]]:
        self.shadows.update(children(self.moderators))
        pids = (*self.pids, *self.shadows)
        return {(pid, tid): v for pid in pids for tid, v in _thread_times(pid).items()}

    def start(self) -> None:
        self._before = self._snapshot()

    def stop(self) -> dict[str, float]:
        """CPU-seconds per role since `start()` (threads born in between count from zero)."""
        split = dict.fromkeys(ROLES, 0.0)
        waits = dict.fromkeys(ROLES, 0.0)
        for (pid, tid), (name, seconds, waited) in self._snapshot().items():
            _, was, was_waiting = self._before.get((pid, tid), (name, 0.0, 0.0))
            role = role_of(
                pid, tid, name, moderators=self.moderators, broker=self.broker, shadows=self.shadows
            )
            split[role] = split.get(role, 0.0) + max(seconds - was, 0.0)
            waits[role] = waits.get(role, 0.0) + max(waited - was_waiting, 0.0)
        self.seconds = split
        self.waits = waits
        return split


def model_ms(cpu: Mapping[str, float]) -> float:
    """The model's share of a CPU split: its scorer threads and any intra-op pool."""
    return cpu.get("scorer", 0.0) + cpu.get("model pool & other", 0.0)


def harness_ms(cpu: Mapping[str, float]) -> float:
    """The harness's share of a CPU split: the broker and the load generator."""
    return cpu.get("broker", 0.0) + cpu.get("load generator", 0.0)


def per_message_ms(split: Mapping[str, float], messages: int) -> dict[str, float]:
    """CPU milliseconds per decided message, by role (a shadow's too, where it ran), and their
    total."""
    n = max(messages, 1)
    roles = [*ROLES, *(role for role in split if role not in ROLES)]
    out = {role: round(split.get(role, 0.0) * 1000 / n, 3) for role in roles}
    out["total"] = round(sum(split.get(role, 0.0) for role in roles) * 1000 / n, 3)
    return out


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages as the reports print them."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _ancestors(pid: int) -> set[int]:
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return seen


def other_cpu_hogs(min_cpu_pct: float = 20.0) -> list[str]:
    """Processes not started by this run using much CPU (ps' lifetime average), for the report."""
    try:
        ps = subprocess.run(["ps", "-eo", "pid,stat,pcpu,etime,args", "--sort=-pcpu"],
                            capture_output=True, text=True, timeout=5, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    me = os.getpid()
    out = []
    for line in ps.stdout.splitlines()[1:15]:
        hog = hog_of(line, min_cpu_pct)
        if hog is not None and me not in _ancestors(hog[0]):
            out.append(hog[1])
    return out


def hog_of(ps_line: str, min_cpu_pct: float) -> tuple[int, str] | None:
    """(pid, description) of a `ps -o pid,stat,pcpu,etime,args` line at `min_cpu_pct` or more;
    one stopped now (SIGSTOP, state T) says so, since its lifetime average is not what it took
    while stopped."""
    parts = ps_line.split(None, 4)
    if len(parts) < 5 or float(parts[2]) < min_cpu_pct:
        return None
    stopped = ", stopped now" if parts[1].startswith("T") else ""
    return int(parts[0]), f"{float(parts[2]):.0f}% `{parts[4][:80]}` (running {parts[3]}{stopped})"
