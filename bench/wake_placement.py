"""Why a lowest-priority shadow still lengthens the primary's tail (issue 41), in isolation.

A writer pinned to CPU 0 wakes a reader free to run on either CPU through a pipe, then keeps
CPU 0 busy for a millisecond (as the broker or the event loop does after handing work on). With
CPU 1 idle the reader runs there at once. With a busy loop in Linux's idle class on CPU 1 (what
the shadow's process is), the kernel sometimes places the reader behind the writer on CPU 0
instead, and it waits out the writer's millisecond: the idle-class task yields at once when a
task is put on its CPU, but the task is not always put there. The shadow's benchmark
(BENCHMARKS.md section 10) sees this as longer waits for a core in every process beside it.
`bench.neighbour` asks the other question, whether the two slow each other's model calls through
the hardware they share.

    python -m bench.wake_placement [--wakes N]
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from collections.abc import Sequence

SPIN_S = 0.001  # the waker's work after each wake
GAP_S = 0.002  # between wakes
LATE_MS = 0.5
HOG = (
    "import os\nos.sched_setaffinity(0, {1})\n"
    "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True:\n    pass\n"
)


def wake_latencies(wakes: int) -> list[float]:
    """Milliseconds from each write to the reader's wake, the reader on CPUs 0 and 1."""
    data_r, data_w = os.pipe()
    back_r, back_w = os.pipe()
    child = os.fork()
    if child == 0:  # the reader
        os.sched_setaffinity(0, {0, 1})
        out = []
        for _ in range(wakes):
            sent = struct.unpack("d", os.read(data_r, 8))[0]
            out.append((time.perf_counter() - sent) * 1000)
        os.write(back_w, struct.pack(f"{wakes}d", *out))
        os._exit(0)
    os.sched_setaffinity(0, {0})
    for _ in range(wakes):
        time.sleep(GAP_S)
        os.write(data_w, struct.pack("d", time.perf_counter()))
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            pass
    raw = b""
    while len(raw) < 8 * wakes:
        raw += os.read(back_r, 8 * wakes - len(raw))
    os.waitpid(child, 0)
    for fd in (data_r, data_w, back_r, back_w):
        os.close(fd)
    return list(struct.unpack(f"{wakes}d", raw))


def summary(latencies: Sequence[float]) -> str:
    """Mean, share later than LATE_MS, and p99 of one arm's wake latencies."""
    ordered = sorted(latencies)
    late = sum(x > LATE_MS for x in ordered) / len(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"mean {sum(ordered) / len(ordered):.3f} ms, later than {LATE_MS} ms {late:.1%},"
        f" p99 {p99:.3f} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wake_placement", description=__doc__)
    p.add_argument("--wakes", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two arms")
    args = p.parse_args(argv)
    if not {0, 1} <= os.sched_getaffinity(0):
        print("needs CPUs 0 and 1", file=sys.stderr)
        return 2
    for _ in range(args.rounds):
        for arm in ("CPU 1 idle", "idle-class loop on CPU 1"):
            hog = subprocess.Popen([sys.executable, "-c", HOG]) if arm != "CPU 1 idle" else None
            try:
                time.sleep(0.5)
                print(f"{arm:26s} {summary(wake_latencies(args.wakes))}", flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
