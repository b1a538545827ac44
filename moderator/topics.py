"""Creating the topics (for `moderator dev`, tests, `run --create-topics` and the policies)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from moderator.connect import start_client

log = logging.getLogger(__name__)


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
