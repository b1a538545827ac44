"""End to end through a running moderator: a message `moderator run` holds for review reaches the
console, and a click there makes the held message's final decision. It needs the moderation
loop's moderator side (issue 29: the review topic, the verdict consumer, final decisions), which
this file only drives through the loop contract's settings and records."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from devstack.embedded import EmbeddedKafka, EmbeddedRedis, free_port
from moderator import loop
from moderator.kafka.topics import ensure_topics
from tests.integration.console_browser import (
    REPO,
    Topics,
    card,
    console_process,
    logged_in,
    produce,
    read_until,
    until,
    wait_for,
)

pytestmark = pytest.mark.integration

HELD = "Ich finde dieses Spiel heute wirklich sehr langweilig und die Musik ist viel zu laut"


@contextmanager
def moderator_run(env: dict[str, str], metrics_port: int, log: Path) -> Iterator[None]:
    """`moderator run` with `env`, once /readyz answers."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moderator", "run"],
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:

            def ready() -> bool:
                try:
                    url = f"http://127.0.0.1:{metrics_port}/readyz"
                    with urllib.request.urlopen(url, timeout=2) as reply:
                        return bool(reply.status == 200)
                except OSError:
                    return proc.poll() is not None

            until(ready, "the moderator is ready", timeout_s=120)
            assert proc.poll() is None, log.read_text()
            yield
        finally:
            proc.terminate()
            proc.wait(60)


def test_a_message_the_moderator_holds_appears_and_a_click_makes_its_final_decision(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    topics = Topics(f"chat.review.{run}", f"chat.verdicts.{run}", f"chat.decisions.{run}")
    inbound = f"chat.messages.{run}"
    loop.run(ensure_topics(kafka.bootstrap, {inbound: 2, topics.decisions: 2, topics.review: 2,
                                             topics.verdicts: 2, f"{inbound}.dlq": 1}))  # fmt: skip
    metrics_port = free_port()
    env = {
        "MODERATOR_KAFKA_BOOTSTRAP": kafka.bootstrap, "MODERATOR_REDIS_URL": redis_server.url,
        "MODERATOR_IN_TOPIC": inbound, "MODERATOR_OUT_TOPIC": topics.decisions,
        "MODERATOR_DLQ_TOPIC": f"{inbound}.dlq", "MODERATOR_POLICY_TOPIC": f"chat.policies.{run}",
        "MODERATOR_REVIEW_TOPIC": topics.review, "MODERATOR_VERDICT_TOPIC": topics.verdicts,
        "MODERATOR_GROUP_ID": f"moderator-{run}", "MODERATOR_METRICS_PORT": str(metrics_port),
        "MODERATOR_COMMIT_INTERVAL_S": "0.2",
        # A busy machine's Redis may miss the default 25 ms: the context would then be left out
        # by design (the breaker's tests cover that); this test checks the context arrives.
        "MODERATOR_REDIS_TIMEOUT_MS": "2000",
    }  # fmt: skip
    with (
        moderator_run(env, metrics_port, tmp_path / "moderator.log"),
        console_process(kafka.bootstrap, redis_server.url, topics, tmp_path) as url,
        logged_in(url, "alice") as alice,
    ):
        now = int(time.time() * 1000)
        for i, text in enumerate(["gg", "nice run, that skip was clean", HELD]):
            message_id = "m-held" if text == HELD else f"m-{run}-{i}"
            chat = {"message_id": message_id, "channel_id": "speedrun", "user_id": f"u-{i}",
                    "text": text, "sent_at_ms": now + i}  # fmt: skip
            produce(kafka.bootstrap, inbound, [chat], key="channel_id")  # one by one: in order
        held = wait_for(alice, lambda b: card(b, "m-held"), "the held message's card")
        assert HELD in held.text
        assert "nice run, that skip was clean" in held.text  # its context, from the moderator
        assert "unsupported_language" in held.text
        held.find_element(By.CSS_SELECTOR, ".verdict-allow").click()

        def final(seen: list[dict[str, object]]) -> bool:
            return any(d["message_id"] == "m-held" and d.get("final") is True for d in seen)

        decisions = [d for d in read_until(kafka.bootstrap, topics.decisions, final)
                     if d["message_id"] == "m-held"]  # fmt: skip
        first = [d for d in decisions if d["final"] is False]
        finals = [d for d in decisions if d["final"] is True]
        assert [d["action"] for d in first] == ["review"]
        assert [(d["action"], d["reason"]) for d in finals] == [("allow", "verdict:alice")]
        wait_for(alice, lambda b: card(b, "m-held") is None, "the decided item leaves")
