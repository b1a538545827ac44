"""Per-channel policies through the policies topic, against the real broker, Redis and model."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from moderator.admin import policy_admin
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.policy.rules import Policy
from moderator.service import Moderator
from tests.integration.kafka_io import consume, decisions_by_id, distinct_ids, produce
from tests.waiting import eventually

pytestmark = pytest.mark.integration

POTATO = {"name": "no-potatoes", "version": 1,
          "deny": [{"term": "potato", "category": "custom", "action": "block"}],
          "allow": ["kill la kill"]}  # fmt: skip
MILD = {"name": "mild", "version": 3, "labels": {"insult": {"medium": "nudge", "high": "nudge"}}}
INSULT = "you are a worthless idiot"  # the default policy blocks it (insult, high)
DEFAULT = Policy.load().ident  # the packaged default's name@version, as decisions carry it


def message(i: int, channel: str, text: str) -> tuple[bytes, bytes]:
    value = {"message_id": f"m-{i}", "channel_id": channel, "user_id": "u-1", "text": text,
             "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    return channel.encode(), orjson.dumps(value)


def sample(service: Moderator, name: str, **labels: str) -> float:
    return service.metrics.registry.get_sample_value(f"moderator_{name}", labels) or 0.0


async def decided(settings: Settings, n: int) -> dict[str, dict[str, Any]]:
    records = await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(n))
    return decisions_by_id(records)


async def test_two_channels_get_different_actions_for_the_same_text(
    settings: Settings, classifier: Classifier
) -> None:
    kafka = settings.kafka_options()
    await policy_admin.write(kafka, settings.policy_topic, "c-potato", POTATO)
    await policy_admin.write(kafka, settings.policy_topic, "c-mild", MILD)
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        texts = ["i like potato salad", INSULT, "kill la kill is the best anime"]
        records = [message(i * 3 + j, channel, text)
                   for i, channel in enumerate(("c-potato", "c-mild", "c-other"))
                   for j, text in enumerate(texts)]  # fmt: skip
        await produce(kafka, settings.in_topic, records)
        got = await decided(settings, len(records))
    act = {m: (d["channel_id"], d["action"], d["reason"], d["severity"], d["policy"])
           for m, d in got.items()}  # fmt: skip
    assert act["m-0"] == ("c-potato", "block", "deny:policy:custom", "high", "no-potatoes@1")
    assert act["m-3"] == ("c-mild", "allow", None, None, "mild@3")
    assert act["m-6"] == ("c-other", "allow", None, None, DEFAULT)
    # The same insult: blocked by the default (and by no-potatoes, which only adds terms over
    # it), only nudged where the channel maps the insult severities to nudge.
    assert act["m-1"][1:4] == ("block", "insult", "high")
    assert act["m-4"] == ("c-mild", "nudge", "insult", "high", "mild@3")
    assert act["m-7"][1:5] == ("block", "insult", "high", DEFAULT)
    assert {act[m][1] for m in ("m-2", "m-5", "m-8")} == {"allow"}


async def test_a_published_policy_changes_decisions_live_without_restart(
    settings: Settings, classifier: Classifier
) -> None:
    """Every message sent once the moderator has counted the policy applied is decided under it
    (no restart, no timing bound: the switch is read off the moderator's own counter)."""
    kafka = settings.kafka_options()
    n, channel = 120, "c-live"
    sent = 0
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)

        async def stream() -> None:
            nonlocal sent
            for i in range(n):
                await produce(kafka, settings.in_topic, [message(i, channel, "potato time")])
                sent += 1
                await asyncio.sleep(0.025)

        sender = asyncio.create_task(stream())
        await eventually(lambda: sent >= n // 3, "a third of the stream is sent")
        await policy_admin.write(kafka, settings.policy_topic, channel, POTATO)
        await eventually(
            lambda: sample(service, "policy_updates_total", result="applied") == 1,
            "the policy was applied",
        )
        applied_after = sent  # messages m-<applied_after> on were produced after it applied
        await sender
        records = await consume(kafka, settings.out_topic, until=distinct_ids(n))
        assert sample(service, "policy_updates_total", result="applied") == 1
    ids = [orjson.loads(r.value)["message_id"] for r in records]
    assert ids == [f"m-{i}" for i in range(n)], "each decided once, in order, none lost"
    actions = [orjson.loads(r.value)["action"] for r in records]
    switch = actions.index("block")
    assert actions[:switch] == ["allow"] * switch
    assert actions[switch:] == ["block"] * (n - switch)
    assert 0 < switch <= applied_after < n, "the stream went on after the policy applied"


async def test_a_bad_policy_is_rejected_and_the_previous_one_kept(
    settings: Settings, classifier: Classifier, caplog: pytest.LogCaptureFixture
) -> None:
    kafka = settings.kafka_options()
    channel = "c-strict"
    await policy_admin.write(kafka, settings.policy_topic, channel, POTATO)
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        bad = {**POTATO, "version": 2, "labels": {"insult": {"high": "obliterate"}}}
        with caplog.at_level(logging.ERROR, logger="moderator.policy.channels"):
            await produce(
                kafka,
                settings.policy_topic,
                [(channel.encode(), b"{not json"), (channel.encode(), orjson.dumps(bad))],
            )
            await eventually(
                lambda: sample(service, "policy_updates_total", result="rejected") >= 2,
                "both bad policies were read and rejected",
            )
        await produce(kafka, settings.in_topic, [message(0, channel, "potato")])
        got = await decided(settings, 1)
    assert (got["m-0"]["action"], got["m-0"]["policy"]) == ("block", "no-potatoes@1")
    rejections = [r.getMessage() for r in caplog.records if "previous policy stays" in r.message]
    assert len(rejections) == 2
    assert "not JSON" in rejections[0]
    assert "labels.insult.high: 'obliterate' is not one of" in rejections[1]


async def test_a_new_instance_has_every_policy_before_it_is_ready(
    settings: Settings, classifier: Classifier
) -> None:
    kafka = settings.kafka_options()
    n = 150
    await produce(kafka, settings.policy_topic, [
        (f"ch-{i}".encode(), orjson.dumps({**POTATO, "name": f"ch-{i}"})) for i in range(n)
    ] + [(b"ch-0", None)])  # fmt: skip
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        assert sample(service, "channel_policies") == n - 1  # ch-0's tombstone applied
        assert sample(service, "policy_updates_total", result="applied") == n
        assert sample(service, "policy_updates_total", result="removed") == 1
        await produce(kafka, settings.in_topic, [message(0, f"ch-{n - 1}", "potato"),
                                                 message(1, "ch-0", "potato")])  # fmt: skip
        got = await decided(settings, 2)
    assert (got["m-0"]["action"], got["m-0"]["policy"]) == ("block", f"ch-{n - 1}@1")
    assert (got["m-1"]["action"], got["m-1"]["policy"]) == ("allow", DEFAULT)


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--kafka-bootstrap", settings.kafka_bootstrap, "--policy-topic", settings.policy_topic]
    return subprocess.run(
        [sys.executable, "-m", "moderator", "policy", *args, *flags],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_policy_command_puts_gets_lists_and_deletes(settings: Settings, tmp_path: Path) -> None:
    good, bad = tmp_path / "potato.json", tmp_path / "bad.toml"
    good.write_text(json.dumps(POTATO))
    bad.write_text('name = "bad"\nversion = 1\n[labels.insult]\nhigh = "obliterate"\n')
    empty = _cli(settings, "list")
    assert (empty.returncode, empty.stdout) == (0, ""), "stdout: one line per policy, no more"
    assert f"no policies on {settings.policy_topic}: every channel gets {DEFAULT}" in empty.stderr
    nothing = _cli(settings, "delete", "c-1")
    assert nothing.returncode == 0, nothing.stderr
    assert "c-1 has no policy, nothing removed (the default applies)" in nothing.stdout
    put = _cli(settings, "put", "c-1", str(good))
    assert put.returncode == 0, put.stderr
    assert "c-1 → no-potatoes@1" in put.stdout
    refused = _cli(settings, "put", "c-2", str(bad))
    assert refused.returncode == 78
    assert "bad.toml: labels.insult.high: 'obliterate'" in refused.stderr
    got = _cli(settings, "get", "c-1")
    assert got.returncode == 0
    assert json.loads(got.stdout) == POTATO
    listed = _cli(settings, "list")
    assert listed.stdout.splitlines() == ["c-1\tno-potatoes@1"], "the refused one was not sent"
    # Written by another client, unchecked: listed as what the moderators will do with it.
    bad_spec = {"name": "raw", "version": 1, "labels": {"insult": {"high": "obliterate"}}}
    asyncio.run(
        policy_admin.write(settings.kafka_options(), settings.policy_topic, "c-3", bad_spec)
    )
    rows = _cli(settings, "list").stdout.splitlines()
    assert rows[0] == "c-1\tno-potatoes@1"
    assert rows[1].startswith(
        "c-3\traw@1\tREJECTED: policy for 'c-3': labels.insult.high: 'obliterate'"
    )
    assert rows[1].endswith(f"(in effect: {DEFAULT})"), "no earlier policy: the default decides"
    asyncio.run(policy_admin.write(settings.kafka_options(), settings.policy_topic, "c-3", None))
    # A default the moderators refuse: they keep the policy file's, and so does the command;
    # channel policies are judged over what is in effect, not over the refused record.
    bad_default = {**bad_spec, "name": "star", "version": 2}
    asyncio.run(
        policy_admin.write(settings.kafka_options(), settings.policy_topic, "*", bad_default)
    )
    rows = _cli(settings, "list").stdout.splitlines()
    assert rows[0].startswith("*\tstar@2\tREJECTED: policy for '*': labels.insult.high")
    assert rows[0].endswith(f"(in effect: {DEFAULT})")
    assert rows[1] == "c-1\tno-potatoes@1"
    again = _cli(settings, "put", "c-1", str(good))
    assert again.returncode == 0, again.stderr
    asyncio.run(policy_admin.write(settings.kafka_options(), settings.policy_topic, "*", None))
    deleted = _cli(settings, "delete", "c-1")
    assert deleted.returncode == 0
    assert "c-1 removed (the default applies)" in deleted.stdout
    missing = _cli(settings, "get", "c-1")
    assert missing.returncode == 1
    assert "no policy for 'c-1'" in missing.stderr
    assert _cli(settings, "list").stdout == ""


@pytest.mark.parametrize("action", [["list"], ["get", "c-1"], ["delete", "c-1"], ["put", "c-1"]])
def test_a_failed_policy_command_closes_its_kafka_clients(
    settings: Settings, tmp_path: Path, action: list[str]
) -> None:
    """No broker at the address: one error and exit 69, with no `ERROR asyncio: Unclosed
    AIOKafkaConsumer` after it. (A server that is not Kafka fails the same way, after aiokafka's
    40 s request timeout.)"""
    if action[0] == "put":
        (tmp_path / "p.json").write_text(json.dumps(POTATO))
        action = [*action, str(tmp_path / "p.json")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    done = _cli(settings.replace(kafka_bootstrap=closed), *action)
    assert done.returncode == 69, done.stderr
    assert "moderator: error: reading the policies could not connect to Kafka" in done.stderr
    assert "Unclosed" not in done.stderr
    assert "Traceback" not in done.stderr
