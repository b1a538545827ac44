"""bench/console_memory.py: what its snapshots say, without a console."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.console_memory import growth, mallinfo, pymalloc


@pytest.fixture
def tracing() -> Iterator[None]:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(2)
    yield
    if started:
        tracemalloc.stop()


def test_growth_names_the_line_that_allocated_what_grew(tracing: None) -> None:
    before = tracemalloc.take_snapshot()
    kept = [str(n) * 20 for n in range(20_000)]  # the allocation the report must name
    after = tracemalloc.take_snapshot()
    top = growth(after, before, "traceback", 1)
    assert len(kept) == 20_000
    assert len(top) == 1
    source = Path(__file__).read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "the allocation the report" in text)
    assert top[0].endswith(f"{__file__}:{line}")
    assert growth(after, None, "traceback", 1) == []  # the first snapshot has nothing to compare


def test_mallinfo_reads_glibcs_heap_where_there_is_one() -> None:
    info = mallinfo()
    if info is None:
        pytest.skip("no glibc 2.33+ here")
    assert info["arena"] >= info["in_use"] > 0


def test_pymalloc_counts_the_arenas_that_hold_small_objects() -> None:
    before = pymalloc()
    kept = [(n,) for n in range(300_000)]  # small blocks: pymalloc's, not glibc's
    after = pymalloc()
    assert len(kept) == 300_000
    assert after["arenas"] > before["arenas"]
    assert after["in_use"] > before["in_use"] + 10  # MiB
