"""A console's memory while it follows a platform's decision rate (issue 44's feed): does one
console process stay flat over an hour at 1,000 decisions a second, and keep up?

The embedded Tansu broker, a real redis-server and a real `python -m moderator console` on fresh
topics, one page open on it (a logged-in event stream, read as a browser would). This process
writes the decision topic at `rate` a second with the load generator's traffic, a share held for
review with its review record, verdicts and final decisions (bench/console_traffic.py: the
moderator's own record code). Every `sample_s` it reads the console's resident memory
(/proc/<pid>/status VmRSS) and CPU time, and whether the console kept up: the decisions its
overview counts for the newest minute that ended at least LAG_S ago, against those written in it.

    python -m bench.console_feed --quick            # two minutes, a smoke test
    python -m bench.console_feed --merge            # the hour; BENCHMARKS.md's section replaced
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from bench.artifacts import BENCH_BUILD_DIR
from bench.console_traffic import Out, Traffic
from bench.cpu import load_average, other_cpu_hogs
from devstack.embedded import EmbeddedKafka, EmbeddedRedis, free_port, terminate
from loadgen.machine import machine_info, machine_label
from moderator.config import REPO_ROOT
from moderator.kafka.topics import ensure_topics
from moderator.loop import run

log = logging.getLogger(__name__)

RESULTS_FILE = BENCH_BUILD_DIR / "results-console-feed.json"
PARTITIONS = 4
TOKEN = "bench-token-44"  # noqa: S105 (a login of this run's own console, on loopback)
LAG_S = 15.0  # a minute is judged this long after it ended (the overview is sent every second)
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class FeedPlan:
    duration_s: float
    rate: float  # decisions a second
    held_share: float  # of the decisions, held for review
    sample_s: float
    warmup_s: float  # the first sample at or after it is the run's start


FULL = FeedPlan(3600.0, 1000.0, 0.02, 30.0, 60.0)
QUICK = FeedPlan(140.0, 1000.0, 0.02, 10.0, 10.0)  # long enough to judge one whole minute


class Tab:
    """One open page: logs in with a token and reads the console's event stream, keeping the
    newest overview; reconnects (a new snapshot) when the stream ends, as the page does."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.overview: dict[str, Any] | None = None
        self.events = 0
        self.connects = 0
        self._thread = threading.Thread(target=self._run, name="bench-tab", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self._follow()
            except (OSError, ValueError) as exc:
                log.info("the page's stream ended (%r); reconnecting", exc)
            time.sleep(1.0)

    def _follow(self) -> None:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        with opener.open(self.url + "/api/session", timeout=30) as answer:
            csrf = json.loads(answer.read())["csrf"]
        form = urllib.parse.urlencode({"token": TOKEN, "csrf": csrf}).encode()
        opener.open(self.url + "/login", data=form, timeout=30).close()
        self.connects += 1
        event = ""
        with opener.open(self.url + "/events", timeout=60) as stream:
            for raw in stream:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    self._read(event, line[5:].strip())

    def _read(self, event: str, data: str) -> None:
        self.events += 1
        if event == "overview":
            self.overview = orjson.loads(data)
        elif event == "snapshot":
            self.overview = orjson.loads(data)["overview"]


def memory_and_cpu(pid: int) -> tuple[float, float]:
    """The process's resident memory (MiB, VmRSS) and CPU-seconds so far (user + system)."""
    status = Path(f"/proc/{pid}/status").read_text()
    kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return kb / 1024, ticks / os.sysconf("SC_CLK_TCK")


def counted(overview: dict[str, Any] | None) -> dict[int, int]:
    """The decisions the console's overview counts, by minute."""
    return {
        int(row["minute_ms"]): sum(
            int(v) for k, v in row.items() if k not in ("minute_ms", "final")
        )
        for row in (overview or {}).get("per_minute") or []
    }


def behind(written: Counter[int], seen: dict[int, int]) -> int | None:
    """Decisions written in the overview's minutes (and since) that it does not count yet: about
    a second's worth when the console keeps up (the page hears the overview every second)."""
    if not seen:
        return None
    first = min(seen)
    return sum(n for minute, n in written.items() if minute >= first) - sum(seen.values())


@contextlib.contextmanager
def console_process(
    bootstrap: str,
    redis_url: str,
    topics: dict[str, str],
    log_path: Path,
    traced: Path | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`python -m moderator console` on a free port, on `topics`; (process, base URL). With
    `traced`, under bench.console_memory, its tracemalloc snapshots appended to that file."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODERATOR_")}
    env.update(MODERATOR_CONSOLE_TOKENS=f"bench:{TOKEN}", PYTHONPATH=str(REPO_ROOT))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as out:
        entry = (
            ["-m", "bench.console_memory", "--out", str(traced), "--"]
            if traced
            else ["-m", "moderator"]
        )
        proc = subprocess.Popen(
            [sys.executable, *entry, "console", "--host", "127.0.0.1", "--port",
             str(port), "--kafka-bootstrap", bootstrap, "--redis-url", redis_url,
             "--review-topic", topics["review"], "--verdict-topic", topics["verdict"],
             "--out-topic", topics["decision"]],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
        )  # fmt: skip
        try:
            yield proc, f"http://127.0.0.1:{port}"
        finally:
            terminate(proc, 15)


