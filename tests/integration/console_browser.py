"""The console's browser tests' parts: a `moderator console` process against the real broker and
Redis, headless Chromium (Debian's `chromium` and `chromium-driver`, `make chromium`) driven by
Selenium, and the topics read with confluent-kafka, a client other than the console's own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from devstack.embedded import free_port
from moderator.cli import COMMANDS
from moderator.policy.review_rules import DEFAULT
from tests.waiting import eventually_blocking

REPO = Path(__file__).resolve().parents[2]
# Each run's screenshots; `make screenshots` copies them to docs/, which the README shows (a test
# run leaves the tree as it found it).
SCREENSHOTS = REPO / "build" / "screenshots"
WAIT_S = 30.0
TOKENS = {"alice": "alice-token-1234", "bob": "bob-token-5678"}
T = TypeVar("T")


@dataclass(frozen=True)
class Topics:
    review: str
    verdicts: str
    decisions: str

    @classmethod
    def fresh(cls) -> Topics:
        run = uuid.uuid4().hex[:8]
        return cls(f"chat.review.{run}", f"chat.verdicts.{run}", f"chat.decisions.{run}")


def _environment(tmp: Path) -> dict[str, str]:
    """This environment, plus the `console` command where the installed tools distribution
    predates it (a venv made before the console existed; `make` reinstalls it on the next
    target): a dist-info naming the entry point, as the installed one will."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    if not any(ep.name == "console" for ep in entry_points(group=COMMANDS)):
        info = tmp / "entry" / "console_checkout-0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: console-checkout\nVersion: 0\n"
        )
        (info / "entry_points.txt").write_text(
            f"[{COMMANDS}]\nconsole = console.commands:register\n"
        )
        env["PYTHONPATH"] = os.pathsep.join([str(info.parent), env["PYTHONPATH"]])
    return env


@contextmanager
def console_process(
    bootstrap: str, redis_url: str, topics: Topics, tmp: Path, *extra: str, grace_s: float = 1.0
) -> Iterator[str]:
    """`moderator console` on a free port; its base URL once it answers. Its verdicts go out
    `grace_s` after the click (the undo grace period): short, unless a test undoes one."""
    port = free_port()
    log = (tmp / f"console-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moderator", "console", "--port", str(port),
         "--kafka-bootstrap", bootstrap, "--redis-url", redis_url,
         "--review-topic", topics.review, "--verdict-topic", topics.verdicts,
         "--out-topic", topics.decisions, "--undo-grace-s", str(grace_s), *extra],
        env={**_environment(tmp), "MODERATOR_CONSOLE_TOKENS":
             ",".join(f"{who}:{token}" for who, token in TOKENS.items())},
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        until(lambda: proc.poll() is not None or _answers(url + "/healthz"), "the console answers")
        assert proc.poll() is None, (tmp / f"console-{port}.log").read_text()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def until(condition: Callable[[], T], what: str, timeout_s: float = WAIT_S) -> T:
    """`condition()`'s first truthy value; fails naming `what` after `timeout_s`."""
    return eventually_blocking(condition, what, timeout_s=timeout_s, poll_s=0.05)


def chromium() -> WebDriver:
    """Headless Debian Chromium through Debian's chromedriver; nothing downloaded."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary, "no chromium on PATH: run `make chromium` (Debian's chromium)"
    assert driver, "no chromedriver on PATH: run `make chromium` (Debian's chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1400,900", "--disable-gpu"):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


@contextmanager
def logged_in(url: str, who: str) -> Iterator[WebDriver]:
    """A browser on the console, logged in as `who` with its token, the live queue open."""
    browser = chromium()
    try:
        browser.get(url)
        wait_for(
            browser,
            lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "login",
        )
        browser.find_element(By.NAME, "token").send_keys(TOKENS[who])
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait_for(
            browser,
            lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true",
        )
        yield browser
    finally:
        browser.quit()


def wait_for(browser: WebDriver, condition: Callable[[WebDriver], Any], what: str = "") -> Any:
    wait = WebDriverWait(browser, WAIT_S, poll_frequency=0.05,
                         ignored_exceptions=[StaleElementReferenceException])  # fmt: skip
    return wait.until(condition, what)


def card(browser: WebDriver, message_id: str) -> Any:
    """The message's card while the page shows it, else None."""
    for _ in range(3):  # a card removed (or redrawn) between finding it and asking about it
        found = browser.find_elements(By.CSS_SELECTOR, f'#queue li[data-message-id="{message_id}"]')
        try:
            return found[0] if found and found[0].is_displayed() else None
        except StaleElementReferenceException:
            continue
    return None


