"""The queue a moderator works through (issue 44), in a real browser (headless Debian Chromium,
Selenium) against the real broker and Redis: each held card's time left before its review
timeout decides it, closest to timing out first (or newest first), a mark under a minute; the
compact view; the user and text filters; the overview's minutes. Review records are made by the
moderator's own code (moderator/review/hold.py) under policies with review timeouts of their own,
so the deadlines the page counts down are the ones the moderator would apply."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import orjson
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from devstack.embedded import EmbeddedKafka
from moderator.policy.rules import Policy, read_spec
from moderator.records import ChatMessage, Outcome
from moderator.review.hold import encode_review, held_message
from tests.contract import check_review
from tests.integration.console_browser import (
    Topics,
    card,
    logged_in,
    press,
    produce,
    read_until,
    review_record,
    screenshot,
    selected,
    until,
    wait_for,
)

pytestmark = pytest.mark.integration

LEFT = re.compile(r"(\d+):(\d\d) left")


def held(
    message_id: str, text: str, *, timeout_s: float, held_at_ms: int, fallback: str = "allow"
) -> dict[str, Any]:
    """The review record `moderator run` publishes for a message it holds at `held_at_ms` under
    a policy whose `review_timeout_s` and `review_fallback` are these."""
    spec = {**read_spec(), "review_timeout_s": timeout_s, "review_fallback": fallback}
    policy = Policy.from_mapping(spec)
    chat = ChatMessage(message_id, "speedrun", "u-troll", text, held_at_ms - 400)
    decision = {"action": "review", "reason": "threat", "severity": "medium",
                "scores": {"threat": 0.81, "toxic": 0.6}, "model": "chat-minilm@3",
                "policy": policy.ident, "span": [0, len(text)]}  # fmt: skip
    outcome = Outcome(None, orjson.dumps(decision), [], action="review", decision=decision)
    kept = held_message(chat, policy, outcome, held_at_ms)
    return check_review(orjson.loads(encode_review(kept, [], context_missing=False)))


def shown(browser: WebDriver) -> list[str]:
    """The message ids of the cards the page shows, top to bottom."""
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#queue > li')]"
        ".filter((li) => !li.hidden).map((li) => li.dataset.messageId)"
    )
    return found


def due(browser: WebDriver, message_id: str) -> str:
    return str(card(browser, message_id).find_element(By.CSS_SELECTOR, ".due").text)


def marked(browser: WebDriver, message_id: str) -> bool:
    return "due-soon" in card(browser, message_id).get_attribute("class").split()


def seconds_left(text: str) -> int:
    found = LEFT.search(text)
    assert found, f"no time left in {text!r}"
    return int(found[1]) * 60 + int(found[2])


def fully_inside(browser: WebDriver) -> int:
    """How many cards are wholly inside the browser's viewport."""
    return int(
        browser.execute_script(
            """return [...document.querySelectorAll('#queue > li')].filter((li) => {
                const r = li.getBoundingClientRect();
                return !li.hidden && r.height > 0 && r.top >= 0 && r.bottom <= innerHeight;
            }).length;"""
        )
    )


