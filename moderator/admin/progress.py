"""The progress bar of `moderator score`: a long input (3,000 lines take seconds) must not look
hung on a terminal, and a pipe or a file must get nothing but the decisions.

Drawn by hand: the runtime depends on no library that draws one (tqdm and rich arrive only with
the dev tools' extras), and this is one line of stderr redrawn in place.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from typing import IO

DELAY_S = 0.5  # nothing is drawn for an input done sooner: a short one stays quiet
EVERY_S = 0.1  # redrawn at most this often
WIDTH = 24  # characters of the bar
ERASE = "\r\x1b[K"  # back to the start of the line, and clear it


class Progress:
    """Lines done, their rate and, when the input is a regular file, the share of it read and
    the time left, on one line of `out` redrawn in place; nothing unless `out` is a terminal."""

    def __init__(
        self,
        out: IO[str],
        source: IO[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.enabled = out.isatty()
        self.lines = 0
        self.done_bytes = 0
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None
        self.total = _regular_file_size(source)

    def update(self, lines: int, size: int = 0) -> None:
        """`lines` more input lines, of `size` bytes, are done."""
        self.lines += lines
        self.done_bytes += size
        if not self.enabled:
            return
        now = self._clock()
        if now - self._started < DELAY_S:
            return
        if self._drawn_at is not None and now - self._drawn_at < EVERY_S:
            return
        self._drawn_at = now
        self.out.write(ERASE + self.render(now - self._started))
        self.out.flush()

    def render(self, elapsed_s: float) -> str:
        text = f"{self.lines:,} lines, {self.lines / max(elapsed_s, 1e-9):,.0f}/s"
        if not self.total:
            return f"scoring: {text}"
        share = min(self.done_bytes / self.total, 1.0)
        filled = round(share * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        left = f", {elapsed_s * (1 - share) / share:.0f} s left" if share else ""
        return f"scoring [{bar}] {share:4.0%} {text}{left}"

    def close(self) -> None:
        """Erase the bar: the decisions on stdout are the output."""
        if self._drawn_at is not None:
            self.out.write(ERASE)
            self.out.flush()


def _regular_file_size(source: IO[str] | None) -> int | None:
    """The size of `source` when it is a regular file (`< file`); None for a pipe, which has
    no size to show a share of."""
    if source is None:
        return None
    try:
        info = os.fstat(source.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both: a StringIO
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