def screenshot(browser: WebDriver, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(SCREENSHOTS / name)), f"no screenshot {name}"


def press(browser: WebDriver, keys: str) -> None:
    """`keys` typed as a moderator does, to whatever has the focus (the page, after a load)."""
    ActionChains(browser).send_keys(keys).perform()


def selected(browser: WebDriver) -> str | None:
    """The message id of the card the keys act on (marked selected and aria-current), if one."""
    found: str | None = browser.execute_script(
        """const marked = document.querySelectorAll('#queue li.selected[aria-current="true"]');
        return marked.length === 1 ? marked[0].dataset.messageId : null;"""
    )
    return found


def in_view(browser: WebDriver, message_id: str) -> bool:
    """Whether the message's whole card is inside the browser's viewport."""
    return bool(
        browser.execute_script(
            """const li = [...document.querySelectorAll('#queue > li')]
                .find((c) => c.dataset.messageId === arguments[0]);
            if (!li) return false;
            const r = li.getBoundingClientRect();
            return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;""",
            message_id,
        )
    )


def review_record(message_id: str, text: str, **fields: Any) -> dict[str, Any]:
    """A review record as the moderator publishes it (loop contract, review.schema.json): due
    the default policy's review timeout after it was held, unless `fields` say otherwise."""
    now = int(time.time() * 1000)
    held_at_ms = fields.get("held_at_ms", now)
    return {
        "message_id": message_id, "channel_id": "speedrun", "user_id": "u-troll",
        "text": text, "sent_at_ms": now - 400, "action": "review", "reason": "threat",
        "severity": "medium", "scores": {"threat": 0.81, "insult": 0.34, "toxic": 0.66},
        "model": "chat-minilm@3", "policy": "default@2", "span": [0, len(text)],
        "language": None, "strikes": 2,
        "context": [
            {"message_id": f"{message_id}-c1", "user_id": "u-7",
             "text": "that boss fight was rough", "sent_at_ms": now - 9000},
            {"message_id": f"{message_id}-c2", "user_id": "u-troll", "text": "you are all trash",
             "sent_at_ms": now - 4000},
        ],
        "held_at_ms": held_at_ms, "review_fallback": DEFAULT.fallback,
        "expires_at_ms": held_at_ms + round(DEFAULT.timeout_s * 1000), **fields,
    }  # fmt: skip


def produce(
    bootstrap: str, topic: str, records: list[dict[str, Any]], *, key: str = "message_id"
) -> None:
    """`records` as JSON, each keyed by its field `key`, acknowledged by the broker."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for record in records:
        producer.produce(topic, orjson.dumps(record), key=record[key].encode())
    assert producer.flush(WAIT_S) == 0, "the broker did not take the records"


def read_until(
    bootstrap: str, topic: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """`topic`'s records from the beginning (JSON) until `done` holds, with confluent-kafka:
    every partition assigned, no group to join (a join costs the broker's rebalance delay, which
    once took most of the deadline on a busy machine)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"console-test-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
    })  # fmt: skip
    seen: list[dict[str, Any]] = []

    def read_more() -> bool:
        if done(seen):
            return True
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(orjson.loads(message.value()))
        return done(seen)

    try:
        partitions = consumer.list_topics(topic, timeout=WAIT_S).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
        eventually_blocking(read_more, lambda: f"{topic} holds what is awaited: only {seen}",
                            timeout_s=WAIT_S, poll_s=0)  # fmt: skip
    finally:
        consumer.close()
    return seen
