"""The OS's view of the process's worker threads: their names and the shadow's priority.

Per-thread CPU (`top -H`, bench/cpu.py) tells the model's share from the event loop's only when
the threads carry names. A shadow model scores in a process at the lowest priority, so that on a
busy host it is the shadow that waits for a core (and its bounded queue sheds), never the
primary's event loop or scorer: Linux's SCHED_IDLE class, which runs only where no other
thread wants the core and is preempted at once when one wakes, and niceness 19 besides (the
priority a platform without that class still honours). Linux applies each to one thread, and a
thread starts with its creator's; elsewhere, or where libc or the kernel refuses, a thread keeps
its name and priority.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1
LOWEST = 19  # niceness: a CPU-bound thread at 19 gets ~1/70 of a core a thread at 0 wants


def _prctl(option: int, arg: object) -> None:
    """Linux's prctl(2) for the calling thread; AttributeError or OSError where there is none."""
    ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def name_thread(name: str) -> None:
    """Name the calling thread for the OS (15 bytes at most; longer names are cut there)."""
    with contextlib.suppress(AttributeError, OSError):
        _prctl(_PR_SET_NAME, name.encode())


def die_with_parent(signum: int, parent: int | None = None) -> None:
    """Have Linux send this process `signum` when the thread that started it ends (a child must
    not outlive a killed parent, holding a port or a model's memory); nothing elsewhere. Given
    the `parent` pid, a process whose parent ended before the request ends now."""
    try:
        _prctl(_PR_SET_PDEATHSIG, signum)
    except (AttributeError, OSError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def lower_priority(niceness: int = LOWEST, *, tid: int | None = None) -> None:
    """Run the calling thread (or thread `tid`), and the threads it starts, at `niceness` in the
    idle class: a nice-19 thread still takes ~1/70 of a contended core, and a waking thread may
    wait a scheduler tick before it preempts it; an idle-class one yields at once."""
    tid = threading.get_native_id() if tid is None else tid
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, tid, niceness)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))


def lower_process_priority(niceness: int = LOWEST) -> None:
    """`lower_priority` for every thread of this process, those its imports started included."""
    lower_priority(niceness)  # the calling thread, where there is no /proc to list the others
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            lower_priority(niceness, tid=int(task.name))


def cpu_list(spec: str) -> frozenset[int]:
    """The CPUs a list such as `1`, `0,2` or `2-3` names (taskset's and cpuset's notation);
    ValueError for anything else."""
    cpus: set[int] = set()
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{spec!r} is not a CPU list such as 1, 0,2 or 2-3")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise ValueError(f"{part.strip()!r}: a range ends below where it starts")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def pin_process(cpus: frozenset[int]) -> frozenset[int]:
    """Keep this process, and the threads it starts, to those of `cpus` it may run on (all it
    may run on where none of them is one); the CPUs it is kept to. Nothing where Linux's
    affinity calls are missing."""
    try:
        allowed = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset()
    kept = (cpus & allowed) or allowed
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            os.sched_setaffinity(int(task.name), kept)
    os.sched_setaffinity(0, kept)
    return kept
