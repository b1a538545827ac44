"""`python -m bench.neighbour`: does a model scoring in an idle-class process slow the primary's?

The shadow benchmark (section 10) found every normal-priority thread waiting longer for a core
while an idle-class shadow process is busy. This separates one candidate cause, the hardware the
two share (caches, memory bandwidth), from the scheduler: the primary (the shipped model on 2 ONNX
threads, one message every 20 ms, 50 a second) is timed call by call alone, beside an idle-class
process (SCHED_IDLE, nice 19) scoring the benchmark's slow shadow model (the BERT-base speed
shape, 1 thread) without pause, and beside two idle-class pure-Python spinners (CPU, little memory
traffic), in rounds A B C C B A A B C. No broker, no event loop: the model calls alone.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.artifacts import speed_model_dir
from bench.pairs import spread
from moderator.decide.classifier import Classifier

SHADOW = """
import sys
from pathlib import Path
from moderator.decide.classifier import Classifier
c = Classifier(Path(sys.argv[1]), threads=1)
ids = c.encode_normalized(["you are a fucking idiot and i will find you tonight"])
while True:
    c.score_ids(ids)
"""
SPIN = "x = 0\nwhile True:\n    x += 1\n"
ORDER = ("alone", "idle model", "idle spinners", "idle spinners", "idle model", "alone",
         "alone", "idle model", "idle spinners")  # fmt: skip
TEXTS = ("you are a fucking idiot", "gg wp everyone nice game", "i will find you tonight",
         "lol that was close", "shut up noob", "hola a todos")  # fmt: skip
CALLS, EVERY_S = 1000, 0.02


def neighbours(kind: str, slow_model: Path) -> list[subprocess.Popen[bytes]]:
    idle = ["chrt", "--idle", "0", "nice", "-n", "19", sys.executable, "-c"]
    if kind == "idle model":
        return [subprocess.Popen([*idle, SHADOW, str(slow_model)])]
    if kind == "idle spinners":
        return [subprocess.Popen([*idle, SPIN]) for _ in range(2)]
    return []


def round_ms(primary: Classifier) -> np.ndarray:
    """Each call's wall time, ms, one message every EVERY_S (open loop)."""
    rows = [primary.encode_normalized([t]) for t in TEXTS]
    out, due = [], time.perf_counter()
    for i in range(CALLS):
        due += EVERY_S
        start = time.perf_counter()
        primary.score_ids(rows[i % len(rows)])
        out.append((time.perf_counter() - start) * 1000)
        time.sleep(max(0.0, due - time.perf_counter()))
    return np.asarray(out)


def shown(values: list[float]) -> str:
    """'median (lowest-highest)' of the rounds' figures."""
    s = spread(values)
    return "–" if s is None else f"{s.median:.2f} ({s.low:.2f}-{s.high:.2f})"


def main() -> int:
    primary = Classifier(Path("moderator/default_model"), threads=2)
    primary.warm_up(8)
    slow = speed_model_dir("bert-base")
    found: dict[str, list[tuple[float, float]]] = {}
    for kind in ORDER:
        procs = neighbours(kind, slow)
        time.sleep(3)  # the neighbour loaded and busy
        ms = round_ms(primary)
        for proc in procs:
            proc.kill()
            proc.wait()
        p50, p99 = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
        print(f"{kind:14s} p50 {p50:.2f} ms  p99 {p99:.2f} ms", flush=True)
        found.setdefault(kind, []).append((p50, p99))
    for kind, rounds in found.items():
        print(f"median of {len(rounds)}: {kind:14s} p50 {shown([r[0] for r in rounds])}  "
              f"p99 {shown([r[1] for r in rounds])} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
