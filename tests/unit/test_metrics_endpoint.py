"""The metrics endpoint binds where it is told and serves its three paths, nothing else."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from moderator.metric_wings import DEAD_LETTER_REASONS, DEFAULT_ACTIONS
from moderator.metrics import Metrics, MetricsServer
from moderator.policy import rules as policy
from tests.promql import REPO
from tests.waiting import eventually, eventually_blocking


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture(params=["127.0.0.1", "::1"])
def server(request: pytest.FixtureRequest) -> Iterator[MetricsServer]:
    if request.param == "::1" and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine (reported by -ra, not silent)")
    metrics = Metrics()
    metrics.kafka.decisions["allow"].inc(3)
    srv = MetricsServer(request.param, 0, metrics)
    srv.start()
    yield srv
    srv.stop()


def get(srv: MetricsServer, path: str, method: str = "GET") -> tuple[int, bytes]:
    host = srv.server_address[0]
    url = f"http://[{host}]:{srv.port}{path}" if ":" in host else f"http://{host}:{srv.port}{path}"
    try:
        with urlopen(Request(url, method=method), timeout=5) as response:
            return response.status, response.read()
    except HTTPError as exc:
        return exc.code, b""


def test_binds_only_the_configured_address(server: MetricsServer) -> None:
    assert server.server_address[0] in ("127.0.0.1", "::1")
    other = "::1" if server.server_address[0] == "127.0.0.1" else "127.0.0.1"
    if other == "::1" and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine (reported by -ra, not silent)")
    family = socket.AF_INET6 if ":" in other else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        assert sock.connect_ex((other, server.port)) != 0, f"nothing answers on {other}"


def test_serves_metrics_health_readiness_and_nothing_else(server: MetricsServer) -> None:
    status, body = get(server, "/metrics")
    assert status == 200
    assert b'moderator_decisions_total{action="allow"} 3.0' in body
    assert get(server, "/healthz") == (200, b"ok\n")
    assert get(server, "/readyz")[0] == 503
    server.ready.set()
    assert get(server, "/readyz") == (200, b"ready\n")
    for path in ("/", "/metrics/", "/../../etc/passwd", "/favicon.ico", "/healthz/x"):
        assert get(server, path)[0] == 404, path
    assert get(server, "/metrics", method="POST")[0] == 501
    assert get(server, "/metrics", method="DELETE")[0] == 501


def test_every_dead_letter_reason_the_schema_names_is_counted_from_0() -> None:
    schema = json.loads((REPO / "moderator/schemas/dead-letter-headers.schema.json").read_text())
    reasons = schema["properties"]["moderator.error.code"]["enum"]
    assert set(DEAD_LETTER_REASONS) == set(reasons)
    assert set(DEFAULT_ACTIONS) == set(policy.DEFAULT_ACTIONS)
    exposition = generate_latest(Metrics().registry).decode()
    for reason in reasons:
        assert f'moderator_dead_letters_total{{reason="{reason}"}} 0.0' in exposition


def test_serves_the_process_and_python_collectors() -> None:
    names = {f.name for f in text_string_to_metric_families(
        generate_latest(Metrics().registry).decode())}  # fmt: skip
    assert {"process_resident_memory_bytes", "process_open_fds", "python_info"} <= names


def test_healthz_fails_while_the_event_loop_is_blocked() -> None:
    """Liveness: the loop stamps a heartbeat; blocked past the bound, /healthz answers 503 (the
    HTTP thread still runs), and 200 again once the loop turns."""
    srv = MetricsServer("127.0.0.1", 0, Metrics(), stale_after_s=0.2)
    srv.start()

    def health() -> int:
        return get(srv, "/healthz")[0]

    async def healthy() -> bool:
        return await asyncio.to_thread(health) == 200

    async def main() -> None:
        beating = asyncio.create_task(srv.heartbeat(every_s=0.01))
        assert await healthy()
        # Blocks the loop (the thread sleeps between checks, nothing awaits): the point.
        eventually_blocking(lambda: health() == 503, "/healthz fails while the loop is blocked")
        await eventually(healthy, "/healthz answers 200 again once the loop turns")
        beating.cancel()

    try:
        asyncio.run(main())
    finally:
        srv.stop()
