"""Where a moderator process spends its time: py-spy samples, folded into the hot functions.

py-spy (`pip install py-spy`) attaches to a running process from outside; if it is not installed
or may not attach (ptrace), the benchmark goes on without a profile.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 100


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.is_file() else shutil.which("py-spy")


def start_profile(pid: int, duration_s: float, out: Path) -> subprocess.Popen[bytes] | None:
    """Start sampling `pid` for `duration_s` into `out` (folded stacks); None if impossible."""
    exe = py_spy()
    if exe is None:
        log.warning("py-spy is not installed: no profile (pip install py-spy)")
        return None
    command = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))),
               "--rate", str(SAMPLE_RATE_HZ), "--format", "raw", "--output", str(out),
               "--threads"]  # fmt: skip
    # PYSPY_NATIVE=1: C frames too (uvloop, ONNX Runtime); py-spy then pauses the process.
    command += ["--native"] if os.environ.get("PYSPY_NATIVE") else ["--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish_profile(proc: subprocess.Popen[bytes] | None, out: Path) -> dict[str, Any] | None:
    if proc is None:
        return None
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 0 or not out.is_file():
        log.warning("py-spy failed (%s): %s", proc.returncode, err.decode(errors="replace")[-300:])
        return None
    return summarize_folded(out.read_text().splitlines())


def _function(frame: str) -> str:
    """'score_ids (moderator/decide/classifier.py:165)' -> 'score_ids
    (moderator/decide/classifier.py)'."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name


def summarize_folded(lines: Iterable[str], top: int = 12) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's folded ('raw') output."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    samples = 0
    for line in lines:
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if frames and frames[0].startswith("thread"):
            threads[frames[0]] += count
            frames = frames[1:]
        frames = [f for f in frames if f.strip()]
        if not frames:
            continue
        samples += count
        own[_function(frames[-1])] += count
        for name in {_function(f) for f in frames}:
            total[name] += count
    if not samples:
        return {"samples": 0, "self": [], "total": [], "threads": []}

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(n / samples, 4)) for name, n in counter.most_common(top)]

    return {"samples": samples, "self": shares(own), "total": shares(total),
            "threads": shares(threads)}  # fmt: skip
