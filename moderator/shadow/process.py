"""The shadow's reading, in a process of its own: the primary's GIL is never the shadow's.

On threads beside the primary, even in the idle scheduling class, the shadow's Python steps
(tokenizing, the language gate, the policy) took the interpreter's lock the primary's event loop
and scorer wait for; a shadow thread preempted while holding it makes the primary wait on the
lowest-priority thread of the host (BENCHMARKS.md section 10 measured the primary waiting longer
for a core with a shadow on). Here the shadow reads in a child process: its whole process, and
every thread it starts (ONNX Runtime's too), in the idle class at niceness 19, named `shadow` for
the OS (`top`, bench/cpu.py). The parent hands it (policy, text) pairs a batch at a time through
a stdlib process pool (pickled: a channel policy is about 1 KB) and gets the rulings back.

The child is spawned, not forked (a fork of a running event loop and its threads is unsafe), and
loads the model directory it is asked to read with, keeping one at a time: after a rollout switch
its first batch loads the new one, and what waits meanwhile sheds as any backlog does. It dies
with the moderator (Linux's parent-death signal): a moderator killed with SIGKILL leaves no
orphan holding a model's memory.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from moderator.decide.classifier import Classifier
from moderator.decide.screen import Judged, Reader, decide_texts, reader_for
from moderator.policy.rules import Policy
from moderator.threads import die_with_parent, lower_process_priority, name_thread, pin_process

THREAD_NAME = "shadow"  # the shadow process's name and its threads', for the OS (top, /proc)


class _Child:
    """What the child process keeps between batches: its settings and the one model it reads."""

    threads = 1
    max_windows = 0
    warm = 1
    readers: dict[Path, Reader] = {}  # noqa: RUF012 - one process, one model at a time


def _start(
    parent: int, model_dir: Path, threads: int, max_windows: int, warm: int, cpus: frozenset[int]
) -> None:
    """The child's initializer: bound to its parent's life, the lowest priority for it and all
    it starts (kept to `cpus` where given), then the model."""
    die_with_parent(signal.SIGKILL, parent)
    name_thread(THREAD_NAME)
    lower_process_priority()
    if cpus:
        pin_process(cpus)
    _Child.threads, _Child.max_windows, _Child.warm = threads, max_windows, warm
    reader(model_dir)


def reader(model_dir: Path) -> Reader:
    """The child's reader for `model_dir`, loaded (and warmed) the first time it is asked for."""
    found = _Child.readers.get(model_dir)
    if found is None:
        _Child.readers.clear()
        classifier = Classifier(model_dir, threads=_Child.threads)
        classifier.warm_up(_Child.warm)
        found = _Child.readers[model_dir] = reader_for(classifier, max_windows=_Child.max_windows)
    return found


def read_texts(reader: Reader, items: Sequence[tuple[Policy, str]]) -> list[Judged]:
    """The shadow's decision on each text under its policy (the texts of one policy scored in one
    model call), in the order given."""
    out: list[Judged | None] = [None] * len(items)
    by_policy: dict[int, list[int]] = {}
    for i, (policy, _) in enumerate(items):
        by_policy.setdefault(id(policy), []).append(i)
    for indices in by_policy.values():
        policy = items[indices[0]][0]
        texts = [items[i][1] for i in indices]
        for i, judged in zip(indices, decide_texts(reader, policy, texts), strict=True):
            out[i] = judged
    return [judged for judged in out if judged is not None]


def read_in_child(model_dir: Path, items: Sequence[tuple[Policy, str]]) -> list[Judged]:
    """What the parent submits: one batch read in the child with `model_dir`'s model."""
    return read_texts(reader(model_dir), items)


def pid() -> int:
    """The child's process id (the parent awaits it once: the child is up, its model loaded)."""
    return os.getpid()


def reading_process(
    model_dir: Path,
    *,
    threads: int,
    max_windows: int,
    warm: int,
    cpus: frozenset[int] = frozenset(),
) -> ProcessPoolExecutor:
    """A pool of one spawned child that reads with `model_dir` on `threads` ONNX threads, on
    `cpus` (any CPU where empty)."""
    return ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start,
        initargs=(os.getpid(), model_dir, threads, max_windows, warm, cpus),
    )
