"""The console's /metrics (console/metrics.py): what `up{job="moderator-console"}` and the
ModeratorConsoleDown alert read. It answers without a login, as /healthz does, in Prometheus'
text format, and names no moderator; it counts the verdicts on the shadow's disagreements by the
model they side with."""

from __future__ import annotations

import orjson
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from console.app import create_app
from console.board import Board
from console.claims import Claims
from console.config import ConsoleSettings
from console.feed import Feed
from console.records import Verdict, parse_disagreement
from moderator.decide.screen import Judged
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage
from moderator.shadow.agreement import Primary, disagreement_record


def served(board: Board) -> TestClient:
    feed = Feed(
        board, {}, review_topic="r", verdict_topic="v", decision_topic="d", max_record_bytes=4096
    )
    settings = ConsoleSettings(tokens="alice:alice-token-1")
    return TestClient(create_app(settings, board, feed, Claims("", 60, verdict_topic="v")))


def test_metrics_answer_without_a_login_in_prometheus_text_and_name_no_one() -> None:
    board = Board(undo_grace_s=30, overview_minutes=15)
    reply = served(board).get("/metrics")  # no lifespan: nothing started, no broker
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    names = {family.name for family in text_string_to_metric_families(reply.text)}
    assert {"process_start_time_seconds", "python_info"} <= names
    assert "alice" not in reply.text


def shadow_record(message_id: str, primary: str, shadow: str) -> bytes:
    """A disagreement as the moderator writes it (moderator/shadow/agreement.py)."""
    chat = ChatMessage(message_id, "speedrun", "u-troll", "say that again", 1_000)
    first = Primary(chat, Policy.load(), "chat-minilm@3", Ruling(primary, "threat", None), {}, None)
    judged = Judged(Ruling(shadow, "threat", None), {"threat": 0.9}, (0, 14))
    return orjson.dumps(disagreement_record(first, judged, "candidate@4", 2_000))


def test_the_verdicts_on_disagreements_are_a_gauge_by_the_model_they_side_with() -> None:
    board = Board(undo_grace_s=30, overview_minutes=15, disagreements_kept=10)
    client = served(board)  # one app, and a second beside it: no collector registered twice
    served(Board(undo_grace_s=30, overview_minutes=15))
    for message_id, primary, shadow, verdict in [
        ("m-1", "review", "block", "block"),
        ("m-2", "review", "block", "block"),
        ("m-3", "block", "allow", "block"),
        ("m-4", "review", "nudge", "allow"),
        ("m-5", "review", "block", None),  # no verdict yet
    ]:
        board.add_disagreement(parse_disagreement(shadow_record(message_id, primary, shadow), 0))
        if verdict is not None:
            board.add_verdict(Verdict(message_id, verdict, "bob", None, "channel", 3_000))
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    sides = {
        s.labels["agrees"]: s.value for s in families["moderator_console_shadow_verdicts"].samples
    }
    assert sides == {"primary": 1.0, "shadow": 2.0, "neither": 1.0}
