"""Dependencies that go away for a while: the moderator waits, resumes, loses nothing."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from devstack.embedded import EmbeddedKafka
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.service import Moderator
from tests.integration.kafka_io import chat, consume, decisions_by_id, distinct_ids, produce

pytestmark = pytest.mark.integration


@pytest.fixture
def own_kafka() -> Iterator[EmbeddedKafka]:
    """A broker of the test's own, for tests that freeze it."""
    with EmbeddedKafka() as broker:
        yield broker


async def test_a_frozen_broker_is_waited_out_without_loss(
    own_kafka: EmbeddedKafka, settings: Settings, classifier: Classifier
) -> None:
    settings = settings.replace(kafka_bootstrap=own_kafka.bootstrap, redis_url="")
    await ensure_topics(
        settings.kafka_bootstrap,
        {settings.in_topic: 2, settings.out_topic: 2, settings.dlq_topic: 1},
    )
    pid = own_kafka.pid
    assert pid is not None
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [chat(i, f"before the freeze {i}") for i in range(100)])  # fmt: skip
        await consume(settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(100))

        os.kill(pid, signal.SIGSTOP)  # unreachable: connections hang, requests time out
        await asyncio.sleep(12)  # past the 10 s group session timeout
        os.kill(pid, signal.SIGCONT)

        await produce(settings.kafka_bootstrap, settings.in_topic,
                      [chat(i, f"after the thaw {i}") for i in range(100, 200)])  # fmt: skip
        records = await consume(
            settings.kafka_bootstrap, settings.out_topic, until=distinct_ids(200), timeout_s=90
        )
        assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(200)}
        assert service.failure is None, "no crash: the moderator waited and resumed"
