"""Hand the C allocator's free pages back to the system once a minute (issue 44).

At 1,000 decisions a second the console's Python objects stop growing once the board's bounds
are full (tracemalloc in the running console, bench/console_memory.py: about 35 minutes in),
yet its resident memory kept rising. glibc keeps what the console frees inside its heap: the
large, short-lived buffers (each fetch response of the decision topic, the claims' read of every
waiting item each second) land between long-lived records once its mmap threshold has risen
past them, and it gives pages back only from the heap's top. In the traced run glibc held 113
MiB free in its arenas beside 169 MiB in use. `malloc_trim(0)` returns every whole free page
wherever it lies (glibc 2.8+); no other allocator here needs it, so elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import time
from collections.abc import Callable

TRIM_EVERY_S = 60.0


def libc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where there is none (musl, macOS): nothing to trim."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Trimmer:
    """Calls `trim(0)` at most once every `every_s`, from the console's tick."""

    def __init__(
        self,
        every_s: float = TRIM_EVERY_S,
        trim: Callable[[int], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every_s = every_s
        self.trim = trim if trim is not None else libc_trim()
        self.clock = clock
        self.last = clock()

    def tick(self) -> bool:
        """Trim if `every_s` passed since the last time; whether it did."""
        now = self.clock()
        if self.trim is None or now - self.last < self.every_s:
            return False
        self.last = now
        self.trim(0)
        return True
