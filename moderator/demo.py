"""`moderator demo`: `moderator dev` in a child process, a burst of realistic chat, a report.

The moderator runs in its own process (as it would in production) so the load generator's
own work does not share its event loop or its GIL.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from moderator import loop
from moderator.embedded import broker_binary, free_port, terminate

READY_TIMEOUT_S = 120


def run_demo(*, rate: float, duration_s: float, dup_ratio: float, malformed_ratio: float) -> int:
    from loadgen.cli import print_progress
    from loadgen.config import LoadConfig
    from loadgen.runner import run_load
    from loadgen.summary import format_summary

    kafka_port, redis_port, metrics_port = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "moderator", "dev", "--kafka-port", str(kafka_port),
               "--redis-port", str(redis_port), "--metrics-port", str(metrics_port)]  # fmt: skip
    broker_binary()  # without the dev extra, say so before starting anything
    print("starting the embedded stack and the moderator in a child process:", flush=True)
    print("$", " ".join(["moderator", *command[3:]]), flush=True)
    dev = subprocess.Popen(command)
    try:
        _wait_ready(dev, metrics_port)
        print(f"\nproducing {round(rate * duration_s)} messages: {rate:g} msg/s for "
              f"{duration_s:g}s of chat ({dup_ratio:.0%} repeats, {malformed_ratio:.0%} "
              "malformed records), then waiting for every decision …\n", flush=True)  # fmt: skip
        config = LoadConfig(
            bootstrap=f"127.0.0.1:{kafka_port}",
            rate=rate,
            duration_s=duration_s,
            dup_ratio=dup_ratio,
            toxic_ratio=0.1,
            malformed_ratio=malformed_ratio,
            drain_timeout_s=30,
            seed=7,
        )
        summary = loop.run(run_load(config, progress=print_progress))
        print("\n" + format_summary(summary))
        print(_moderator_report(metrics_port))
    finally:
        terminate(dev, 60)
    print(f"moderator dev stopped on SIGTERM with exit code {dev.returncode}")
    return 0 if summary.missing == 0 and dev.returncode == 0 else 1


def _wait_ready(dev: subprocess.Popen[bytes], metrics_port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    said = False
    while time.monotonic() < deadline:
        if dev.poll() is not None:
            raise SystemExit(f"moderator dev exited with code {dev.returncode}")
        if _answers(metrics_port, "/readyz"):
            return
        if not said and _answers(metrics_port, "/healthz"):
            print("waiting until the moderator is ready (model loaded, partitions assigned) …",
                  flush=True)  # fmt: skip
            said = True
        time.sleep(0.2)
    raise SystemExit(f"moderator dev was not ready within {READY_TIMEOUT_S}s")


def _answers(port: int, path: str) -> bool:
    """True when the metrics endpoint answers `path` with 200 (503, refused, timeout: False)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as response:
            return int(response.status) == 200
    except OSError:
        return False


def _moderator_report(metrics_port: int) -> str:
    """What the moderator itself counted, read from its /metrics."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value

    def by(name: str, label: str) -> str:
        parts = [f"{dict(k)[label]} {int(v)}" for k, v in sorted(samples[name].items())]
        return ", ".join(parts) or "none"

    def total(name: str) -> int:
        return int(sum(samples[name].values()))

    cache = samples["moderator_cache_requests_total"]
    l1_hits = cache.get((("level", "l1"), ("result", "hit")), 0)
    redis_hits = cache.get((("level", "redis"), ("result", "hit")), 0)
    lookups = l1_hits + cache.get((("level", "l1"), ("result", "miss")), 0)
    batches = samples["moderator_batch_size_count"].get((), 0)
    batch_mean = samples["moderator_batch_size_sum"].get((), 0) / batches if batches else 0
    lines = [
        "moderator /metrics",
        f"  consumed        {total('moderator_messages_consumed_total')}",
        f"  decisions       {by('moderator_decisions_total', 'action')}",
        f"  dead letters    {by('moderator_dead_letters_total', 'reason')}",
        f"  cache hits      in-process {int(l1_hits)}, redis {int(redis_hits)} "
        f"of {int(lookups)} lookups",
        f"  model batches   {int(batches)} (mean size {batch_mean:.2f})",
        f"  over budget     {total('moderator_over_budget_total')}",
    ]
    return "\n".join(lines)
