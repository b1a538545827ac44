"""Prometheus metrics and the tiny HTTP endpoint serving /metrics, /healthz and /readyz."""

from __future__ import annotations

import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from moderator.errors import ListenError

log = logging.getLogger(__name__)

NAMESPACE = "moderator"
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03,
                     0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
# Send to decision: fine around a tens-of-milliseconds budget, coarse out to a minute-old backlog.
END_TO_END_BUCKETS_S = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0,
                        2.5, 5.0, 10.0, 30.0, 60.0)  # fmt: skip


class Metrics:
    """Every metric of one moderator, on its own registry (so tests can run several)."""

    def __init__(self, budget_s: float = 0.05) -> None:
        """`budget_s` is also a bucket bound of `end_to_end_seconds`: the share of decisions
        within budget is then exact, whatever the budget."""
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ns = NAMESPACE
        self.consumed = Counter("messages_consumed", "Inbound records fetched", namespace=ns,
                                registry=r)  # fmt: skip
        self.decisions = Counter("decisions", "Decisions published, by action", ["action"],
                                 namespace=ns, registry=r)  # fmt: skip
        self.dead_letters = Counter("dead_letters", "Records sent to the dead-letter topic",
                                    ["reason"], namespace=ns, registry=r)  # fmt: skip
        self.cache_requests = Counter("cache_requests", "Verdict cache lookups",
                                      ["level", "result"], namespace=ns, registry=r)  # fmt: skip
        self.cache_writes_dropped = Counter("cache_writes_dropped",
                                            "Verdicts not written to Redis (down or backlog)",
                                            namespace=ns, registry=r)  # fmt: skip
        self.redis_errors = Counter("redis_errors", "Failed or timed-out Redis calls",
                                    namespace=ns, registry=r)  # fmt: skip
        self.redis_up = Gauge("redis_up", "1 while the Redis circuit breaker is closed",
                              namespace=ns, registry=r)  # fmt: skip
        self.stage_seconds = Histogram("stage_seconds",
                                       "Time per message in each stage: queue (waiting for a "
                                       "model batch) and score (the model call) count the "
                                       "messages the model scored; total (fetched to decided) "
                                       "counts every decision, cached and degraded included; "
                                       "dead letters count in none", ["stage"],
                                       buckets=LATENCY_BUCKETS_S, namespace=ns,
                                       registry=r)  # fmt: skip
        self.end_to_end = Histogram("end_to_end_seconds",
                                    "Decisions by decided_at_ms - sent_at_ms: the latency each "
                                    "is judged by against the budget (clock skew below 0 "
                                    "counts as 0)", buckets=sorted({*END_TO_END_BUCKETS_S,
                                                                    budget_s}),
                                    namespace=ns, registry=r)  # fmt: skip
        self.batch_size = Histogram("batch_size", "Messages per model batch",
                                    buckets=BATCH_BUCKETS, namespace=ns, registry=r)  # fmt: skip
        self.over_budget = Counter("over_budget", "Decisions later than the latency budget",
                                   namespace=ns, registry=r)  # fmt: skip
        self.degraded = Counter("degraded_decisions", "Late messages decided without the model",
                                ["action"], namespace=ns, registry=r)  # fmt: skip
        self.in_flight = Gauge("in_flight", "Messages fetched and not yet acknowledged",
                               namespace=ns, registry=r)  # fmt: skip
        self.consumer_lag = Gauge("consumer_lag", "Records behind the partition's high-water mark",
                                  ["topic", "partition"], namespace=ns, registry=r)  # fmt: skip
        self.publish_retries = Counter("publish_retries", "Decision or dead-letter re-sends",
                                       namespace=ns, registry=r)  # fmt: skip
        self.publish_refused = Counter("publish_refused",
                                       "Outcomes the broker refused for good, diverted to the "
                                       "dead-letter topic", ["outcome"], namespace=ns,
                                       registry=r)  # fmt: skip
        self.commits = Counter("commits", "Offset commits", ["result"], namespace=ns,
                               registry=r)  # fmt: skip
        self.policy_updates = Counter("policy_updates",
                                      "Policy records read from the policies topic: applied, "
                                      "removed (tombstone) or rejected (invalid; the previous "
                                      "policy stays)", ["result"], namespace=ns,
                                      registry=r)  # fmt: skip
        self.policies = Gauge("channel_policies", "Channels with a policy of their own",
                              namespace=ns, registry=r)  # fmt: skip
        self.model = Info("model", "The model being served", namespace=ns, registry=r)


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.server.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._reply(200, b"ok\n")
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

    def __init__(self, host: str, port: int, metrics: Metrics) -> None:
        host = host.strip("[]")  # "[::1]" as in a URL
        if ":" in host:  # an IPv6 address such as ::1
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self.metrics = metrics
        self.ready = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

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
