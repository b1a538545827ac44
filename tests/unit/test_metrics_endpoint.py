"""The metrics endpoint binds where it is told and serves its three paths, nothing else."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from moderator.metrics import Metrics, MetricsServer


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
    metrics.decisions.labels("allow").inc(3)
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
