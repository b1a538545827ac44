"""The OS's view of the process's worker threads: their names and the shadow's priority.

Per-thread CPU (`top -H`, bench/cpu.py) tells the model's share from the event loop's only when
the threads carry names. A shadow model scores on threads at the lowest priority, so that on a
busy host it is the shadow that waits for a core (and its bounded queue sheds), never the
primary's event loop or scorer. Linux applies both to one thread; elsewhere, or where libc or
the kernel refuses, a thread keeps its name and priority.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading

_PR_SET_NAME = 15
LOWEST = 19  # niceness: a CPU-bound thread at 19 gets ~1/70 of a core a thread at 0 wants


def name_thread(name: str) -> None:
    """Name the calling thread for the OS (15 bytes at most; longer names are cut there)."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)


def lower_priority(niceness: int = LOWEST) -> None:
    """Run the calling thread, and the threads it starts, at `niceness`."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
