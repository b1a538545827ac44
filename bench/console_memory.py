"""The console's own entry point under tracemalloc, for finding what grows inside the real process
(issue 44: RSS grew 30 MiB/h while the board alone, fed the same traffic, grew 3.4).

A thread takes a snapshot every `--every-s` and appends one JSON line to `--out`: Python's traced
total, VmRSS, glibc's own count (mallinfo2: bytes in use vs held free in its arenas), threads, the
object types that grew, and the top allocation sites that grew since the previous snapshot and
since the first, and pymalloc's arenas (which mallinfo does not count). Traced flat while RSS
grows points at an allocator; traced growing names a line.

    python -m bench.console_memory --out F.jsonl -- console --host 127.0.0.1 ...
    python -m bench.console_feed --traced F.jsonl --minutes 45   # the same, under the feed bench

Frames: 2 by default; 25 slows a console at 1,000 decisions a second until it falls behind.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

from devstack.child import read_status_kb

TOP = 30
MIB = 1 << 20


class MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (2.33+): all fields size_t."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")
    ]  # fmt: skip


def mallinfo() -> dict[str, float] | None:
    """glibc's heap in MiB: `arena` held from the system by sbrk/arenas, `in_use`, `free` inside
    them (fragmentation when it grows), `mmapped`; None off glibc or before 2.33."""
    path = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(path).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = MallInfo2
    info = fn()
    return {"arena": info.arena / MIB, "in_use": info.uordblks / MIB,
            "free": info.fordblks / MIB, "mmapped": info.hblkhd / MIB}  # fmt: skip


def pymalloc() -> dict[str, float]:
    """Python's small-object allocator (blocks up to 512 bytes, in arenas of its own that glibc
    never sees), in MiB: its arenas, the bytes in live blocks, and the free blocks inside them
    (sys._debugmallocstats, read from stderr: what the console logs meanwhile goes there too)."""
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace")
    wanted = {
        "# arenas allocated current": "arenas",
        "# bytes in allocated blocks": "in_use",
        "# bytes in available blocks": "free",
        "# bytes in unused pools": "unused_pools",
    }
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if (key := wanted.get(name.strip())) is not None and key not in found:
            number = int(value.strip().replace(",", ""))
            found[key] = number if key == "arenas" else round(number / MIB, 2)
    return found


def growth(new: tracemalloc.Snapshot | None, old: tracemalloc.Snapshot | None, key: str,
           top: int) -> list[str]:  # fmt: skip
    """The `top` sites whose traced size grew most, one line each (caller -> allocating line);
    none without both snapshots."""
    lines: list[str] = []
    if new is None or old is None:
        return lines
    for stat in new.compare_to(old, key)[:top]:
        where = " -> ".join(f"{f.filename}:{f.lineno}" for f in stat.traceback)
        lines.append(f"{stat.size_diff / 1024:+.1f} KiB ({stat.size / MIB:.2f} MiB, "
                     f"{stat.count_diff:+d} blocks) {where}")  # fmt: skip
    return lines


def type_counts() -> Counter[str]:
    """Live objects the garbage collector tracks, by type name (dicts, tasks, futures...)."""
    return Counter(type(o).__name__ for o in gc.get_objects())


class Tracer:
    """Takes the snapshots; the first is the baseline the later ones are also compared with."""

    def __init__(self, out: Path, every_s: float, key: str) -> None:
        self.out = out
        self.every_s = every_s
        self.key = key
        self.started = time.monotonic()
        self.first: tracemalloc.Snapshot | None = None  # None throughout with --frames 0
        self.previous: tracemalloc.Snapshot | None = None
        self.types: Counter[str] = Counter()

    def loop(self) -> None:
        while True:
            time.sleep(self.every_s)
            self.write(self.record())

    def record(self) -> dict[str, Any]:
        snap = None
        if tracemalloc.is_tracing():  # --frames 0: the allocator's figures without the tracing
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)]
            )
        types = type_counts()
        current, peak = tracemalloc.get_traced_memory()
        status = read_status_kb(os.getpid(), ("VmRSS", "VmHWM", "Threads"))
        row: dict[str, Any] = {
            "t_s": round(time.monotonic() - self.started, 1),
            "traced_mib": round(current / MIB, 2), "traced_peak_mib": round(peak / MIB, 2),
            "tracemalloc_own_mib": round(tracemalloc.get_tracemalloc_memory() / MIB, 2),
            "rss_mib": round(status.get("VmRSS", 0) / 1024, 1),
            "hwm_mib": round(status.get("VmHWM", 0) / 1024, 1),
            "threads": status.get("Threads"), "malloc": mallinfo(), "pymalloc": pymalloc(),
            "types_grown": (types - self.types).most_common(15),
            "since_previous": growth(snap, self.previous, self.key, TOP),
            "since_first": growth(snap, self.first, self.key, TOP // 2),
        }  # fmt: skip
        self.types = types
        self.previous = snap
        self.first = self.first or snap
        return row

    def write(self, row: dict[str, Any]) -> None:
        with self.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.console_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="JSON lines, one per snapshot")
    p.add_argument("--every-s", type=float, default=300.0, help="seconds between snapshots")
    p.add_argument("--frames", type=int, default=2, help="frames per allocation; 0: no tracing")
    p.add_argument("moderator_args", nargs=argparse.REMAINDER, help="-- then moderator's args")
    args = p.parse_args(argv)
    rest = [a for a in args.moderator_args if a != "--"] if args.moderator_args else []
    if args.frames > 0:
        tracemalloc.start(args.frames)
    tracer = Tracer(args.out, args.every_s, "traceback" if args.frames > 1 else "lineno")
    threading.Thread(target=tracer.loop, name="bench-tracemalloc", daemon=True).start()
    from moderator.cli import main as moderator_main

    return int(moderator_main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
