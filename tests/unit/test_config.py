from __future__ import annotations

from pathlib import Path

import pytest

from moderator.config import DEFAULT_THREADS, Settings, available_cores
from moderator.errors import ConfigError


def test_defaults_match_the_design() -> None:
    s = Settings.from_env({})
    assert s.kafka_bootstrap == "127.0.0.1:9092"
    assert (s.in_topic, s.out_topic, s.dlq_topic) == (
        "chat.messages", "chat.decisions", "chat.messages.dlq",
    )  # fmt: skip
    assert s.group_id == "moderator"
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.threads == DEFAULT_THREADS
    assert s.budget_ms == 50
    assert s.metrics_port == 9108


def test_the_environment_is_read_and_flags_win() -> None:
    env = {"MODERATOR_THREADS": "2", "MODERATOR_BUDGET_MS": "20", "MODERATOR_REDIS_URL": ""}
    s = Settings.from_env(env, budget_ms="30")
    assert s.threads == 2
    assert s.budget_ms == 30.0
    assert s.redis_url == ""


def test_threads_are_capped_at_the_cores_we_may_use() -> None:
    assert Settings(threads=512).effective_threads == available_cores()
    assert Settings(threads=1).effective_threads == 1


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"MODERATOR_THREADS": "four"}, "MODERATOR_THREADS"),
        ({"MODERATOR_THREADS": "0"}, "MODERATOR_THREADS"),
        ({"MODERATOR_KAFKA_BOOTSTRAP": "nohostport"}, "MODERATOR_KAFKA_BOOTSTRAP"),
        ({"MODERATOR_REDIS_URL": "http://x"}, "MODERATOR_REDIS_URL"),
        ({"MODERATOR_METRICS_PORT": "70000"}, "MODERATOR_METRICS_PORT"),
        ({"MODERATOR_OUT_TOPIC": "chat.messages"}, "MODERATOR_IN_TOPIC"),
        ({"MODERATOR_POLICY": "/nonexistent.toml"}, "MODERATOR_POLICY"),
    ],
)
def test_bad_settings_fail_naming_the_setting(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Settings.from_env(env)


def test_a_missing_model_dir_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MODERATOR_MODEL_DIR"):
        Settings(model_dir=tmp_path).check_model_dir()
