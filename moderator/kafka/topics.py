"""Creating the topics (for `moderator dev`, tests, `run --create-topics`, the policies and the
overrides)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from moderator.kafka.connect import start_client

log = logging.getLogger(__name__)

COMPACTED = {"cleanup.policy": "compact"}  # the policies and overrides topics: latest per key


async def ensure_topics(
    kafka: str | Mapping[str, Any],
    partitions: Mapping[str, int],
    *,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    replication: int = 1,
) -> None:
    """Create each topic with its partition count (and `configs[topic]`, such as
    `cleanup.policy`) and `replication` replicas unless it already exists. No default from the
    broker: aiokafka's CreateTopics always names a factor (`MODERATOR_TOPIC_REPLICATION`).

    `kafka` is a bootstrap string or the client options of `Settings.kafka_options()`.
    """
    options = {"bootstrap_servers": kafka} if isinstance(kafka, str) else dict(kafka)
    admin = AIOKafkaAdminClient(**options, client_id="moderator-admin")
    await start_client(admin, options, "creating topics, the admin client")
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name,
                num_partitions=n,
                replication_factor=replication,
                topic_configs=dict((configs or {}).get(name, {})),
            )
            for name, n in partitions.items()
            if name not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):  # another process was first
                await admin.create_topics(wanted)
            log.info("created topics %s", ", ".join(t.name for t in wanted))
    finally:
        await admin.close()


async def compacted_reader(
    options: Mapping[str, Any], topic: str, *, replication: int, what: str
) -> AIOKafkaConsumer:
    """Make sure `topic` exists, compacted, with one partition (a broker that refuses to create
    it may have it all the same: a warning), and a consumer outside any group to read it with,
    not started yet; `what` names the topic in the warning and the consumer's client id."""
    try:
        await ensure_topics(
            options, {topic: 1}, configs={topic: COMPACTED}, replication=replication
        )
    except KafkaError as exc:
        log.warning("could not make sure the %s topic %s exists: %r", what, topic, exc)
    return AIOKafkaConsumer(
        **options, group_id=None, enable_auto_commit=False, client_id=f"moderator-{what}"
    )
