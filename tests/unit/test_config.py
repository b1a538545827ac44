from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from moderator.commandline import settings_from_args
from moderator.config import DEFAULT_THREADS, Settings, available_cores
from moderator.decide.windows import MAX_WINDOWS
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
    assert s.max_windows == MAX_WINDOWS == 16


def test_the_environment_is_read_and_flags_win() -> None:
    env = {"MODERATOR_THREADS": "2", "MODERATOR_BUDGET_MS": "20", "MODERATOR_REDIS_URL": ""}
    s = Settings.from_env(env, budget_ms="30")
    assert s.threads == 2
    assert s.budget_ms == 30.0
    assert s.redis_url == ""


def test_max_windows_is_read_from_the_environment_and_the_flag() -> None:
    s = Settings.from_env({"MODERATOR_MAX_WINDOWS": "4"})
    assert s.max_windows == 4
    args = argparse.Namespace(max_windows="2")
    assert settings_from_args(args).max_windows == 2  # `--max-windows` wins over the variable


def test_threads_are_capped_at_the_cores_we_may_use() -> None:
    assert Settings(threads=512).effective_threads == available_cores()
    assert Settings(threads=1).effective_threads == 1


@pytest.mark.parametrize(
    ("threads", "batch_threads", "layout"),
    [(1, 1, (1, 1)), (2, 1, (1, 2)), (2, 2, (2, 1)), (2, 4, (2, 1)), (8, 1, (1, 2))],
)
def test_the_threads_run_one_batch_each_unless_batch_threads_says_otherwise(
    threads: int, batch_threads: int, layout: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """(intra-op threads per batch, batches at once), within the cores we may use."""
    monkeypatch.setattr("moderator.config.available_cores", lambda: 2)
    assert Settings(threads=threads, batch_threads=batch_threads).scoring_layout == layout


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"MODERATOR_THREADS": "four"}, "MODERATOR_THREADS"),
        ({"MODERATOR_THREADS": "0"}, "MODERATOR_THREADS"),
        ({"MODERATOR_BATCH_THREADS": "0"}, "MODERATOR_BATCH_THREADS"),
        ({"MODERATOR_KAFKA_BOOTSTRAP": "nohostport"}, "MODERATOR_KAFKA_BOOTSTRAP"),
        ({"MODERATOR_REDIS_URL": "http://x"}, "MODERATOR_REDIS_URL"),
        ({"MODERATOR_METRICS_PORT": "70000"}, "MODERATOR_METRICS_PORT"),
        ({"MODERATOR_OUT_TOPIC": "chat.messages"}, "MODERATOR_IN_TOPIC"),
        ({"MODERATOR_POLICY": "/nonexistent.toml"}, "MODERATOR_POLICY"),
        ({"MODERATOR_AUTO_OFFSET_RESET": "newest"}, "MODERATOR_AUTO_OFFSET_RESET"),
        ({"MODERATOR_MAX_WINDOWS": "0"}, "MODERATOR_MAX_WINDOWS"),
        ({"MODERATOR_SHADOW_MODEL": "/nonexistent"}, "MODERATOR_SHADOW_MODEL"),
        ({"MODERATOR_SHADOW_THREADS": "0"}, "MODERATOR_SHADOW_THREADS"),
        ({"MODERATOR_SHADOW_QUEUE": "0"}, "MODERATOR_SHADOW_QUEUE"),
        ({"MODERATOR_SHADOW_TOPIC": "chat.decisions"}, "MODERATOR_SHADOW_TOPIC"),
    ],
)
def test_bad_settings_fail_naming_the_setting(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        Settings.from_env(env)


def test_no_shadow_unless_its_model_is_named(model_dir: Path) -> None:
    assert Settings.from_env({}).shadow_model is None
    assert Settings.from_env({"MODERATOR_SHADOW_MODEL": ""}).shadow_model is None
    named = Settings.from_env({"MODERATOR_SHADOW_MODEL": str(model_dir)})
    assert (named.shadow_model, named.shadow_topic) == (model_dir, "chat.shadow")
    assert Settings.from_env({"MODERATOR_SHADOW_TOPIC": ""}).shadow_topic == ""  # counted only


def test_a_missing_model_dir_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MODERATOR_MODEL_DIR"):
        Settings(model_dir=tmp_path).check_model_dir()


def test_secrets_never_appear_in_the_settings_repr() -> None:
    s = Settings.from_env(
        {
            "MODERATOR_REDIS_URL": "rediss://moderator:s3cret-redis@cache.internal:6380/0",
            "MODERATOR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "MODERATOR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "MODERATOR_KAFKA_SASL_USERNAME": "moderator",
            "MODERATOR_KAFKA_SASL_PASSWORD": "s3cret-kafka",
        }
    )
    text = repr(s) + str(s)
    assert "s3cret" not in text
    assert "rediss://moderator:***@cache.internal:6380/0" in text
    options = s.kafka_options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_password"] == "s3cret-kafka"


def test_tls_builds_an_ssl_context() -> None:
    options = Settings(kafka_security_protocol="SSL").kafka_options()
    assert options["security_protocol"] == "SSL"
    assert options["ssl_context"] is not None


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"MODERATOR_KAFKA_SECURITY_PROTOCOL": "TLS"}, "MODERATOR_KAFKA_SECURITY_PROTOCOL"),
        ({"MODERATOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "MODERATOR_KAFKA_SASL_USERNAME"),
        ({"MODERATOR_KAFKA_SSL_CAFILE": "/nonexistent.pem"}, "MODERATOR_KAFKA_SSL_CAFILE"),
        ({"MODERATOR_DEGRADED_MODE": "panic"}, "MODERATOR_DEGRADED_MODE"),
        ({"MODERATOR_SESSION_TIMEOUT_MS": "500"}, "MODERATOR_SESSION_TIMEOUT_MS"),
        ({"MODERATOR_PUBLISH_ATTEMPTS": "-1"}, "MODERATOR_PUBLISH_ATTEMPTS"),
    ],
)
def test_bad_security_and_overload_settings(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env(env)


@pytest.mark.parametrize(("session", "shutdown"), [(6000, 15.0), (3000, 1.0), (45_000, 60.0)])
def test_group_timeouts_fit_together(session: int, shutdown: float) -> None:
    t = Settings(session_timeout_ms=session, shutdown_timeout_s=shutdown).consumer_timeouts()
    assert t["session_timeout_ms"] == session
    assert t["heartbeat_interval_ms"] * 3 <= session
    assert t["rebalance_timeout_ms"] >= shutdown * 1000, "a draining hand-over is not cut short"
    assert t["request_timeout_ms"] > max(t["rebalance_timeout_ms"], session)