def wait_ready(proc: subprocess.Popen[bytes], tab: Tab) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while tab.overview is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the console did not serve its page (see its log)")
        time.sleep(0.5)


class Writer:
    """The producer side: records to their topics, the decisions written counted by minute."""

    def __init__(self, bootstrap: str, topics: dict[str, str]) -> None:
        self.topics = topics
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1,
                                  "client.id": "bench-console-feed",
                                  "log.connection.close": False})  # fmt: skip
        self.by_minute: Counter[int] = Counter()
        self.failed = 0

    def write(self, out: Out) -> None:
        if out.kind == "decision":
            at = int(orjson.loads(out.value)["decided_at_ms"])
            self.by_minute[at - at % 60_000] += 1
        while True:
            try:
                self.producer.produce(self.topics[out.kind], out.value, out.key,
                                      on_delivery=self._delivered)  # fmt: skip
                return
            except BufferError:
                self.producer.poll(0.1)

    def _delivered(self, err: object, _msg: object) -> None:
        if err is not None:
            self.failed += 1

    def close(self) -> None:
        self.producer.flush(30)


def drive(plan: FeedPlan, traffic: Traffic, writer: Writer,
          sample: Callable[[float], None]) -> None:  # fmt: skip
    """Write `plan.rate` decisions a second (and what falls due) for `plan.duration_s`,
    calling `sample(elapsed_s)` every `plan.sample_s`."""
    start = time.monotonic()
    made = 0
    next_sample = start
    while (now := time.monotonic()) < start + plan.duration_s:
        wall_ms = int(time.time() * 1000)
        while made < int((now - start) * plan.rate):
            for out in traffic.message(wall_ms):
                writer.write(out)
            made += 1
        for out in traffic.due(wall_ms):
            writer.write(out)
        writer.producer.poll(0)
        if now >= next_sample:
            sample(now - start)
            next_sample += plan.sample_s
        time.sleep(0.01)


