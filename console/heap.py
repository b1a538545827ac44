"""Hand the C allocator's free pages back to the system once a minute (issue 44).

At 1,000 decisions a second the console's Python objects stop growing once the board's bounds
are full (tracemalloc in the running console, bench/console_memory.py: 111.5 MiB traced at minute
35, 115.0 at 42 with 7.5 of it one fetch response in flight), yet its resident memory kept rising.
glibc gives pages back only from the top of its heap on its own; in that run it held 113, then
120 MiB free in its arenas beside 169-172 MiB in use (68 of it tracemalloc's). `malloc_trim(0)`
returns every whole free page wherever it lies, but not pymalloc's arenas (objects up to 512
bytes). Measured (bench.console_feed, untraced): RSS now also falls at times, and grew 18.2 MiB/h
from minute 35 to 54 against 22.2 without it: not yet flat. Elsewhere than glibc: nothing to call.
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