def test_each_card_counts_down_its_own_deadline_closest_first_and_marks_its_last_minute(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    with logged_in(console, "alice") as alice:
        now = int(time.time() * 1000)  # once the page is up: m-mid's last minute is 30 s away
        records = [
            held("m-old", "you again", timeout_s=600, held_at_ms=now - 120_000),
            held("m-soon", "last warning", timeout_s=60, held_at_ms=now - 20_000, fallback="nudge"),
            held("m-new", "just arrived", timeout_s=600, held_at_ms=now),
            held("m-mid", "crossing the line", timeout_s=95, held_at_ms=now - 5_000),
        ]
        deadline_s = {r["message_id"]: (r["expires_at_ms"] - now) / 1000 for r in records}
        produce(kafka.bootstrap, topics.review, records)
        wait_for(alice, lambda b: len(shown(b)) == len(records), "every card")
        # m-mid's minute has not come yet: no mark, more than a minute left (checked first).
        mid = due(alice, "m-mid")
        assert not marked(alice, "m-mid")
        assert "under 1 min" not in mid
        assert 60 <= seconds_left(mid) <= deadline_s["m-mid"]
        # Closest to timing out first (m-soon, held under a short timeout, on top, though newer
        # than m-old); its card says so in words and is marked.
        assert shown(alice) == ["m-soon", "m-mid", "m-old", "m-new"]
        soon = due(alice, "m-soon")
        assert soon.startswith("under 1 min")
        assert soon.endswith("then nudge")  # what the timeout will decide: its policy's fallback
        assert seconds_left(soon) < 60
        assert marked(alice, "m-soon")
        for message_id in ("m-old", "m-new"):  # each its own deadline, not one assumed timeout
            text = due(alice, message_id)
            assert not marked(alice, message_id)
            assert text.endswith("then allow")
            assert 60 <= seconds_left(text) <= deadline_s[message_id]
        assert seconds_left(due(alice, "m-old")) < seconds_left(due(alice, "m-new"))
        # Newest first by the control (a click), back by its key (`o`); the top card selected.
        Select(alice.find_element(By.ID, "queue-order")).select_by_value("newest")
        wait_for(alice, lambda b: shown(b) == ["m-new", "m-mid", "m-soon", "m-old"], "newest")
        wait_for(alice, lambda b: selected(b) == "m-new", "the newest selected")
        alice.execute_script("document.activeElement.blur()")  # the page's keys, not the select's
        press(alice, "o")
        wait_for(alice, lambda b: shown(b) == ["m-soon", "m-mid", "m-old", "m-new"], "back")
        wait_for(alice, lambda b: selected(b) == "m-soon", "the one closest to timing out selected")
        screenshot(alice, "console-time-left.png")
        assert alice.find_element(By.ID, "queue-order").get_attribute("value") == "due"
        # As time passes the page counts down, and m-mid gets its mark once under a minute.
        newest = due(alice, "m-new")
        wait_for(alice, lambda b: due(b, "m-new") != newest, "m-new's time left counts down")
        assert seconds_left(due(alice, "m-new")) < seconds_left(newest)
        until(lambda: card(alice, "m-mid") and marked(alice, "m-mid"), "m-mid's mark",
              timeout_s=deadline_s["m-mid"])  # fmt: skip
        assert due(alice, "m-mid").startswith("under 1 min")


def test_the_compact_view_shows_eight_held_messages_on_a_1080_pixel_screen_and_is_kept(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    now = review_record("x", "")["held_at_ms"]
    texts = ["you are the worst player I have ever seen, uninstall the game today",
             "meet me outside after the stream and we will see who is laughing"]  # fmt: skip
    produce(kafka.bootstrap, topics.review, [
        review_record(f"m-{i}", texts[i % 2], held_at_ms=now - 60_000 + i * 1000)
        for i in range(10)
    ])  # fmt: skip
    with logged_in(console, "alice") as alice:
        alice.set_window_size(1920, 1080)
        wait_for(alice, lambda b: "10 waiting" in b.find_element(By.ID, "counts").text, "all 10")
        width, height = alice.execute_script("return [innerWidth, innerHeight]")
        assert width <= 1920
        assert height <= 1080
        full = fully_inside(alice)
        assert full < 8, "the full cards must not already fit eight"
        press(alice, "v")
        wait_for(alice, lambda b: fully_inside(b) >= 8, "eight cards fully inside the window")
        toggle = alice.find_element(By.ID, "compact")
        assert toggle.is_selected()
        assert toggle.accessible_name == "Compact view"
        # The selected card shows the channel's lines before it; the others their head, one
        # line of text and their buttons.
        context = "that boss fight was rough"
        assert selected(alice) == "m-0"
        assert context in card(alice, "m-0").text
        assert context not in card(alice, "m-1").text
        screenshot(alice, "console-compact.png")
        press(alice, "j")
        wait_for(alice, lambda b: context in card(b, "m-1").text, "j opens the next card")
        assert context not in card(alice, "m-0").text
        # Remembered by this browser: after a reload the page is still compact.
        alice.refresh()
        wait_for(alice, lambda b: "10 waiting" in b.find_element(By.ID, "counts").text, "reload")
        assert alice.find_element(By.ID, "compact").is_selected()
        assert fully_inside(alice) >= 8
        alice.find_element(By.ID, "compact").click()  # and off by a click
        wait_for(alice, lambda b: fully_inside(b) < 8, "the full cards again")
        assert alice.execute_script("return localStorage.getItem('console.compact')") == "0"


def test_the_user_and_text_filters_narrow_the_queue_as_a_moderator_types(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    now = review_record("x", "")["held_at_ms"]
    produce(kafka.bootstrap, topics.review, [
        review_record("m-a1", "see you at the rematch, loser", user_id="u-alpha",
                      held_at_ms=now - 3000),
        review_record("m-a2", "nobody wants you here", user_id="u-alpha", channel_id="lobby",
                      held_at_ms=now - 2000),
        review_record("m-b1", "REMATCH now or you are a coward", user_id="u-beta",
                      held_at_ms=now - 1000),
        review_record("m-g1", "touch grass", user_id="u-Gamma", held_at_ms=now),
    ])  # fmt: skip
    with logged_in(console, "alice") as alice:
        wait_for(alice, lambda b: len(shown(b)) == 4, "every card")
        user, text = (
            alice.find_element(By.ID, "filter-user"),
            alice.find_element(By.ID, "filter-text"),
        )
        assert (user.accessible_name, text.accessible_name) == ("User", "Text")
        # Tab walks from the label filter to the new controls, in order.
        alice.execute_script("document.getElementById('filter-label').focus()")
        walked = []
        for _ in range(4):
            press(alice, Keys.TAB)
            walked.append(alice.switch_to.active_element.get_attribute("id"))
        assert walked == ["filter-user", "filter-text", "queue-order", "compact"]
        # By user, as typed (any case), with the channel filter beside it.
        user.click()
        user.send_keys("ALP")
        wait_for(alice, lambda b: shown(b) == ["m-a1", "m-a2"], "u-alpha's two messages")
        assert "2 waiting (of 4)" in alice.find_element(By.ID, "counts").text
        Select(alice.find_element(By.ID, "filter-channel")).select_by_value("lobby")
        wait_for(alice, lambda b: shown(b) == ["m-a2"], "u-alpha's in #lobby")
        Select(alice.find_element(By.ID, "filter-channel")).select_by_value("")
        user.send_keys(Keys.CONTROL, "a")
        user.send_keys(Keys.BACKSPACE)
        wait_for(alice, lambda b: len(shown(b)) == 4, "the user filter cleared")
        # By text, from the keyboard: `/` focuses it; Esc leaves it and keeps the filter.
        user.send_keys(Keys.ESCAPE)
        press(alice, "/")
        assert alice.switch_to.active_element.get_attribute("id") == "filter-text"
        press(alice, "rematch")
        wait_for(alice, lambda b: shown(b) == ["m-a1", "m-b1"], "the two rematch messages")
        user.send_keys("beta")
        wait_for(alice, lambda b: shown(b) == ["m-b1"], "both filters: u-beta's rematch")
        user.send_keys(Keys.ESCAPE)
        assert shown(alice) == ["m-b1"]
        # The keys act on a card the filters show: `b` blocks u-beta's message, and only it.
        wait_for(alice, lambda b: selected(b) == "m-b1", "the shown card selected")
        press(alice, "b")
        verdicts = read_until(kafka.bootstrap, topics.verdicts, lambda seen: len(seen) >= 1)
        assert [(v["message_id"], v["verdict"]) for v in verdicts] == [("m-b1", "block")]
        wait_for(alice, lambda b: shown(b) == [], "nothing else matches")
        assert "0 waiting (of 3)" in alice.find_element(By.ID, "counts").text


def test_the_overview_names_each_minute_as_a_24_hour_time(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    at_ms = review_record("x", "")["held_at_ms"]
    produce(kafka.bootstrap, topics.decisions, [
        {"message_id": f"d-{i}", "channel_id": "speedrun", "user_id": "u-1", "action": "block",
         "reason": "threat", "final": False, "decided_at_ms": at_ms}
        for i in range(3)
    ])  # fmt: skip
    minute = datetime.fromtimestamp((at_ms - at_ms % 60_000) / 1000).strftime("%H:%M")
    with logged_in(console, "bob") as bob:
        rows = "#overview table.per-minute tbody tr"
        wait_for(bob, lambda b: [r.text for r in b.find_elements(By.CSS_SELECTOR, rows)]
                 == [f"{minute} 0 0 0 3 0"], "the three blocks in their minute")  # fmt: skip
        cell = bob.find_element(By.CSS_SELECTOR, f"{rows} td:first-child").text
        assert cell == minute  # not "6:11:", the AM/PM cut off
