"""Integration fixtures: the real embedded broker and Redis (once per session), the real model."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.kafka.topics import ensure_topics
from moderator.service import Moderator
from tests.integration.console_browser import Topics, console_process

PARTITIONS = 2


@pytest.fixture(scope="session")
def kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka() as broker:
        yield broker


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def fresh_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of the test's own, for tests that stop it."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
async def settings(kafka: EmbeddedKafka, redis_server: EmbeddedRedis, model_dir: Path) -> Settings:
    """Settings on fresh topics and a fresh consumer group."""
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=kafka.bootstrap,
        redis_url=redis_server.url,
        model_dir=model_dir,
        in_topic=f"chat.messages.{run}",
        out_topic=f"chat.decisions.{run}",
        dlq_topic=f"chat.messages.dlq.{run}",
        policy_topic=f"chat.policies.{run}",
        review_topic=f"chat.review.{run}",
        verdict_topic=f"chat.verdicts.{run}",
        override_topic=f"chat.overrides.{run}",  # one test's verdicts never steer another's
        rollout_topic=f"chat.rollout.{run}",  # one test's promotion never switches another's
        group_id=f"moderator-{run}",
        metrics_port=0,
        commit_interval_s=0.2,
        shutdown_timeout_s=10.0,
    )
    await ensure_topics(
        kafka.bootstrap,
        {settings.in_topic: PARTITIONS, settings.out_topic: PARTITIONS, settings.dlq_topic: 1},
    )
    return settings


@pytest.fixture
async def moderator(settings: Settings, classifier: Classifier) -> AsyncIterator[Moderator]:
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        yield service


# The console's browser tests (test_console_*.py) share these two; a module may define its own.
@pytest.fixture
def topics(kafka: EmbeddedKafka) -> Topics:
    """Fresh review, verdict and decision topics of 2 partitions each."""
    topics = Topics.fresh()
    partitions = {topics.review: 2, topics.verdicts: 2, topics.decisions: 2}
    loop.run(ensure_topics(kafka.bootstrap, partitions))
    return topics


@pytest.fixture
def console(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, topics: Topics, tmp_path: Path
) -> Iterator[str]:
    """A console process following `topics`: its URL."""
    with console_process(kafka.bootstrap, redis_server.url, topics, tmp_path) as url:
        yield url
