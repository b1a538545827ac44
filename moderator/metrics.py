"""Prometheus metrics and the tiny HTTP endpoint serving /metrics, /healthz and /readyz."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase

from moderator.errors import ListenError

log = logging.getLogger(__name__)

NAMESPACE = "moderator"
LATENCY_BUCKETS_S = (
    *(0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03),
    *(0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5),
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
WINDOW_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)  # windows per message (cap 16 by default)
# Send to decision: fine around a tens-of-milliseconds budget, coarse out to a minute-old backlog.
END_TO_END_BUCKETS_S = (
    *(0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0),
    *(2.5, 5.0, 10.0, 30.0, 60.0),
)

# Every value each labelled metric can take, so its series exist at 0 from the start: a series
# born at 1 has no increase() to see, and an alert on it stays silent on the first event.
# Policies may name more actions than these defaults; those series appear when first counted.
DEFAULT_ACTIONS = ("allow", "nudge", "review", "block")  # moderator/policy.py DEFAULT_ACTIONS
DEAD_LETTER_REASONS = (  # moderator/schemas/dead-letter-headers.schema.json's enum
    *("empty_value", "too_large", "not_utf8", "invalid_json", "not_object"),
    *("missing_field", "wrong_type", "empty_field", "publish_failed"),
    *("invalid_verdict", "verdict_not_held"),  # verdicts (moderator/verdict_intake.py)
)
CACHE_LOOKUPS = (("l1", "hit"), ("l1", "miss"), ("redis", "hit"), ("redis", "miss"),
                 ("inflight", "hit"))  # fmt: skip
STAGES = ("queue", "score", "total")
REFUSED_OUTCOMES = ("decision", "dead_letter", "receipt")
COMMIT_RESULTS = ("ok", "failed")
POLICY_RESULTS = ("applied", "removed", "rejected")
VERDICTS = ("allow", "nudge", "block")  # moderator/records.py VERDICTS
VERDICT_OUTCOMES = ("applied", "late", "not_held", "timed_out", "invalid")
# What holds a message besides a model label (the reason's head: `unsupported_language:fr`).
HOLD_REASONS = ("truncated", "unsupported_language", "deny", "escalated", "none")
OVERRIDE_ACTIONS = ("allow", "nudge", "block")  # moderator/overrides.py ACTIONS (a verdict's)
USER_RULES = ("muted", "rate_limited", "spam", "link", "escalated")  # moderator/users.py
USER_STEPS = ("before", "after")
# Who makes a Redis round trip besides the users' state (its own counter, by step): the score
# cache's reads (one MGET per batch with L1 misses) and background writes, the per-batch hold
# (context rings and held messages), a verdict applied, and the timeout sweep.
REDIS_PARTS = ("cache_read", "cache_write", "review", "verdict", "sweep")

# Liveness: the event loop stamps a heartbeat this often; /healthz fails once the stamp is older
# than the bound (a loop blocked that long serves nothing; a model batch runs off the loop).
HEARTBEAT_EVERY_S = 1.0
HEARTBEAT_STALE_S = 10.0


def _precreate(metric: MetricWrapperBase, *values: str | tuple[str, ...]) -> None:
    for value in values:
        metric.labels(*((value,) if isinstance(value, str) else value))


class Metrics:
    """Every metric of one moderator, on its own registry (so tests can run several)."""

    def __init__(self, budget_s: float = 0.05) -> None:
        """`budget_s` is also a bucket bound of `end_to_end_seconds`: the share of decisions
        within budget is then exact, whatever the budget."""
        self.registry = r = CollectorRegistry(auto_describe=True)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, namespace=NAMESPACE, registry=r)

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, labels, namespace=NAMESPACE, registry=r)

        def histogram(name: str, doc: str, buckets: Sequence[float], *labels: str) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, namespace=NAMESPACE, registry=r)

        self.consumed = counter("messages_consumed", "Inbound records fetched")
        self.decisions = counter("decisions", "Decisions published, by action", "action")
        self.dead_letters = counter(
            "dead_letters", "Records sent to the dead-letter topic", "reason"
        )
        self.cache_requests = counter("cache_requests", "Score cache lookups", "level", "result")
        self.cache_writes_dropped = counter(
            "cache_writes_dropped", "Scores not written to Redis (down or backlog)"
        )
        self.redis_errors = counter("redis_errors", "Failed or timed-out Redis calls")
        self.redis_up = gauge("redis_up", "1 while the Redis circuit breaker is closed")
        self.user_rules = counter(
            "user_rules",
            "Decisions the users' rules made or changed: muted, rate_limited, spam, link (decided "
            "without the model), escalated (one step up the ladder)",
            "rule",
        )
        self.user_state_degraded = gauge(
            "user_state_degraded", "1 while users' state is kept per process (Redis failed)"
        )
        self.user_state_round_trips = counter(
            "user_state_round_trips",
            "Redis calls for users' state, by step (one per batch)",
            "step",
        )
        self.redis_round_trips = counter(
            "redis_round_trips",
            "Redis calls (a command, a pipeline or a script: one round trip each) by part: "
            "cache_read, cache_write, review, verdict, sweep (users' state: "
            "user_state_round_trips)",
            "part",
        )
        self.user_state_local = counter(
            "user_state_local",
            "Messages whose users' state step ran on per-process state (Redis down or slow)",
            "step",
        )
        self.stage_seconds = histogram(
            "stage_seconds",
            "Time per message in each stage: queue (waiting for a model batch) and score (the "
            "model call) count the messages the model scored; total (fetched to decided) counts "
            "every decision, cached and degraded included; dead letters count in none",
            LATENCY_BUCKETS_S,
            "stage",
        )
        self.end_to_end = histogram(
            "end_to_end_seconds",
            "Decisions by decided_at_ms - sent_at_ms: the latency each is judged by against the "
            "budget (clock skew below 0 counts as 0)",
            sorted({*END_TO_END_BUCKETS_S, budget_s}),
        )
        self.batch_size = histogram("batch_size", "Messages per model batch", BATCH_BUCKETS)
        self.over_budget = counter("over_budget", "Decisions later than the latency budget")
        self.message_windows = histogram(
            "message_windows",
            "Windows of the model's length per message past the screen, scored or found in "
            "the cache (above 1: a long message read whole)",
            WINDOW_BUCKETS,
        )
        self.truncated = counter(
            "truncated_messages",
            "Messages longer than MODERATOR_MAX_WINDOWS windows: their middle was not all read "
            "(nothing flagged: review, reason truncated)",
        )
        self.unsupported_language = counter(
            "unsupported_language",
            "Messages the language gate named as a language the model does not read",
            "language",
        )
        self.degraded = counter(
            "degraded_decisions", "Late messages decided without the model", "action"
        )
        self.in_flight = gauge("in_flight", "Messages fetched and not yet acknowledged")
        self.consumer_lag = gauge(
            "consumer_lag", "Records behind the partition's high-water mark", "topic", "partition"
        )
        self.publish_retries = counter("publish_retries", "Decision or dead-letter re-sends")
        self.publish_refused = counter(
            "publish_refused",
            "Outcomes the broker refused for good, diverted to the dead-letter topic",
            "outcome",
        )
        self.commits = counter("commits", "Offset commits", "result")
        self.policy_updates = counter(
            "policy_updates",
            "Policy records read from the policies topic: applied, removed (tombstone) or "
            "rejected (invalid; the previous policy stays)",
            "result",
        )
        self.policies = gauge("channel_policies", "Channels with a policy of their own")
        self.review_records = counter(
            "review_records", "Review records published (one per review decision)"
        )
        self.review_fallbacks = counter(
            "review_fallbacks",
            "Messages held in this process, their review record without context, because Redis "
            "was down, slow or disabled",
        )
        self.held_messages = gauge(
            "held_messages", "Messages awaiting a verdict or their timeout (this instance's view)"
        )
        self.held_timeout_spent = gauge(
            "held_timeout_spent_ratio",
            "The held message next due: the share of its review timeout spent (0: none held)",
        )
        self.review_timeouts = counter(
            "review_timeouts", "Held messages timed out to their policy's review_fallback"
        )
        self.verdicts = counter(
            "verdicts",
            "Verdicts applied to held messages (the first per message), by the action the "
            "model's decision had, the human's verdict, and the label or reason that held it",
            *("model_action", "verdict", "label"),
        )
        self.verdict_outcomes = counter(
            "verdict_outcomes",
            "Verdicts read: applied, late (a second one for a message), not_held (unknown or "
            "expired), timed_out (after its fallback) or invalid: the last three dead-lettered",
            "outcome",
        )
        self.override_decisions = counter(
            "override_decisions",
            "Messages decided by a moderator's override (their normalised text had a verdict), "
            "without the model",
            "action",
        )
        self.override_updates = counter(
            "override_updates",
            "Override records read from the overrides topic or written here: applied, removed "
            "(tombstone) or rejected (invalid; an earlier override for the text stays)",
            "result",
        )
        self.overrides = gauge("overrides", "Overrides in effect (global and per channel)")
        self.model = Info("model", "The model being served", namespace=NAMESPACE, registry=r)
        # process_* (memory, CPU, open fds, start time: restarts) and python_* (GC, version),
        # as the default registry has them; this registry is the one /metrics serves.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        _precreate(self.decisions, *DEFAULT_ACTIONS)
        _precreate(self.degraded, *DEFAULT_ACTIONS)
        _precreate(self.dead_letters, *DEAD_LETTER_REASONS)
        _precreate(self.cache_requests, *CACHE_LOOKUPS)
        _precreate(self.stage_seconds, *STAGES)
        _precreate(self.publish_refused, *REFUSED_OUTCOMES)
        _precreate(self.commits, *COMMIT_RESULTS)
        _precreate(self.policy_updates, *POLICY_RESULTS)
        _precreate(self.verdict_outcomes, *VERDICT_OUTCOMES)
        _precreate(self.override_decisions, *OVERRIDE_ACTIONS)
        _precreate(self.override_updates, *POLICY_RESULTS)
        _precreate(self.user_rules, *USER_RULES)
        _precreate(self.user_state_round_trips, *USER_STEPS)
        _precreate(self.user_state_local, *USER_STEPS)
        _precreate(self.redis_round_trips, *REDIS_PARTS)

    def precreate_verdicts(self, labels: Iterable[str]) -> None:
        """Every agreement series at 0: a held message's label is one of the model's `labels`
        or a reason that holds without one."""
        for label in (*labels, *HOLD_REASONS):
            _precreate(self.verdicts, *(("review", v, label) for v in VERDICTS))


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
