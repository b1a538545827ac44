"""Topics the moderator creates get the replication and partitions the settings name."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from aiokafka.admin import NewTopic

from moderator import cli
from moderator.config import Settings
from moderator.errors import ConfigError
from moderator.kafka import topics


class FakeAdmin:
    """An admin client that has one topic and records what it is asked to create."""

    created: ClassVar[list[NewTopic]] = []

    def __init__(self, **options: Any) -> None:
        self.options = options

    async def list_topics(self) -> list[str]:
        return ["chat.decisions"]

    async def create_topics(self, wanted: list[NewTopic]) -> None:
        FakeAdmin.created.extend(wanted)

    async def close(self) -> None:
        pass


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> type[FakeAdmin]:
    async def started(*_: object) -> None:
        pass

    FakeAdmin.created = []
    monkeypatch.setattr(topics, "AIOKafkaAdminClient", FakeAdmin)
    monkeypatch.setattr(topics, "start_client", started)
    return FakeAdmin


def test_missing_topics_are_created_with_the_replication_asked_for(
    admin: type[FakeAdmin],
) -> None:
    settings = Settings.from_env({"MODERATOR_TOPIC_REPLICATION": "3",
                                  "MODERATOR_TOPIC_PARTITIONS": "12"})  # fmt: skip
    wanted = cli.topic_partitions(settings, settings.topic_partitions)
    asyncio.run(topics.ensure_topics("b:9092", wanted, replication=settings.topic_replication))
    made = {t.name: (t.num_partitions, t.replication_factor) for t in admin.created}
    assert made == {"chat.messages": (12, 3), "chat.messages.dlq": (1, 3),
                    "chat.review": (12, 3), "chat.verdicts": (12, 3)}  # fmt: skip


def test_replication_and_partitions_are_settings_with_flags() -> None:
    args = cli._parser().parse_args(["run", "--topic-replication", "3", "--topic-partitions", "48"])
    settings = cli.settings_from_args(args)
    assert (settings.topic_replication, settings.topic_partitions) == (3, 48)
    assert (Settings().topic_replication, Settings().topic_partitions) == (1, 4)
    old = cli._parser().parse_args(["run", "--partitions", "6"])
    assert cli.settings_from_args(old).topic_partitions == 6  # the old spelling still works
    for bad in ("0", "-1"):
        with pytest.raises(ConfigError, match="MODERATOR_TOPIC_REPLICATION"):
            Settings.from_env({"MODERATOR_TOPIC_REPLICATION": bad})
