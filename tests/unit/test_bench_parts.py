"""The benchmark's pure helpers: layouts and core splits, profile folding, texts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import cpu
from bench.profile import summarize_folded
from bench.scaleup import layout_label, layouts
from bench.texts import bench_texts, key_repeat_share, repeat_share
from moderator.decide.batcher import SCORER_THREAD_NAME


@pytest.mark.parametrize(
    ("cores", "threads", "expected"),
    [
        (2, 2, [(1, 2), (2, 1)]),
        (4, 4, [(1, 4), (2, 2), (4, 1)]),
        (1, 1, [(1, 1)]),
        (2, 1, [(1, 1)]),  # one thread cannot be split across processes
    ],
)
def test_layouts_split_threads_over_processes(
    cores: int, threads: int, expected: list[tuple[int, int]]
) -> None:
    assert layouts(cores, threads) == expected


def test_layout_label_names_the_disjoint_core_sets() -> None:
    assert layout_label(1, 2, 2) == "1 process x 2 threads"
    assert layout_label(2, 1, 2) == "2 processes x 1 thread, pinned {0} {1}"
    assert layout_label(2, 2, 4) == "2 processes x 2 threads, pinned {0,1} {2,3}"


def test_folded_stacks_become_self_and_inclusive_shares() -> None:
    lines = [
        "thread (1): MainThread;main (m/cli.py:10);loop (m/service.py:20) 30",
        "thread (2): scorer_0;run (m/batcher.py:5);score_ids (m/classifier.py:165) 60",
        "thread (2): scorer_0;run (m/batcher.py:5);encode (m/classifier.py:150) 10",
        "garbage line",
    ]
    out = summarize_folded(lines)
    assert out["samples"] == 100
    own = dict(out["self"])
    assert own["score_ids (m/classifier.py)"] == pytest.approx(0.6)
    total = dict(out["total"])
    assert total["run (m/batcher.py)"] == pytest.approx(0.7)
    assert dict(out["threads"])["thread (2): scorer_0"] == pytest.approx(0.7)


def test_empty_profile_is_reported_as_no_samples() -> None:
    assert summarize_folded([])["samples"] == 0


def test_bench_texts_are_the_same_sequence_every_time() -> None:
    assert bench_texts(50) == bench_texts(50)
    assert bench_texts(20) == bench_texts(50)[:20]


def test_key_repeat_share_counts_keys_seen_before() -> None:
    # "gg" and "GG" tokenise alike (the tokenizer lowercases): the second is a repeat by key.
    keys = [(101, 1), (101, 1), (7,), (101, 1), (8,)]
    assert key_repeat_share(keys) == pytest.approx(2 / 5)
    assert key_repeat_share([]) == 0.0


def test_repeat_share_counts_exact_repeats_only() -> None:
    assert repeat_share(["gg", "gg", "GG", "wp"]) == pytest.approx(0.25)
    assert repeat_share([]) == 0.0
    assert repeat_share(bench_texts(300)) == 0.0  # the no-repeat texts really have none
    assert repeat_share(bench_texts(300, dup_ratio=0.4)) > 0.1


def test_affinity_pins_inside_the_block_and_restores_after() -> None:
    import os

    from bench.stack import affinity

    before = os.sched_getaffinity(0)
    one = frozenset({min(before)})
    with affinity(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with affinity(None):
        assert os.sched_getaffinity(0) == before


def test_cpu_split_counts_each_thread_for_its_role() -> None:
    def role(pid: int, tid: int, name: str = "python") -> str:
        return cpu.role_of(pid, tid, name, moderators=[100], broker=200)

    assert role(100, 100) == "event loop"
    assert role(100, 101, SCORER_THREAD_NAME) == "scorer"
    assert role(100, 102) == "model pool & other"
    assert role(200, 201, "tokio-rt-worker") == "broker"
    assert role(300, 300) == "load generator"


def test_cpu_split_measures_this_process_as_the_harness() -> None:
    split = cpu.CpuSplit(moderators=[], broker=0, harness=os.getpid())
    split.start()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # burn 0.2 s of CPU in this thread
        pass
    seconds = split.stop()
    assert seconds["load generator"] >= 0.1
    assert seconds["event loop"] == seconds["scorer"] == seconds["broker"] == 0.0
    per = cpu.per_message_ms(seconds, 100)
    assert per["total"] == pytest.approx(per["load generator"], abs=0.01)
    assert per["load generator"] == pytest.approx(seconds["load generator"] * 10, abs=0.01)


def test_cpu_split_counts_the_time_a_thread_waited_for_a_core() -> None:
    """This thread and a spinning child share one core: the thread's 0.2 s of CPU takes about
    twice that, and the time it stood runnable is its role's wait (the child is no role)."""
    core = min(os.sched_getaffinity(0))
    tid = threading.get_native_id()
    was = os.sched_getaffinity(tid)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {core})
        os.sched_setaffinity(tid, {core})
        split = cpu.CpuSplit(moderators=[], broker=0, harness=os.getpid())
        split.start()
        deadline = time.process_time() + 0.2
        while time.process_time() < deadline:
            pass
        split.stop()
    finally:
        os.sched_setaffinity(tid, was)
        spinner.kill()
        spinner.wait()
    assert split.waits["load generator"] >= 0.05, split.waits
    assert split.waits["event loop"] == split.waits["broker"] == 0.0


def test_the_layout_diagnosis_ends_with_the_shipped_layout_and_keeps_the_old_one() -> None:
    from bench.spin import WITHSPIN_MODULE, variants

    two = variants(2)
    assert [(v.threads, v.batch_threads) for v in two] == [(2, 2), (2, 2), (1, 1), (2, 1)]
    assert two[0].module == WITHSPIN_MODULE
    assert all(v.module == "moderator" for v in two[1:])
    assert "as shipped" in two[-1].label
    assert [(v.threads, v.batch_threads) for v in variants(1)] == [(1, 1), (1, 1)]


def test_a_stopped_hog_says_so_and_a_quiet_process_is_no_hog() -> None:
    line = " 4766 TNl   64.2 16:28 /venv/bin/python -m moderator model build"
    assert cpu.hog_of(line, 20.0) == (
        4766,
        "64% `/venv/bin/python -m moderator model build` (running 16:28, stopped now)",
    )
    running = cpu.hog_of(line.replace("TNl", "RNl"), 20.0)
    assert running is not None
    assert running[1].endswith("(running 16:28)")
    assert cpu.hog_of(line.replace("64.2", "3.0"), 20.0) is None


def test_a_record_is_written_after_every_run_and_ends_with_the_load(tmp_path: Path) -> None:
    import json

    from bench.record import Record

    path = tmp_path / "sub" / "results.json"
    record = Record(path, "linger", threads=2)
    record.save({"runs": [1]})
    written = json.loads(path.read_text())
    assert written["linger"] == {"runs": [1]}
    assert written["threads"] == 2
    assert {"started", "machine", "machine_label", "load_before", "duration_s"} <= set(written)
    record.finish()
    ended = json.loads(path.read_text())
    assert ended["linger"] == {"runs": [1]}, "the section kept"
    assert ended["load_during"][0]["section"] == "linger"
