"""Bulk verdicts (issue 44) in a real browser (headless Chromium, Selenium) against the real
broker and Redis: ticked cards (a click, or `x`; "Select all shown" and `X` take only what the
filters show) allowed, nudged or blocked in one request, under the one-item rules (a card another
moderator claimed is refused and named, never decided), and one undo for the whole batch within
the grace (its toast's button, or `u`): what reaches the verdict topic is read back with a
client other than the console's."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from tests.integration.console_browser import (
    Topics,
    card,
    console_process,
    logged_in,
    press,
    produce,
    read_until,
    review_record,
    screenshot,
    selected,
    wait_for,
)

pytestmark = pytest.mark.integration


def shown(browser: WebDriver) -> list[str]:
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#queue > li')]"
        ".filter((li) => !li.hidden).map((li) => li.dataset.messageId)"
    )
    return found


def ticked(browser: WebDriver) -> list[str]:
    """The cards whose checkbox is ticked, shown or not, top to bottom."""
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#queue > li')]"
        ".filter((li) => li.querySelector('.pick').checked).map((li) => li.dataset.messageId)"
    )
    return found


def toasts(browser: WebDriver) -> str:
    return str(browser.find_element(By.ID, "toasts").text)


def queued(bootstrap: str, topic: str, count: int) -> list[tuple[str, str, str]]:
    """The first `count` verdicts on `topic` as (message_id, verdict, moderator), sorted."""
    verdicts = read_until(bootstrap, topic, lambda seen: len(seen) >= count)
    return sorted((v["message_id"], v["verdict"], v["moderator_id"]) for v in verdicts)


def test_select_all_shown_follows_the_filters_and_a_card_claimed_by_another_is_refused(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    now = review_record("x", "")["held_at_ms"]
    produce(kafka.bootstrap, topics.review, [
        review_record(f"m-{i}", f"line {i} of the raid", user_id="u-alpha",
                      held_at_ms=now - 4000 + i * 1000)
        for i in (1, 2, 3)
    ] + [review_record("m-4", "a different troll", user_id="u-beta", held_at_ms=now)])  # fmt: skip
    with logged_in(console, "alice") as alice, logged_in(console, "bob") as bob:
        for page in (alice, bob):
            wait_for(page, lambda b: len(shown(b)) == 4, "every card")
        # Bob claims m-2 by clicks; alice's console shows it.
        card(bob, "m-2").click()
        card(bob, "m-2").find_element(By.CSS_SELECTOR, ".claim-button").click()
        wait_for(alice, lambda b: "bob is on it" in card(b, "m-2").text, "bob's claim")
        # Alice shows u-alpha's messages and ticks all shown (a click): m-4, hidden, is not.
        alice.find_element(By.ID, "filter-user").send_keys("alpha")
        wait_for(alice, lambda b: shown(b) == ["m-1", "m-2", "m-3"], "u-alpha's three")
        pick_all = alice.find_element(By.ID, "pick-all")
        assert pick_all.accessible_name == "Select all shown"
        pick_all.click()
        wait_for(alice, lambda b: ticked(b) == ["m-1", "m-2", "m-3"], "the three shown ticked")
        assert alice.find_element(By.ID, "picked-count").text == "3 selected"
        screenshot(alice, "console-bulk.png")
        alice.find_element(By.ID, "bulk-block").click()
        # m-2 is bob's: refused and named; the other two leave alice's queue and go out.
        wait_for(alice, lambda b: "Not blocked: m-2 (bob is on it)" in toasts(b), "the refusal")
        wait_for(alice, lambda b: shown(b) == ["m-2"], "the two blocked leave; bob's m-2 stays")
        assert queued(kafka.bootstrap, topics.verdicts, 2) == [
            ("m-1", "block", "alice"), ("m-3", "block", "alice")]  # fmt: skip
        assert "bob is on it" in card(alice, "m-2").text
        # By keys: the user filter cleared, `x` ticks the selected card (m-4), Shift+n nudges it.
        user = alice.find_element(By.ID, "filter-user")
        user.clear()
        user.send_keys("beta")
        wait_for(alice, lambda b: shown(b) == ["m-4"], "u-beta's message")
        press(alice, "\ue00c")  # Escape: leave the filter, the page's keys act again
        wait_for(alice, lambda b: selected(b) == "m-4", "m-4 selected")
        press(alice, "x")
        wait_for(alice, lambda b: ticked(b) == ["m-2", "m-4"], "x ticks m-4 (m-2 still ticked)")
        assert alice.find_element(By.ID, "picked-count").text == "1 selected"  # shown ones
        press(alice, "N")
        wait_for(alice, lambda b: card(b, "m-4") is None, "m-4 nudged")
        assert queued(kafka.bootstrap, topics.verdicts, 3) == [
            ("m-1", "block", "alice"), ("m-3", "block", "alice"), ("m-4", "nudge", "alice"),
        ]  # fmt: skip
        # Bob's claimed item was never decided: it still waits in both consoles (hidden by
        # alice's filter, not gone).
        for page in (alice, bob):
            assert "m-2" in page.execute_script(
                "return [...document.querySelectorAll('#queue > li')]"
                ".map((li) => li.dataset.messageId)")  # fmt: skip


def test_one_undo_takes_back_the_whole_batch_by_key_or_by_its_button(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, topics: Topics, tmp_path: Path
) -> None:
    now = review_record("x", "")["held_at_ms"]
    ids = ["m-1", "m-2", "m-3"]
    produce(kafka.bootstrap, topics.review, [
        review_record(m, f"message {m}", held_at_ms=now - 3000 + i * 1000)
        for i, m in enumerate(ids)
    ])  # fmt: skip
    args = (kafka.bootstrap, redis_server.url, topics, tmp_path)
    # The console holds verdicts back far longer than this test lasts, and sends what it still
    # holds as it stops.
    with console_process(*args, grace_s=3600) as slow, logged_in(slow, "alice") as alice:
        wait_for(alice, lambda b: shown(b) == ids, "every card, closest to timing out first")
        # Keys: x on m-1, j, x on m-2, Shift+b blocks both; u undoes both.
        press(alice, "x")
        press(alice, "j")
        press(alice, "x")
        wait_for(alice, lambda b: ticked(b) == ["m-1", "m-2"], "two ticked by x")
        press(alice, "B")
        wait_for(alice, lambda b: shown(b) == ["m-3"], "both leave the queue at once")
        press(alice, "u")
        wait_for(alice, lambda b: shown(b) == ids, "u puts the whole batch back")
        # Clicks: tick all shown, block; the toast's one button undoes all three.
        alice.find_element(By.ID, "pick-all").click()
        wait_for(alice, lambda b: ticked(b) == ids, "all three ticked")
        alice.find_element(By.ID, "bulk-block").click()
        wait_for(alice, lambda b: shown(b) == [], "all three leave")
        undo = alice.find_element(By.XPATH, "//div[@id='toasts']//button[.='Undo all']")
        assert "block on 3 messages" in undo.find_element(By.XPATH, "..").text
        undo.click()
        wait_for(alice, lambda b: shown(b) == ids, "the button puts all three back")
        # `X` ticks every card shown, Shift+a allows them: these stay, and go out as it stops.
        press(alice, "X")
        wait_for(alice, lambda b: ticked(b) == ids, "X ticks all shown")
        press(alice, "A")
        wait_for(alice, lambda b: shown(b) == [], "allowed")
    # Only the batch not undone reached the topic: no block at all.
    assert queued(kafka.bootstrap, topics.verdicts, 3) == [(m, "allow", "alice") for m in ids]