def measure(plan: FeedPlan, checkpoint: Callable[[dict[str, Any]], None],
            traced: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The whole run: servers, console, page, traffic; the samples, saved after each."""
    run_id = uuid.uuid4().hex[:8]
    topics = {k: f"bench.console.{k}.{run_id}" for k in ("decision", "review", "verdict")}
    console_log = BENCH_BUILD_DIR / f"console-feed-{run_id}.log"
    out: dict[str, Any] = {"plan": asdict(plan), "topics": topics, "partitions": PARTITIONS,
                           "console_log": str(console_log), "samples": [],
                           "traced": str(traced) if traced else None}  # fmt: skip
    with EmbeddedKafka() as kafka, EmbeddedRedis() as redis:
        run(ensure_topics(kafka.bootstrap, dict.fromkeys(topics.values(), PARTITIONS)))
        console = console_process(kafka.bootstrap, redis.url, topics, console_log, traced)
        with console as (proc, url):
            tab = Tab(url)
            tab.start()
            wait_ready(proc, tab)
            out["idle_rss_mib"] = round(memory_and_cpu(proc.pid)[0], 1)
            traffic = Traffic(run_id, plan.held_share)
            writer = Writer(kafka.bootstrap, topics)

            def sample(elapsed_s: float) -> None:
                if proc.poll() is not None:
                    raise RuntimeError(f"the console exited ({proc.returncode}); see its log")
                out["samples"].append(
                    one_sample(elapsed_s, proc.pid, tab, writer, traffic, kafka.pid)
                )
                checkpoint(out)

            try:
                drive(plan, traffic, writer, sample)
                sample(plan.duration_s)
            finally:
                writer.close()
            out["failed_writes"] = writer.failed
    return out


def one_sample(elapsed_s: float, pid: int, tab: Tab, writer: Writer,
               traffic: Traffic, broker_pid: int | None = None) -> dict[str, Any]:  # fmt: skip
    rss_mib, cpu_s = memory_and_cpu(pid)
    # the broker's share: the embedded one keeps its whole log in memory, and late in an hour
    # at this rate it can be what the console waits for
    broker_rss, broker_cpu = memory_and_cpu(broker_pid) if broker_pid else (None, None)
    seen = counted(tab.overview)
    now_ms = int(time.time() * 1000)
    judged = now_ms - round(LAG_S * 1000)
    minute = judged - judged % 60_000 - 60_000  # the newest minute that ended LAG_S ago
    row = {"t_s": round(elapsed_s, 1), "rss_mib": round(rss_mib, 1), "cpu_s": round(cpu_s, 2),
           "written": traffic.made, "held_written": traffic.held, "minute_ms": minute,
           "minute_written": writer.by_minute[minute],
           "minute_counted": seen.get(minute), "behind": behind(writer.by_minute, seen),
           "waiting": (tab.overview or {}).get("waiting"), "tab_events": tab.events,
           "tab_connects": tab.connects, "loadavg": load_average(),
           "broker_cpu_s": None if broker_cpu is None else round(broker_cpu, 2),
           "broker_rss_mib": None if broker_rss is None else round(broker_rss, 1)}  # fmt: skip
    log.info("console feed %.0f s: %s", elapsed_s, row)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.console_feed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="about two minutes, a smoke test")
    p.add_argument("--minutes", type=float, default=None, help="how long (default 60)")
    p.add_argument("--results", type=Path, default=RESULTS_FILE, help="results JSON")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "BENCHMARKS.md")
    p.add_argument("--merge", action="store_true", help="put the section into --out")
    p.add_argument("--report-only", action="store_true", help="merge --results, run nothing")
    p.add_argument("--traced", type=Path, default=None,
                   help="console under tracemalloc (bench.console_memory)")  # fmt: skip
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.report_only:
        plan = QUICK if args.quick else FULL
        if args.minutes is not None:
            plan = dataclasses.replace(plan, duration_s=args.minutes * 60)
        results: dict[str, Any] = {
            "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "quick": bool(args.quick), "machine": machine_info(),
            "machine_label": machine_label(), "load_before": load_average(),
        }  # fmt: skip

        def checkpoint(section: dict[str, Any]) -> None:
            results["console_feed"] = section
            args.results.parent.mkdir(parents=True, exist_ok=True)
            args.results.write_text(json.dumps(results, indent=1, default=str))

        checkpoint(measure(plan, checkpoint, args.traced))
        results["load_during"] = [{"section": "console_feed", "loadavg": load_average(),
                                   "others": other_cpu_hogs()}]  # fmt: skip
        checkpoint(results["console_feed"])
    if args.merge:
        from bench.console_feed_report import merge_console_feed

        results = json.loads(args.results.read_text())
        args.out.write_text(merge_console_feed(results, args.out.read_text()))
        print(f"merged the console feed section into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
