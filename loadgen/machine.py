"""What machine a run was made on: cores and the CPU flags that matter for int8 inference."""

from __future__ import annotations

import os
from pathlib import Path

FLAGS_OF_INTEREST = ("avx512f", "avx512_vnni", "avx512_bf16", "amx_int8")


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, bool]:
    """Which of the flags of interest the CPU reports (all False when /proc/cpuinfo is absent)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return dict.fromkeys(FLAGS_OF_INTEREST, False)
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return {flag: flag in flags for flag in FLAGS_OF_INTEREST}


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("" when absent): flags alone do not say
    which generation a figure came from."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return ""


def machine_info() -> dict[str, object]:
    return {"cores": usable_cores(), "cpu_count": os.cpu_count(), "cpu_model": cpu_model(),
            **cpu_flags()}  # fmt: skip


def machine_label() -> str:
    """A short label for plots and reports: "2 cores, avx512f avx512_vnni"."""
    flags = [name for name, present in cpu_flags().items() if present]
    return f"{usable_cores()} cores, " + (" ".join(flags) if flags else "no avx512")
