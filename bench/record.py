"""A benchmark's results file: when and where it ran, written again after every run, so a run
stopped part way keeps what it measured (and `--report-only` can render it)."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from bench.cpu import load_average, other_cpu_hogs
from loadgen.machine import machine_info, machine_label


class Record:
    """`data` holds the machine, the start, the load before, and the section under `key`."""

    def __init__(self, path: Path, key: str, **extra: Any) -> None:
        self.path = path
        self.key = key
        self.data: dict[str, Any] = {
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": machine_info(),
            "machine_label": machine_label(),
            **extra,
            "load_before": load_average(),
        }
        self._started = time.monotonic()

    def save(self, section: dict[str, Any]) -> None:
        """The section so far, with the seconds since the start, written to `path`."""
        self.data[self.key] = section
        self.data["duration_s"] = round(time.monotonic() - self._started)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1, default=str))

    def finish(self) -> None:
        """The load at the end and who else used the CPU, written with the section."""
        self.data["load_during"] = [{"section": self.key, "loadavg": load_average(),
                                     "others": other_cpu_hogs()}]  # fmt: skip
        self.save(self.data.get(self.key) or {})
