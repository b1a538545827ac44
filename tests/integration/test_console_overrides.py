"""Scoped overrides through the review console, against the real broker, Redis, model, moderator
and a `moderator console` process, driven over HTTP the way its page drives it (session cookie,
CSRF token): a verdict that names no scope overrides its channel only; a global one needs the
role and the confirmation; an override revoked in the console, or expired with `moderator
override expire`, stops applying; each act is on the audit topic with who and when."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, Request, build_opener

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import read_spec
from moderator.review.overrides import Override, Overrides, text_digest
from moderator.service import Moderator
from tests.contract import validator
from tests.integration.console_browser import (
    TOKENS,
    Topics,
    card,
    console_process,
    logged_in,
    produce,
    read_until,
    review_record,
    wait_for,
)
from tests.integration.kafka_io import consume
from tests.integration.kafka_io import produce as produce_async
from tests.waiting import eventually

pytestmark = pytest.mark.integration

HOLD = "potato"  # the test policy holds any message with it for review (a deny term)
TEXT = f"who wants {HOLD} salad"
WAIT_S = 60.0  # a console process and a moderator on a busy machine


class Page:
    """One moderator's session on the console, making the page's requests (blocking: call
    through asyncio.to_thread, the moderator runs on this test's loop)."""

    def __init__(self, url: str, who: str) -> None:
        self.url = url
        self.opener = build_opener(HTTPCookieProcessor(CookieJar()))
        form = urlencode({"token": TOKENS[who], "csrf": self.get("/api/session")["csrf"]})
        self.opener.open(Request(url + "/login", data=form.encode()), timeout=30)
        session = self.get("/api/session")
        assert session["moderator_id"] == who
        self.csrf: str = session["csrf"]  # a new one after the login

    def get(self, path: str) -> dict[str, Any]:
        with self.opener.open(self.url + path, timeout=30) as reply:
            data: dict[str, Any] = json.loads(reply.read())
        return data

    def post(self, path: str, body: dict[str, Any], *, csrf: bool = True) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if csrf:
            headers["X-CSRF-Token"] = self.csrf
        request = Request(self.url + path, data=orjson.dumps(body), headers=headers)
        try:
            with self.opener.open(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


@dataclass
class Loop:
    """The moderator, the console and its settings, for one test."""

    settings: Settings
    overrides: Overrides
    url: str

    def page(self, who: str) -> Page:
        return Page(self.url, who)

    async def say(self, i: int, channel: str, text: str = TEXT) -> dict[str, Any]:
        """Send one chat message; its first decision."""
        value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": "u-1", "text": text,
                 "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
        await produce_async(self.settings.kafka_bootstrap, self.settings.in_topic,
                      [(channel.encode(), orjson.dumps(value))])  # fmt: skip

        def decided(records: list[Any]) -> bool:
            return any(orjson.loads(r.value)["message_id"] == f"m-{i}" for r in records)

        out = await consume(self.settings.kafka_bootstrap, self.settings.out_topic, until=decided,
                            timeout_s=WAIT_S)  # fmt: skip
        found = [orjson.loads(r.value) for r in out]
        return next(d for d in found if d["message_id"] == f"m-{i}" and not d["final"])

    def lookup(self, channel: str) -> str | None:
        return self.overrides.lookup(TEXT, channel)

    async def audit(self, n: int) -> list[dict[str, Any]]:
        """The audit topic's first `n` entries, each checked against its schema."""
        topic = self.settings.audit_topic
        records = await consume(self.settings.kafka_bootstrap, topic,
                                until=lambda r: len(r) >= n, timeout_s=WAIT_S)  # fmt: skip
        entries = [orjson.loads(r.value) for r in records]
        for e in entries:
            validator("audit").validate(e)
        return entries


async def verdict(page: Page, message_id: str, **body: Any) -> tuple[int, Any]:
    """Post a verdict as soon as the console has the held message (404 until it has read it)."""
    answer: tuple[int, Any] = (0, None)

    async def taken() -> bool:
        nonlocal answer
        answer = await asyncio.to_thread(
            page.post, "/api/verdict", {"message_id": message_id, **body}
        )
        return answer[0] != 404

    await eventually(taken, f"the console has {message_id}", timeout_s=WAIT_S)
    return answer


async def listed(page: Page, n: int) -> dict[str, Any]:
    """The page's list of overrides once it has `n` (the console follows the topic)."""
    found: dict[str, Any] = {}

    async def has() -> bool:
        nonlocal found
        found = await asyncio.to_thread(page.get, "/api/overrides")
        return len(found["overrides"]) == n

    await eventually(has, f"the console lists {n} overrides", timeout_s=WAIT_S)
    return found


@contextmanager
def console(s: Settings, redis_url: str, tmp: Path) -> Iterator[str]:
    topics = Topics(s.review_topic, s.verdict_topic, s.out_topic)
    extra = ("--override-topic", s.override_topic, "--audit-topic", s.audit_topic,
             "--global-moderators", "alice")  # fmt: skip
    with console_process(s.kafka_bootstrap, redis_url, topics, tmp, *extra, grace_s=0) as url:
        yield url


@pytest.fixture
async def loop_(
    settings: Settings,
    classifier: Classifier,
    redis_server: EmbeddedRedis,
    tmp_path: Path,
) -> AsyncIterator[Loop]:
    spec = read_spec()
    spec["deny"] = [{"term": HOLD, "category": "test", "action": "review"}]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(spec))
    run = uuid.uuid4().hex[:8]
    topics = {"review_topic": f"chat.review.{run}", "verdict_topic": f"chat.verdicts.{run}",
              "audit_topic": f"chat.audit.{run}"}  # fmt: skip
    s = settings.replace(policy=policy, **topics)
    async with AsyncExitStack() as stack:
        service = await stack.enter_async_context(Moderator(s, classifier=classifier))
        await service.wait_ready(30)
        assert service.overrides is not None
        url = stack.enter_context(console(s, redis_server.url, tmp_path))
        yield Loop(s, service.overrides, url)


async def test_a_verdict_without_a_scope_overrides_its_channel_and_global_needs_role_and_confirm(
    loop_: Loop,
) -> None:
    bob = await asyncio.to_thread(loop_.page, "bob")
    alice = await asyncio.to_thread(loop_.page, "alice")
    assert (await loop_.say(1, "c-a"))["action"] == "review"
    status, sent = await verdict(bob, "m-1", verdict="block")  # as the page's default: no scope
    assert status == 200, sent
    assert sent["verdict"]["scope"] == "channel"
    await eventually(lambda: loop_.lookup("c-a") == "block", "bob's override", timeout_s=WAIT_S)
    same_channel, elsewhere = await loop_.say(2, "c-a"), await loop_.say(3, "c-b")
    assert (same_channel["action"], same_channel["reason"]) == ("block", "override")
    assert (elsewhere["action"], elsewhere["reason"]) == ("review", "deny:policy:test"), (
        "the same text in another channel is not overridden"
    )

    # Global: refused without the role, then without the confirmation; taken with both.
    status, refused = await verdict(bob, "m-3", verdict="allow", scope="global",
                                    confirm_global=True)  # fmt: skip
    assert status == 403, refused
    assert "MODERATOR_CONSOLE_GLOBAL_MODERATORS" in refused["error"]
    status, unconfirmed = await verdict(alice, "m-3", verdict="nudge", scope="global")
    assert status == 400, unconfirmed
    assert "confirm_global" in unconfirmed["error"]
    status, sent = await verdict(alice, "m-3", verdict="nudge", scope="global",
                                 confirm_global=True)  # fmt: skip
    assert status == 200, sent
    await eventually(lambda: loop_.lookup("c-z") == "nudge", "the global one", timeout_s=WAIT_S)
    anywhere = await loop_.say(4, "c-z")
    assert (anywhere["action"], anywhere["reason"]) == ("nudge", "override")
    assert loop_.lookup("c-a") == "block", "a channel's own override comes first"

    # The list: who made each, when; only alice may revoke the global one.
    shown = await listed(bob, 2)
    assert shown["may_global"] is False
    assert (await listed(alice, 2))["may_global"] is True
    rows = {
        (o["scope"], o["channel_id"], o["action"], o["moderator_id"]): o for o in shown["overrides"]
    }
    assert set(rows) == {("channel", "c-a", "block", "bob"), ("global", None, "nudge", "alice")}
    assert all(isinstance(o["at_ms"], int) for o in rows.values())
    everywhere = rows[("global", None, "nudge", "alice")]
    status, refused = await asyncio.to_thread(
        bob.post, "/api/overrides/revoke", {"key": everywhere["key"]}
    )
    assert status == 403, refused
    assert loop_.lookup("c-z") == "nudge"

    entries = await loop_.audit(2)
    assert [(e["event"], e["actor"], e["via"]) for e in entries] == [
        ("verdict", "bob", "console"), ("verdict", "alice", "console")
    ]  # fmt: skip
    assert [(e["verdict"]["scope"], e["confirmed_global"]) for e in entries] == [
        ("channel", False), ("global", True)
    ]  # fmt: skip


def _cli(s: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--kafka-bootstrap", s.kafka_bootstrap]
    if args[0] != "list":
        flags += ["--audit-topic", s.audit_topic]
    if args[0] != "audit":
        flags += ["--override-topic", s.override_topic]
    return subprocess.run([sys.executable, "-m", "moderator", "override", *args, *flags],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


async def test_an_override_revoked_in_the_console_or_expired_stops_applying_and_is_audited(
    loop_: Loop,
) -> None:
    alice = await asyncio.to_thread(loop_.page, "alice")
    bob = await asyncio.to_thread(loop_.page, "bob")
    assert (await loop_.say(1, "c-a"))["action"] == "review"
    status, sent = await verdict(alice, "m-1", verdict="block", expires_in_s=86400)
    assert status == 200, sent
    await eventually(lambda: loop_.lookup("c-a") == "block", "alice's override", timeout_s=WAIT_S)
    (shown,) = (await listed(bob, 1))["overrides"]
    assert (shown["moderator_id"], shown["scope"], shown["channel_id"]) == (
        "alice",
        "channel",
        "c-a",
    )
    assert shown["expires_at_ms"] - shown["at_ms"] == 86_400_000, "a day from the verdict"

    # Revoking: CSRF as for every action, then any moderator may revoke a channel's override.
    status, _ = await asyncio.to_thread(
        bob.post, "/api/overrides/revoke", {"key": shown["key"]}, csrf=False
    )
    assert status == 403
    assert loop_.lookup("c-a") == "block"
    status, revoked = await asyncio.to_thread(
        bob.post, "/api/overrides/revoke", {"key": shown["key"]}
    )
    assert status == 200, revoked
    await eventually(lambda: loop_.lookup("c-a") is None, "revoked", timeout_s=WAIT_S)
    again = await loop_.say(2, "c-a")
    assert (again["action"], again["reason"]) == ("review", "deny:policy:test"), "the policy again"
    assert (await listed(bob, 0))["overrides"] == []

    # Expiry: alice blocks it again; `moderator override expire` makes it lapse a second later.
    status, sent = await verdict(alice, "m-2", verdict="block")
    assert status == 200, sent
    await eventually(lambda: loop_.lookup("c-a") == "block", "alice's second", timeout_s=WAIT_S)
    lapse = ("--text", TEXT, "--channel", "c-a", "--expires-in", "1s", "--by", "carol")
    expire = await asyncio.to_thread(_cli, loop_.settings, "expire", *lapse)
    assert expire.returncode == 0, expire.stderr
    await eventually(lambda: loop_.lookup("c-a") is None, "expired", timeout_s=WAIT_S)
    lapsed = await loop_.say(3, "c-a")
    assert (lapsed["action"], lapsed["reason"]) == ("review", "deny:policy:test")
    listing = await asyncio.to_thread(_cli, loop_.settings, "list")
    assert (listing.returncode, listing.stdout) == (0, "")
    assert "1 expired override records (ignored)" in listing.stderr

    entries = await loop_.audit(4)
    assert [(e["event"], e["actor"], e["via"]) for e in entries] == [
        ("verdict", "alice", "console"), ("override_revoked", "bob", "console"),
        ("verdict", "alice", "console"), ("override_expiry", "carol", "cli"),
    ]  # fmt: skip
    assert entries[1]["override"]["moderator_id"] == "alice", "what was revoked, and whose"
    assert entries[3]["previous_expires_at_ms"] is None
    trail = await asyncio.to_thread(_cli, loop_.settings, "audit")
    assert trail.returncode == 0, trail.stderr
    assert [line.split("\t")[1:4] for line in trail.stdout.splitlines()] == [
        ["alice", "console", "verdict"], ["bob", "console", "override_revoked"],
        ["alice", "console", "verdict"], ["carol", "cli", "override_expiry"],
    ]  # fmt: skip


def produce_overrides(bootstrap: str, topic: str, overrides: list[Override]) -> None:
    """Overrides as the moderators write them, with the stock client."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for o in overrides:
        producer.produce(topic, o.encode(), key=o.key.encode())
    assert producer.flush(30) == 0, "the broker did not take the overrides"


def records_on(bootstrap: str, topic: str) -> int:
    """How many records `topic` holds (its partitions' high watermarks, from offset 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def scopes(browser: WebDriver, message_id: str) -> list[str]:
    shown = card(browser, message_id)
    return [o.get_attribute("value") for o in shown.find_elements(By.CSS_SELECTOR, ".scope option")]


def test_the_page_offers_every_channel_only_to_named_moderators_and_asks_first(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    topics, override_topic, audit_topic = (
        Topics.fresh(),
        f"chat.overrides.{run}",
        f"chat.audit.{run}",
    )
    loop.run(ensure_topics(kafka.bootstrap, {topics.review: 2, topics.verdicts: 2,
                                             topics.decisions: 2, override_topic: 1}))  # fmt: skip
    produce(kafka.bootstrap, topics.review, [review_record("m-1", TEXT)])
    at = int(time.time() * 1000)
    digest = text_digest(TEXT)
    made = [Override(digest, "global", None, "nudge", "carol", "h-1", None, at),
            Override(digest, "channel", "lobby", "block", "bob", "h-2", None, at + 1)]  # fmt: skip
    produce_overrides(kafka.bootstrap, override_topic, made)
    extra = ("--override-topic", override_topic, "--audit-topic", audit_topic,
             "--global-moderators", "alice")  # fmt: skip
    with (
        console_process(kafka.bootstrap, redis_server.url, topics, tmp_path, *extra) as url,
        logged_in(url, "bob") as bob,
        logged_in(url, "alice") as alice,
    ):
        rows = "#overrides tbody tr"
        wait_for(bob, lambda b: len(b.find_elements(By.CSS_SELECTOR, rows)) == 2, "both listed")
        listed = bob.find_element(By.ID, "overrides").text
        for shown in ("every channel", "carol", "#lobby", "bob"):
            assert shown in listed
        everywhere = bob.find_element(By.CSS_SELECTOR, f'{rows}[data-key="{made[0].key}"] .revoke')
        assert not everywhere.is_enabled(), "bob may not revoke a global override"
        wait_for(bob, lambda b: card(b, "m-1"), "the held message")
        assert scopes(bob, "m-1") == ["channel"], "bob is not offered every channel"
        wait_for(alice, lambda b: card(b, "m-1") and scopes(b, "m-1") == ["channel", "global"])

        held = card(alice, "m-1")
        Select(held.find_element(By.CSS_SELECTOR, ".scope")).select_by_value("global")
        held.find_element(By.CSS_SELECTOR, ".verdict-block").click()
        asked = wait_for(alice, EC.alert_is_present(), "the confirmation")
        assert "EVERY channel" in asked.text, "it says what a global override does"
        assert TEXT in asked.text
        asked.dismiss()
        held.find_element(By.CSS_SELECTOR, ".verdict-block").click()
        wait_for(alice, EC.alert_is_present(), "the confirmation again").accept()
        (sent,) = read_until(kafka.bootstrap, topics.verdicts, lambda seen: len(seen) >= 1)
        assert (sent["message_id"], sent["scope"], sent["moderator_id"]) == ("m-1", "global",
                                                                            "alice")  # fmt: skip
        # A verdict goes out (grace 0) before the page hears back, and the page posts one at a
        # time: had the dismissed click sent one, it would be on the topic by now.
        assert records_on(kafka.bootstrap, topics.verdicts) == 1, "the dismissed click sent nothing"

        alice.find_element(By.CSS_SELECTOR, f'{rows}[data-key="{made[1].key}"] .revoke').click()
        revoking = wait_for(alice, EC.alert_is_present(), "the revoke confirmation")
        assert "#lobby" in revoking.text
        revoking.accept()
        wait_for(
            bob, lambda b: len(b.find_elements(By.CSS_SELECTOR, rows)) == 1, "it left the list"
        )
        trail = read_until(kafka.bootstrap, audit_topic, lambda seen: len(seen) >= 2)
        assert [(e["event"], e["actor"]) for e in trail] == [
            ("verdict", "alice"), ("override_revoked", "alice")
        ]  # fmt: skip
        assert trail[1]["override"]["moderator_id"] == "bob"
