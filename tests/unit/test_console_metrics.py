"""The console's /metrics (console/metrics.py): what `up{job="moderator-console"}` and the
ModeratorConsoleDown alert read. It answers without a login, as /healthz does, in Prometheus'
text format, and names no moderator."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from console.app import create_app
from console.board import Board
from console.claims import Claims
from console.config import ConsoleSettings
from console.feed import Feed


def test_metrics_answer_without_a_login_in_prometheus_text_and_name_no_one() -> None:
    board = Board(undo_grace_s=30, overview_minutes=15)
    feed = Feed(
        board, {}, review_topic="r", verdict_topic="v", decision_topic="d", max_record_bytes=4096
    )
    settings = ConsoleSettings(tokens="alice:alice-token-1")
    served = create_app(settings, board, feed, Claims("", 60, verdict_topic="v"))
    reply = TestClient(served).get("/metrics")  # no lifespan: nothing started, no broker
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    names = {family.name for family in text_string_to_metric_families(reply.text)}
    assert {"process_start_time_seconds", "python_info"} <= names
    assert "alice" not in reply.text
