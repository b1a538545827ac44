"""The user panel (issue 44) in a real browser (headless Chromium, Selenium) against the real
broker and Redis: opened from a card (a click on the user's name, or `p`), it lists the user's
recent held messages with what became of each (waiting, a moderator's verdict, a final decision),
and the strikes and mute the moderator's own code (moderator/users/state.py) wrote to Redis,
which the console reads and never changes; Esc closes it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.users.state import PREFIX, RedisState, Strike
from tests.integration.console_browser import (
    Topics,
    card,
    logged_in,
    press,
    produce,
    review_record,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000


async def strike_twice(url: str, user_id: str, at_ms: int) -> dict[Any, Any]:
    """Two flagged messages of `user_id` through the moderator's own step (one strike allowed,
    the second mutes the user in #lobby for an hour); every key of the user, dumped."""
    client = aioredis.Redis.from_url(url)
    try:
        users = RedisState(client)
        for n, (message_id, channel) in enumerate((("a1", "speedrun"), ("a2", "lobby"))):
            await users.after([Strike(user_id, channel, f"{user_id}-{message_id}", at_ms + n,
                                      True, 1, HOUR_MS, HOUR_MS, True)])  # fmt: skip
        return await dump(client, user_id)
    finally:
        await client.aclose()


async def dump(client: aioredis.Redis, user_id: str) -> dict[Any, Any]:
    keys = sorted(await client.keys(f"{PREFIX}{{{user_id}}}*"))
    return {k: (await client.dump(k), await client.pttl(k) > 0) for k in keys}


async def keys_now(url: str, user_id: str) -> dict[Any, Any]:
    client = aioredis.Redis.from_url(url)
    try:
        return await dump(client, user_id)
    finally:
        await client.aclose()


def panel(browser: WebDriver) -> dict[str, Any]:
    found: dict[str, Any] = browser.execute_script(
        """const d = document.getElementById('user-panel');
        return {open: d.open, title: d.querySelector('h2').textContent,
                state: document.getElementById('user-state').textContent,
                focused: d.contains(document.activeElement),
                rows: [...d.querySelectorAll('tbody tr')].map((tr) =>
                  [tr.dataset.messageId, tr.cells[1].textContent, tr.cells[2].textContent,
                   tr.querySelector('.outcome').textContent])};"""
    )
    return found


def test_the_user_panel_shows_recent_messages_outcomes_strikes_and_mute_by_click_and_by_key(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, console: str, topics: Topics
) -> None:
    user = f"u-alpha-{uuid.uuid4().hex[:6]}"  # the moderator's user keys are not per topic
    now = int(time.time() * 1000)
    before = loop.run(strike_twice(redis_server.url, user, now - 5000))
    produce(kafka.bootstrap, topics.review, [
        review_record(f"{user}-a1", "first insult", user_id=user, held_at_ms=now - 3000),
        review_record(f"{user}-a2", "second insult", user_id=user, channel_id="lobby",
                      held_at_ms=now - 2000),
        review_record(f"{user}-a3", "third insult", user_id=user, held_at_ms=now - 1000),
        review_record("m-beta", "someone else", user_id="u-beta", held_at_ms=now),
    ])  # fmt: skip
    produce(kafka.bootstrap, topics.verdicts, [
        {"message_id": f"{user}-a1", "verdict": "block", "moderator_id": "bob",
         "reason": "repeat offender", "scope": "channel", "at_ms": now},
    ])  # fmt: skip
    produce(kafka.bootstrap, topics.decisions, [
        {"message_id": f"{user}-a3", "channel_id": "speedrun", "user_id": user, "action": "allow",
         "reason": "review_timeout", "final": True, "decided_at_ms": now},
    ])  # fmt: skip
    with logged_in(console, "alice") as alice:
        wait_for(alice, lambda b: card(b, f"{user}-a2") and card(b, f"{user}-a1") is None
                 and card(b, f"{user}-a3") is None, "a1 decided, a3 final, a2 waiting")  # fmt: skip
        # A click on the user's name on the card.
        name = card(alice, f"{user}-a2").find_element(By.CSS_SELECTOR, ".head .user-link")
        assert name.text == user
        name.click()
        wait_for(alice, lambda b: panel(b)["open"], "the panel opens")
        shown = panel(alice)
        assert shown["title"] == f"User {user}"
        assert shown["focused"], "the focus moves into the panel"
        assert shown["rows"] == [
            [f"{user}-a3", "#speedrun", "third insult", "final: allow (review_timeout)"],
            [f"{user}-a2", "#lobby", "second insult", "waiting"],
            [f"{user}-a1", "#speedrun", "first insult", "block by bob (repeat offender)"],
        ]
        assert shown["state"].startswith("2 strikes · muted in #lobby until ")
        screenshot(alice, "console-user-panel.png")
        press(alice, Keys.ESCAPE)
        wait_for(alice, lambda b: not panel(b)["open"], "Esc closes it")
        assert alice.switch_to.active_element == name, "the focus is back on the name"
        # The keyboard: `p` opens the outlined card's user (u-beta: nothing of theirs in Redis).
        card(alice, "m-beta").click()
        press(alice, "p")
        wait_for(alice, lambda b: panel(b)["title"] == "User u-beta" and panel(b)["open"], "u-beta")
        assert panel(alice)["state"] == "0 strikes · not muted"
        assert [r[0] for r in panel(alice)["rows"]] == ["m-beta"]
        press(alice, Keys.ESCAPE)
        wait_for(alice, lambda b: not panel(b)["open"], "Esc closes it again")
    # The console only read the moderator's keys: they are as the moderator left them.
    assert loop.run(keys_now(redis_server.url, user)) == before
