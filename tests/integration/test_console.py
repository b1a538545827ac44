"""The review console in a real browser (headless Debian Chromium, Selenium) against the real
broker and Redis: review records are produced as the moderator publishes them (loop contract),
verdicts read back with confluent-kafka. The screenshots the README shows come from these runs
(build/screenshots/; `make screenshots` copies them to docs/)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from console.claims import Claims
from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.kafka.topics import ensure_topics
from tests.integration.console_browser import (
    Topics,
    card,
    console_process,
    in_view,
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


def create(bootstrap: str, topics: Topics) -> Topics:
    loop.run(ensure_topics(bootstrap, {topics.review: 2, topics.verdicts: 2, topics.decisions: 2}))
    return topics


def post_from(browser: WebDriver, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A POST the page's way (its session, its CSRF token): {status, data}."""
    result: dict[str, Any] = browser.execute_async_script(
        """const [path, body, done] = arguments;
        post(path, body).then(done, (e) => done({status: 0, data: String(e)}));""",
        path,
        body,
    )
    return result


def test_a_held_message_appears_live_a_click_sends_the_verdict_and_it_leaves_every_console(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    with logged_in(console, "alice") as alice, logged_in(console, "bob") as bob:
        earlier = review_record("x", "")["held_at_ms"] - 90_000
        produce(kafka.bootstrap, topics.review, [
            review_record("m-older", "nobody asked for your opinion", reason="insult",
                          channel_id="lobby", held_at_ms=earlier),
            review_record("m-held", "say that again and I will find you after the stream"),
        ])  # fmt: skip
        decisions = [
            {"message_id": f"d-{i}", "channel_id": channel, "user_id": "u-1", "action": action,
             "reason": None, "final": False, "decided_at_ms": review_record("x", "")["held_at_ms"]}
            for i, (channel, action) in enumerate(
                [("speedrun", "block")] * 3 + [("lobby", "nudge")] * 2 + [("lobby", "allow")] * 6
            )
        ]  # fmt: skip
        produce(kafka.bootstrap, topics.decisions, decisions)
        # Without reloading: the live stream brings both to both pages, the one closest to timing
        # out (held first, under the same policy) on top.
        for page in (alice, bob):
            wait_for(page, lambda b: card(b, "m-held") and card(b, "m-older"), "both cards")
        held = card(alice, "m-held")
        assert "say that again and I will find you after the stream" in held.text
        assert "that boss fight was rough" in held.text  # the channel's context before it
        assert "strikes 2" in held.text
        assert "threat" in held.text
        assert "default@2" in held.text
        order = [
            li.get_attribute("data-message-id")
            for li in alice.find_elements(By.CSS_SELECTOR, "#queue > li")
        ]
        assert order == ["m-older", "m-held"]
        assert "2 waiting" in alice.find_element(By.ID, "counts").text
        # Filters: by channel (and label), with the counts of what is shown.
        Select(bob.find_element(By.ID, "filter-channel")).select_by_value("lobby")
        wait_for(bob, lambda b: card(b, "m-held") is None, "the channel filter hides speedrun")
        assert card(bob, "m-older") is not None
        assert "1 waiting (of 2)" in bob.find_element(By.ID, "counts").text
        Select(bob.find_element(By.ID, "filter-channel")).select_by_value("")
        Select(bob.find_element(By.ID, "filter-label")).select_by_value("threat")
        wait_for(bob, lambda b: card(b, "m-older") is None, "the label filter hides the insult")
        Select(bob.find_element(By.ID, "filter-label")).select_by_value("")
        wait_for(bob, lambda b: card(b, "m-older") and card(b, "m-held"), "no filter: both")
        # Bob sees who is on it once Alice claims it.
        held.find_element(By.CSS_SELECTOR, ".claim-button").click()
        wait_for(
            bob, lambda b: "alice is on it" in card(b, "m-held").text, "bob sees alice's claim"
        )
        screenshot(alice, "console-queue.png")

        held.find_element(By.CSS_SELECTOR, ".reason").send_keys("threat against a streamer")
        held.find_element(By.CSS_SELECTOR, ".verdict-block").click()
        verdicts = read_until(kafka.bootstrap, topics.verdicts, lambda seen: len(seen) >= 1)
        assert len(verdicts) == 1
        verdict = verdicts[0]
        assert verdict["message_id"] == "m-held"
        assert (verdict["verdict"], verdict["moderator_id"]) == ("block", "alice")
        assert verdict["reason"] == "threat against a streamer"
        assert verdict["scope"] == "channel"  # the page's default: this channel only
        assert isinstance(verdict["at_ms"], int)

        # It left both pages at the click (held back for the grace, then on the topic); the
        # other item stays.
        for page in (alice, bob):
            wait_for(page, lambda b: card(b, "m-held") is None, "the decided item leaves")
            assert card(page, "m-older") is not None
        # The overview counts the decision topic: per action this minute, flagged per channel;
        # and the verdicts, once read back from their topic (the item left at the click).
        overview = wait_for(bob, lambda b: (t := b.find_element(By.ID, "overview").text)
                            and "speedrun 3" in t and "threat 1" in t and t)  # fmt: skip
        assert "lobby 2" in overview
        assert "allow nudge review block final" in overview
        assert "threat 1 0 0 1 0%" in overview  # model vs human: the held threat, blocked
        screenshot(bob, "console-overview.png")
        # A final decision for the other one (its review timed out) takes it off the queue.
        produce(kafka.bootstrap, topics.decisions, [{**decisions[0], "message_id": "m-older",
                "action": "allow", "reason": "review_timeout", "final": True}])  # fmt: skip
        wait_for(bob, lambda b: card(b, "m-older") is None, "a final decision removes the item")
        history = bob.find_element(By.ID, "history").text
        assert "alice" in history
        assert "m-held" in history
        assert "block" in history
        # Bob, late, is told it is gone and who decided it; nothing more reaches the topic.
        late = post_from(bob, "/api/verdict", {"message_id": "m-held", "verdict": "allow"})
        assert late["status"] == 409
        assert (late["data"]["error"], late["data"]["decided_by"]) == ("gone", "alice")
        screenshot(alice, "console-history.png")


def test_an_undo_within_the_grace_period_returns_the_item_and_sends_nothing(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, topics: Topics, tmp_path: Path
) -> None:
    produce(kafka.bootstrap, topics.review, [review_record("m-undo", "you again, huh")])
    args = (kafka.bootstrap, redis_server.url, topics, tmp_path)
    with console_process(*args) as quick, logged_in(quick, "bob") as bob:
        # Alice's console holds verdicts back far longer than this test lasts.
        with console_process(*args, grace_s=3600) as slow, logged_in(slow, "alice") as alice:
            for page in (alice, bob):
                wait_for(page, lambda b: card(b, "m-undo"), "the held message's card")
            assert (selected(alice), in_view(alice, "m-undo")) == ("m-undo", True)
            press(alice, "b")
            wait_for(
                alice, lambda b: card(b, "m-undo") is None, "it leaves alice's console at once"
            )
            wait_for(bob, lambda b: "alice is deciding (block" in card(b, "m-undo").text,
                     "bob's console shows alice deciding it")  # fmt: skip
            screenshot(bob, "console-undo.png")
            press(alice, "u")  # the key itself, not the toast's button
            wait_for(alice, lambda b: card(b, "m-undo"), "the undone item is back in the queue")
            wait_for(alice, lambda b: selected(b) == "m-undo" and in_view(b, "m-undo"),
                     "the undone item is selected again, in view")  # fmt: skip
            wait_for(bob, lambda b: "deciding" not in card(b, "m-undo").text, "the lock is gone")
        # Alice's console has stopped (it sends what it still holds back on the way out): her
        # undone verdict must not be among them. Bob decides it; his is the first on the topic.
        card(bob, "m-undo").find_element(By.CSS_SELECTOR, ".verdict-nudge").click()
        verdicts = read_until(kafka.bootstrap, topics.verdicts, lambda seen: len(seen) >= 1)
        assert [(v["verdict"], v["moderator_id"]) for v in verdicts] == [("nudge", "bob")]
        wait_for(bob, lambda b: card(b, "m-undo") is None, "the decided item leaves")


def test_the_keys_act_only_on_the_selected_card_and_only_while_it_is_in_view(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    # A queue far taller than the window, the oldest item at the bottom of the page.
    now = review_record("x", "")["held_at_ms"]
    queue = [f"m-{i:02}" for i in range(30)]  # m-29 the newest
    produce(kafka.bootstrap, topics.review, [
        review_record(m, f"held message number {i}", held_at_ms=now - 60_000 + i * 1000)
        for i, m in enumerate(queue)
    ])  # fmt: skip
    waiting = "30 waiting"
    with logged_in(console, "bob") as bob:  # the console holds all 30 before alice logs in
        wait_for(bob, lambda b: waiting in b.find_element(By.ID, "counts").text, "all 30")
    with logged_in(console, "alice") as alice:
        wait_for(alice, lambda b: waiting in b.find_element(By.ID, "counts").text, "all 30")
        page_px, window_px = alice.execute_script(
            "return [document.documentElement.scrollHeight, window.innerHeight]"
        )
        assert page_px > 3 * window_px, "the queue must be taller than the window"
        # After login the selected card is the top one, in view: the one closest to timing out.
        assert (selected(alice), in_view(alice, "m-00")) == ("m-00", True)
        assert not in_view(alice, "m-29")
        press(alice, "o")  # newest first: the top card is the newest, selected, in view
        wait_for(alice, lambda b: selected(b) == "m-29" and in_view(b, "m-29"), "newest first")
        assert not in_view(alice, "m-00")
        # A newer item arrives while alice reads m-29: her card keeps the selection and its place.
        newer = review_record("m-new", "arrived while reading", held_at_ms=now + 1000)
        produce(kafka.bootstrap, topics.review, [newer])
        wait_for(alice, lambda b: "31 waiting" in b.find_element(By.ID, "counts").text, "m-new")
        assert (selected(alice), in_view(alice, "m-29")) == ("m-29", True)
        press(alice, "n")  # acts on the card she reads, not on the newcomer
        wait_for(alice, lambda b: card(b, "m-29") is None, "the nudged card leaves")
        # The card below takes its place and the selection, in view.
        wait_for(alice, lambda b: selected(b) == "m-28" and in_view(b, "m-28"), "m-28 selected")
        # Scrolled away (as a wheel would), the selected card is out of view: a verdict key
        # brings it back into view and decides nothing.
        alice.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
        assert not in_view(alice, "m-28")
        press(alice, "b")
        wait_for(alice, lambda b: in_view(b, "m-28"), "the key brings the selected card into view")
        assert selected(alice) == "m-28"
        assert "out of view" in alice.find_element(By.ID, "toasts").text
        press(alice, "a")  # in view now: this one acts
        # Had `b` acted, m-28 would have been blocked first (the first verdict wins) or `a` would
        # have gone to another card: the allow for m-28 would never come.
        verdicts = read_until(
            kafka.bootstrap, topics.verdicts,
            lambda seen: any(v["message_id"] == "m-28" for v in seen) and len(seen) >= 2,
        )  # fmt: skip
        assert sorted((v["message_id"], v["verdict"]) for v in verdicts) == [
            ("m-28", "allow"),
            ("m-29", "nudge"),
        ]
        wait_for(alice, lambda b: card(b, "m-28") is None, "the allowed card leaves")
        assert card(alice, "m-new") is not None


def test_a_hostile_message_is_shown_as_its_literal_text_and_no_script_runs(
    kafka: EmbeddedKafka, console: str, topics: Topics
) -> None:
    hostile = (
        '<script>window.__xss = "script"</script> '
        "<img src=x onerror=\"window.__xss = 'img'\"> "
        "[free skins](javascript:window.__xss='link') javascript:alert(1)"
    )
    frame = "<iframe src=\"javascript:window.__xss='ctx'\"></iframe>"
    with logged_in(console, "alice") as alice:
        produce(kafka.bootstrap, topics.review, [
            review_record("m-xss", hostile, user_id='<b onmouseover="window.__xss=1">u</b>',
                          channel_id="<svg onload=window.__xss=2>",
                          context=[{"message_id": "c", "user_id": "u-1", "sent_at_ms": 1,
                                    "text": frame}]),
        ])  # fmt: skip
        item = wait_for(alice, lambda b: card(b, "m-xss"), "the hostile message's card")
        held = item.find_element(By.CSS_SELECTOR, ".held .text")
        assert held.text == hostile  # every character shown, as text
        assert frame in item.text
        assert '<b onmouseover="window.__xss=1">u</b>' in item.text
        assert "#<svg onload=window.__xss=2>" in item.text
        queue = alice.find_element(By.ID, "queue")
        for tag in ("script", "img", "a", "iframe", "svg", "b"):
            assert queue.find_elements(By.TAG_NAME, tag) == [], f"a <{tag}> element was made"
        item.click()
        assert alice.execute_script("return window.__xss") is None  # the marker was never set
        screenshot(alice, "console-hostile.png")


def test_the_page_says_the_broker_is_unreachable_while_it_is_stopped_and_recovers(
    redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    with EmbeddedKafka() as broker:  # its own broker: this test stops it
        assert broker.pid is not None
        topics = create(broker.bootstrap, Topics.fresh())
        with (
            console_process(broker.bootstrap, redis_server.url, topics, tmp_path) as url,
            logged_in(url, "alice") as alice,
        ):
            now = review_record("x", "")["held_at_ms"]
            older = review_record("m-queued", "waiting all along", held_at_ms=now - 60_000)
            produce(broker.bootstrap, topics.review, [review_record("m-before", "before"), older])
            wait_for(alice, lambda b: card(b, "m-before") and card(b, "m-queued"), "the cards")
            banner = alice.find_element(By.ID, "banner")
            assert not banner.is_displayed()
            os.kill(broker.pid, signal.SIGSTOP)
            try:
                wait_for(alice, lambda b: banner.is_displayed() and "unreachable" in banner.text,
                         "the outage banner")  # fmt: skip
                assert card(alice, "m-before") is not None  # still serving what it has
                screenshot(alice, "console-outage.png")
                # A verdict meanwhile is queued, and the page says so.
                card(alice, "m-before").find_element(By.CSS_SELECTOR, ".verdict-block").click()
                queued = "goes out when it is back"
                wait_for(alice, lambda b: queued in b.find_element(By.ID, "toasts").text,
                         "the page says the verdict is queued")  # fmt: skip
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            wait_for(alice, lambda b: not banner.is_displayed(), "the banner goes once it is back")
            wait_for(alice, lambda b: card(b, "m-before") is None, "the queued verdict went out")
            produce(broker.bootstrap, topics.review, [review_record("m-after", "after the outage")])
            wait_for(alice, lambda b: card(b, "m-after"), "a card held after the outage")
            # By keyboard this time: j selects the newer card below (it times out later), a
            # allows it.
            ActionChains(alice).send_keys("j").perform()
            wait_for(alice, lambda b: "selected" in card(b, "m-after").get_attribute("class"),
                     "j selects the card below")  # fmt: skip
            ActionChains(alice).send_keys("a").perform()
            verdicts = read_until(broker.bootstrap, topics.verdicts, lambda seen: len(seen) >= 2)
            assert [(v["message_id"], v["verdict"]) for v in verdicts] == [
                ("m-before", "block"),
                ("m-after", "allow"),
            ]
            assert card(alice, "m-queued") is not None


async def test_two_consoles_share_claims_and_the_first_verdict_through_redis(
    fresh_redis: EmbeddedRedis,
) -> None:
    one, two = (Claims(fresh_redis.url, 60, verdict_topic="chat.verdicts") for _ in range(2))
    # Another deployment's console (its own verdict topic) on the same Redis, same message ids.
    staging = Claims(fresh_redis.url, 60, verdict_topic="staging.verdicts")
    try:
        assert (await one.claim("m-1", "alice"))["moderator_id"] == "alice"
        assert (await two.claim("m-1", "bob"))["moderator_id"] == "alice"  # held elsewhere
        assert (await staging.claim("m-1", "carol"))["moderator_id"] == "carol"  # not alice's
        held = await two.held(["m-1", "m-2"])
        assert held is not None
        assert list(held) == ["m-1"]
        await two.release("m-1", "bob")  # not bob's to release
        assert (await one.claim("m-1", "alice"))["moderator_id"] == "alice"
        await one.release("m-1", "alice")
        assert await two.held(["m-1"]) == {}
        first = {"moderator_id": "alice", "verdict": "block", "at_ms": 1}
        assert await one.first_verdict("m-1", first) == first
        assert await two.first_verdict("m-1", {**first, "moderator_id": "bob"}) == first
        theirs = {**first, "moderator_id": "carol"}
        assert await staging.first_verdict("m-1", theirs) == theirs  # not alice's verdict
        fresh_redis.stop()  # Redis gone: each console on its own, still answering
        assert (await two.claim("m-3", "bob"))["moderator_id"] == "bob"
        assert not two.shared
    finally:
        for claims in (one, two, staging):
            await claims.close()


def test_a_console_started_later_rebuilds_the_queue_and_history_from_the_topics(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, topics: Topics, tmp_path: Path
) -> None:
    produce(kafka.bootstrap, topics.review, [
        review_record("m-decided", "decided before this console started"),
        review_record("m-waiting", "still waiting for a moderator"),
        review_record("m-expired", "its review timed out", expires_at_ms=1),
    ])  # fmt: skip
    earlier = {"message_id": "m-decided", "verdict": "nudge", "moderator_id": "carol",
               "reason": None, "scope": "channel", "at_ms": 1}  # fmt: skip
    produce(kafka.bootstrap, topics.verdicts, [earlier])
    with (
        console_process(kafka.bootstrap, redis_server.url, topics, tmp_path) as url,
        logged_in(url, "bob") as bob,
    ):
        wait_for(bob, lambda b: card(b, "m-waiting"), "the undecided item")
        wait_for(bob, lambda b: "carol" in b.find_element(By.ID, "history").text, "the history")
        assert card(bob, "m-decided") is None
        assert card(bob, "m-expired") is None
        assert "1 waiting" in bob.find_element(By.ID, "counts").text
