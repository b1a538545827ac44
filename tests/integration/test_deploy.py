"""deploy/ against a real `moderator run`: every metric the Grafana dashboard and the alert rules
read is one it exports; the image's HEALTHCHECK command and the pods' probes get their answers.

Nothing in deploy/ can run here (no container engine, no cluster): these tests run the parts of
it that are plain commands and HTTP paths against the moderator itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack.child import ModeratorChild, Samples, answers
from moderator.config import Settings
from tests.integration.kafka_io import chat, consume, distinct_ids, produce
from tests.integration.test_processes import closed_port, start
from tests.promql import (
    ALERT_RULES,
    REPO,
    deploy_queries,
    exported_names,
    metric_names,
    rule_queries,
    selectors,
    unknown_names,
)
from tests.waiting import eventually

pytestmark = pytest.mark.integration

PROMETHEUS_OWN = {"up"}  # series Prometheus writes itself, not the moderator


async def serving(settings: Settings) -> ModeratorChild:
    """A moderator that has decided a few messages and dead-lettered one."""
    proc = start(settings)
    try:
        await asyncio.to_thread(proc.wait_ready)
        records = [chat(i, f"deploy check line {i}") for i in range(20)]
        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [*records, (b"c-0", b"{not json")])  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(20))
    except BaseException:
        proc.kill()
        raise
    return proc


async def test_every_metric_the_dashboard_and_the_alerts_read_is_exported(
    settings: Settings,
) -> None:
    proc = await serving(settings)
    try:
        samples = await asyncio.to_thread(proc.scrape)
    finally:
        proc.terminate()
    assert samples is not None, "no answer on /metrics"
    exported = exported_names(samples.text)
    queries = deploy_queries()
    read = set().union(*(metric_names(expr) for _, expr in queries))
    print(f"{len(queries)} PromQL expressions read {len(read)} series names: {sorted(read)}")

    assert unknown_names(queries, exported | PROMETHEUS_OWN) == {}
    # The dashboard really covers what it claims (issue 16's list), by the series it reads.
    for name in ("moderator_messages_consumed_total", "moderator_decisions_total",
                 "moderator_dead_letters_total", "moderator_end_to_end_seconds_bucket",
                 "moderator_over_budget_total", "moderator_consumer_lag",
                 "moderator_cache_requests_total", "moderator_redis_up",
                 "moderator_batch_size_bucket", "moderator_publish_retries_total",
                 "moderator_publish_refused_total", "moderator_policy_updates_total",
                 "process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "process_start_time_seconds"):  # fmt: skip
        assert name in read, f"the dashboard reads no {name}"


def missing_alert_series(samples: Samples) -> dict[str, list[str]]:
    """Per alert, each series it reads (name and `label="value"` matchers) that `samples` holds
    no sample of, or, for a counter, holds at other than 0: a fresh process must export every
    one at 0, or `increase()` cannot see its first event. Prometheus adds `job` and `instance`."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(samples.text):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((sample.labels, sample.value))
    missing: dict[str, list[str]] = {}
    for alert, expr in rule_queries(yaml.safe_load(ALERT_RULES.read_text())):
        for name, labels in selectors(expr):
            if name in PROMETHEUS_OWN:
                continue
            wanted = {k: v for k, v in labels.items() if k not in ("job", "instance")}
            found = [value for have, value in series.get(name, [])
                     if all(have.get(k) == v for k, v in wanted.items())]  # fmt: skip
            if not found or (name.endswith("_total") and any(found)):
                missing.setdefault(alert, []).append(f"{name}{wanted or ''}: {found}")
    return missing


