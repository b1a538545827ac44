"""The console's disagreements view (issue 41) in a real browser against the real broker: shadow
records made by the moderator's own function (moderator/shadow/agreement.py) on a shadow topic,
a held message's review record and a verdict produced as the loop publishes them; the view shows
both decisions, the held message with its context, and the verdict once it is read, live."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.decide.screen import Judged
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import Policy, Ruling
from moderator.records import ChatMessage, Verdict
from moderator.shadow.agreement import Primary, disagreement_record
from tests.contract import check_shadow
from tests.integration.console_browser import (
    Topics,
    console_process,
    logged_in,
    press,
    produce,
    review_record,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.integration

PRIMARY, CANDIDATE = "chat-minilm@3", "candidate@4"
HELD_TEXT = "say that again and I will find you after the stream"


def shadow_record(
    message_id: str, primary: Ruling, shadow: Ruling, scores: dict[str, float], at_ms: int
) -> dict[str, Any]:
    """The shadow topic's record of one disagreement, as `moderator run` writes it."""
    chat = ChatMessage(message_id, "speedrun", "u-troll", "(the record holds no text)", at_ms)
    first = Primary(chat, Policy.load(), PRIMARY, primary, {"threat": 0.71, "toxic": 0.4}, None)
    judged = Judged(shadow, scores, (0, 1), language=None)
    return check_shadow(disagreement_record(first, judged, CANDIDATE, at_ms))


@pytest.fixture
def shadow_topic(kafka: EmbeddedKafka) -> str:
    return f"chat.shadow.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def console(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, shadow_topic: str, tmp_path: Path
) -> Iterator[tuple[str, Topics]]:
    topics = Topics.fresh()
    partitions = {topics.review: 2, topics.verdicts: 2, topics.decisions: 2, shadow_topic: 2}
    loop.run(ensure_topics(kafka.bootstrap, partitions))
    extra = ("--shadow-topic", shadow_topic)
    with console_process(kafka.bootstrap, redis_server.url, topics, tmp_path, *extra) as url:
        yield url, topics


def rows(browser: WebDriver) -> list[Any]:
    return browser.find_elements(By.CSS_SELECTOR, "#disagreements > li")


def row(browser: WebDriver, message_id: str) -> Any:
    found = [li for li in rows(browser) if li.get_attribute("data-message-id") == message_id]
    return found[0] if found and found[0].is_displayed() else None


def test_the_view_shows_both_decisions_the_held_message_and_its_verdict_live(
    kafka: EmbeddedKafka, console: tuple[str, Topics], shadow_topic: str
) -> None:
    url, topics = console
    now = int(time.time() * 1000)
    produce(kafka.bootstrap, shadow_topic, [
        shadow_record("m-held", Ruling("review", "threat", "medium"),
                      Ruling("block", "threat", "high"), {"threat": 0.93}, now - 2000),
        shadow_record("m-quiet", Ruling("allow", None), Ruling("nudge", "insult", "low"),
                      {"insult": 0.64, "toxic": 0.2}, now - 1000),
    ], key="channel_id")  # fmt: skip
    produce(kafka.bootstrap, topics.review, [review_record("m-held", HELD_TEXT)])
    with logged_in(url, "alice") as alice:
        tab = alice.find_element(By.ID, "tab-disagreements")
        assert tab.get_attribute("role") == "tab"
        press(alice, "d")  # the keyboard opens the view
        wait_for(alice, lambda b: tab.get_attribute("aria-selected") == "true", "the tab is on")
        assert not alice.find_element(By.ID, "queue-section").is_displayed()
        wait_for(alice, lambda b: row(b, "m-held") and row(b, "m-quiet"), "both rows")
        order = [li.get_attribute("data-message-id") for li in rows(alice)]
        assert order == ["m-quiet", "m-held"]  # newest first
        wait_for(alice, lambda b: HELD_TEXT in row(b, "m-held").text, "the held message's text")
        held = row(alice, "m-held")
        assert "that boss fight was rough" in held.text  # the channel's lines before it
        assert "u-troll" in held.text
        sides = [tr.text for tr in held.find_elements(By.CSS_SELECTOR, "tr.side")]
        assert sides == [f"primary {PRIMARY} review threat threat 0.71",
                         f"shadow {CANDIDATE} block threat threat 0.93"]  # fmt: skip
        assert "No verdict" in held.text
        quiet = row(alice, "m-quiet")
        assert "No text here" in quiet.text
        assert "#speedrun" in quiet.text
        sides = [tr.text for tr in quiet.find_elements(By.CSS_SELECTOR, "tr.side")]
        assert sides == [f"primary {PRIMARY} allow – threat 0.71",
                         f"shadow {CANDIDATE} nudge insult insult 0.64"]  # fmt: skip
        # Read live: a moderator's verdict on the held message, and a newer disagreement.
        verdict = Verdict("m-held", "block", "bob", "a threat", "channel", now)
        produce(kafka.bootstrap, topics.verdicts, [verdict._asdict()])
        produce(kafka.bootstrap, shadow_topic, [
            shadow_record("m-new", Ruling("block", "threat", "high"), Ruling("allow", None),
                          {"threat": 0.3}, now),
        ], key="channel_id")  # fmt: skip
        wait_for(alice, lambda b: "Verdict: block by bob" in row(b, "m-held").text, "the verdict")
        assert "sides with the shadow" in row(alice, "m-held").text
        assert alice.find_element(By.ID, "disagreement-sides").text.startswith(
            "Verdicts on 1 of these: 0 side with the primary, 1 with the shadow, 0 with neither."
        )
        wait_for(alice, lambda b: row(b, "m-new"), "the newer disagreement")
        order = [li.get_attribute("data-message-id") for li in rows(alice)]
        assert order == ["m-new", "m-quiet", "m-held"]
        screenshot(alice, "console-disagreements.png")
        # The keyboard walks the rows from the tab `d` focused; each says what it shows.
        press(alice, Keys.TAB + Keys.TAB + Keys.TAB)
        focused = alice.switch_to.active_element
        assert focused.get_attribute("data-message-id") == "m-held"
        assert focused.get_attribute("aria-label") == (
            "m-held in #speedrun, u-troll: primary review, shadow block, verdict block by bob"
        )
        press(alice, "q")
        wait_for(alice, lambda b: b.find_element(By.ID, "queue-section").is_displayed(), "queue")
        assert tab.get_attribute("aria-selected") == "false"
