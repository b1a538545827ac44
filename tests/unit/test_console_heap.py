"""console/heap.py: the console hands glibc's free pages back once a minute, not every tick."""

from __future__ import annotations

import pytest

from console.heap import Trimmer, libc_trim


def test_the_heap_is_trimmed_once_a_minute_from_a_tick_every_second() -> None:
    now = [0.0]
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    heap = Trimmer(60.0, trim=trim, clock=lambda: now[0])
    trimmed = []
    for second in range(1, 181):
        now[0] = float(second)
        trimmed.append(heap.tick())
    assert calls == [0, 0, 0]
    assert [n + 1 for n, done in enumerate(trimmed) if done] == [60, 120, 180]


def test_glibcs_trim_is_found_and_runs_where_glibc_is() -> None:
    trim = libc_trim()
    if trim is None:
        pytest.skip("no glibc here")
    assert trim(0) in (0, 1)  # 1: memory was given back, 0: there was none to give