async def test_a_fresh_process_exports_every_series_the_alerts_read_at_0(
    settings: Settings,
) -> None:
    """Issue 30: a labelled counter first exported at 1 never shows an increase, so
    ModeratorPublishRefused and ModeratorPolicyRejected were silent on the first refusal."""
    proc = start(settings)
    try:
        await asyncio.to_thread(proc.wait_ready)
        scraped: list[Samples] = []

        async def complete() -> bool:  # consumer_lag appears once the lag loop has run
            samples = await asyncio.to_thread(proc.scrape)
            scraped[:] = [samples] if samples is not None else []
            return bool(scraped) and not missing_alert_series(scraped[0])

        with contextlib.suppress(AssertionError):  # the assertion below says what is missing
            await eventually(complete, "every series the alerts read, at 0")
    finally:
        proc.terminate()
    assert scraped, "no answer on /metrics"
    samples = scraped[0]
    assert missing_alert_series(samples) == {}
    # The resources the dashboard shows: process_* and python_* on the moderator's registry.
    resources = {"process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "process_start_time_seconds", "python_info"}  # fmt: skip
    assert resources <= exported_names(samples.text)


def healthcheck_command() -> list[str]:
    """The exec-form command of deploy/Dockerfile's HEALTHCHECK."""
    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK\b.*?\bCMD\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert match, "deploy/Dockerfile has no exec-form HEALTHCHECK"
    command: list[str] = json.loads(match.group(1))
    return command


def run_healthcheck(port: int) -> int:
    """The HEALTHCHECK as the container runs it (its `python` is this interpreter here)."""
    command = healthcheck_command()
    assert command[0] == "python"
    done = subprocess.run([sys.executable, *command[1:]], env={"MODERATOR_METRICS_PORT": str(port)},
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    return done.returncode


def run_compose_readiness(port: int) -> int:
    """deploy/compose.yaml's health check of the moderator (asks /readyz), as compose runs it."""
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    kind, python, *args = compose["services"]["moderator"]["healthcheck"]["test"]
    assert (kind, python) == ("CMD", "python")
    done = subprocess.run([sys.executable, *args], env={"MODERATOR_METRICS_PORT": str(port)},
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    return done.returncode


def probe_paths() -> dict[str, str]:
    """Each probe of the base Deployment's moderator container → its HTTP path."""
    deployment = yaml.safe_load((REPO / "deploy" / "k8s" / "base" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        probe: container[probe]["httpGet"]["path"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    }


async def test_the_image_healthcheck_and_the_pod_probes_answer(settings: Settings) -> None:
    proc = await serving(settings)
    try:
        port = proc.metrics_port
        assert port is not None
        healthy = await asyncio.to_thread(run_healthcheck, port)
        ready = await asyncio.to_thread(run_compose_readiness, port)
        paths = probe_paths()
        answered = {probe: await asyncio.to_thread(answers, port, path)
                    for probe, path in paths.items()}  # fmt: skip
    finally:
        proc.terminate()
    assert healthy == 0, "the HEALTHCHECK command failed against a healthy moderator"
    assert ready == 0, "compose's readiness check (what loadgen waits for) failed"
    assert paths["readinessProbe"] == "/readyz"
    assert paths["livenessProbe"] == paths["startupProbe"] == "/healthz"
    assert answered == dict.fromkeys(paths, True), answered
    # And it fails when nothing answers (a dead or hung process).
    assert await asyncio.to_thread(run_healthcheck, closed_port()) != 0


def test_healthcheck_reads_the_metrics_port_from_the_environment() -> None:
    """The HEALTHCHECK asks the port the image's ENV sets, not a second copy of it."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    assert "MODERATOR_METRICS_PORT=9108" in dockerfile
    assert "os.environ.get('MODERATOR_METRICS_PORT', '9108')" in " ".join(healthcheck_command())


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments and blanks skipped)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))  # fmt: skip
    return {key.strip(): value.strip() for key, value in pairs}


async def test_the_example_environment_file_starts_and_fails_only_on_the_broker() -> None:
    """deploy/moderator.env.example as systemd would load it, with the broker (and Redis)
    unreachable and a free metrics port: exit 69, which the unit restarts, not 78 (a setting
    wrong, which it does not). It named a model directory no install has (issue 30)."""
    example = env_file(REPO / "deploy" / "moderator.env.example")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODERATOR_")}
    env.update(example)
    env.update(MODERATOR_KAFKA_BOOTSTRAP=f"127.0.0.1:{closed_port()}",
               MODERATOR_REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
               MODERATOR_METRICS_HOST="127.0.0.1", MODERATOR_METRICS_PORT="0",
               MODERATOR_THREADS="1")  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "moderator", "run"], env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 69, done.stderr[-3000:]
    assert "could not connect to Kafka" in done.stderr
