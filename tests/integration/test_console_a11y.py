"""The console's accessibility (issue 44), checked by a tool: axe-core run inside the real
Chromium page (tests/integration/accessibility.py) finds no WCAG 2 A or AA violation, colour
contrast included, on each view a moderator uses: the queue (full and compact, a card claimed
by another and a ticked one among them), the history (with its older-pages control), the user
panel, and the shadow model's disagreements; each reached with the keys a moderator uses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import Ruling
from tests.integration.accessibility import violations
from tests.integration.console_browser import (
    Topics,
    card,
    console_process,
    logged_in,
    press,
    produce,
    review_record,
    wait_for,
)
from tests.integration.test_console_disagreements import shadow_record

pytestmark = pytest.mark.integration


@pytest.fixture
def console(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, tmp_path: Path
) -> Iterator[tuple[str, Topics, str]]:
    topics, shadow = Topics.fresh(), f"chat.shadow.{uuid.uuid4().hex[:8]}"
    partitions = {topics.review: 2, topics.verdicts: 2, topics.decisions: 2, shadow: 2}
    loop.run(ensure_topics(kafka.bootstrap, partitions))
    extra = ("--shadow-topic", shadow)
    with console_process(kafka.bootstrap, redis_server.url, topics, tmp_path, *extra) as url:
        yield url, topics, shadow


def test_every_view_passes_wcag_2_aa_as_axe_core_checks_it(
    kafka: EmbeddedKafka, console: tuple[str, Topics, str]
) -> None:
    url, topics, shadow = console
    now = int(time.time() * 1000)
    produce(kafka.bootstrap, topics.review, [
        review_record(f"m-{i}", f"held message {i}", user_id=f"u-{i}", held_at_ms=now - 60_000 + i)
        for i in range(4)
    ] + [review_record("m-soon", "about to time out", expires_at_ms=now + 30_000)])  # fmt: skip
    produce(kafka.bootstrap, topics.verdicts, [
        {"message_id": "m-0", "verdict": "block", "moderator_id": "carol", "reason": "threat",
         "scope": "channel", "at_ms": now},
        {"message_id": "m-0", "verdict": "allow", "moderator_id": "dave", "reason": None,
         "scope": "channel", "at_ms": now + 1},  # a late one: its row is shown muted
    ])  # fmt: skip
    produce(kafka.bootstrap, shadow, [
        shadow_record("m-1", Ruling("review", "threat", "medium"),
                      Ruling("block", "threat", "high"), {"threat": 0.93}, now - 2000),
        shadow_record("m-x", Ruling("allow", None), Ruling("nudge", "insult", "low"),
                      {"insult": 0.64}, now - 1000),
    ], key="channel_id")  # fmt: skip
    with logged_in(url, "alice") as alice, logged_in(url, "bob") as bob:
        wait_for(alice, lambda b: card(b, "m-3") and card(b, "m-0") is None, "the queue")
        wait_for(bob, lambda b: card(b, "m-2"), "bob's queue")
        card(bob, "m-2").find_element(By.CSS_SELECTOR, ".claim-button").click()  # another's
        wait_for(alice, lambda b: "bob is on it" in card(b, "m-2").text, "bob's claim shown")
        press(alice, "x")  # a ticked card
        wait_for(alice, lambda b: "due-soon" in card(b, "m-soon").get_attribute("class"), "mark")
        wait_for(alice, lambda b: "carol" in b.find_element(By.ID, "history").text, "history")
        assert violations(alice) == [], "the queue, with the history and the overview"
        press(alice, "v")
        wait_for(alice, lambda b: "compact" in (b.find_element(By.TAG_NAME, "body")
                 .get_attribute("class") or ""), "the compact view")  # fmt: skip
        assert violations(alice) == [], "the compact view"
        older = alice.find_element(By.ID, "history-older")
        older.click()
        wait_for(alice, lambda b: b.find_element(By.ID, "history-end").is_displayed(), "the end")
        assert violations(alice) == [], "the history, paged to its end"
        press(alice, "p")
        wait_for(alice, lambda b: b.find_element(By.ID, "user-panel").get_attribute("open"),
                 "the user panel")  # fmt: skip
        assert violations(alice) == [], "the user panel"
        press(alice, Keys.ESCAPE)
        press(alice, "d")
        wait_for(alice, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#disagreements > li"))
                 == 2, "the disagreements")  # fmt: skip
        assert violations(alice) == [], "the disagreements view"
