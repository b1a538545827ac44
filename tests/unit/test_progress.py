"""`moderator score`'s progress bar: on a terminal only, after a delay, erased at the end."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from moderator.admin.progress import DELAY_S, ERASE, Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    """Lines of equal length: the share of bytes is the share of lines."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"text": "message number {i:05d}"}}\n' for i in range(20_000)))
    return path


def test_a_regular_file_shows_the_share_read_and_the_time_left(big_file: Path) -> None:
    out, clock = Terminal(), Clock()
    with big_file.open() as source:
        bar = Progress(out, source, clock=clock)
        clock.now += 10.0
        bar.update(5_000, sum(len(source.readline()) for _ in range(5_000)))
        drawn = out.getvalue()
        assert (
            drawn == ERASE + "scoring [######------------------]  25% 5,000 lines, 500/s, 30 s left"
        )
        bar.close()
    assert out.getvalue().endswith(ERASE)


def test_a_pipe_shows_lines_and_rate_without_a_bar() -> None:
    out, clock = Terminal(), Clock()
    read_end, write_end = os.pipe()
    os.close(write_end)
    with os.fdopen(read_end) as source:
        bar = Progress(out, source, clock=clock)
        clock.now += DELAY_S + 4
        bar.update(800)
    shown = out.getvalue()
    assert shown == ERASE + f"scoring: 800 lines, {800 / (DELAY_S + 4):,.0f}/s"


def test_nothing_is_drawn_for_a_short_input() -> None:
    out, clock = Terminal(), Clock()
    bar = Progress(out, io.StringIO("x\n"), clock=clock)
    clock.now += DELAY_S / 2
    bar.update(5)
    bar.close()
    assert out.getvalue() == ""


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(big_file: Path) -> None:
    out, clock = io.StringIO(), Clock()
    with big_file.open() as source:
        bar = Progress(out, source, clock=clock)
        clock.now += 100 * DELAY_S
        bar.update(20_000, big_file.stat().st_size)
        bar.close()
    assert out.getvalue() == ""
    assert bar.lines == 20_000


def test_redraws_are_spaced_out() -> None:
    out, clock = Terminal(), Clock()
    bar = Progress(out, None, clock=clock)
    clock.now += DELAY_S
    for _ in range(50):
        bar.update(1)  # no time passes: drawn once
    assert out.getvalue().count(ERASE) == 1
    assert "1 lines" in out.getvalue()
