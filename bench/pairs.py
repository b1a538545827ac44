"""Arms measured side by side on a shared machine: the order they run in, and what their spread
says. Pure: no timing, no servers.

These hosts are shared and drift (another build starts, the page cache fills), so arms are not
run in blocks: each round runs every arm once, and every other round runs them in reverse, so a
drift that grows steadily costs every arm alike over two rounds. One arm's runs then give the
spread a quiet change must stay inside: a figure within it is not told apart from that noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import median
from typing import NamedTuple


def interleaved(pairs: int, arms: Sequence[str]) -> list[tuple[int, str]]:
    """(pair, arm) in the order run: the arms in order, then reversed, then in order, ...: each
    arm's mean position over two rounds is the same, so a linear drift costs them alike."""
    out = []
    for pair in range(pairs):
        order = arms if pair % 2 == 0 else arms[::-1]
        out += [(pair, arm) for arm in order]
    return out


class Spread(NamedTuple):
    """One arm's runs: their median, and their lowest and highest (the spread)."""

    median: float
    low: float
    high: float


def spread(values: Iterable[float]) -> Spread | None:
    """The median and range of `values`; None when there are none."""
    known = sorted(values)
    if not known:
        return None
    return Spread(median(known), known[0], known[-1])


def place(value: float, around: Spread) -> str:
    """Where `value` falls against `around`'s range: "below", "within" or "above"."""
    if value < around.low:
        return "below"
    return "above" if value > around.high else "within"


def unaffected(value: float | None, around: Spread | None) -> bool | None:
    """Whether `value` (an arm's median latency) is no worse than `around` (the reference arm's
    runs) can tell apart from noise: not above their highest. Below their lowest counts too: a
    faster figure is no harm. None when either is missing."""
    if value is None or around is None:
        return None
    return place(value, around) != "above"
