"""CPU lists in taskset's notation, and keeping a process to some CPUs (the shadow's process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from moderator.config import Settings
from moderator.errors import ConfigError
from moderator.threads import cpu_list


@pytest.mark.parametrize(
    ("spec", "cpus"),
    [("1", {1}), ("0,2", {0, 2}), ("2-3", {2, 3}), (" 0 , 4-5 ", {0, 4, 5}), ("3-3", {3})],
)
def test_a_cpu_list_names_single_cpus_and_ranges(spec: str, cpus: set[int]) -> None:
    assert cpu_list(spec) == cpus


@pytest.mark.parametrize("spec", ["", "a", "1-", "-1", "3-1", "1,,2", "1.5"])
def test_anything_else_is_refused_and_so_is_the_setting(spec: str) -> None:
    with pytest.raises(ValueError, match=r"CPU list|range"):
        cpu_list(spec)
    if spec:  # empty is the setting's "any CPU"
        with pytest.raises(ConfigError, match="MODERATOR_SHADOW_CPUS"):
            Settings.from_env({"MODERATOR_SHADOW_CPUS": spec})


PINNED = """
import os, sys, threading
from moderator.threads import pin_process
started = threading.Event()
def waiting(): started.set(); threading.Event().wait(5)
threading.Thread(target=waiting, daemon=True).start(); started.wait()
kept = pin_process(frozenset(int(c) for c in sys.argv[1].split(",")))
tasks = os.listdir("/proc/self/task")
print(sorted(kept), sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in tasks}))
"""


def pinned(cpus: str) -> str:
    """What a fresh process kept to `cpus` prints: the CPUs it kept, and each thread's set."""
    run = subprocess.run([sys.executable, "-c", PINNED, cpus], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return run.stdout.strip()


def test_a_process_is_kept_to_the_cpus_named_with_the_threads_it_had_already() -> None:
    last = max(os.sched_getaffinity(0))
    assert pinned(str(last)) == f"[{last}] [({last},)]"


def test_cpus_it_may_not_run_on_leave_it_on_all_it_may() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    assert pinned("4096") == f"{allowed} [{tuple(allowed)}]"
