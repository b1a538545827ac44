"""Prometheus metrics and the tiny HTTP endpoint serving /metrics, /healthz and /readyz.

The metrics live in wings (moderator/metric_wings.py); `Metrics` owns their one registry.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from moderator.errors import ListenError
from moderator.metric_families import NAMESPACE, Families
from moderator.metric_wings import (
    DecideMetrics,
    KafkaMetrics,
    PolicyMetrics,
    RedisMetrics,
    ReviewMetrics,
    ShadowMetrics,
    UserMetrics,
)
from moderator.records import VERDICTS

log = logging.getLogger(__name__)

# Liveness: the event loop stamps a heartbeat this often; /healthz fails once the stamp is older
# than the bound (a loop blocked that long serves nothing; a model batch runs off the loop).
HEARTBEAT_EVERY_S = 1.0
HEARTBEAT_STALE_S = 10.0


class Metrics:
    """Every metric of one moderator, on its own registry (so tests can run several), by wing:
    each module gets its wing (moderator/metric_wings.py), the service the whole."""

    def __init__(self, budget_s: float = 0.05) -> None:
        """`budget_s`: the latency budget, a bucket bound of `end_to_end_seconds`."""
        self.registry = r = CollectorRegistry(auto_describe=True)
        f = Families(r)
        self.kafka = KafkaMetrics(f)
        self.redis = RedisMetrics(f)
        self.decide = DecideMetrics(f, self.redis, budget_s)
        self.users = UserMetrics(f, self.redis)
        self.policy = PolicyMetrics(f)
        self.review = ReviewMetrics(f, self.redis, VERDICTS)
        self.shadow = ShadowMetrics(f)
        self.model = Info("model", "The model being served", namespace=NAMESPACE, registry=r)
        # process_* (memory, CPU, open fds, start time: restarts) and python_* (GC, version),
        # as the default registry has them; this registry is the one /metrics serves.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            alive = self.server.alive()
            self._reply(200 if alive else 503, b"ok\n" if alive else b"event loop stuck\n")
        elif path == "/readyz":
            ready = self.server.ready.is_set()
            self._reply(200 if ready else 503, b"ready\n" if ready else b"not ready\n")
        else:
            self._reply(404, b"not found\n")

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics endpoint: " + format, *args)  # noqa: G003


class MetricsServer(ThreadingHTTPServer):
    """Serves the metrics on its own thread so a busy event loop cannot starve a scrape."""

    daemon_threads = True

    def __init__(
        self, host: str, port: int, metrics: Metrics, *, stale_after_s: float = HEARTBEAT_STALE_S
    ) -> None:
        host = host.strip("[]")  # "[::1]" as in a URL
        if ":" in host:  # an IPv6 address such as ::1
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self.metrics = metrics
        self.ready = threading.Event()
        self.stale_after_s = stale_after_s
        self._beat: float | None = None  # time.monotonic() of the loop's last heartbeat
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def beat(self) -> None:
        """Called on the event loop: it is still turning."""
        self._beat = time.monotonic()

    def alive(self) -> bool:
        """No heartbeat yet (not started) or a recent one."""
        beat = self._beat
        return beat is None or time.monotonic() - beat <= self.stale_after_s

    async def heartbeat(self, every_s: float = HEARTBEAT_EVERY_S) -> None:
        """Stamp the heartbeat every `every_s` until cancelled (run it on the loop to watch)."""
        while True:
            self.beat()
            await asyncio.sleep(every_s)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.serve_forever, name="metrics-http", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self.shutdown()
            thread.join()
        self.server_close()


def listen(host: str, port: int, metrics: Metrics) -> MetricsServer:
    """A `MetricsServer` on `host:port`; a busy or bad address is one line, not a traceback."""
    try:
        return MetricsServer(host, port, metrics)
    except OSError as exc:
        raise ListenError(
            f"the metrics endpoint cannot listen on {host}:{port}: {exc.strerror or exc} "
            "(MODERATOR_METRICS_HOST / MODERATOR_METRICS_PORT; 0 picks a free port)"
        ) from None
