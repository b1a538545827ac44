"""The history (issue 44) in a real browser (headless Chromium, Selenium) against the real broker
and Redis: each entry says who decided what on which user's message (its text), and "Older
entries" pages back past the newest 200 the console keeps in memory, from Redis, where the
console writes every entry it reads (console/history.py), by a click and by the keyboard."""

from __future__ import annotations

import pytest
import redis
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from console.board import Board
from console.claims import PREFIX
from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from tests.integration.console_browser import (
    Topics,
    logged_in,
    produce,
    review_record,
    screenshot,
    until,
    wait_for,
)

pytestmark = pytest.mark.integration

LIVE = Board(undo_grace_s=0, overview_minutes=1).history_size  # what the console keeps
DECIDED = LIVE + 80  # two older pages: one full (a click), one short (the keyboard)
MODERATORS = ("alice", "bob")
VERDICTS = ("allow", "nudge", "block")


def rows(browser: WebDriver) -> list[list[str]]:
    """The history table's rows: [moderator, user and channel, message text, verdict]."""
    found: list[list[str]] = browser.execute_script(
        """return [...document.querySelectorAll('#history tbody tr')].map((tr) => [
            tr.cells[1].textContent, tr.cells[2].textContent,
            tr.cells[3].querySelector('.text').textContent, tr.cells[4].textContent]);"""
    )
    return found


def expected(i: int) -> list[str]:
    return [MODERATORS[i % 2], f"u-{i % 7} #speedrun", f"message number {i}", VERDICTS[i % 3]]


def test_the_history_names_user_text_and_moderator_and_pages_back_past_the_newest_200(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, console: str, topics: Topics
) -> None:
    held_at = review_record("x", "")["held_at_ms"] - DECIDED * 1000
    produce(kafka.bootstrap, topics.review, [
        review_record(f"m-{i}", f"message number {i}", user_id=f"u-{i % 7}",
                      held_at_ms=held_at + i * 1000)
        for i in range(DECIDED)
    ])  # fmt: skip
    with logged_in(console, "alice") as alice:
        wait_for(alice, lambda b: f"{DECIDED} waiting" in b.find_element(By.ID, "counts").text,
                 "every held message read")  # fmt: skip
        produce(kafka.bootstrap, topics.verdicts, [
            {"message_id": f"m-{i}", "verdict": VERDICTS[i % 3], "moderator_id": MODERATORS[i % 2],
             "reason": None, "scope": "channel", "at_ms": held_at + i * 1000 + 500,
             "override_expires_at_ms": None}
            for i in range(DECIDED)
        ])  # fmt: skip
        newest = [expected(i) for i in reversed(range(DECIDED))]
        wait_for(alice, lambda b: rows(b) == newest[:LIVE], "the newest 200, newest first")
        # Bob's 140 decisions told of a few at a time, not a column of toasts over the page.
        assert 0 < len(alice.find_elements(By.CSS_SELECTOR, "#toasts > .toast")) <= 4
        store = redis.Redis.from_url(redis_server.url)
        key = f"{PREFIX}{topics.verdicts}:history"
        until(lambda: store.zcard(key) == DECIDED, "every entry written to Redis")
        store.close()
        # A click: the next 50, below the newest 200.
        older = alice.find_element(By.ID, "history-older")
        assert older.accessible_name == "Older entries"
        older.click()
        wait_for(alice, lambda b: len(rows(b)) > LIVE, "an older page")
        assert rows(alice) == newest[: LIVE + 50]
        # The keyboard: the button focused, Enter; the last page is short, and says it is the end.
        alice.execute_script("document.getElementById('history-older').focus()")
        alice.switch_to.active_element.send_keys(Keys.ENTER)
        wait_for(alice, lambda b: b.find_element(By.ID, "history-end").is_displayed(), "the end")
        assert rows(alice) == newest
        assert not alice.find_element(By.ID, "history-older").is_displayed()
        assert alice.find_element(By.ID, "history-count").text == f"{DECIDED} entries shown"
        alice.execute_script("document.getElementById('history-end').scrollIntoView(false)")
        screenshot(alice, "console-history-older.png")
